package clientintegration_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

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
// counts the RPCs it receives, and can be made slow or failing.
type harness struct {
	clock *backendtest.Clock
	conn  *grpc.ClientConn
	rpcs  atomic.Int64
	slow  atomic.Bool           // the server answers only when the call's context ends
	fail  atomic.Pointer[error] // the server answers with this error
	stop  func()                // stops the server; idempotent
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
		if h.slow.Load() {
			<-ctx.Done()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		if err := h.fail.Load(); err != nil {
			return nil, *err
		}
		return handler(ctx, req)
	}
	g := grpc.NewServer(append(srv.GRPCOptions(), grpc.ChainUnaryInterceptor(count))...)
	srv.Register(g)
	h.conn, h.stop = grpctest.Serve(t, g)
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

// client returns a Client on h's connection, reading h's clock.
// client returns a Client of h's ratelimitd. Its call budget is long, so
// that a loaded machine does not turn answers into failure-policy ones;
// tests of the budget set their own.
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

func wantCode(t *testing.T, call string, err error, code codes.Code) {
	t.Helper()
	if got := status.Code(err); err == nil || got != code {
		t.Errorf("%s: error %v (code %v), want code %v", call, err, got, code)
	}
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

// TestFailurePolicy: when ratelimitd is stopped, slower than the budget,
// or answers with an error, the failure policy decides: allowed by
// default, refused with WithFailClosed; the error is in Decision.Err,
// never returned, and the call lasts no longer than the budget.
func TestFailurePolicy(t *testing.T) {
	const budget = 30 * time.Millisecond
	failures := []struct {
		name     string
		setup    func(h *harness)
		wantCode codes.Code
	}{
		{"stopped", func(h *harness) { h.stop() }, codes.Unavailable},
		{"slow", func(h *harness) { h.slow.Store(true) }, codes.DeadlineExceeded},
		{"unavailable", func(h *harness) {
			err := status.Error(codes.Unavailable, "store down")
			h.fail.Store(&err)
		}, codes.Unavailable},
		{"internal", func(h *harness) {
			err := status.Error(codes.Internal, "internal error")
			h.fail.Store(&err)
		}, codes.Internal},
	}
	policies := []struct {
		name        string
		opts        []client.Option
		wantAllowed bool
	}{
		{"open", nil, true},
		{"closed", []client.Option{client.WithFailClosed()}, false},
	}
	for _, f := range failures {
		for _, p := range policies {
			t.Run(f.name+"/"+p.name, func(t *testing.T) {
				h := newHarness(t)
				c := h.client(append(p.opts, client.WithTimeout(budget))...)
				ask(t, h.client(), "api", client.D("api_key", "k1")) // connected, without the short budget
				f.setup(h)
				for range 2 { // no refusal is remembered
					start := time.Now()
					d, err := c.ShouldRateLimit(t.Context(), "api", client.D("api_key", "k1"))
					elapsed := time.Since(start)
					if err != nil {
						t.Fatalf("ShouldRateLimit: error %v, want the policy's decision", err)
					}
					if d.Allowed != p.wantAllowed || d.Local || d.Statuses != nil || d.RetryAfter != 0 {
						t.Errorf("ShouldRateLimit = %+v, want Allowed %v, no statuses", d, p.wantAllowed)
					}
					if f.name == "stopped" && status.Code(d.Err) == codes.DeadlineExceeded {
						// gRPC may still be reconnecting when the budget ends.
					} else {
						wantCode(t, "Decision.Err", d.Err, f.wantCode)
					}
					if elapsed > budget+time.Second { // generous under -race
						t.Errorf("ShouldRateLimit took %v, want about the budget %v", elapsed, budget)
					}
				}
				if got := c.LocalRefusals(); got != 0 {
					t.Errorf("LocalRefusals() = %d, want 0", got)
				}
			})
		}
	}
}

// TestNeverReachable: a Client whose ratelimitd never answered fails open
// within its budget.
func TestNeverReachable(t *testing.T) {
	lis := bufconn.Listen(1 << 10)
	lis.Close()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	d, err := client.New(conn).ShouldRateLimit(t.Context(), "api", client.D("api_key", "k1"))
	if err != nil || !d.Allowed || d.Err == nil {
		t.Errorf("ShouldRateLimit = %+v, %v; want allowed, with Decision.Err set", d, err)
	}
}

// TestBudget: the budget never extends the caller's context, and without
// a budget the call waits for ratelimitd as long as ctx allows.
func TestBudget(t *testing.T) {
	h := newHarness(t)
	ask(t, h.client(), "api", client.D("api_key", "k1")) // connected
	h.slow.Store(true)

	c := h.client(client.WithTimeout(0))
	start := time.Now() // before ctx's deadline is set, so the deadline is at least 100ms later
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	d, err := c.ShouldRateLimit(ctx, "api", client.D("api_key", "k1"))
	// gRPC's own timer may end the call a hair before ctx reports it: allow
	// it, the default budget (50ms) being far shorter.
	if elapsed := time.Since(start); elapsed < 90*time.Millisecond {
		t.Errorf("without a budget, ShouldRateLimit gave up after %v, before ctx's deadline", elapsed)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("ShouldRateLimit after ctx's deadline = %+v, %v; want an error wrapping context.DeadlineExceeded", d, err)
	}
}

// TestContextEnded: when the caller's context ends first, there is no
// decision, whatever the policy: the error wraps ctx.Err().
func TestContextEnded(t *testing.T) {
	h := newHarness(t)
	ask(t, h.client(), "api", client.D("api_key", "k1")) // connected
	for _, opts := range [][]client.Option{nil, {client.WithFailClosed()}} {
		c := h.client(opts...)

		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		d, err := c.ShouldRateLimit(ctx, "api", client.D("api_key", "k1"))
		if !errors.Is(err, context.Canceled) || d.Allowed {
			t.Errorf("ShouldRateLimit(canceled ctx) = %+v, %v; want an error wrapping context.Canceled", d, err)
		}

		h.slow.Store(true)
		ctx, cancel = context.WithTimeout(t.Context(), 5*time.Millisecond) // shorter than the budget
		d, err = c.ShouldRateLimit(ctx, "api", client.D("api_key", "k1"))
		cancel()
		h.slow.Store(false)
		if !errors.Is(err, context.DeadlineExceeded) || d.Allowed {
			t.Errorf("ShouldRateLimit(ctx expiring before the budget) = %+v, %v; want an error wrapping context.DeadlineExceeded", d, err)
		}
	}
}

// TestInvalidArgument: a malformed request, or one ratelimitd would refuse
// or that cannot be encoded, is an InvalidArgument error, not subject to
// the failure policy: the Client finds these mistakes itself, without an
// RPC, even while ratelimitd is stopped, and returns those ratelimitd
// finds.
func TestInvalidArgument(t *testing.T) {
	h := newHarness(t)
	c := h.client() // fail open
	hits := func(n uint64, d client.Descriptor) client.Descriptor { d.Hits = n; return d }
	big := make([]client.Descriptor, 64)
	for i := range big {
		big[i] = client.Descriptor{Entries: make([]client.Entry, 32)}
		for j := range big[i].Entries {
			big[i].Entries[j] = client.Entry{Key: "k", Value: strings.Repeat("v", 1000)}
		}
	}
	cases := []struct {
		name   string
		domain string
		ds     []client.Descriptor
	}{
		{"empty domain", "", []client.Descriptor{client.D("k", "v")}},
		{"no descriptors", "api", nil},
		{"no entries", "api", []client.Descriptor{client.D("k", "v"), {}}},
		{"empty key", "api", []client.Descriptor{client.D("k", "v", "", "v")}},
		{"long domain", strings.Repeat("d", 257), []client.Descriptor{client.D("k", "v")}},
		{"domain not UTF-8", "api\xff", []client.Descriptor{client.D("k", "v")}},
		{"long key", "api", []client.Descriptor{client.D(strings.Repeat("k", 1025), "v")}},
		{"key not UTF-8", "api", []client.Descriptor{client.D("k", "v"), client.D("api_key\xff", "v")}},
		{"too many descriptors", "api", make65()},
		{"too many entries", "api", []client.Descriptor{{Entries: make33()}}},
		{"too many hits", "api", []client.Descriptor{hits(1<<32, client.D("k", "v"))}},
		{"request over 1 MiB", "api", big},
	}
	for _, tt := range cases {
		d, err := c.ShouldRateLimit(t.Context(), tt.domain, tt.ds...)
		wantCode(t, tt.name, err, codes.InvalidArgument)
		if d.Allowed || d.Err != nil {
			t.Errorf("%s: %+v, want the zero Decision", tt.name, d)
		}
	}
	if got := h.rpcs.Load(); got != 0 {
		t.Errorf("%d RPCs, want 0: the Client finds these itself", got)
	}

	// The limits themselves are fine.
	ask(t, c, "api", hits(1<<32-1, client.D(strings.Repeat("k", 1024), "v")))
	ask(t, c, strings.Repeat("d", 256), make65()[:64]...)

	// ratelimitd's own InvalidArgument is returned.
	invalid := status.Error(codes.InvalidArgument, "bad request")
	h.fail.Store(&invalid)
	_, err := c.ShouldRateLimit(t.Context(), "api", client.D("k", "v"))
	wantCode(t, "ratelimitd answering InvalidArgument", err, codes.InvalidArgument)

	h.stop()
	for _, tt := range cases {
		_, err := c.ShouldRateLimit(t.Context(), tt.domain, tt.ds...)
		wantCode(t, tt.name+", ratelimitd stopped", err, codes.InvalidArgument)
	}
}

func make33() []client.Entry {
	es := make([]client.Entry, 33)
	for i := range es {
		es[i] = client.Entry{Key: "k", Value: "v"}
	}
	return es
}

func make65() []client.Descriptor {
	ds := make([]client.Descriptor, 65)
	for i := range ds {
		ds[i] = client.D("api_key", "k")
	}
	return ds
}

// TestRefusalMemory: a refusal with retry-after T is repeated locally,
// without an RPC, for min(T, cap), and counted.
func TestRefusalMemory(t *testing.T) {
	h := newHarness(t)
	c := h.client() // cap 1 s
	ms := time.Millisecond

	// api_key: refused for 60 s, remembered for the cap, 1 s.
	ask(t, c, "api", client.D("api_key", "k1"))
	ask(t, c, "api", client.D("api_key", "k1"))
	if d := ask(t, c, "api", client.D("api_key", "k1")); d.Allowed || d.Local {
		t.Fatalf("third call: %+v, want refused by ratelimitd", d)
	}
	rpcs := h.rpcs.Load()
	h.at(999 * ms)
	d := ask(t, c, "api", client.D("api_key", "k1"))
	want := client.Decision{
		RetryAfter: 60*time.Second - 999*ms,
		Statuses:   []client.Status{{OverLimit: true, Limit: apiKeyLimit, ResetAfter: 60*time.Second - 999*ms, RetryAfter: 60*time.Second - 999*ms}},
		Local:      true,
	}
	if diff := cmp.Diff(want, d, ignoreHeaders); diff != "" {
		t.Errorf("at +999ms: local refusal mismatch (-want +got):\n%s", diff)
	}
	if got := h.rpcs.Load() - rpcs; got != 0 {
		t.Errorf("local refusal: %d RPCs, want 0", got)
	}
	if got := c.LocalRefusals(); got != 1 {
		t.Errorf("LocalRefusals() = %d, want 1", got)
	}

	// Other requests are not refused by that memory: another value, more
	// descriptors, other hits, a check only, another domain.
	more := client.D("api_key", "k1")
	more.Hits = 2
	check := client.D("api_key", "k1")
	check.CheckOnly = true
	for _, ds := range [][]client.Descriptor{
		{client.D("api_key", "k2")},
		{client.D("api_key", "k1"), client.D("health", "x")},
		{more},
		{check},
	} {
		if d := ask(t, c, "api", ds...); d.Local {
			t.Errorf("ShouldRateLimit(%v): refused locally, want asked", ds)
		}
	}
	if d := ask(t, c, "other", client.D("api_key", "k1")); d.Local || !d.Allowed {
		t.Errorf("another domain: %+v, want asked and allowed", d)
	}

	// After the cap, ratelimitd is asked again, and refuses again.
	rpcs = h.rpcs.Load()
	h.at(time.Second)
	if d := ask(t, c, "api", client.D("api_key", "k1")); d.Allowed || d.Local {
		t.Errorf("at +1s: %+v, want refused by ratelimitd", d)
	}
	if got := h.rpcs.Load() - rpcs; got != 1 {
		t.Errorf("at +1s: %d RPCs, want 1", got)
	}

	// user: refused for 400 ms (< cap), remembered for that long only.
	h.at(1100 * ms)
	ask(t, c, "api", client.D("user", "u1"))
	if d := ask(t, c, "api", client.D("user", "u1")); d.Allowed || d.RetryAfter != 400*ms {
		t.Fatalf("user at +1.1s: %+v, want refused for 400ms", d)
	}
	h.at(1499 * ms)
	if d := ask(t, c, "api", client.D("user", "u1")); !d.Local || d.RetryAfter != ms {
		t.Errorf("user at +1.499s: %+v, want refused locally, retry after 1ms", d)
	}
	h.at(1500 * ms)
	if d := ask(t, c, "api", client.D("user", "u1")); !d.Allowed || d.Local {
		t.Errorf("user at +1.5s: %+v, want allowed by ratelimitd", d)
	}
	if got := c.LocalRefusals(); got != 2 {
		t.Errorf("LocalRefusals() = %d, want 2", got)
	}
}

// TestRefusalMemoryOff: WithRefusalCache(0) asks ratelimitd every time.
func TestRefusalMemoryOff(t *testing.T) {
	for _, opt := range []client.Option{client.WithRefusalCache(0), client.WithRefusalCacheSize(0)} {
		h := newHarness(t)
		c := h.client(opt)
		for range 5 {
			ask(t, c, "api", client.D("user", "u1"))
		}
		if got := h.rpcs.Load(); got != 5 {
			t.Errorf("%d RPCs for 5 calls, want 5", got)
		}
		if got := c.LocalRefusals(); got != 0 {
			t.Errorf("LocalRefusals() = %d, want 0", got)
		}
	}
}

// TestConcurrent: one Client from many goroutines (run with -race): every
// request is decided once by ratelimitd or locally, and ratelimitd admits
// exactly its limit.
func TestConcurrent(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	var allowed, local atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				d, err := c.ShouldRateLimit(t.Context(), "api", client.D("api_key", "shared"))
				switch {
				case err != nil:
					t.Errorf("ShouldRateLimit: %v", err)
				case d.Allowed:
					allowed.Add(1)
				case d.Local:
					local.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got := allowed.Load(); got != 2 {
		t.Errorf("%d allowed, want the limit, 2", got)
	}
	if got, want := uint64(local.Load()), c.LocalRefusals(); got != want {
		t.Errorf("%d local refusals seen, LocalRefusals() = %d", got, want)
	}
	if got := h.rpcs.Load() + local.Load(); got != 160 {
		t.Errorf("RPCs + local refusals = %d, want 160", got)
	}
}
