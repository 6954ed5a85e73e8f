package backend

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

var t0 = Micros(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))

// randomLimit returns a valid limit of algorithm a.
func randomLimit(r *rand.Rand, a Algorithm) Limit {
	windows := []time.Duration{time.Second, 10 * time.Second, time.Minute, 7 * time.Second, 1500 * time.Millisecond}
	l := Limit{Algorithm: a, Requests: 1 + r.Uint64N(20), Window: windows[r.IntN(len(windows))]}
	if (a == TokenBucket || a == GCRA) && r.IntN(2) == 0 {
		l.Burst = 1 + r.Uint64N(30)
	}
	return l
}

// clone returns a copy of st that shares nothing with it.
func clone(st State) State {
	if st.Log != nil {
		l := *st.Log
		l.buf = append([]logEntry(nil), l.buf...)
		st.Log = &l
	}
	return st
}

// TestRetryAfterIsExact drives random traffic through every algorithm
// and checks, at every refusal, that the same hits are admitted exactly
// RetryAfter later and not a microsecond sooner.
func TestRetryAfterIsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, a := range Algorithms {
		for range 200 {
			l := randomLimit(r, a)
			if err := l.Validate(); err != nil {
				t.Fatalf("randomLimit() = %+v: %v", l, err)
			}
			var st State
			now := t0 + r.Int64N(l.window())
			for range 100 {
				now += r.Int64N(l.window() / 4)
				hits := r.Uint64N(4)
				if st.Admits(l, now, hits) {
					st.Add(l, now, hits)
					continue
				}
				res := st.Result(l, now, hits, true)
				retry := int64(res.RetryAfter / time.Microsecond)
				if retry <= 0 {
					t.Fatalf("%v %+v: refused %d hits at %d with RetryAfter %v", a, l, hits, now-t0, res.RetryAfter)
				}
				capacity := l.Requests
				if a == TokenBucket || a == GCRA {
					capacity = l.Capacity()
				}
				if hits > capacity {
					if res.RetryAfter != l.Window {
						t.Errorf("%v %+v: %d hits over capacity: RetryAfter %v, want the window", a, l, hits, res.RetryAfter)
					}
					continue
				}
				later, sooner := clone(st), clone(st)
				if !later.Admits(l, now+retry, hits) {
					t.Errorf("%v %+v state %+v: %d hits refused at now+RetryAfter (%v)", a, l, st, hits, res.RetryAfter)
				}
				if retry > 1 && sooner.Admits(l, now+retry-1, hits) {
					t.Errorf("%v %+v state %+v: %d hits admitted 1µs before RetryAfter (%v)", a, l, st, hits, res.RetryAfter)
				}
			}
		}
	}
}

// TestExpiry checks that a state at its expiry decides as a fresh one.
func TestExpiry(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, a := range Algorithms {
		for range 200 {
			l := randomLimit(r, a)
			var st State
			now := t0
			for range 1 + r.IntN(30) {
				now += r.Int64N(l.window() / 3)
				if hits := r.Uint64N(3); st.Admits(l, now, hits) {
					st.Add(l, now, hits)
				}
			}
			exp := max(st.Expiry(l), now)
			var fresh State
			for hits := range uint64(3) {
				got, want := clone(st), fresh
				gotR := got.Result(l, exp, hits, !got.Admits(l, exp, hits))
				wantR := want.Result(l, exp, hits, !want.Admits(l, exp, hits))
				if gotR != wantR {
					t.Errorf("%v %+v: at Expiry, Result(%d) = %+v, fresh state says %+v", a, l, hits, gotR, wantR)
				}
			}
		}
	}
}

// TestNeverExceeds checks, for the algorithms that promise it, that
// admitted hits within any window never exceed the limit.
func TestNeverExceeds(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, a := range []Algorithm{FixedWindow, SlidingLog, SlidingWindow} {
		for range 100 {
			l := randomLimit(r, a)
			w := l.window()
			var st State
			type hit struct {
				t int64
				n uint64
			}
			var admitted []hit
			now := t0
			for range 300 {
				now += r.Int64N(w / 8)
				hits := 1 + r.Uint64N(2)
				if st.Admits(l, now, hits) {
					st.Add(l, now, hits)
					admitted = append(admitted, hit{now, hits})
				}
			}
			for i, h := range admitted {
				var sum uint64
				var from int64
				switch a {
				case SlidingLog: // any window (t-w, t]
					from = h.t - w + 1
				default: // the epoch-aligned window holding t
					from = h.t - h.t%w
				}
				for _, g := range admitted[:i+1] {
					if g.t >= from {
						sum += g.n
					}
				}
				if sum > l.Requests {
					t.Fatalf("%v %+v: %d hits admitted in the window ending at %d, limit %d", a, l, sum, h.t-t0, l.Requests)
				}
			}
		}
	}
}

func TestCheckOnlyNeverChangesDecisions(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, a := range Algorithms {
		l := randomLimit(r, a)
		var st State
		now := t0
		for range 50 {
			now += r.Int64N(l.window() / 5)
			before := st.Result(l, now, 1, false)
			st.Admits(l, now, 0)
			st.Add(l, now, 0)
			if after := st.Result(l, now, 1, false); after != before {
				t.Errorf("%v: a check-only call changed the state: %+v -> %+v", a, before, after)
			}
			if st.Admits(l, now, 1) {
				st.Add(l, now, 1)
			}
		}
	}
}

func TestBanTouchesNothing(t *testing.T) {
	for _, a := range Algorithms {
		l := Limit{Algorithm: a, Window: time.Minute}
		var st State
		if st.Admits(l, t0, 0) || st.Admits(l, t0, 1) {
			t.Errorf("%v ban admitted a hit", a)
		}
		st.Add(l, t0, 5)
		if st != (State{}) {
			t.Errorf("%v ban changed the state: %+v", a, st)
		}
	}
}

func TestClockSteppingBack(t *testing.T) {
	for _, a := range Algorithms {
		l := Limit{Algorithm: a, Requests: 2, Window: time.Minute}
		var st State
		now := t0 + 30e6
		st.Add(l, now, 2)
		if st.Admits(l, now-20e6, 1) {
			t.Errorf("%v: a clock stepping back 20s re-admitted a full limit", a)
		}
	}
}

func TestLogFoldsPastItsCap(t *testing.T) {
	l := Limit{Algorithm: SlidingLog, Requests: 10, Window: time.Hour}
	var st State
	for i := range int64(MaxSlidingLog + 500) {
		st.Add(l, t0+i, 1) // recorded past the limit, as ConsumeWhenOver does
	}
	if got := st.Log.Len(); got != MaxSlidingLog {
		t.Errorf("Log.Len() = %d, want the cap %d", got, MaxSlidingLog)
	}
	if st.N != MaxSlidingLog+500 {
		t.Errorf("N = %d, want every hit counted (%d)", st.N, MaxSlidingLog+500)
	}
	// Folded hits expire with the newest entry, not earlier.
	if st.Admits(l, t0+MaxSlidingLog+499+int64(time.Hour/time.Microsecond)-1, 10) {
		t.Error("folded hits expired before the newest one")
	}
	if !st.Admits(l, t0+MaxSlidingLog+499+int64(time.Hour/time.Microsecond), 10) {
		t.Error("the log did not empty one window after its newest hit")
	}
	if st.Log.Len() != 0 || len(st.Log.buf) > 64 {
		t.Errorf("an expired log kept %d entries and %d slots", st.Log.Len(), len(st.Log.buf))
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		l    Limit
		fail bool
	}{
		{Limit{Requests: 10, Window: time.Second}, false},
		{Limit{Requests: 0, Window: time.Second}, false},
		{Limit{Requests: 10}, true},
		{Limit{Requests: 10, Window: time.Nanosecond * 1500000}, false},
		{Limit{Requests: 10, Window: time.Nanosecond*1000000 + 1}, true},
		{Limit{Requests: 10, Window: 200 * 365 * 24 * time.Hour}, true},
		{Limit{Requests: MaxRequests + 1, Window: time.Second}, true},
		{Limit{Algorithm: SlidingLog, Requests: MaxSlidingLog + 1, Window: time.Second}, true},
		{Limit{Algorithm: FixedWindow, Requests: 1, Burst: 2, Window: time.Second}, true},
		{Limit{Algorithm: TokenBucket, Requests: 1, Burst: 2, Window: time.Second}, false},
		{Limit{Algorithm: GCRA, Requests: 1, Burst: MaxRequests, Window: MaxWindow}, true},
		{Limit{Algorithm: 9, Requests: 1, Window: time.Second}, true},
	}
	for _, tt := range tests {
		if err := tt.l.Validate(); (err != nil) != tt.fail {
			t.Errorf("%+v.Validate() = %v, want failure %v", tt.l, err, tt.fail)
		}
	}
}

func TestParseAlgorithm(t *testing.T) {
	for _, a := range Algorithms {
		if got, err := ParseAlgorithm(a.String()); err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v, want %v", a.String(), got, err, a)
		}
	}
	if _, err := ParseAlgorithm("leaky"); err == nil {
		t.Error(`ParseAlgorithm("leaky") error = nil`)
	}
}

func BenchmarkAdmitsAdd(b *testing.B) {
	for _, a := range Algorithms {
		l := Limit{Algorithm: a, Requests: 1 << 20, Window: time.Minute}
		if a == SlidingLog {
			l.Requests = MaxSlidingLog
		}
		b.Run(a.String(), func(b *testing.B) {
			var st State
			now := t0
			for b.Loop() {
				now += 50
				if st.Admits(l, now, 1) {
					st.Add(l, now, 1)
				}
				_ = st.Result(l, now, 1, false)
			}
		})
	}
}

// TestHugeDebtSaturates: usage recorded far past a token bucket's limit
// (consume_when_over) saturates its times instead of wrapping around.
func TestHugeDebtSaturates(t *testing.T) {
	l := Limit{Algorithm: TokenBucket, Requests: 1, Window: time.Hour}
	now := t0
	var st State
	st.Add(l, now, 3_198_334_611) // ~365,000 years of refill
	r := st.Result(l, now, 1, true)
	if r.ResetAfter <= 0 || r.RetryAfter <= 0 {
		t.Errorf("Result after a huge debt = %+v, want saturated, positive durations", r)
	}
	if exp := st.Expiry(l); exp < now {
		t.Errorf("Expiry after a huge debt = %d, before now %d: the debt would be forgotten", exp, now)
	}
}

// TestGiveBackOnFreshChangesNothing: a give-back on a fresh counter, of
// any hits, leaves it deciding as a fresh one, on every algorithm.
func TestGiveBackOnFreshChangesNothing(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, a := range Algorithms {
		for range 50 {
			l := randomLimit(r, a)
			var fresh, st State
			st.GiveBack(l, t0, r.Uint64N(2*l.Capacity()+2), 0)
			if !slices.Equal(decisions(st, l, t0), decisions(fresh, l, t0)) {
				t.Fatalf("%v %+v: a give-back on a fresh counter changed its decisions", a, l)
			}
		}
	}
}

// TestGiveBackNeverPastTheLimit: after random traffic, a give-back of
// any hits leaves Remaining within the capacity, and a take of the
// capacity then admitted at most once.
func TestGiveBackNeverPastTheLimit(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, a := range Algorithms {
		for range 200 {
			l := randomLimit(r, a)
			st, now := randomState(r, l)
			st.GiveBack(l, now, r.Uint64N(3*l.Capacity()+2), 0)
			if res := st.Result(l, now, 0, false); res.Remaining > l.Capacity() {
				t.Fatalf("%v %+v: remaining %d after a give-back, over the capacity", a, l, res.Remaining)
			}
			if st.Admits(l, now, l.Capacity()+1) {
				t.Fatalf("%v %+v: admits more than the capacity after a give-back", a, l)
			}
		}
	}
}

// TestConcurrencyLogBound: leases recorded past the limit
// (ConsumeWhenOver) never grow the log past MaxSlidingLog entries; they
// fold into the newest, as a sliding log's do.
func TestConcurrencyLogBound(t *testing.T) {
	l := Limit{Algorithm: Concurrency, Requests: 3, Window: time.Minute}
	var st State
	for range MaxSlidingLog + 100 {
		st.Add(l, t0, 1)
	}
	if st.Log.Len() > MaxSlidingLog || st.N != MaxSlidingLog+100 {
		t.Errorf("log of %d entries holding %d; want at most %d entries holding %d", st.Log.Len(), st.N, MaxSlidingLog, MaxSlidingLog+100)
	}
}

// TestConcurrencyStampsNeverRepeat: a lease released, then another taken
// at the same instant, gets a stamp of its own, so that the stale lease
// names nothing (a double release frees nothing).
func TestConcurrencyStampsNeverRepeat(t *testing.T) {
	l := Limit{Algorithm: Concurrency, Requests: 2, Window: time.Minute}
	var st State
	a := st.Add(l, t0, 1)
	st.GiveBack(l, t0, 1, a)
	b := st.Add(l, t0, 1)
	if a == b {
		t.Fatalf("stamps %d and %d: a released lease's stamp given again", a, b)
	}
	st.GiveBack(l, t0, 1, a)
	if st.N != 1 {
		t.Errorf("a second release of a released lease freed another: %d held, want 1", st.N)
	}
	// Kept until now passes the newest stamp, though nothing is held.
	st.GiveBack(l, t0, 1, b)
	if exp := st.Expiry(l); exp <= b {
		t.Errorf("expiry %d with nothing held, want after the newest stamp %d", exp, b)
	}
}
