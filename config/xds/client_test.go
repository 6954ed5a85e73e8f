package xds_test

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/config/xds"
	"github.com/ratelimitd/ratelimitd/internal/certtest"
)

// wait is how long a test waits for an event that should come at once: a
// bound against hanging, not a timing assertion.
const wait = time.Minute

const nodeID = "ratelimitd-test"

// A mgmtServer is a go-control-plane management server on loopback that
// serves a snapshot cache and records every request it receives.
type mgmtServer struct {
	addr  string
	cache cachev3.SnapshotCache
	reqs  chan *discoveryv3.DiscoveryRequest
	hdrs  chan metadata.MD // of each stream opened
	srv   *grpc.Server
	ctx   context.Context // ends when the server stops
	stop  context.CancelFunc
	done  chan struct{} // closed when Serve returned
}

// startServer starts a management server listening on addr
// ("127.0.0.1:0" for any port), with the gRPC server options opts.
func startServer(t *testing.T, addr string, opts ...grpc.ServerOption) *mgmtServer {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &mgmtServer{
		addr:  lis.Addr().String(),
		cache: cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil),
		reqs:  make(chan *discoveryv3.DiscoveryRequest, 64),
		hdrs:  make(chan metadata.MD, 8),
		srv:   grpc.NewServer(opts...),
		ctx:   ctx,
		stop:  cancel,
		done:  make(chan struct{}),
	}
	cb := serverv3.CallbackFuncs{StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
		md, _ := metadata.FromIncomingContext(ctx)
		select {
		case m.hdrs <- md:
		case <-m.ctx.Done():
		}
		return nil
	}, StreamRequestFunc: func(_ int64, r *discoveryv3.DiscoveryRequest) error {
		select {
		case m.reqs <- r:
		case <-m.ctx.Done():
		}
		return nil
	}}
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(m.srv, serverv3.NewServer(ctx, m.cache, cb))
	go func() {
		defer close(m.done)
		_ = m.srv.Serve(lis)
	}()
	t.Cleanup(m.close)
	return m
}

// close stops the server, dropping its streams; it is idempotent.
func (m *mgmtServer) close() {
	m.stop()
	m.srv.Stop()
	<-m.done
}

// set publishes configs as the snapshot version for the test node.
func (m *mgmtServer) set(t *testing.T, version string, configs ...*rlsconf.RateLimitConfig) {
	t.Helper()
	res := make([]types.Resource, len(configs))
	for i, c := range configs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.cache.SetSnapshot(context.Background(), nodeID, snap); err != nil {
		t.Fatal(err)
	}
}

// next returns the next request the server received.
func (m *mgmtServer) next(t *testing.T) *discoveryv3.DiscoveryRequest {
	t.Helper()
	select {
	case r := <-m.reqs:
		return r
	case <-time.After(wait):
		t.Fatal("no request from the client")
		return nil
	}
}

// nextRules returns the next rules the client accepted.
func nextRules(t *testing.T, c <-chan *config.Rules) *config.Rules {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(wait):
		t.Fatal("no rules from the client")
		return nil
	}
}

// domain is a RateLimitConfig of domain name with one key-only rule of n
// per second.
func domain(name, key string, n uint32) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{
		Name:        name + "-config",
		Domain:      name,
		Descriptors: []*rlsconf.RateLimitDescriptor{{Key: key, RateLimit: limit(rlsconf.RateLimitUnit_SECOND, n)}},
	}
}

// requests returns the limit of the rule that key matches in domain name,
// or -1 if there is none.
func requests(r *config.Rules, name, key string) int64 {
	rule := config.Match(r.Domain(name), []entry{{key, "v"}})
	if rule == nil || len(rule.Limits) == 0 {
		return -1
	}
	return int64(rule.Limits[0].Requests)
}

// checkAck checks that r ACKs version.
func checkAck(t *testing.T, r *discoveryv3.DiscoveryRequest, version string) {
	t.Helper()
	if r.GetErrorDetail() != nil || r.GetVersionInfo() != version || r.GetResponseNonce() == "" || r.GetTypeUrl() != xds.TypeURL {
		t.Fatalf("request = %v, want an ACK of version %q", r, version)
	}
}

func TestClientFollowsManagementServer(t *testing.T) {
	m := startServer(t, "127.0.0.1:0")
	// The client finds the server through a resolver that the test points
	// at the new server when it replaces the old one, on another port.
	res := manual.NewBuilderWithScheme("xdstest")
	res.InitialState(resolver.State{Addresses: []resolver.Address{{Addr: m.addr}}})
	updates := make(chan *config.Rules, 16)
	rejected := make(chan string, 1) // the first refused version
	meta, err := structpb.NewStruct(map[string]any{"zone": "test"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := xds.New(xds.Options{
		Target:          res.Scheme() + ":///mgmt",
		DialOptions:     []grpc.DialOption{grpc.WithResolvers(res)},
		NodeID:          nodeID,
		NodeMetadata:    meta,
		Headers:         map[string]string{"X-Token": "secret"}, // sent in lower case
		InsecureHeaders: true,
		OnRules:         func(r *config.Rules) { updates <- r },
		OnReject: func(version string, err error) {
			if err == nil {
				version = "(no error)"
			}
			select {
			case rejected <- version:
			default: // the server may send the refused set again
			}
		},
		MinBackoff: 10 * time.Millisecond,
		MaxBackoff: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// Subscribed, but the server has nothing for this node yet.
	first := m.next(t)
	if first.GetNode().GetId() != nodeID || first.GetNode().GetMetadata().GetFields()["zone"].GetStringValue() != "test" ||
		first.GetTypeUrl() != xds.TypeURL || len(first.GetResourceNames()) != 0 || first.GetVersionInfo() != "" {
		t.Fatalf("first request = %v, want a wildcard subscription from the node", first)
	}
	select {
	case md := <-m.hdrs:
		if len(md.Get("x-token")) != 1 || md.Get("x-token")[0] != "secret" {
			t.Errorf("stream metadata = %v, want x-token: secret", md)
		}
	case <-time.After(wait):
		t.Fatal("no stream opened")
	}
	if c.Ready() || c.Rules() != nil || c.Version() != "" {
		t.Fatal("ready before any rules")
	}

	m.set(t, "1", domain("a", "k", 10), domain("b", "k", 20))
	r := nextRules(t, updates)
	if requests(r, "a", "k") != 10 || requests(r, "b", "k") != 20 {
		t.Fatalf("rules v1: a %d, b %d, want 10, 20", requests(r, "a", "k"), requests(r, "b", "k"))
	}
	checkAck(t, m.next(t), "1")
	if !c.Ready() || c.Rules() != r {
		t.Fatal("not ready, or not the rules handed over, after the first rules")
	}
	select {
	case <-c.ReadyC():
	default:
		t.Fatal("ReadyC not closed")
	}

	// A change.
	m.set(t, "2", domain("a", "k", 11), domain("b", "k", 20))
	r = nextRules(t, updates)
	if requests(r, "a", "k") != 11 {
		t.Fatalf("rules v2: a %d, want 11", requests(r, "a", "k"))
	}
	checkAck(t, m.next(t), "2")

	// A bad change is NACKed and the rules stay.
	bad := domain("c", "k", 1)
	bad.Name = "bad-config"
	bad.Descriptors[0].RateLimit.Unit = rlsconf.RateLimitUnit_UNKNOWN
	m.set(t, "3", domain("a", "k", 12), bad)
	nack := m.next(t)
	if nack.GetErrorDetail() == nil || nack.GetVersionInfo() != "2" || nack.GetResponseNonce() == "" {
		t.Fatalf("request = %v, want a NACK keeping version 2", nack)
	}
	if msg := nack.GetErrorDetail().GetMessage(); !strings.Contains(msg, `resource "bad-config"`) || !strings.Contains(msg, "neither unit nor window") {
		t.Errorf("NACK message %q does not name the resource and the error", msg)
	}
	if c.Rules() != r || requests(c.Rules(), "a", "k") != 11 || c.Version() != "2" {
		t.Fatalf("rules changed by a NACKed set (version %q)", c.Version())
	}
	if v := <-rejected; v != "3" {
		t.Errorf("OnReject got version %q, want 3 with its error", v)
	}

	// Removal: an empty set leaves no domain.
	m.set(t, "4")
	r = nextRules(t, updates)
	if r.Domain("a") != nil || r.Domain("b") != nil || len(r.Domains()) != 0 {
		t.Fatalf("rules after removal have domains %v", r.Domains())
	}
	// The server may send the refused version 3 again before version 4
	// (go-control-plane's cache does): those are NACKed too.
	for {
		req := m.next(t)
		if req.GetErrorDetail() == nil {
			checkAck(t, req, "4")
			break
		}
		if req.GetVersionInfo() != "2" {
			t.Fatalf("request = %v, want a NACK keeping version 2 or an ACK of 4", req)
		}
	}

	// The server is replaced: the client subscribes again with the
	// version it ACKed last, and follows the new server.
	m.close()
	m = startServer(t, "127.0.0.1:0")
	m.set(t, "5", domain("d", "k", 50))
	res.UpdateState(resolver.State{Addresses: []resolver.Address{{Addr: m.addr}}})
	again := m.next(t)
	if again.GetVersionInfo() != "4" || again.GetErrorDetail() != nil || again.GetNode().GetId() != nodeID {
		t.Fatalf("first request after restart = %v, want version 4", again)
	}
	r = nextRules(t, updates)
	if requests(r, "d", "k") != 50 || r.Domain("a") != nil {
		t.Fatalf("rules v5: d %d, want 50 and only d", requests(r, "d", "k"))
	}
	checkAck(t, m.next(t), "5")
	if !c.Ready() {
		t.Fatal("not ready after reconnection")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if c.Rules() != r {
		t.Fatal("Close dropped the rules")
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	for _, o := range []xds.Options{
		{},
		{Target: "127.0.0.1:1", MinBackoff: time.Second, MaxBackoff: time.Millisecond},
		{Target: "127.0.0.1:1", Headers: map[string]string{"authorization": "Bearer x"}}, // in plaintext
	} {
		if c, err := xds.New(o); err == nil {
			c.Close()
			t.Errorf("New(%+v) = nil error", o)
		}
	}
}

func TestCloseWhileDisconnected(t *testing.T) {
	// Nothing listens: the client keeps retrying until Close, which must
	// return.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	rec := newRecorder()
	c, err := xds.New(xds.Options{Target: addr, NodeID: nodeID, Logger: slog.New(rec),
		MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Close once the client is retrying, not before its first attempt.
	rec.waitFor(t, "xds: stream ended, reconnecting", 2)
	if c.Ready() {
		t.Fatal("ready without a server")
	}
	if err := c.Close(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
}

func TestClientOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "xds-ca")
	srvCert := ca.Server(t, dir, "xds", "localhost", "127.0.0.1")
	cliCert := ca.Client(t, dir, "ratelimitd")
	srvTLS := &tls.Config{
		Certificates: []tls.Certificate{srvCert.TLS},
		ClientCAs:    ca.Pool(),
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}
	m := startServer(t, "127.0.0.1:0", grpc.Creds(credentials.NewTLS(srvTLS)))
	m.set(t, "1", domain("a", "k", 7))
	updates := make(chan *config.Rules, 4)
	c, err := xds.New(xds.Options{
		Target:      m.addr,
		Credentials: credentials.NewTLS(ca.ClientTLS(cliCert)),
		NodeID:      nodeID,
		OnRules:     func(r *config.Rules) { updates <- r },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if r := nextRules(t, updates); requests(r, "a", "k") != 7 {
		t.Fatalf("rules over TLS: a %d, want 7", requests(r, "a", "k"))
	}
	select {
	case <-c.ReadyC():
	case <-time.After(wait):
		t.Fatal("not ready")
	}
}
