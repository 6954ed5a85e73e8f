package xds_test

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/ratelimitd/ratelimitd/config/xds"
)

// A recorder is a slog.Handler that counts the records of each message.
type recorder struct {
	mu      sync.Mutex
	counts  map[string]int
	changed chan struct{} // closed, and replaced, at each record
}

// newRecorder returns a recorder with no record.
func newRecorder() *recorder {
	return &recorder{counts: make(map[string]int), changed: make(chan struct{})}
}

// Enabled records every level.
func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }

// Handle counts rec.
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[rec.Message]++
	close(r.changed)
	r.changed = make(chan struct{})
	return nil
}

// WithAttrs drops the attributes: only messages count.
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }

// WithGroup drops the group: only messages count.
func (r *recorder) WithGroup(string) slog.Handler { return r }

// count returns how many records of msg there were.
func (r *recorder) count(msg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[msg]
}

// waitFor waits until there were at least n records of msg.
func (r *recorder) waitFor(t *testing.T, msg string, n int) {
	t.Helper()
	deadline := time.After(wait)
	for {
		r.mu.Lock()
		got, changed := r.counts[msg], r.changed
		r.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("%d records of %q, want %d", got, msg, n)
		}
	}
}

// Messages the Client logs, which tests wait for.
const (
	msgRefused = "xds: rules refused"
	msgHeld    = "xds: rules refused again, NACK held back"
	msgIgnored = "xds: ignored responses of an unsubscribed type"
)

// An adsServer is a hand-driven ADS server on loopback: it sends what the
// test passes to send, on the stream open at the time, and records every
// request.
type adsServer struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	addr  string
	reqs  chan *discoveryv3.DiscoveryRequest
	resps chan *discoveryv3.DiscoveryResponse
}

// startADS starts an adsServer, stopped when the test ends.
func startADS(t *testing.T) *adsServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &adsServer{
		addr:  lis.Addr().String(),
		reqs:  make(chan *discoveryv3.DiscoveryRequest, 256),
		resps: make(chan *discoveryv3.DiscoveryResponse),
	}
	srv := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(srv, a)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return a
}

// StreamAggregatedResources sends the test's responses and records the
// client's requests until the stream ends.
func (a *adsServer) StreamAggregatedResources(s discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	ctx := s.Context()
	go func() { // returns when the stream ends, which makes Recv fail
		for {
			req, err := s.Recv()
			if err != nil {
				return
			}
			select {
			case a.reqs <- req:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case resp := <-a.resps:
			if err := s.Send(resp); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// send has the server send resp on the open stream.
func (a *adsServer) send(t *testing.T, resp *discoveryv3.DiscoveryResponse) {
	t.Helper()
	select {
	case a.resps <- resp:
	case <-time.After(wait):
		t.Fatal("no stream to send on")
	}
}

// next returns the next request the server received.
func (a *adsServer) next(t *testing.T) *discoveryv3.DiscoveryRequest {
	t.Helper()
	select {
	case r := <-a.reqs:
		return r
	case <-time.After(wait):
		t.Fatal("no request from the client")
		return nil
	}
}

// response is a RateLimitConfig response of version, with version as nonce.
func response(t *testing.T, version string, configs ...*rlsconf.RateLimitConfig) *discoveryv3.DiscoveryResponse {
	t.Helper()
	res := make([]*anypb.Any, len(configs))
	for i, c := range configs {
		res[i] = mustAny(t, c)
	}
	return &discoveryv3.DiscoveryResponse{VersionInfo: version, Nonce: version, TypeUrl: xds.TypeURL, Resources: res}
}

// badConfig is a RateLimitConfig that Compile refuses: it has no domain.
func badConfig() *rlsconf.RateLimitConfig { return &rlsconf.RateLimitConfig{Name: "bad"} }

// checkNack checks that r NACKs the response of nonce, keeping version.
func checkNack(t *testing.T, r *discoveryv3.DiscoveryRequest, nonce, version string) {
	t.Helper()
	if r.GetErrorDetail() == nil || r.GetResponseNonce() != nonce || r.GetVersionInfo() != version || r.GetTypeUrl() != xds.TypeURL {
		t.Fatalf("request = %v, want a NACK of nonce %q keeping version %q", r, nonce, version)
	}
}

// startClient starts a client of a, logging to rec, with backoff between
// lo and hi.
func startClient(t *testing.T, a *adsServer, rec *recorder, lo, hi time.Duration) *xds.Client {
	t.Helper()
	c, err := xds.New(xds.Options{Target: a.addr, NodeID: nodeID, Logger: slog.New(rec), MinBackoff: lo, MaxBackoff: hi})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if sub := a.next(t); sub.GetTypeUrl() != xds.TypeURL || sub.GetErrorDetail() != nil {
		t.Fatalf("first request = %v, want a subscription", sub)
	}
	return c
}

func TestClientIgnoresUnsubscribedTypes(t *testing.T) {
	a := startADS(t)
	rec := newRecorder()
	c := startClient(t, a, rec, time.Hour, time.Hour)

	const cluster = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	for _, nonce := range []string{"f1", "f2", "f3"} {
		a.send(t, &discoveryv3.DiscoveryResponse{VersionInfo: nonce, Nonce: nonce, TypeUrl: cluster})
	}
	a.send(t, response(t, "1", domain("a", "k", 1)))
	// The client handles responses in order: had it answered the others,
	// the answers would come before this ACK.
	checkAck(t, a.next(t), "1")
	if n := rec.count(msgIgnored); n != 1 {
		t.Errorf("%d log records of ignored responses for one type, want 1", n)
	}
	if !c.Ready() || c.Version() != "1" {
		t.Fatalf("version %q after the ACK, want 1", c.Version())
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for len(a.reqs) > 0 {
		if r := <-a.reqs; r.GetTypeUrl() != xds.TypeURL {
			t.Errorf("request %v, of a type the client did not subscribe to", r)
		}
	}
}

func TestClientHoldsRepeatedNACKsWhateverTheVersion(t *testing.T) {
	a := startADS(t)
	rec := newRecorder()
	c := startClient(t, a, rec, time.Hour, time.Hour) // a held NACK never goes out during the test
	a.send(t, response(t, "1", domain("a", "k", 1)))
	checkAck(t, a.next(t), "1")

	// A first bad set is NACKed at once.
	a.send(t, response(t, "2", badConfig()))
	checkNack(t, a.next(t), "2", "1")
	// Further bad sets, each under a new version, are not answered before
	// the backoff; the client still reads them.
	a.send(t, response(t, "3", badConfig()))
	a.send(t, response(t, "4", badConfig()))
	rec.waitFor(t, msgRefused, 3)
	if n := rec.count(msgHeld); n != 1 { // the NACK of 4 replaced that of 3
		t.Errorf("%d NACKs held back, want 1", n)
	}
	// A good set is ACKed at once, and drops the held NACK: it is the next
	// request.
	a.send(t, response(t, "5", domain("a", "k", 5)))
	checkAck(t, a.next(t), "5")
	if c.Version() != "5" {
		t.Fatalf("version %q, want 5", c.Version())
	}
	// The ACK ended the run of NACKs: the next bad set is NACKed at once.
	a.send(t, response(t, "6", badConfig()))
	checkNack(t, a.next(t), "6", "5")
}

func TestClientSendsHeldNACKAfterBackoff(t *testing.T) {
	// Like go-control-plane's, the server sends nothing before the
	// client's answer: each NACK after the first must come after the
	// client held it back.
	a := startADS(t)
	rec := newRecorder()
	startClient(t, a, rec, time.Millisecond, 4*time.Millisecond)
	const sets = 5
	for i := 1; i <= sets; i++ {
		v := string(rune('0' + i))
		a.send(t, response(t, v, badConfig()))
		checkNack(t, a.next(t), v, "")
		if held := rec.count(msgHeld); held != i-1 {
			t.Fatalf("NACK %d came after %d NACKs held back, want %d", i, held, i-1)
		}
	}
}
