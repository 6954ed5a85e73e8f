package rlqs

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/certtest"
)

// serveTCP serves a Service under rules with opts (its Now the test
// clock) on a loopback TCP listener, as the daemon does, and returns it,
// its address and the clock; dial connects to it, each call on a
// connection of its own.
func serveTCP(t *testing.T, rules *config.Rules, opts Options, srvOpts ...grpc.ServerOption) (*Service, string, *clock) {
	t.Helper()
	clk := &clock{now: time.Unix(1_700_000_000, 0)}
	opts.Now = clk.Now
	s := New(rules, opts)
	g := grpc.NewServer(srvOpts...)
	s.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- g.Serve(lis) }()
	t.Cleanup(func() {
		s.EndStreams()
		g.Stop()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, lis.Addr().String(), clk
}

// dial opens a connection of its own to addr, in plain text without creds.
func dial(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// ids returns n bucket ids of key, values prefix0, prefix1, ...
func ids(key, prefix string, n int) []usage {
	us := make([]usage, n)
	for i := range us {
		us[i] = usage{id: map[string]string{key: fmt.Sprint(prefix, i)}, allowed: 1, elapsed: 300 * time.Second}
	}
	return us
}

// held returns the buckets the service counts against its bound.
func held(s *Service) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.all.held
}

// TestUnmatchedBucketsHoldNothing: bucket ids that no rule matches are
// answered ALLOW_ALL and held nowhere, so that a client reporting
// thousands of them takes no place under any bound: a well-behaved client
// then gets its token bucket.
func TestUnmatchedBucketsHoldNothing(t *testing.T) {
	s, addr, clk := serveTCP(t, rulesOf(t, oneRule), Options{Bounds: Bounds{Total: 10, PerStream: 10, PerConnection: 10}})
	attacker := dial(t, addr, nil)
	for i := range 5 {
		c := newClient(t, attacker, clk, "web")
		flood := ids("nope", fmt.Sprint(i, "-"), 1000)
		c.report(flood...)
		for _, u := range flood[:3] {
			if s := c.strategy(u.id); !isBlanket(s, typev3.RateLimitStrategy_ALLOW_ALL) {
				t.Fatalf("a bucket no rule matches: got %v, want ALLOW_ALL", s)
			}
		}
	}
	if n := held(s); n != 0 {
		t.Errorf("after 5,000 buckets no rule matches: %d held, want 0", n)
	}
	victim := newClient(t, dial(t, addr, nil), clk, "web")
	id := map[string]string{"path": "/api"}
	victim.report(usage{id: id, allowed: 1})
	if got := rate(victim.strategy(id)); got != 100 {
		t.Errorf("the well-behaved client: %v per second, want its token bucket of 100", got)
	}
}

// TestConnectionBound: the streams of one connection hold at most
// Bounds.PerConnection buckets together; the bucket past it gets the
// failure mode's assignment and is counted, and takes nobody's place: a
// client on another connection gets its token bucket.
func TestConnectionBound(t *testing.T) {
	s, addr, clk := serveTCP(t, rulesOf(t, oneRule), Options{Fallback: FallbackDenyAll, Bounds: Bounds{PerConnection: 5}})
	attacker := dial(t, addr, nil)
	a1, a2 := newClient(t, attacker, clk, "web"), newClient(t, attacker, clk, "web")
	a1.report(ids("path", "/a", 3)...)
	more := ids("path", "/b", 3)
	a2.report(more...)
	if got := rate(a2.strategy(more[1].id)); got != 100 {
		t.Errorf("the connection's 5th bucket: %v per second, want 100", got)
	}
	if s := a2.strategy(more[2].id); !isBlanket(s, typev3.RateLimitStrategy_DENY_ALL) {
		t.Errorf("the connection's 6th bucket: got %v, want the failure mode's DENY_ALL", s)
	}
	if got := testutil.ToFloat64(s.metrics.refused.WithLabelValues("connection")); got != 1 {
		t.Errorf("refused at the connection's bound: %v, want 1", got)
	}
	victim := newClient(t, dial(t, addr, nil), clk, "web")
	id := map[string]string{"path": "/b2"} // the one refused to the attacker
	victim.report(usage{id: id, allowed: 1})
	if got := rate(victim.strategy(id)); got != 100 {
		t.Errorf("a client on another connection: %v per second, want 100", got)
	}
}

// TestStreamsPerBucket: at most Bounds.StreamsPerBucket streams of one
// connection hold one bucket, so that one connection cannot fill a
// bucket's clients (nor divide its limit among as many as it likes).
func TestStreamsPerBucket(t *testing.T) {
	s, addr, clk := serveTCP(t, rulesOf(t, oneRule), Options{Fallback: FallbackDenyAll, Bounds: Bounds{StreamsPerBucket: 2}})
	conn := dial(t, addr, nil)
	id := map[string]string{"path": "/api"}
	a, b, c := newClient(t, conn, clk, "web"), newClient(t, conn, clk, "web"), newClient(t, conn, clk, "web")
	a.report(usage{id: id, allowed: 1})
	b.report(usage{id: id, allowed: 1})
	c.report(usage{id: id, allowed: 1})
	if s := c.strategy(id); !isBlanket(s, typev3.RateLimitStrategy_DENY_ALL) {
		t.Errorf("a third stream of the connection on the bucket: got %v, want DENY_ALL", s)
	}
	other := newClient(t, dial(t, addr, nil), clk, "web")
	other.report(usage{id: id, allowed: 1})
	if got := rate(other.strategy(id)); got <= 0 {
		t.Errorf("a stream of another connection on the bucket: %v, want a share", other.strategy(id))
	}
	if got := testutil.ToFloat64(s.metrics.refused.WithLabelValues("connection")); got != 1 {
		t.Errorf("refused at the connection's bound: %v, want 1", got)
	}
}

// TestDeparturesKeepTheirPlace: a stream that ends leaves its buckets
// counted against its connection's bound until the assignments it was
// sent expire (the tracker counts their shares that long), so that
// opening and closing streams cannot hold more than the bound; once they
// expire, there is room again.
func TestDeparturesKeepTheirPlace(t *testing.T) {
	s, addr, clk := serveTCP(t, rulesOf(t, oneRule), Options{Fallback: FallbackDenyAll, Bounds: Bounds{PerConnection: 3}})
	conn := dial(t, addr, nil)
	first := newClient(t, conn, clk, "web")
	first.report(ids("path", "/old", 3)...)
	if err := first.st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := first.st.Recv(); err == nil {
		t.Fatal("the stream goes on after CloseSend")
	}
	next := newClient(t, conn, clk, "web")
	id := map[string]string{"path": "/new"}
	next.report(usage{id: id, allowed: 1})
	if s := next.strategy(id); !isBlanket(s, typev3.RateLimitStrategy_DENY_ALL) {
		t.Errorf("while the ended stream's assignments are in force: got %v, want DENY_ALL", s)
	}
	if n := held(s); n != 3 {
		t.Errorf("held while the ended stream's assignments are in force: %d, want 3", n)
	}
	clk.Advance(MaxTTL + time.Second) // the flood reported 300 s intervals: assignments of 600 s
	next.report(usage{id: id, allowed: 1})
	if got := rate(next.strategy(id)); got != 100 {
		t.Errorf("once they expired: %v per second, want 100", got)
	}
}

// TestPeerBound: under mutual TLS, the connections of one client
// certificate's identity hold at most Bounds.PerPeer buckets together;
// another identity has a bound of its own.
func TestPeerBound(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "test CA")
	srv := ca.Server(t, dir, "server", "127.0.0.1")
	srvTLS := &tls.Config{Certificates: []tls.Certificate{srv.TLS}, ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	s, addr, clk := serveTCP(t, rulesOf(t, oneRule), Options{Fallback: FallbackDenyAll, Bounds: Bounds{PerPeer: 3}},
		grpc.Creds(credentials.NewTLS(srvTLS)))
	mallory := ca.Client(t, dir, "mallory", "spiffe://example.org/mallory")
	alice := ca.Client(t, dir, "alice", "spiffe://example.org/alice")
	var last *quotaClient
	var lastID map[string]string
	for i := range 2 { // two connections of one identity, two buckets each
		c := newClient(t, dial(t, addr, credentials.NewTLS(ca.ClientTLS(mallory))), clk, "web")
		us := ids("path", fmt.Sprint("/m", i, "-"), 2)
		c.report(us...)
		last, lastID = c, us[1].id
	}
	if s := last.strategy(lastID); !isBlanket(s, typev3.RateLimitStrategy_DENY_ALL) {
		t.Errorf("the identity's 4th bucket: got %v, want DENY_ALL", s)
	}
	if got := testutil.ToFloat64(s.metrics.refused.WithLabelValues("peer")); got != 1 {
		t.Errorf("refused at the peer's bound: %v, want 1", got)
	}
	c := newClient(t, dial(t, addr, credentials.NewTLS(ca.ClientTLS(alice))), clk, "web")
	id := map[string]string{"path": "/alice"}
	c.report(usage{id: id, allowed: 1})
	if got := rate(c.strategy(id)); got != 100 {
		t.Errorf("another identity: %v per second, want 100", got)
	}
}

// TestTrackerFollowsTheBounds: a client that reports new buckets with a
// short reporting interval, within every bound at every moment (its
// buckets expire before it reports the next), fills nothing: the
// fair-share tracker forgets each client as its stream drops the bucket,
// and a client on another connection gets its token bucket. (The tracker
// once kept each client 30 s whatever its assignment's lifetime, and
// refused every new bucket once it held 30 times the service's bound.)
func TestTrackerFollowsTheBounds(t *testing.T) {
	s, addr, clk := serveTCP(t, rulesOf(t, oneRule), Options{Fallback: FallbackDenyAll, Bounds: Bounds{Total: 100, PerStream: 10, PerConnection: 10}})
	churner := newClient(t, dial(t, addr, nil), clk, "web")
	for i := range 40 {
		us := ids("path", fmt.Sprint("/churn-", i, "-"), 10)
		for j := range us {
			us[j].elapsed = 500 * time.Millisecond // assignments of MinTTL, 1 s
		}
		churner.report(us...)
		clk.Advance(1100 * time.Millisecond)
	}
	victim := newClient(t, dial(t, addr, nil), clk, "web")
	id := map[string]string{"path": "/victim"}
	victim.report(usage{id: id, allowed: 1})
	if got := rate(victim.strategy(id)); got != 100 {
		t.Errorf("a client on another connection after 400 churned buckets: %v, want its token bucket of 100 per second", victim.strategy(id))
	}
	if got := testutil.ToFloat64(s.metrics.refused.WithLabelValues("tracker")); got != 0 {
		t.Errorf("refused by the tracker: %v, want 0", got)
	}
}
