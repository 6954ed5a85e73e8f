package client_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimitd/ratelimitd/client"
)

// A clock is a manual clock for WithClock.
type clock struct{ now atomic.Int64 }

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// Now returns t0 plus the time set.
func (c *clock) Now() time.Time { return t0.Add(time.Duration(c.now.Load())) }

// at sets the clock to t0+d.
func (c *clock) at(d time.Duration) { c.now.Store(int64(d)) }

// TestRefusalMemory: a refusal with retry-after T is repeated locally,
// without an RPC, for min(T, cap), its durations and headers counted
// down, and counted; other requests are asked.
func TestRefusalMemory(t *testing.T) {
	f := &fakeRLS{limit: 1, retryAfter: durationpb.New(time.Minute)}
	var clk clock
	c := client.New(newFakeRLS(t, f), client.WithTimeout(0), client.WithClock(clk.Now)) // cap 1 s
	ms := time.Millisecond

	ask(t, c, "api", client.D("api_key", "k1"))
	if d := ask(t, c, "api", client.D("api_key", "k1")); d.Allowed || d.Local {
		t.Fatalf("second call: %+v, want refused by ratelimitd", d)
	}
	rpcs := f.rpcs()
	clk.at(999 * ms)
	d := ask(t, c, "api", client.D("api_key", "k1"))
	limit := client.Limit{Name: "api_key", Requests: 1, Window: time.Hour}
	want := client.Decision{
		RetryAfter: 60*time.Second - 999*ms,
		Statuses:   []client.Status{{OverLimit: true, Limit: limit, RetryAfter: 60*time.Second - 999*ms}},
		Headers: []client.Header{
			{Name: "RateLimit-Policy", Value: `"api_key";q=1;w=3600`},
			{Name: "RateLimit", Value: `"api_key";r=0;t=3600`},
			{Name: "Retry-After", Value: "60"},
		},
		Local: true,
	}
	if diff := cmp.Diff(want, d); diff != "" {
		t.Errorf("at +999ms: local refusal mismatch (-want +got):\n%s", diff)
	}
	if got := f.rpcs() - rpcs; got != 0 {
		t.Errorf("local refusal: %d RPCs, want 0", got)
	}
	if got := c.LocalRefusals(); got != 1 {
		t.Errorf("LocalRefusals() = %d, want 1", got)
	}

	// Other requests are not refused by that memory: another value, more
	// descriptors, other hits, a check only, another domain, a limit
	// override.
	more := client.D("api_key", "k1")
	more.Hits = 2
	check := client.D("api_key", "k1")
	check.CheckOnly = true
	override := client.D("api_key", "k1")
	override.Limit = &client.LimitOverride{Requests: 10, Window: time.Minute}
	for _, ds := range [][]client.Descriptor{
		{client.D("api_key", "k2")},
		{client.D("api_key", "k1"), client.D("health", "x")},
		{more},
		{check},
		{override},
	} {
		rpcs := f.rpcs()
		if d := ask(t, c, "api", ds...); d.Local || f.rpcs() != rpcs+1 {
			t.Errorf("ShouldRateLimit(%v): refused locally, want asked", ds)
		}
	}
	if d := ask(t, c, "other", client.D("api_key", "k1")); d.Local {
		t.Errorf("another domain: %+v, want asked", d)
	}

	// After the cap, ratelimitd is asked again, and refuses again.
	rpcs = f.rpcs()
	clk.at(time.Second)
	if d := ask(t, c, "api", client.D("api_key", "k1")); d.Allowed || d.Local {
		t.Errorf("at +1s: %+v, want refused by ratelimitd", d)
	}
	if got := f.rpcs() - rpcs; got != 1 {
		t.Errorf("at +1s: %d RPCs, want 1", got)
	}

	// A refusal for less than the cap is remembered that long only.
	f.retryAfter = durationpb.New(400 * ms)
	clk.at(1100 * ms)
	ask(t, c, "api", client.D("user", "u1"))
	if d := ask(t, c, "api", client.D("user", "u1")); d.Allowed || d.RetryAfter != 400*ms {
		t.Fatalf("user at +1.1s: %+v, want refused for 400ms", d)
	}
	clk.at(1499 * ms)
	if d := ask(t, c, "api", client.D("user", "u1")); !d.Local || d.RetryAfter != ms {
		t.Errorf("user at +1.499s: %+v, want refused locally, retry after 1ms", d)
	}
	rpcs = f.rpcs()
	clk.at(1500 * ms)
	if d := ask(t, c, "api", client.D("user", "u1")); d.Local || f.rpcs() != rpcs+1 {
		t.Errorf("user at +1.5s: %+v, want asked", d)
	}
	if got := c.LocalRefusals(); got != 2 {
		t.Errorf("LocalRefusals() = %d, want 2", got)
	}
}

// TestRefusalMemoryOff: WithRefusalCache(0), or a size of 0, asks
// ratelimitd every time.
func TestRefusalMemoryOff(t *testing.T) {
	for _, opt := range []client.Option{client.WithRefusalCache(0), client.WithRefusalCacheSize(0)} {
		f := &fakeRLS{limit: 1}
		c := client.New(newFakeRLS(t, f), opt)
		for range 5 {
			ask(t, c, "api", client.D("user", "u1"))
		}
		if got := f.rpcs(); got != 5 {
			t.Errorf("%d RPCs for 5 calls, want 5", got)
		}
		if got := c.LocalRefusals(); got != 0 {
			t.Errorf("LocalRefusals() = %d, want 0", got)
		}
	}
}

// TestRefusalMemoryBounded: the memory holds at most its size, forgetting
// expired refusals first.
func TestRefusalMemoryBounded(t *testing.T) {
	f := &fakeRLS{limit: 1, retryAfter: durationpb.New(500 * time.Millisecond)}
	var clk clock
	c := client.New(newFakeRLS(t, f), client.WithTimeout(0), client.WithClock(clk.Now), client.WithRefusalCacheSize(3))
	refuse := func(user string) {
		t.Helper()
		ask(t, c, "api", client.D("user", user))
		if d := ask(t, c, "api", client.D("user", user)); d.Allowed {
			t.Fatalf("user %s: allowed twice, want refused", user)
		}
	}
	for i := range 10 {
		refuse(string(rune('a' + i)))
		if got := c.Refusals(); got > 3 {
			t.Fatalf("after %d refusals: %d remembered, want at most 3", i+1, got)
		}
	}
	if got := c.Refusals(); got != 3 {
		t.Errorf("%d refusals remembered, want 3", got)
	}
	if !ask(t, c, "api", client.D("user", "j")).Local {
		t.Error("the last refusal was not remembered")
	}

	// Once expired, they make room without evicting live ones.
	clk.at(500 * time.Millisecond)
	refuse("x")
	refuse("y")
	if !ask(t, c, "api", client.D("user", "x")).Local || !ask(t, c, "api", client.D("user", "y")).Local {
		t.Error("after expiry: a new refusal was evicted, want the expired ones forgotten first")
	}
}

// TestConcurrent: one Client from many goroutines (run with -race): every
// request is decided once, by ratelimitd or locally, and ratelimitd
// admits exactly its limit.
func TestConcurrent(t *testing.T) {
	f := &fakeRLS{limit: 2}
	c := client.New(newFakeRLS(t, f), client.WithTimeout(0))
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
	if got := int64(f.rpcs()) + local.Load(); got != 160 {
		t.Errorf("RPCs + local refusals = %d, want 160", got)
	}
}

// TestClockNil: WithClock(nil) keeps the real clock, as it does for a
// Quota, rather than leaving the refusal memory without one.
func TestClockNil(t *testing.T) {
	f := &fakeRLS{limit: 1, retryAfter: durationpb.New(time.Minute)}
	c := client.New(newFakeRLS(t, f), client.WithTimeout(0), client.WithClock(nil))
	ask(t, c, "api", client.D("api_key", "k1"))
	ask(t, c, "api", client.D("api_key", "k1")) // refused: remembered
	if d := ask(t, c, "api", client.D("api_key", "k1")); d.Allowed || !d.Local {
		t.Errorf("third call: %+v, want refused from the refusal memory", d)
	}
}
