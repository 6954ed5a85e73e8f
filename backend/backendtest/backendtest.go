// Package backendtest is the conformance suite of backend.Store: every
// store (memory, Redis standalone, Sentinel, Cluster) must pass Run, in the
// way every fs.FS must pass testing/fstest.TestFS.
//
// Usage, in a store's tests:
//
//	func TestConformance(t *testing.T) {
//		backendtest.Run(t, func(t *testing.T, now func() time.Time) backend.Store {
//			s := memory.New(memory.Options{Now: now})
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
package backendtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/ratelimitd/ratelimitd/backend"
)

// NewStore returns a fresh, empty store that reads the time from now.
// It should register its own cleanup with t.Cleanup.
type NewStore func(t *testing.T, now func() time.Time) backend.Store

// T0 is the instant the suite's clocks start at: aligned to every window the
// cases use, so that window ends are round numbers.
var T0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Run runs the whole suite against stores made by newStore.
func Run(t *testing.T, newStore NewStore) {
	t.Run("Cases", func(t *testing.T) { runCases(t, newStore) })
	t.Run("Semantics", func(t *testing.T) { runSemantics(t, newStore) })
	t.Run("Concurrency", func(t *testing.T) { runConcurrency(t, newStore) })
	t.Run("OpCases", func(t *testing.T) { runOpCases(t, newStore) })
	t.Run("GiveBacks", func(t *testing.T) { runGiveBacks(t, newStore) })
	t.Run("Leases", func(t *testing.T) { runLeases(t, newStore) })
}

// Clock is a manual clock, safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock reading t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// A Step is one call with one request on a case's counter, at T0+At.
type Step struct {
	At   time.Duration
	Hits uint64
	Want backend.Result
}

// A Case is a limit and a sequence of steps on one fresh counter.
type Case struct {
	Name  string
	Limit backend.Limit
	Steps []Step
}

func ok(remaining uint64, reset time.Duration) backend.Result {
	return backend.Result{Remaining: remaining, ResetAfter: reset}
}

func over(remaining uint64, reset, retry time.Duration) backend.Result {
	return backend.Result{OverLimit: true, Remaining: remaining, ResetAfter: reset, RetryAfter: retry}
}

const (
	ms = time.Millisecond
	s  = time.Second
)

// Cases is the shared table of decisions on explicit instants: the
// reference that every store, and every port of backend.State's
// algorithms (such as the Redis scripts), must reproduce exactly.
var Cases = []Case{
	{
		Name:  "fixed_window",
		Limit: backend.Limit{Algorithm: backend.FixedWindow, Requests: 3, Window: time.Minute},
		Steps: []Step{
			{0, 1, ok(2, 60*s)},
			{10 * s, 2, ok(0, 50*s)},
			{20 * s, 1, over(0, 40*s, 40*s)},
			{30 * s, 0, ok(0, 30*s)}, // check only: at the limit is not past it
			{60 * s, 1, ok(2, 60*s)}, // a new window
			{61 * s, 5, over(2, 59*s, 60*s)},
		},
	},
	{
		Name:  "sliding_window",
		Limit: backend.Limit{Algorithm: backend.SlidingWindow, Requests: 10, Window: time.Minute},
		Steps: []Step{
			{0, 10, ok(0, 60*s)},
			// Next window: 10·(60-e)/60 + 1 <= 10 from e = 6 s, at 66 s.
			{30 * s, 1, over(0, 30*s, 36*s)},
			{66 * s, 1, ok(0, 54*s)},
			{90 * s, 0, ok(4, 30*s)},
			// 10·(60-e)/60 + 1 + 5 <= 10 from e = 36 s, at 96 s.
			{90 * s, 5, over(4, 30*s, 6*s)},
			{96 * s, 5, ok(0, 24*s)},
			{180 * s, 1, ok(9, 60*s)}, // two windows later: all forgotten
			{181 * s, 11, over(9, 59*s, 60*s)},
		},
	},
	{
		Name:  "sliding_window_fractional",
		Limit: backend.Limit{Algorithm: backend.SlidingWindow, Requests: 3, Window: 10 * s},
		Steps: []Step{
			{9 * s, 3, ok(0, 1*s)},
			// 3·(10-e)/10 + 1 <= 3 from e = 10/3 s: 3.333334 s after 10 s.
			{10 * s, 1, over(0, 10*s, 3333334*time.Microsecond)},
			{13333333 * time.Microsecond, 1, over(0, 6666667*time.Microsecond, time.Microsecond)},
			{13333334 * time.Microsecond, 1, ok(0, 6666666*time.Microsecond)},
		},
	},
	{
		Name:  "sliding_log",
		Limit: backend.Limit{Algorithm: backend.SlidingLog, Requests: 3, Window: 10 * s},
		Steps: []Step{
			{0, 1, ok(2, 10*s)},
			{2 * s, 1, ok(1, 8*s)},
			{4 * s, 1, ok(0, 6*s)},
			{5 * s, 1, over(0, 5*s, 5*s)},   // the hit at 0 expires at 10 s
			{5 * s, 2, over(0, 5*s, 7*s)},   // and the one at 2 s at 12 s
			{10 * s, 1, ok(0, 2*s)},         // the hit at 0 has expired
			{10 * s, 4, over(0, 2*s, 10*s)}, // more than the limit: never
			{30 * s, 0, ok(3, 0)},
		},
	},
	{
		Name:  "token_bucket",
		Limit: backend.Limit{Algorithm: backend.TokenBucket, Requests: 2, Window: s, Burst: 4},
		Steps: []Step{
			{0, 4, ok(0, 2*s)}, // starts full
			{0, 1, over(0, 2*s, 500*ms)},
			{500 * ms, 1, ok(0, 2*s)},
			{1500 * ms, 0, ok(2, s)},
			{1500 * ms, 5, over(2, s, s)}, // more than the burst: never
			{10 * s, 1, ok(3, 500*ms)},
		},
	},
	{
		Name:  "token_bucket_default_burst",
		Limit: backend.Limit{Algorithm: backend.TokenBucket, Requests: 3, Window: time.Minute},
		Steps: []Step{
			{0, 3, ok(0, 60*s)},
			{10 * s, 1, over(0, 50*s, 10*s)},
			{20 * s, 1, ok(0, 60*s)},
		},
	},
	{
		Name:  "gcra",
		Limit: backend.Limit{Algorithm: backend.GCRA, Requests: 2, Window: s, Burst: 2},
		Steps: []Step{
			{0, 1, ok(1, 500*ms)},
			{0, 1, ok(0, s)},
			{0, 1, over(0, s, 500*ms)},
			{500 * ms, 1, ok(0, s)},
			{600 * ms, 0, ok(0, 900*ms)},
			{600 * ms, 3, over(0, 900*ms, s)}, // more than the burst: never
			{5 * s, 2, ok(0, s)},
		},
	},
	{
		Name:  "gcra_burst",
		Limit: backend.Limit{Algorithm: backend.GCRA, Requests: 1, Window: s, Burst: 5},
		Steps: []Step{
			{0, 5, ok(0, 5*s)},
			{0, 1, over(0, 5*s, s)},
			{2 * s, 2, ok(0, 5*s)},
			{2 * s, 1, over(0, 5*s, s)},
		},
	},
	{
		Name:  "ban",
		Limit: backend.Limit{Algorithm: backend.FixedWindow, Requests: 0, Window: time.Hour},
		Steps: []Step{
			{0, 1, over(0, time.Hour, time.Hour)},
			{90 * time.Minute, 0, over(0, 30*time.Minute, 30*time.Minute)},
		},
	},
	{
		Name:  "ban_token_bucket",
		Limit: backend.Limit{Algorithm: backend.TokenBucket, Requests: 0, Window: time.Minute},
		Steps: []Step{{30 * s, 1, over(0, 30*s, 30*s)}},
	},
}

func runCases(t *testing.T, newStore NewStore) {
	for _, c := range Cases {
		steps := make([]OpStep, len(c.Steps))
		for i, step := range c.Steps {
			steps[i] = OpStep{At: step.At, Op: backend.Take, Hits: step.Hits, Want: step.Want}
		}
		t.Run(c.Name, func(t *testing.T) { runSteps(t, newStore, c.Limit, steps) })
	}
}

// runSteps makes steps, one call each, on a fresh counter of limit l in
// a store of newStore, and checks each answer.
func runSteps(t *testing.T, newStore NewStore, l backend.Limit, steps []OpStep) {
	t.Helper()
	clock := NewClock(T0)
	st := newStore(t, clock.Now)
	key := Key(t.Name())
	for i, step := range steps {
		clock.Set(T0.Add(step.At))
		req := backend.Request{Key: key, Limit: l, Hits: step.Hits, Op: step.Op}
		if step.Lease != 0 {
			req.Lease = stamp(step.Lease)
		}
		got := take1(t, st, req)
		// Cached says how the store answered, not what: the suite
		// checks the answers, whichever way they came.
		if diff := cmp.Diff(step.Want, got, cmpopts.IgnoreFields(backend.Result{}, "Cached")); diff != "" {
			t.Errorf("step %d (at +%v, op %d, hits %d, lease +%v): Take() mismatch (-want +got):\n%s",
				i, step.At, step.Op, step.Hits, step.Lease, diff)
		}
	}
}

// Key returns a counter key made from parts, as the engine makes them.
func Key(parts ...string) string {
	var b []byte
	for _, p := range parts {
		b = backend.AppendKeyPart(b, p)
	}
	return string(backend.AppendKeySuffix(b, backend.Limit{Window: time.Minute}))
}

func take1(t *testing.T, st backend.Store, req backend.Request) backend.Result {
	t.Helper()
	res := make([]backend.Result, 1)
	if err := st.Take(t.Context(), []backend.Request{req}, res); err != nil {
		t.Fatalf("Take(%q) error: %v", req.Key, err)
	}
	return res[0]
}

func take(t *testing.T, st backend.Store, reqs ...backend.Request) []backend.Result {
	t.Helper()
	res := make([]backend.Result, len(reqs))
	if err := st.Take(t.Context(), reqs, res); err != nil {
		t.Fatalf("Take() error: %v", err)
	}
	return res
}

// remaining returns what a check-only call reports as remaining on key.
func remaining(t *testing.T, st backend.Store, key string, l backend.Limit) uint64 {
	t.Helper()
	return take1(t, st, backend.Request{Key: key, Limit: l, Hits: 0}).Remaining
}

func overs(res []backend.Result) []bool {
	o := make([]bool, len(res))
	for i, r := range res {
		o[i] = r.OverLimit
	}
	return o
}

func runSemantics(t *testing.T, newStore NewStore) {
	fixed := func(n uint64) backend.Limit {
		return backend.Limit{Algorithm: backend.FixedWindow, Requests: n, Window: time.Hour}
	}
	type check struct {
		key  string
		want uint64 // remaining after the call, per a check-only call
	}
	tests := []struct {
		name      string
		prime     []backend.Request // taken first, one call each
		reqs      []backend.Request
		wantOver  []bool
		wantCheck []check
	}{
		{
			name:      "keys are independent",
			prime:     []backend.Request{{Key: "a", Limit: fixed(1), Hits: 1}},
			reqs:      []backend.Request{{Key: "b", Limit: fixed(1), Hits: 1}},
			wantOver:  []bool{false},
			wantCheck: []check{{"a", 0}, {"b", 0}},
		},
		{
			name: "a refused call consumes nothing",
			reqs: []backend.Request{
				{Key: "a", Limit: fixed(5), Hits: 1, Group: 0},
				{Key: "b", Limit: fixed(1), Hits: 2, Group: 1},
			},
			wantOver:  []bool{false, true},
			wantCheck: []check{{"a", 5}, {"b", 1}},
		},
		{
			name: "an admitted call consumes on every group",
			reqs: []backend.Request{
				{Key: "a", Limit: fixed(5), Hits: 2, Group: 0},
				{Key: "b", Limit: fixed(3), Hits: 2, Group: 1},
			},
			wantOver:  []bool{false, false},
			wantCheck: []check{{"a", 3}, {"b", 1}},
		},
		{
			name: "the limits of a group stand or fall together",
			reqs: []backend.Request{
				{Key: "burst", Limit: fixed(10), Hits: 1, Group: 0, Mode: backend.Shadow},
				{Key: "daily", Limit: fixed(0), Hits: 1, Group: 0, Mode: backend.Shadow},
				{Key: "other", Limit: fixed(10), Hits: 1, Group: 1},
			},
			wantOver:  []bool{false, true, false},
			wantCheck: []check{{"burst", 10}, {"other", 9}},
		},
		{
			name: "a shadow group over its limit refuses nothing and consumes nothing",
			prime: []backend.Request{
				{Key: "s", Limit: fixed(1), Hits: 1},
			},
			reqs: []backend.Request{
				{Key: "s", Limit: fixed(1), Hits: 1, Group: 0, Mode: backend.Shadow},
				{Key: "e", Limit: fixed(2), Hits: 1, Group: 1},
			},
			wantOver:  []bool{true, false},
			wantCheck: []check{{"s", 0}, {"e", 1}},
		},
		{
			name:  "one quota group over of two: admitted",
			prime: []backend.Request{{Key: "q1", Limit: fixed(1), Hits: 1}},
			reqs: []backend.Request{
				{Key: "q1", Limit: fixed(1), Hits: 1, Group: 0, Mode: backend.Quota},
				{Key: "q2", Limit: fixed(2), Hits: 1, Group: 1, Mode: backend.Quota},
				{Key: "e", Limit: fixed(2), Hits: 1, Group: 2},
			},
			wantOver:  []bool{true, false, false},
			wantCheck: []check{{"q1", 0}, {"q2", 1}, {"e", 1}},
		},
		{
			name: "every quota group over: refused",
			prime: []backend.Request{
				{Key: "q1", Limit: fixed(1), Hits: 1},
				{Key: "q2", Limit: fixed(1), Hits: 1},
			},
			reqs: []backend.Request{
				{Key: "q1", Limit: fixed(1), Hits: 1, Group: 0, Mode: backend.Quota},
				{Key: "q2", Limit: fixed(1), Hits: 1, Group: 1, Mode: backend.Quota},
				{Key: "e", Limit: fixed(2), Hits: 1, Group: 2},
			},
			wantOver:  []bool{true, true, false},
			wantCheck: []check{{"e", 2}},
		},
		{
			name: "consume_when_over records even when refused, past the limit",
			reqs: []backend.Request{
				{Key: "c", Limit: fixed(2), Hits: 3, Group: 0, ConsumeWhenOver: true},
				{Key: "e", Limit: fixed(2), Hits: 1, Group: 1},
			},
			wantOver:  []bool{true, false},
			wantCheck: []check{{"c", 0}, {"e", 2}},
		},
		{
			name: "check only consumes nothing",
			reqs: []backend.Request{
				{Key: "a", Limit: fixed(2), Hits: 0},
			},
			wantOver:  []bool{false},
			wantCheck: []check{{"a", 2}},
		},
		{
			name: "check only is over once the counter is past the limit",
			prime: []backend.Request{
				{Key: "a", Limit: fixed(2), Hits: 3, ConsumeWhenOver: true},
			},
			reqs:     []backend.Request{{Key: "a", Limit: fixed(2), Hits: 0}},
			wantOver: []bool{true},
		},
		{
			name: "one counter twice in a call counts both",
			reqs: []backend.Request{
				{Key: "d", Limit: fixed(1), Hits: 1, Group: 0},
				{Key: "d", Limit: fixed(1), Hits: 1, Group: 1},
			},
			wantOver:  []bool{false, true},
			wantCheck: []check{{"d", 1}},
		},
		{
			name: "one counter twice in a shadow call admits only what fits",
			reqs: []backend.Request{
				{Key: "d", Limit: fixed(1), Hits: 1, Group: 0, Mode: backend.Shadow},
				{Key: "d", Limit: fixed(1), Hits: 1, Group: 1, Mode: backend.Shadow},
			},
			wantOver:  []bool{false, true},
			wantCheck: []check{{"d", 0}},
		},
		{
			name:      "a changed count keeps the counter",
			prime:     []backend.Request{{Key: "k", Limit: fixed(5), Hits: 2}},
			reqs:      []backend.Request{{Key: "k", Limit: fixed(3), Hits: 1}},
			wantOver:  []bool{false},
			wantCheck: []check{{"k", 0}},
		},
		{
			name: "long keys with a common prefix are distinct counters",
			prime: []backend.Request{
				{Key: strings.Repeat("x", 2000) + "a", Limit: fixed(1), Hits: 1},
			},
			reqs:      []backend.Request{{Key: strings.Repeat("x", 2000) + "b", Limit: fixed(1), Hits: 1}},
			wantOver:  []bool{false},
			wantCheck: []check{{strings.Repeat("x", 2000) + "a", 0}, {strings.Repeat("x", 2000) + "b", 0}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := NewClock(T0)
			st := newStore(t, clock.Now)
			for _, p := range tt.prime {
				take1(t, st, p)
			}
			res := take(t, st, tt.reqs...)
			if diff := cmp.Diff(tt.wantOver, overs(res)); diff != "" {
				t.Errorf("OverLimit mismatch (-want +got):\n%s", diff)
			}
			for _, c := range tt.wantCheck {
				if got := remaining(t, st, c.key, fixed(limitOf(tt.reqs, tt.prime, c.key))); got != c.want {
					t.Errorf("remaining(%.20q) = %d, want %d", c.key, got, c.want)
				}
			}
		})
	}

	t.Run("changed window or algorithm is a fresh counter", func(t *testing.T) {
		// Keys carry the algorithm and window (AppendKeySuffix); the store
		// must keep one state per key, whatever the limit says.
		clock := NewClock(T0)
		st := newStore(t, clock.Now)
		for _, a := range backend.Algorithms {
			l := backend.Limit{Algorithm: a, Requests: 1, Window: time.Minute}
			key := string(backend.AppendKeySuffix(backend.AppendKeyPart(nil, "k"), l))
			if r := take1(t, st, backend.Request{Key: key, Limit: l, Hits: 1}); r.OverLimit {
				t.Errorf("%v: first hit on a fresh key refused: %+v", a, r)
			}
		}
	})

	t.Run("canceled context", func(t *testing.T) {
		st := newStore(t, NewClock(T0).Now)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		err := st.Take(ctx, []backend.Request{{Key: "a", Limit: fixed(1), Hits: 1}}, make([]backend.Result, 1))
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Take(canceled ctx) error = %v, want context.Canceled", err)
		}
	})

	t.Run("results slice of the wrong length", func(t *testing.T) {
		st := newStore(t, NewClock(T0).Now)
		err := st.Take(t.Context(), []backend.Request{{Key: "a", Limit: fixed(1), Hits: 1}}, nil)
		if err == nil {
			t.Error("Take(1 request, 0 results) error = nil, want an error")
		}
	})

	t.Run("every algorithm refuses past its limit and admits after its window", func(t *testing.T) {
		for _, a := range backend.Algorithms {
			t.Run(a.String(), func(t *testing.T) {
				clock := NewClock(T0)
				st := newStore(t, clock.Now)
				l := backend.Limit{Algorithm: a, Requests: 5, Window: 10 * s}
				for i := range 5 {
					if r := take1(t, st, backend.Request{Key: "k", Limit: l, Hits: 1}); r.OverLimit {
						t.Fatalf("hit %d refused: %+v", i+1, r)
					}
				}
				r := take1(t, st, backend.Request{Key: "k", Limit: l, Hits: 1})
				if !r.OverLimit || r.RetryAfter <= 0 || r.RetryAfter > 2*l.Window {
					t.Fatalf("hit 6 = %+v, want over with 0 < RetryAfter <= %v", r, 2*l.Window)
				}
				clock.Set(T0.Add(r.RetryAfter))
				if r := take1(t, st, backend.Request{Key: "k", Limit: l, Hits: 1}); r.OverLimit {
					t.Errorf("hit after RetryAfter refused: %+v", r)
				}
			})
		}
	})
}

// limitOf returns the Requests of the first request on key.
func limitOf(reqs, prime []backend.Request, key string) uint64 {
	for _, r := range append(append([]backend.Request(nil), reqs...), prime...) {
		if r.Key == key {
			return r.Limit.Requests
		}
	}
	panic(fmt.Sprintf("no request on key %q", key))
}

func runConcurrency(t *testing.T, newStore NewStore) {
	const (
		limit   = 100
		callers = 64
		calls   = 10 // per caller
	)
	for _, a := range backend.Algorithms {
		t.Run("exact/"+a.String(), func(t *testing.T) {
			st := newStore(t, NewClock(T0).Now)
			l := backend.Limit{Algorithm: a, Requests: limit, Window: time.Hour}
			var admitted atomic.Int64
			run(t, callers, calls, func() error {
				res := make([]backend.Result, 1)
				err := st.Take(t.Context(), []backend.Request{{Key: "k", Limit: l, Hits: 1}}, res)
				if err == nil && !res[0].OverLimit {
					admitted.Add(1)
				}
				return err
			})
			if got := admitted.Load(); got != limit {
				t.Errorf("%d callers × %d calls on a limit of %d: admitted %d, want exactly %d", callers, calls, limit, got, limit)
			}
		})
	}
	t.Run("atomic across keys", func(t *testing.T) {
		// Every call takes one hit on a (limit 50) and on b (limit 30):
		// exactly 30 calls pass, and a counts exactly those 30.
		st := newStore(t, NewClock(T0).Now)
		la := backend.Limit{Algorithm: backend.FixedWindow, Requests: 50, Window: time.Hour}
		lb := backend.Limit{Algorithm: backend.SlidingWindow, Requests: 30, Window: time.Hour}
		var admitted atomic.Int64
		run(t, callers, calls, func() error {
			reqs := []backend.Request{{Key: "a", Limit: la, Hits: 1, Group: 0}, {Key: "b", Limit: lb, Hits: 1, Group: 1}}
			res := make([]backend.Result, 2)
			err := st.Take(t.Context(), reqs, res)
			if err == nil && !backend.Refused(reqs, res) {
				admitted.Add(1)
			}
			return err
		})
		if got := admitted.Load(); got != 30 {
			t.Errorf("admitted %d calls, want 30", got)
		}
		if got := remaining(t, st, "a", la); got != 20 {
			t.Errorf("remaining on a = %d, want 20: a refused call consumed", got)
		}
	})
}

// run calls f calls times from each of callers goroutines and fails t on
// the first error.
func run(t *testing.T, callers, calls int, f func() error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Go(func() {
			for range calls {
				if err := f(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
