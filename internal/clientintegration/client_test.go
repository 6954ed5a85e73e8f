package clientintegration_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/ratelimitd/ratelimitd/backend/backendtest"
	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/client"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/grpctest"
	"github.com/ratelimitd/ratelimitd/server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is aligned to every window of rules, so window ends are round numbers.
var t0 = backendtest.T0

// rules are the test's rate limits, as fixed windows so that the counts
// are easy to follow.
const rules = `
domain: api
descriptors:
  - key: api_key
    rate_limit: {algorithm: fixed_window, unit: minute, requests_per_unit: 2}
  - key: user
    rate_limit: {algorithm: fixed_window, window: 500ms, requests_per_unit: 1}
  - key: health
    rate_limit: {unlimited: true}
  - key: tenant
    value: acme
    descriptors:
      - key: path
        rate_limit: {name: acme_paths, algorithm: token_bucket, unit: second, requests_per_unit: 10, burst: 5}
`

// A harness is ratelimitd (the server package on the memory store and a
// manual clock) served over a real gRPC connection (bufconn). Its server
// counts the RPCs it receives.
type harness struct {
	clock *backendtest.Clock
	conn  *grpc.ClientConn
	rpcs  atomic.Int64
}

func newHarness(t *testing.T) *harness { return newHarnessRules(t, rules) }

// newHarnessRules is newHarness under the rules of yaml.
func newHarnessRules(t *testing.T, yaml string) *harness {
	t.Helper()
	h := &harness{clock: backendtest.NewClock(t0)}
	store := memory.New(memory.Options{Now: h.clock.Now})
	t.Cleanup(func() { store.Close() })
	srv := server.New(store, compileRules(t, yaml), server.Options{})
	count := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		h.rpcs.Add(1)
		return handler(ctx, req)
	}
	g := grpc.NewServer(append(srv.GRPCOptions(), grpc.ChainUnaryInterceptor(count))...)
	srv.Register(g)
	h.conn, _ = grpctest.Serve(t, g)
	return h
}

// compileRules parses and compiles the rules of yaml.
func compileRules(t testing.TB, yaml string) *config.Rules {
	t.Helper()
	domains, err := config.Parse(t.Name()+".yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	compiled, err := config.Compile(domains)
	if err != nil {
		t.Fatalf("config.Compile: %v", err)
	}
	return compiled
}

// client returns a Client of h's ratelimitd, reading h's clock. Its call
// budget is long, so that a loaded machine does not turn answers into
// failure-policy ones.
func (h *harness) client(opts ...client.Option) *client.Client {
	return client.New(h.conn, append([]client.Option{client.WithClock(h.clock.Now), client.WithTimeout(10 * time.Second)}, opts...)...)
}

// at moves h's clock to t0+d.
func (h *harness) at(d time.Duration) { h.clock.Set(t0.Add(d)) }

// ask calls ShouldRateLimit and fails the test on an error.
func ask(t *testing.T, c *client.Client, domain string, ds ...client.Descriptor) client.Decision {
	t.Helper()
	d, err := c.ShouldRateLimit(t.Context(), domain, ds...)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%q, %v): %v", domain, ds, err)
	}
	if d.Err != nil {
		t.Fatalf("ShouldRateLimit(%q, %v) was answered by the failure policy: %v", domain, ds, d.Err)
	}
	return d
}

var (
	apiKeyLimit = client.Limit{Name: "api_key", Requests: 2, Window: time.Minute, Algorithm: client.FixedWindow, Burst: 2}
	userLimit   = client.Limit{Name: "user", Requests: 1, Window: 500 * time.Millisecond, Algorithm: client.FixedWindow, Burst: 1}
	acmeLimit   = client.Limit{Name: "acme_paths", Requests: 10, Window: time.Second, Algorithm: client.TokenBucket, Burst: 5}
)

var ignoreHeaders = cmpopts.IgnoreFields(client.Decision{}, "Headers")

// TestShouldRateLimit: ratelimitd's decisions, converted: allowed and
// refused, per-descriptor limit, remaining, reset and retry-after, and the
// request's retry-after, the longest of its refused descriptors'.
func TestShouldRateLimit(t *testing.T) {
	h := newHarness(t)
	c := h.client(client.WithRefusalCache(0))
	s := time.Second
	steps := []struct {
		at     time.Duration
		domain string
		ds     []client.Descriptor
		want   client.Decision
	}{
		{0, "api", []client.Descriptor{client.D("api_key", "k1")}, client.Decision{
			Allowed:  true,
			Statuses: []client.Status{{Limit: apiKeyLimit, Remaining: 1, ResetAfter: 60 * s}},
		}},
		{10 * s, "api", []client.Descriptor{client.D("api_key", "k1"), client.D("health", "lb"), client.D("no_rule", "x")}, client.Decision{
			Allowed: true,
			Statuses: []client.Status{
				{Limit: apiKeyLimit, Remaining: 0, ResetAfter: 50 * s},
				{Unlimited: true, Remaining: 1<<32 - 1},
				{},
			},
		}},
		{15 * s, "api", []client.Descriptor{client.D("api_key", "k1")}, client.Decision{
			RetryAfter: 45 * s,
			Statuses:   []client.Status{{OverLimit: true, Limit: apiKeyLimit, ResetAfter: 45 * s, RetryAfter: 45 * s}},
		}},
		// Two refused descriptors: the request may be retried when both pass.
		{20 * s, "api", []client.Descriptor{client.D("user", "u1"), client.D("api_key", "k1"), client.D("user", "u2")}, client.Decision{
			RetryAfter: 40 * s,
			Statuses: []client.Status{
				{Limit: userLimit, Remaining: 1, ResetAfter: 500 * time.Millisecond},
				{OverLimit: true, Limit: apiKeyLimit, ResetAfter: 40 * s, RetryAfter: 40 * s},
				{Limit: userLimit, Remaining: 1, ResetAfter: 500 * time.Millisecond},
			},
		}},
		{20 * s, "api", []client.Descriptor{client.D("user", "u1")}, client.Decision{
			Allowed:  true,
			Statuses: []client.Status{{Limit: userLimit, Remaining: 0, ResetAfter: 500 * time.Millisecond}},
		}},
		{20*s + 100*time.Millisecond, "api", []client.Descriptor{client.D("user", "u1")}, client.Decision{
			RetryAfter: 400 * time.Millisecond,
			Statuses:   []client.Status{{OverLimit: true, Limit: userLimit, ResetAfter: 400 * time.Millisecond, RetryAfter: 400 * time.Millisecond}},
		}},
		// Nested entries, a named token bucket limit.
		{20 * s, "api", []client.Descriptor{client.D("tenant", "acme", "path", "/search")}, client.Decision{
			Allowed:  true,
			Statuses: []client.Status{{Limit: acmeLimit, Remaining: 4, ResetAfter: 100 * time.Millisecond}},
		}},
		// An unknown domain: allowed, nothing applies.
		{20 * s, "no_such_domain", []client.Descriptor{client.D("api_key", "k1")}, client.Decision{Allowed: true, Statuses: []client.Status{{}}}},
	}
	for i, st := range steps {
		h.at(st.at)
		got := ask(t, c, st.domain, st.ds...)
		if diff := cmp.Diff(st.want, got, ignoreHeaders); diff != "" {
			t.Errorf("step %d at t0+%v: ShouldRateLimit(%q, %v) mismatch (-want +got):\n%s", i, st.at, st.domain, st.ds, diff)
		}
	}
}

// TestHeaders: a decision carries the headers ratelimitd sends, and a
// local refusal those of the refusal it remembers.
func TestHeaders(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	h.at(10 * time.Second)
	got := ask(t, c, "api", client.D("api_key", "k1")).Headers
	want := []client.Header{{Name: "RateLimit-Policy", Value: `"api_key";q=2;w=60`}, {Name: "RateLimit", Value: `"api_key";r=1;t=50`}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("allowed: Headers mismatch (-want +got):\n%s", diff)
	}
	ask(t, c, "api", client.D("api_key", "k1"))
	want = []client.Header{{Name: "RateLimit-Policy", Value: `"api_key";q=2;w=60`}, {Name: "RateLimit", Value: `"api_key";r=0;t=50`}, {Name: "Retry-After", Value: "50"}}
	for _, local := range []bool{false, true} {
		d := ask(t, c, "api", client.D("api_key", "k1"))
		if d.Local != local {
			t.Fatalf("refused: Local = %v, want %v", d.Local, local)
		}
		if diff := cmp.Diff(want, d.Headers); diff != "" {
			t.Errorf("refused (local %v): Headers mismatch (-want +got):\n%s", local, diff)
		}
	}
}

// TestHits: a descriptor's hits are consumed together; a check-only
// descriptor consumes nothing.
func TestHits(t *testing.T) {
	h := newHarness(t)
	c := h.client(client.WithRefusalCache(0))
	check := client.D("api_key", "k1")
	check.CheckOnly = true
	check.Hits = 5 // ignored
	two := client.D("api_key", "k1")
	two.Hits = 2
	steps := []struct {
		d             client.Descriptor
		wantAllowed   bool
		wantRemaining uint64
	}{
		{check, true, 2},
		{two, true, 0},
		{check, true, 0}, // at the limit, not past it
		{client.D("api_key", "k1"), false, 0},
	}
	for i, st := range steps {
		d := ask(t, c, "api", st.d)
		if d.Allowed != st.wantAllowed || d.Statuses[0].Remaining != st.wantRemaining {
			t.Errorf("step %d: ShouldRateLimit(%+v) = allowed %v, remaining %d; want %v, %d",
				i, st.d, d.Allowed, d.Statuses[0].Remaining, st.wantAllowed, st.wantRemaining)
		}
	}
}
