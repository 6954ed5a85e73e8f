package clientintegration_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/client"
	"github.com/ratelimitd/ratelimitd/server"
)

// quotaRules are the rules of the quota mode's tests.
const quotaRules = `
domain: q
descriptors:
  - key: limited
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: open
    rate_limit: {unlimited: true}
  - key: banned
    rate_limit: {unit: second, requests_per_unit: 0}
`

// An rlqsServer is ratelimitd serving RLQS (server.Options{RLQS: true},
// on the memory store) on a real loopback listener, which can be stopped
// and started again on the same address.
type rlqsServer struct {
	t    *testing.T
	yaml string
	addr string
	mu   sync.Mutex
	stop func()
}

// newRLQSServer starts an rlqsServer of the rules of yaml; the test's
// cleanup stops it.
func newRLQSServer(t *testing.T, yaml string) *rlqsServer {
	t.Helper()
	s := &rlqsServer{t: t, yaml: yaml}
	s.start("127.0.0.1:0")
	t.Cleanup(s.halt)
	return s
}

// start serves on addr.
func (s *rlqsServer) start(addr string) {
	s.t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		s.t.Fatalf("listen on %s: %v", addr, err)
	}
	s.addr = lis.Addr().String()
	store := memory.New(memory.Options{})
	srv := server.New(store, compileRules(s.t, s.yaml), server.Options{RLQS: true, Logger: slog.New(slog.DiscardHandler)})
	g := grpc.NewServer(srv.GRPCOptions()...)
	srv.Register(g)
	served := make(chan error, 1)
	go func() { served <- g.Serve(lis) }()
	s.mu.Lock()
	s.stop = func() {
		g.Stop()
		srv.EndHealthWatches()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.t.Errorf("Serve: %v", err)
		}
		store.Close()
	}
	s.mu.Unlock()
}

// halt stops the server, if running.
func (s *rlqsServer) halt() {
	s.mu.Lock()
	stop := s.stop
	s.stop = nil
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// restart starts the stopped server again on its address.
func (s *rlqsServer) restart() { s.start(s.addr) }

// quota returns a Quota of domain q on a connection to s, both closed by
// the test's cleanup.
func (s *rlqsServer) quota(opts ...client.QuotaOption) *client.Quota {
	s.t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		s.t.Fatalf("grpc.NewClient: %v", err)
	}
	s.t.Cleanup(func() { conn.Close() })
	opts = append([]client.QuotaOption{client.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, opts...)
	q, err := client.NewQuota(conn, "q", opts...)
	if err != nil {
		s.t.Fatalf("NewQuota: %v", err)
	}
	s.t.Cleanup(func() { q.Close() })
	return q
}

// decide calls q.ShouldRateLimit, failing the test on an error.
func decide(t *testing.T, q *client.Quota, ds ...client.Descriptor) client.Decision {
	t.Helper()
	d, err := q.ShouldRateLimit(t.Context(), "q", ds...)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", ds, err)
	}
	return d
}

// checkOnly returns d as a CheckOnly descriptor, which consumes nothing.
func checkOnly(d client.Descriptor) client.Descriptor {
	d.CheckOnly = true
	return d
}

// waitDecided waits until ratelimitd's assignment, not the failure
// policy, decides d (asking with CheckOnly, which takes no token), or,
// with policy set, until the failure policy does; a minute at most.
func waitDecided(t *testing.T, q *client.Quota, d client.Descriptor, policy bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if got := decide(t, q, checkOnly(d)); (got.Err != nil) == policy {
			return
		}
	}
	t.Fatalf("%v: no decision by %s in a minute", d, map[bool]string{false: "an assignment", true: "the failure policy"}[policy])
}

// manualClock is a clock the test moves.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestQuotaLimited: a limited rule gives the Quota a token bucket, which
// admits about the limit: over 5 s of its clock, 5 calls every 10 ms,
// at least 40 and at most the burst and 5 s of 10/s (60), the rest
// refused by the bucket, not the failure policy. A value that is not
// UTF-8 is a bucket of its own.
func TestQuotaLimited(t *testing.T) {
	srv := newRLQSServer(t, quotaRules)
	clk := &manualClock{now: time.Unix(1_000_000, 0)}
	q := srv.quota(client.WithFailClosed(), client.WithReportingInterval(time.Minute), client.WithClock(clk.Now))
	for _, value := range []string{"a", "\xff\xfe"} {
		d := client.D("limited", value)
		waitDecided(t, q, d, false)
		var admitted, refused int
		for range 500 {
			for range 5 {
				got := decide(t, q, d)
				switch {
				case got.Err != nil:
					t.Fatalf("%q: decided by the failure policy: %v", value, got.Err)
				case got.Allowed:
					admitted++
				default:
					refused++
				}
			}
			clk.add(10 * time.Millisecond)
		}
		if admitted < 40 || admitted > 60 {
			t.Errorf("%q: %d admitted over 5 s under 10/s, want 40 to 60 (%d refused)", value, admitted, refused)
		}
	}
}

// TestQuotaBlanket: an unlimited rule admits all, requests_per_unit: 0
// refuses all, and a descriptor no rule matches is admitted (ratelimitd
// assigns ALLOW_ALL), all by assignment, not by the failure policy, which
// refuses here. A call with one refused descriptor is refused whole.
func TestQuotaBlanket(t *testing.T) {
	srv := newRLQSServer(t, quotaRules)
	q := srv.quota(client.WithFailClosed(), client.WithReportingInterval(time.Minute))
	open, banned, none := client.D("open", "x"), client.D("banned", "x"), client.D("no_rule", "x")
	for _, d := range []client.Descriptor{open, banned, none} {
		waitDecided(t, q, d, false)
	}
	for _, c := range []struct {
		ds   []client.Descriptor
		want bool
	}{
		{[]client.Descriptor{open}, true},
		{[]client.Descriptor{banned}, false},
		{[]client.Descriptor{none}, true},
		{[]client.Descriptor{open, none}, true},
		{[]client.Descriptor{open, banned}, false},
	} {
		for range 100 {
			if got := decide(t, q, c.ds...); got.Allowed != c.want || got.Err != nil {
				t.Fatalf("%v: %+v, want Allowed %v by assignment", c.ds, got, c.want)
			}
		}
	}
}

// TestQuotaLimiter: the go-grpc-middleware Limiter and the server
// interceptor over a Quota refuse with ResourceExhausted what
// ratelimitd's assignment refuses.
func TestQuotaLimiter(t *testing.T) {
	srv := newRLQSServer(t, quotaRules)
	q := srv.quota(client.WithFailClosed(), client.WithReportingInterval(time.Minute))
	banned := client.D("banned", "x")
	waitDecided(t, q, banned, false)
	l := client.NewLimiter(q, q.Domain(), client.WithDescriptors(func(context.Context, string) []client.Descriptor { return []client.Descriptor{banned} }))
	if err := l.Limit(t.Context()); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("Limit of a banned descriptor: %v, want ResourceExhausted", err)
	}
	in := client.UnaryServerInterceptor(q, "q", client.WithDescriptors(func(context.Context, string) []client.Descriptor {
		return []client.Descriptor{banned}
	}))
	waitDecided(t, q, client.D(client.MethodKey, "/s/M"), false) // the interceptor's own descriptor
	_, err := in(t.Context(), nil, &grpc.UnaryServerInfo{FullMethod: "/s/M"}, func(context.Context, any) (any, error) {
		t.Error("the handler ran for a banned descriptor")
		return nil, nil
	})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("UnaryServerInterceptor on a banned descriptor: %v, want ResourceExhausted", err)
	}
}

// TestQuotaServerStopped: with ratelimitd stopped, assignments hold until
// their time to live ends, and the failure policy decides after; once
// ratelimitd is back, the Quota reconnects and assignments decide again.
func TestQuotaServerStopped(t *testing.T) {
	srv := newRLQSServer(t, quotaRules)
	q := srv.quota(client.WithFailClosed(), client.WithReportingInterval(100*time.Millisecond))
	open := client.D("open", "x")
	waitDecided(t, q, open, false)
	srv.halt()
	waitDecided(t, q, open, true)
	if got := decide(t, q, open); got.Allowed || !errors.Is(got.Err, client.ErrNoAssignment) {
		t.Errorf("ratelimitd stopped, after the TTL: %+v, want refused by the failure policy", got)
	}
	srv.restart()
	waitDecided(t, q, open, false)
	if got := decide(t, q, open); !got.Allowed || got.Err != nil {
		t.Errorf("ratelimitd back: %+v, want allowed by assignment", got)
	}
}

// TestQuotaHTTPMiddleware: HTTPMiddleware over a Quota answers 429, with
// a Retry-After, what ratelimitd's assignment refuses, and serves what it
// admits.
func TestQuotaHTTPMiddleware(t *testing.T) {
	srv := newRLQSServer(t, quotaRules)
	q := srv.quota(client.WithFailClosed(), client.WithReportingInterval(time.Minute))
	for _, d := range []client.Descriptor{client.D("banned", "/x"), client.D("open", "/x")} {
		waitDecided(t, q, d, false)
	}
	h := client.HTTPMiddleware(q, "q", client.WithHTTPDescriptors(func(r *http.Request) []client.Descriptor {
		return []client.Descriptor{client.D(r.Header.Get("Kind"), r.URL.Path)}
	}))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	for kind, want := range map[string]int{"banned": http.StatusTooManyRequests, "open": http.StatusNoContent} {
		r := httptest.NewRequest(http.MethodGet, "/x", nil)
		r.Header.Set("Kind", kind)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("%s: %d, want %d", kind, w.Code, want)
		}
		if want == http.StatusTooManyRequests && w.Header().Get("Retry-After") == "" {
			t.Errorf("%s: no Retry-After", kind)
		}
	}
}
