package clientintegration_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/ratelimitd/ratelimitd/client"
	"github.com/ratelimitd/ratelimitd/internal/grpctest"
)

// leaseRules hold concurrency limits (a lease is their window) and a
// window that give-backs refill.
const leaseRules = `
domain: jobs
descriptors:
  - key: job
    rate_limit: {name: jobs, algorithm: concurrency, window: 1m, requests_per_unit: 2}
  - key: tokens
    rate_limit: {name: tokens, algorithm: fixed_window, unit: minute, requests_per_unit: 10}
  - key: method
    rate_limit: {name: calls, algorithm: concurrency, window: 1m, requests_per_unit: 1}
  - key: path
    descriptors:
      - key: method
        rate_limit: {name: requests, algorithm: concurrency, window: 1m, requests_per_unit: 1}
`

// acquire calls AcquireLease, failing the test on an error or a decision
// of the failure policy.
func acquire(t *testing.T, c *client.Client, ds ...client.Descriptor) (*client.Lease, client.Decision) {
	t.Helper()
	l, d, err := c.AcquireLease(t.Context(), "jobs", ds...)
	if err != nil || d.Err != nil {
		t.Fatalf("AcquireLease(%v) = %+v, %v", ds, d, err)
	}
	return l, d
}

// TestAcquireRelease: ratelimitd holds at most two slots of a job; the
// third Acquire is refused with the concurrency limit; a release frees
// exactly its slot, once, even after its context ended.
func TestAcquireRelease(t *testing.T) {
	h := newHarnessRules(t, leaseRules)
	c := h.client(client.WithRefusalCache(0))
	job := client.D("job", "export")
	ctx, cancel := context.WithCancel(t.Context())
	release1, d, err := c.Acquire(ctx, "jobs", job)
	if err != nil || !d.Allowed {
		t.Fatalf("first Acquire = %+v, %v", d, err)
	}
	l2, _ := acquire(t, c, job)
	if got, want := l2.ExpiresAt(), t0.Add(time.Minute); got.Before(want) || got.After(want.Add(time.Millisecond)) {
		t.Errorf("ExpiresAt = %v, want %v (to the millisecond)", got, want)
	}
	_, d = acquire(t, c, job)
	if d.Allowed {
		t.Fatalf("third Acquire allowed, want refused: %+v", d)
	}
	if got := d.Statuses[0].Limit; got.Name != "jobs" || got.Algorithm != client.Concurrency || got.Requests != 2 {
		t.Errorf("refusal's limit = %+v, want jobs, concurrency, 2", got)
	}

	cancel()
	release1()
	release1() // once only: it must not free l2's slot
	l3, d := acquire(t, c, job)
	if !d.Allowed {
		t.Fatalf("Acquire after a release refused: %+v", d)
	}
	if _, d := acquire(t, c, job); d.Allowed {
		t.Errorf("a release freed more than its slot: a fourth Acquire was allowed")
	}
	for _, l := range []*client.Lease{l2, l3} {
		if err := l.Release(t.Context()); err != nil {
			t.Errorf("Release: %v", err)
		}
	}
	for range 2 {
		if _, d := acquire(t, c, job); !d.Allowed {
			t.Errorf("Acquire after all releases refused: %+v", d)
		}
	}
}

// TestRenew: Renew extends a lease to a full one from now; a lease left
// to lapse frees its slot by itself, and renewing it is ErrLeaseLost.
func TestRenew(t *testing.T) {
	h := newHarnessRules(t, leaseRules)
	c := h.client()
	job := client.D("job", "import")
	l, _ := acquire(t, c, job)
	acquire(t, c, job) // left to lapse at t0+1m
	h.at(40 * time.Second)
	if err := l.Renew(t.Context()); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if got, want := l.ExpiresAt(), t0.Add(100*time.Second); got.Before(want) || got.After(want.Add(time.Millisecond)) {
		t.Errorf("ExpiresAt after Renew = %v, want %v (to the millisecond)", got, want)
	}
	h.at(90 * time.Second) // the second lease lapsed, the renewed one holds
	if _, d := acquire(t, c, job); !d.Allowed {
		t.Errorf("Acquire once a lease lapsed refused: %+v", d)
	}
	if _, d := acquire(t, c, job); d.Allowed {
		t.Errorf("the renewed lease lapsed early: a third slot was allowed")
	}
	h.at(101 * time.Second)
	if err := l.Renew(t.Context()); !errors.Is(err, client.ErrLeaseLost) {
		t.Errorf("Renew of a lapsed lease = %v, want ErrLeaseLost", err)
	}
}

// TestGiveBack: a give-back returns hits to a window, never past its
// limit, and is applied even in a request that is refused.
func TestGiveBack(t *testing.T) {
	h := newHarnessRules(t, leaseRules)
	c := h.client(client.WithRefusalCache(0))
	tokens := func(hits uint64, giveBack bool) client.Descriptor {
		return client.Descriptor{Entries: []client.Entry{{Key: "tokens", Value: "u1"}}, Hits: hits, GiveBack: giveBack}
	}
	if d := ask(t, c, "jobs", tokens(10, false)); !d.Allowed {
		t.Fatalf("10 tokens refused: %+v", d)
	}
	if d := ask(t, c, "jobs", tokens(4, true)); !d.Allowed || d.Statuses[0].Remaining != 4 {
		t.Errorf("give back 4 = %+v, want allowed, 4 remaining", d)
	}
	// Refused by the other descriptor, the give-back applies still.
	if d := ask(t, c, "jobs", tokens(2, true), tokens(7, false)); d.Allowed {
		t.Errorf("7 tokens of 6 allowed: %+v", d)
	}
	if d := ask(t, c, "jobs", tokens(6, false)); !d.Allowed {
		t.Errorf("6 tokens after giving back 6 refused: %+v", d)
	}
	if d := ask(t, c, "jobs", tokens(100, true)); d.Statuses[0].Remaining != 10 {
		t.Errorf("give back 100: %d remaining, want 10 (never past the limit)", d.Statuses[0].Remaining)
	}
}

// TestConcurrencyInterceptor: with WithConcurrency, a call holds the
// method's one slot while its handler runs (another call is refused with
// ResourceExhausted), and frees it when the handler returns.
func TestConcurrencyInterceptor(t *testing.T) {
	h := newHarnessRules(t, leaseRules)
	c := h.client()
	var inner healthpb.HealthClient
	var nested error
	nest := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if inner != nil {
			_, nested = inner.Check(ctx, &healthpb.HealthCheckRequest{Service: "nested"})
		}
		return handler(ctx, req)
	}
	g := grpc.NewServer(grpc.ChainUnaryInterceptor(client.UnaryServerInterceptor(c, "jobs", client.WithConcurrency()), nest))
	hs := health.NewServer()
	hs.SetServingStatus("nested", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, hs)
	conn, _ := grpctest.Serve(t, g)
	hc := healthpb.NewHealthClient(conn)
	inner = hc
	if _, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("Check: %v", err)
	}
	if status.Code(nested) != codes.ResourceExhausted {
		t.Errorf("a call while the slot was held: %v, want ResourceExhausted", nested)
	}
	inner = nil
	for i := range 2 {
		if _, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Errorf("call %d after the first returned: %v", i, err)
		}
	}
}

// TestHTTPConcurrency: with WithHTTPConcurrency, a request holds the
// path's one slot while the handler runs, and frees it after.
func TestHTTPConcurrency(t *testing.T) {
	h := newHarnessRules(t, leaseRules)
	c := h.client()
	mw := client.HTTPMiddleware(c, "jobs", client.WithRoute(nil), client.WithHTTPConcurrency())
	var nested int
	var handler http.Handler
	handler = mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Nested") == "" {
			rec := httptest.NewRecorder()
			nr := httptest.NewRequest("GET", "/export", nil)
			nr.Header.Set("X-Nested", "1")
			handler.ServeHTTP(rec, nr)
			nested = rec.Code
		}
	}))
	for i := range 2 {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest("GET", "/export", nil))
		if rec.Code != http.StatusOK || nested != http.StatusTooManyRequests {
			t.Errorf("request %d: %d, nested %d; want 200, nested 429", i, rec.Code, nested)
		}
	}
}
