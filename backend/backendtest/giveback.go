package backendtest

import (
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ratelimitd/ratelimitd/backend"
)

// An OpStep is one call with one request of any Op on a case's counter,
// at T0+At. Lease, when not zero, names the lease stamped T0+Lease.
type OpStep struct {
	At    time.Duration
	Op    backend.Op
	Hits  uint64
	Lease time.Duration
	Want  backend.Result
}

// An OpCase is a limit and a sequence of steps, give-backs and renews
// among takes, on one fresh counter.
type OpCase struct {
	Name  string
	Limit backend.Limit
	Steps []OpStep
}

// stamp returns the lease stamp (µs) of the instant T0+d.
func stamp(d time.Duration) int64 { return backend.Micros(T0.Add(d)) }

// leased is ok with the lease stamped T0+d.
func leased(remaining uint64, reset, d time.Duration) backend.Result {
	return backend.Result{Remaining: remaining, ResetAfter: reset, Lease: stamp(d)}
}

const (
	tk   = backend.Take
	give = backend.GiveBack
	renw = backend.Renew
	us   = time.Microsecond
)

// OpCases is the shared table of give-backs (Envoy's negative hits) and
// of the Concurrency algorithm's leases, on explicit instants, as Cases
// is of takes.
var OpCases = []OpCase{
	{
		Name:  "fixed_window_give_back",
		Limit: backend.Limit{Algorithm: backend.FixedWindow, Requests: 5, Window: time.Minute},
		Steps: []OpStep{
			{0, give, 2, 0, ok(5, 60*s)}, // a fresh budget: nothing changes
			{1 * s, tk, 5, 0, ok(0, 59*s)},
			{2 * s, tk, 1, 0, over(0, 58*s, 58*s)},
			{3 * s, give, 2, 0, ok(2, 57*s)},
			{4 * s, give, 9, 0, ok(5, 56*s)}, // not below zero
			{5 * s, tk, 5, 0, ok(0, 55*s)},   // no credit past the limit
			{6 * s, tk, 1, 0, over(0, 54*s, 54*s)},
			{60 * s, give, 3, 0, ok(5, 60*s)}, // a new window: nothing to give back
		},
	},
	{
		Name:  "sliding_window_give_back",
		Limit: backend.Limit{Algorithm: backend.SlidingWindow, Requests: 10, Window: time.Minute},
		Steps: []OpStep{
			{0, tk, 10, 0, ok(0, 60*s)},
			// The previous window is left as is: its weight still fills the limit.
			{60 * s, give, 5, 0, ok(0, 60*s)},
			// 10·(60-e)/60 + 4 <= 10 from e = 24 s.
			{60 * s, tk, 4, 0, over(0, 60*s, 24*s)},
			{90 * s, tk, 5, 0, ok(0, 30*s)}, // 5 weighted + 5
			{90 * s, give, 3, 0, ok(3, 30*s)},
			{91 * s, give, 9, 0, ok(5, 29*s)}, // not below zero: 10·29/60 weighted
		},
	},
	{
		Name:  "sliding_log_give_back",
		Limit: backend.Limit{Algorithm: backend.SlidingLog, Requests: 3, Window: 10 * s},
		Steps: []OpStep{
			{0, give, 1, 0, ok(3, 0)}, // a fresh budget: nothing changes
			{0, tk, 1, 0, ok(2, 10*s)},
			{2 * s, tk, 1, 0, ok(1, 8*s)},
			{4 * s, tk, 1, 0, ok(0, 6*s)},
			{5 * s, give, 1, 0, ok(1, 5*s)}, // drops the newest, at 4 s
			// At 10 s the hit at 0 expires: only the one at 2 s is left
			// (had the oldest been dropped, those at 2 and 4 s would be).
			{10 * s, tk, 0, 0, ok(2, 2*s)},
			{11 * s, give, 5, 0, ok(3, 0)}, // not below zero
			{11 * s, tk, 3, 0, ok(0, 10*s)},
		},
	},
	{
		Name:  "token_bucket_give_back",
		Limit: backend.Limit{Algorithm: backend.TokenBucket, Requests: 2, Window: s, Burst: 4},
		Steps: []OpStep{
			{0, give, 2, 0, ok(4, 0)}, // full: nothing changes
			{0, tk, 4, 0, ok(0, 2*s)},
			{0, tk, 1, 0, over(0, 2*s, 500*ms)},
			{0, give, 1, 0, ok(1, 1500*ms)},
			{0, give, 9, 0, ok(4, 0)}, // up to the capacity
			{0, tk, 4, 0, ok(0, 2*s)},
		},
	},
	{
		Name:  "gcra_give_back",
		Limit: backend.Limit{Algorithm: backend.GCRA, Requests: 2, Window: s, Burst: 2},
		Steps: []OpStep{
			{0, give, 1, 0, ok(2, 0)}, // a fresh budget: nothing changes
			{0, tk, 2, 0, ok(0, s)},
			{250 * ms, give, 1, 0, ok(1, 250*ms)}, // TAT from 1 s back to 500 ms
			{250 * ms, give, 5, 0, ok(2, 0)},      // not before now
			{250 * ms, tk, 2, 0, ok(0, s)},        // no credit past the burst
			{250 * ms, tk, 1, 0, over(0, s, 500*ms)},
		},
	},
	{
		Name:  "ban_give_back",
		Limit: backend.Limit{Algorithm: backend.FixedWindow, Requests: 0, Window: time.Hour},
		Steps: []OpStep{
			{0, give, 1, 0, ok(0, time.Hour)}, // never over, changes nothing
			{30 * time.Minute, tk, 1, 0, over(0, 30*time.Minute, 30*time.Minute)},
		},
	},
	{
		Name:  "concurrency",
		Limit: backend.Limit{Algorithm: backend.Concurrency, Requests: 3, Window: 10 * s},
		Steps: []OpStep{
			{1 * s, give, 1, 0, ok(3, 0)}, // nothing held: nothing changes
			// Unique stamps: leases taken at one instant are a µs apart.
			{1 * s, tk, 1, 0, leased(2, 10*s, 1*s)},
			{1 * s, tk, 1, 0, leased(1, 10*s, 1*s+us)},
			{1 * s, tk, 1, 0, leased(0, 10*s, 1*s+2*us)},
			{2 * s, tk, 1, 0, over(0, 9*s, 9*s)},   // the lease at 1 s lapses at 11 s
			{3 * s, give, 1, 1*s + us, ok(1, 8*s)}, // released by its lease
			{3 * s, give, 1, 1*s + us, ok(1, 8*s)}, // twice: frees nothing more
			{4 * s, tk, 1, 0, leased(0, 7*s, 4*s)},
			// Renewed: a new stamp, a full window from now; the oldest
			// lease is now the one at 1 s + 2 µs.
			{5 * s, renw, 1, 1 * s, leased(0, 6*s+2*us, 5*s)},
			{5 * s, renw, 1, 1*s + us, over(0, 6*s+2*us, 6*s+2*us)}, // released: over
			{5 * s, renw, 1, 0, over(0, 6*s+2*us, 6*s+2*us)},        // no lease named: over
			{5 * s, give, 1, 7 * s, ok(0, 6*s+2*us)},                // no such lease: frees nothing
			// The lease at 1 s + 2 µs lapses; those at 4 and 5 s are held.
			{11*s + 2*us, tk, 0, 0, ok(1, 3*s-2*us)},
			{11*s + 2*us, give, 1, 1*s + 2*us, ok(1, 3*s-2*us)}, // lapsed: frees nothing
			{15 * s, tk, 0, 0, ok(3, 0)},                        // all lapsed
			{20 * s, tk, 1, 0, leased(2, 10*s, 20*s)},
			{20 * s, tk, 2, 0, leased(0, 10*s, 20*s+us)},
			// Without a lease: frees the newest held slots, hits worth
			// (1 of the 2 of the lease at 20 s + 1 µs).
			{20 * s, give, 1, 0, ok(1, 10*s)},
			{21 * s, renw, 1, 20 * s, leased(1, 9*s+us, 21*s)},
			{21 * s, give, 5, 0, ok(3, 0)}, // frees what is held, no more
			// Released: over, yet a slot is free now (no RetryAfter).
			{21 * s, renw, 1, 21 * s, over(3, 0, 0)},
		},
	},
	{
		Name:  "concurrency_renew_outlives_the_window",
		Limit: backend.Limit{Algorithm: backend.Concurrency, Requests: 2, Window: 10 * s},
		Steps: []OpStep{
			{1 * s, tk, 1, 0, leased(1, 10*s, 1*s)},
			{10 * s, renw, 1, 1 * s, leased(1, 10*s, 10*s)},
			{15 * s, tk, 0, 0, ok(1, 5*s)}, // held past the first lease's 11 s
			{20 * s, tk, 0, 0, ok(2, 0)},   // lapsed
			{20 * s, renw, 1, 10 * s, over(2, 0, 0)},
		},
	},
	{
		Name:  "concurrency_ban",
		Limit: backend.Limit{Algorithm: backend.Concurrency, Requests: 0, Window: 10 * s},
		Steps: []OpStep{
			{1 * s, give, 1, 1 * s, ok(0, 9*s)},
			{1 * s, tk, 1, 0, over(0, 9*s, 9*s)},
			{1 * s, renw, 1, 1 * s, over(0, 9*s, 9*s)},
		},
	},
}

func runOpCases(t *testing.T, newStore NewStore) {
	for _, c := range OpCases {
		t.Run(c.Name, func(t *testing.T) { runSteps(t, newStore, c.Limit, c.Steps) })
	}
}

// runGiveBacks checks how give-backs and renews sit in a call beside
// takes. The keys of one call differ, so that on Redis Cluster a call
// spans slots: give-backs beside takes decided with PART and REFUND.
func runGiveBacks(t *testing.T, newStore NewStore) {
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
			name: "a give-back on a ban is not over and refuses nothing",
			reqs: []backend.Request{
				{Key: "b", Limit: fixed(0), Hits: 1, Group: 0, Op: give},
				{Key: "e", Limit: fixed(2), Hits: 1, Group: 1},
			},
			wantOver:  []bool{false, false},
			wantCheck: []check{{"e", 1}},
		},
		{
			name:  "a group of give-backs is no quota group",
			prime: []backend.Request{{Key: "q", Limit: fixed(1), Hits: 1}, {Key: "g", Limit: fixed(3), Hits: 2}},
			reqs: []backend.Request{
				{Key: "q", Limit: fixed(1), Hits: 1, Group: 0, Mode: backend.Quota},
				{Key: "g", Limit: fixed(3), Hits: 1, Group: 1, Mode: backend.Quota, Op: give},
				{Key: "e", Limit: fixed(2), Hits: 1, Group: 2},
			},
			wantOver:  []bool{true, false, false},
			wantCheck: []check{{"q", 0}, {"g", 2}, {"e", 2}},
		},
		{
			name:  "give-backs apply before the call's takes",
			prime: []backend.Request{{Key: "a", Limit: fixed(1), Hits: 1}},
			reqs: []backend.Request{
				{Key: "a", Limit: fixed(1), Hits: 1, Group: 0},
				{Key: "a", Limit: fixed(1), Hits: 1, Group: 1, Op: give},
			},
			wantOver:  []bool{false, false},
			wantCheck: []check{{"a", 0}},
		},
		{
			name:  "give-backs apply in a refused call",
			prime: []backend.Request{{Key: "a", Limit: fixed(3), Hits: 2}},
			reqs: []backend.Request{
				{Key: "a", Limit: fixed(3), Hits: 1, Group: 0, Op: give},
				{Key: "c", Limit: fixed(5), Hits: 1, Group: 1},
				{Key: "b", Limit: fixed(1), Hits: 2, Group: 2},
			},
			wantOver:  []bool{false, false, true},
			wantCheck: []check{{"a", 2}, {"c", 5}, {"b", 1}},
		},
		{
			name:  "a give-back beside an admitted take",
			prime: []backend.Request{{Key: "a", Limit: fixed(3), Hits: 3}},
			reqs: []backend.Request{
				{Key: "c", Limit: fixed(5), Hits: 2, Group: 0},
				{Key: "a", Limit: fixed(3), Hits: 2, Group: 1, Op: give},
			},
			wantOver:  []bool{false, false},
			wantCheck: []check{{"a", 2}, {"c", 3}},
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

	t.Run("leases beside takes", func(t *testing.T) {
		clock := NewClock(T0)
		st := newStore(t, clock.Now)
		conc := backend.Limit{Algorithm: backend.Concurrency, Requests: 2, Window: time.Minute}
		take1(t, st, backend.Request{Key: "a", Limit: fixed(3), Hits: 3})
		// An acquire beside a give-back on another counter.
		res := take(t, st,
			backend.Request{Key: "c", Limit: conc, Hits: 1, Group: 0},
			backend.Request{Key: "a", Limit: fixed(3), Hits: 1, Group: 1, Op: give},
		)
		if want := stamp(0); res[0].OverLimit || res[0].Lease != want || res[0].Remaining != 1 || res[1].Remaining != 1 {
			t.Fatalf("acquire beside a give-back: %+v, want the lease stamped %d, 1 remaining on each", res, want)
		}
		lease := res[0].Lease
		// An acquire of a refused call holds nothing.
		res = take(t, st,
			backend.Request{Key: "c", Limit: conc, Hits: 1, Group: 0},
			backend.Request{Key: "b", Limit: fixed(1), Hits: 2, Group: 1},
		)
		if !backend.Refused([]backend.Request{{}, {Group: 1}}, res) || res[0].Lease != 0 || res[0].Remaining != 1 {
			t.Fatalf("acquire in a refused call: %+v, want refused, no lease, 1 remaining", res)
		}
		// A release and a failed renew in a refused call apply, and
		// refuse nothing themselves.
		clock.Set(T0.Add(s))
		res = take(t, st,
			backend.Request{Key: "c", Limit: conc, Hits: 1, Group: 0, Op: give, Lease: lease},
			backend.Request{Key: "c", Limit: conc, Hits: 1, Group: 1, Op: renw, Lease: lease},
			backend.Request{Key: "e", Limit: fixed(2), Hits: 1, Group: 2},
		)
		if res[0].OverLimit || !res[1].OverLimit || res[2].OverLimit || res[0].Remaining != 2 {
			t.Fatalf("release, renew of the released lease, take: %+v, want the release freeing the slot, the renew over, the take admitted", res)
		}
		if got := remaining(t, st, "e", fixed(2)); got != 1 {
			t.Errorf("remaining on e = %d, want 1: a failed renew refused the call", got)
		}
	})
}

// runLeases checks a Concurrency limit's exactness under concurrent
// acquires, releases and renews on one counter, with leases that lapse
// as the clock moves between phases (within a phase it stands still, so
// that the callers know which leases hold). Callers count their leases
// conservatively: a lease counts once its acquire or renew has answered,
// and no more from before its release or renew is sent. At no time may
// that count exceed the limit, a renew of a lease that counts must
// succeed, one of a lease released or lapsed must fail, and at the end of
// each phase the store's Remaining is the limit less what is counted.
func runLeases(t *testing.T, newStore NewStore) {
	const (
		limit   = 5
		callers = 8
		phases  = 12
		calls   = 8 // per caller and phase
	)
	w := 10 * s
	l := backend.Limit{Algorithm: backend.Concurrency, Requests: limit, Window: w}
	clock := NewClock(T0)
	st := newStore(t, clock.Now)
	key := Key("leases")
	var (
		mu    sync.Mutex
		held  = map[int64]uint64{} // lease → its hits
		stale []int64              // leases released or lapsed
		// what the callers did: admitted and refused acquires,
		// releases, renews, and releases and renews of stale leases
		acquired, refused, released, renewed, staleOps atomic.Int64
	)
	count := func() (n uint64) {
		for _, h := range held {
			n += h
		}
		return n
	}
	// pick removes and returns a held lease (0 if none), or a stale one.
	pick := func(r *rand.Rand, fromStale bool) (int64, uint64) {
		mu.Lock()
		defer mu.Unlock()
		if fromStale {
			if len(stale) == 0 {
				return 0, 0
			}
			return stale[r.IntN(len(stale))], 1
		}
		for lease, h := range held {
			delete(held, lease)
			return lease, h
		}
		return 0, 0
	}
	hold := func(lease int64, hits uint64) {
		mu.Lock()
		defer mu.Unlock()
		if _, dup := held[lease]; dup {
			t.Errorf("lease %d given twice", lease)
		}
		held[lease] = hits
		if n := count(); n > limit {
			t.Errorf("callers hold %d slots of a limit of %d", n, limit)
		}
	}
	do := func(q backend.Request) backend.Result {
		res := make([]backend.Result, 1)
		if err := st.Take(t.Context(), []backend.Request{q}, res); err != nil {
			t.Errorf("Take(%+v): %v", q, err)
		}
		return res[0]
	}
	now := T0
	for phase := range phases {
		var wg sync.WaitGroup
		for c := range callers {
			r := rand.New(rand.NewPCG(uint64(phase), uint64(c)))
			wg.Go(func() {
				for range calls {
					q := backend.Request{Key: key, Limit: l, Hits: 1 + r.Uint64N(2)}
					switch r.IntN(8) {
					case 0, 1, 2: // acquire
						if res := do(q); !res.OverLimit {
							acquired.Add(1)
							hold(res.Lease, q.Hits)
						} else {
							refused.Add(1)
							if res.Lease != 0 {
								t.Errorf("refused acquire with a lease: %+v", res)
							}
						}
					case 3, 4: // release
						if q.Lease, _ = pick(r, false); q.Lease != 0 {
							q.Op = give
							do(q)
							released.Add(1)
							mu.Lock()
							stale = append(stale, q.Lease)
							mu.Unlock()
						}
					case 5: // renew
						if q.Lease, q.Hits = pick(r, false); q.Lease != 0 {
							q.Op = renw
							res := do(q)
							mu.Lock()
							stale = append(stale, q.Lease)
							mu.Unlock()
							if res.OverLimit {
								t.Errorf("renew of held lease %d refused: %+v", q.Lease, res)
								continue
							}
							renewed.Add(1)
							hold(res.Lease, q.Hits)
						}
					case 6: // release a stale lease: frees nothing
						if q.Lease, _ = pick(r, true); q.Lease != 0 {
							q.Op = give
							do(q)
							staleOps.Add(1)
						}
					case 7: // renew a stale lease: over
						if q.Lease, _ = pick(r, true); q.Lease != 0 {
							q.Op = renw
							staleOps.Add(1)
							if res := do(q); !res.OverLimit || res.Lease != 0 {
								t.Errorf("renew of stale lease %d: %+v, want over", q.Lease, res)
							}
						}
					}
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		res := do(backend.Request{Key: key, Limit: l})
		if want := limit - count(); res.Remaining != want {
			t.Fatalf("phase %d: remaining %d, want %d (callers hold %d)", phase, res.Remaining, want, count())
		}
		// Let some leases lapse: those stamped a window ago.
		now = now.Add(time.Duration(rand.New(rand.NewPCG(uint64(phase), 99)).Int64N(int64(4 * s))))
		clock.Set(now)
		for lease := range held {
			if lease <= backend.Micros(now)-int64(w/us) {
				delete(held, lease)
				stale = append(stale, lease)
			}
		}
	}
	// The mix must have reached every case, else the test shows nothing.
	counts := []int64{acquired.Load(), refused.Load(), released.Load(), renewed.Load(), staleOps.Load()}
	t.Logf("acquired %d, refused %d, released %d, renewed %d, stale leases released or renewed %d", counts[0], counts[1], counts[2], counts[3], counts[4])
	if slices.Contains(counts, 0) {
		t.Errorf("a kind of call never happened: acquired, refused, released, renewed, stale = %v", counts)
	}
}
