package backend

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// decisions returns what st answers, at a few instants from now on, for a
// few hits: enough to tell two states that decide differently apart.
func decisions(st State, l Limit, now int64) []Result {
	var out []Result
	for _, dt := range []int64{0, 1, l.window() / 3, l.window() - 1, l.window(), 2 * l.window()} {
		for hits := range l.Capacity() + 2 {
			probe := clone(st)
			out = append(out, probe.Result(l, now+dt, hits, !probe.Admits(l, now+dt, hits)))
		}
	}
	return out
}

// randomState returns a state of l after random traffic, and the time of
// its last call.
func randomState(r *rand.Rand, l Limit) (State, int64) {
	var st State
	now := t0
	for range r.IntN(20) {
		now += r.Int64N(l.window() / 3)
		if hits := r.Uint64N(3); st.Admits(l, now, hits) || r.IntN(8) == 0 {
			st.Add(l, now, hits)
		}
	}
	return st, now
}

// TestRefundUndoesAdd: a refund right after an add, with its stamp, gives
// the state back its decisions, for every algorithm, whether the add was
// admitted or (but for token bucket) past the limit.
func TestRefundUndoesAdd(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, a := range Algorithms {
		for range 300 {
			l := randomLimit(r, a)
			st, now := randomState(r, l)
			now += r.Int64N(l.window() / 2)
			// Bring the state to now, as Decide's Admits does before any
			// Add: a token bucket refilled in two steps may round apart
			// from one refilled in one.
			st.Admits(l, now, 0)
			want := decisions(st, l, now)
			hits := r.Uint64N(l.Capacity() + 2)
			if a == TokenBucket && !st.Admits(l, now, hits) {
				continue // hits past the limit: see Refund
			}
			got := clone(st)
			stamp := got.Add(l, now, hits)
			got.Refund(l, now, hits, stamp)
			if d := decisions(got, l, now); !slices.Equal(d, want) {
				t.Fatalf("%v %+v: add then refund of %d hits at %d (stamp %d) changed decisions:\n got %+v\nwant %+v", a, l, hits, now-t0, stamp, d, want)
			}
		}
	}
}

// TestRefundAfterWindowMoved: fixed and sliding windows give nothing back
// once the window that counted the hits has ended, nor does a sliding log
// once the entry has expired.
func TestRefundAfterWindowMoved(t *testing.T) {
	for _, a := range []Algorithm{FixedWindow, SlidingWindow, SlidingLog} {
		l := Limit{Algorithm: a, Requests: 5, Window: time.Minute}
		w := l.window()
		now := t0 + w/2
		var st State
		stamp := st.Add(l, now, 3)
		later := now + w // the next window; the log's entry at now expires
		want := decisions(st, l, later)
		got := clone(st)
		got.Refund(l, later, 3, stamp)
		if d := decisions(got, l, later); !slices.Equal(d, want) {
			t.Errorf("%v: a refund after the window moved gave hits back:\n got %+v\nwant %+v", a, d, want)
		}
		if a == SlidingWindow && got.P != 3 {
			t.Errorf("sliding window: the previous window's count is %d after a late refund, want 3 left as is", got.P)
		}
	}
}

// TestRefundStampMustMatch: a refund whose stamp names no window or entry
// of the state gives nothing back.
func TestRefundStampMustMatch(t *testing.T) {
	for _, a := range []Algorithm{FixedWindow, SlidingWindow, SlidingLog} {
		l := Limit{Algorithm: a, Requests: 5, Window: time.Minute}
		var st State
		stamp := st.Add(l, t0, 3)
		got := clone(st)
		got.Refund(l, t0, 3, stamp+1)
		if got.N != 3 {
			t.Errorf("%v: a refund with a stale stamp left N = %d, want 3", a, got.N)
		}
	}
}

// TestRefundSlidingLog: a refund takes hits off the entry with its stamp,
// and drops the entry once it is empty, leaving the others as they were.
func TestRefundSlidingLog(t *testing.T) {
	l := Limit{Algorithm: SlidingLog, Requests: 20, Window: time.Minute}
	var st State
	var stamps []int64
	for i, hits := range []uint64{2, 3, 4} {
		stamps = append(stamps, st.Add(l, t0+int64(i)*1000, hits))
	}
	if want := []int64{t0, t0 + 1000, t0 + 2000}; !slices.Equal(stamps, want) {
		t.Fatalf("stamps = %v, want the entries' times %v", stamps, want)
	}
	entries := func() string {
		s := ""
		for i := range st.Log.Len() {
			e := st.Log.at(i)
			s += fmt.Sprintf("%d:%d ", e.t-t0, e.n)
		}
		return fmt.Sprintf("%sN=%d", s, st.N)
	}
	now := t0 + 5000
	st.Refund(l, now, 1, stamps[1])
	if got, want := entries(), "0:2 1000:2 2000:4 N=8"; got != want {
		t.Errorf("after refunding 1 of the middle entry: %s, want %s", got, want)
	}
	st.Refund(l, now, 5, stamps[1]) // more than it holds: only what it holds
	if got, want := entries(), "0:2 2000:4 N=6"; got != want {
		t.Errorf("after emptying the middle entry: %s, want %s", got, want)
	}
	st.Refund(l, now, 1, t0+3000) // no such entry
	if got, want := entries(), "0:2 2000:4 N=6"; got != want {
		t.Errorf("after a refund at no entry's time: %s, want %s", got, want)
	}
	st.Refund(l, now, 4, stamps[2])
	st.Refund(l, now, 2, stamps[0])
	if got, want := entries(), "N=0"; got != want {
		t.Errorf("after emptying every entry: %s, want %s", got, want)
	}
	// The emptied log counts again from scratch.
	if s := st.Add(l, now, 1); s != now || entries() != "5000:1 N=1" {
		t.Errorf("add after emptying: stamp %d, log %s; want stamp %d, 5000:1 N=1", s-t0, entries(), now-t0)
	}
}

// TestRefundBucketAndGCRA: a token bucket's refund stops at a full
// bucket, and a GCRA refund never moves the TAT before now.
func TestRefundBucketAndGCRA(t *testing.T) {
	tb := Limit{Algorithm: TokenBucket, Requests: 4, Window: time.Second}
	var st State
	st.Add(tb, t0, 1)
	st.Refund(tb, t0, 3, 0)
	if st.Tokens != 4 {
		t.Errorf("token bucket: refunding 3 on 3 of 4 tokens left %v tokens, want 4", st.Tokens)
	}
	g := Limit{Algorithm: GCRA, Requests: 4, Window: time.Second}
	st = State{}
	st.Add(g, t0, 1)
	st.Refund(g, t0, 3, 0)
	if st.T != t0 {
		t.Errorf("gcra: refunding 3 after 1 left TAT at %d, want now (0)", st.T-t0)
	}
}

// TestBanAndZeroHitsRefundNothing: a ban, or zero hits, refunds nothing.
func TestBanAndZeroHitsRefundNothing(t *testing.T) {
	for _, a := range Algorithms {
		l := Limit{Algorithm: a, Requests: 3, Window: time.Minute}
		var st State
		stamp := st.Add(l, t0, 2)
		want := clone(st)
		st.Refund(l, t0, 0, stamp)
		st.Refund(Limit{Algorithm: a, Window: time.Minute}, t0, 2, stamp)
		if !slices.Equal(decisions(st, l, t0), decisions(want, l, t0)) {
			t.Errorf("%v: a refund of zero hits or of a ban changed decisions", a)
		}
	}
}

// call is a random call of the property tests: its requests, and the
// descriptor (Cluster's hash tag) of each.
type call struct {
	reqs []Request
	desc []int
}

// randomCall returns a call of up to four groups, each one descriptor's
// limits (of limits[d]), with keys that repeat across groups when two
// groups share a descriptor. Unless debt is set, no ConsumeWhenOver group
// holds a token bucket (see TestDecidePartsTokenBucketDebt), nor ever a
// concurrency limit. Some groups
// are give-backs, and some renews of a concurrency limit; those name a
// lease of leases (by key) when one is known, a stale one at times, and a
// give-back none at times (the newest held slots).
func randomCall(r *rand.Rand, limits [][]Limit, debt bool, leases map[string][]int64) call {
	var c call
	for g := range 1 + r.IntN(4) {
		d := r.IntN(len(limits))
		mode := Mode(r.IntN(3))
		cwo := r.IntN(6) == 0
		op := Take
		switch r.IntN(10) {
		case 0, 1:
			op, cwo = GiveBack, false
		case 2:
			op, cwo = Renew, false
		}
		for range 1 + r.IntN(3) {
			k := r.IntN(len(limits[d]))
			l := limits[d][k]
			if op == Renew && l.Algorithm != Concurrency {
				continue
			}
			if cwo && !debt && l.Algorithm == TokenBucket {
				continue // see TestDecidePartsTokenBucketDebt
			}
			if cwo && l.Algorithm == Concurrency {
				// Cluster refunds a refused call's leases after the
				// ConsumeWhenOver leases of its slot were stamped
				// after them, a microsecond or more later than Decide
				// stamps them; config refuses consume_when_over on
				// concurrency limits.
				continue
			}
			if r.IntN(15) == 0 {
				l.Requests = 0 // a ban
			}
			q := Request{
				Key: fmt.Sprintf("d%d|%d", d, k), Limit: l, Hits: r.Uint64N(4),
				Group: g, Mode: mode, ConsumeWhenOver: cwo, Op: op,
			}
			if op != Take && l.Algorithm == Concurrency && r.IntN(4) != 0 {
				if known := leases[q.Key]; len(known) > 0 && r.IntN(5) != 0 {
					q.Lease = known[r.IntN(len(known))]
				} else {
					q.Lease = t0 + r.Int64N(1e6) // most likely no lease's
				}
			}
			c.reqs = append(c.reqs, q)
			c.desc = append(c.desc, d)
		}
	}
	return c
}

// randomLimits returns n descriptors' limits: every algorithm, small.
func randomLimits(r *rand.Rand, n int) [][]Limit {
	out := make([][]Limit, n)
	for d := range out {
		for _, a := range Algorithms {
			l := randomLimit(r, a)
			l.Requests = 1 + l.Requests%5
			out[d] = append(out[d], l)
		}
	}
	return out
}

// statesOf returns the states of c's requests in m, creating them: one
// *State per key, nil for a ban.
func statesOf(m map[string]*State, reqs []Request) []*State {
	states := make([]*State, len(reqs))
	for i, q := range reqs {
		if q.Limit.Ban() {
			continue
		}
		if m[q.Key] == nil {
			m[q.Key] = new(State)
		}
		states[i] = m[q.Key]
	}
	return states
}

// decideParts decides c as Redis Cluster does: DecidePart on each
// descriptor's share, then, if the call is refused or a group is over,
// Refund of what a share took but the call does not consume, and the
// refunded shares' results read again.
func decideParts(m map[string]*State, c call, now int64) []Result {
	res := make([]Result, len(c.reqs))
	stamps := make([]int64, len(c.reqs))
	var parts [][]int
	for d := range slices.Max(c.desc) + 1 {
		var idx []int
		for i := range c.reqs {
			if c.desc[i] == d {
				idx = append(idx, i)
			}
		}
		if idx != nil {
			parts = append(parts, idx)
		}
	}
	for _, idx := range parts {
		reqs := make([]Request, len(idx))
		for k, i := range idx {
			reqs[k] = c.reqs[i]
		}
		pres, pstamps := make([]Result, len(idx)), make([]int64, len(idx))
		DecidePart(reqs, statesOf(m, reqs), now, pres, pstamps)
		for k, i := range idx {
			res[i], stamps[i] = pres[k], pstamps[k]
		}
	}
	refused := Refused(c.reqs, res)
	for _, idx := range parts {
		give := false
		over := make([]bool, len(idx))
		// Newest first, as take.lua refunds: see Refund.
		for k, i := range slices.Backward(idx) {
			q := c.reqs[i]
			over[k] = res[i].OverLimit
			took := q.Op == Take && !q.ConsumeWhenOver && q.Hits > 0 && !q.Limit.Ban() && !groupOver(c.reqs, res, i)
			if took && !Consumes(c.reqs, res, refused, i) {
				m[q.Key].Refund(q.Limit, now, q.Hits, stamps[i])
				res[i].Lease = 0
				give = true
			}
		}
		if give {
			for k, i := range idx {
				q, lease := c.reqs[i], res[i].Lease
				if q.Op != Take {
					res[i] = opResult(&q, m[q.Key], now, over[k], lease)
					continue
				}
				res[i] = m[q.Key].Result(q.Limit, now, q.Hits, over[k])
				res[i].Lease = lease
			}
		}
	}
	return res
}

// FuzzDecide replays a seeded random sequence of calls and checks two
// properties of every call: a refused call that records no usage
// (no consume_when_over) and gives nothing back leaves every counter
// deciding as before; and
// deciding each descriptor's share as if admitted, then refunding what
// the call does not consume (Redis Cluster's protocol: DecidePart and
// Refund), answers as Decide does and leaves the counters deciding alike.
func FuzzDecide(f *testing.F) {
	for seed := range uint64(20) {
		f.Add(seed, uint8(4))
	}
	f.Fuzz(func(t *testing.T, seed uint64, descs uint8) {
		r := rand.New(rand.NewPCG(seed, 13))
		limits := randomLimits(r, 1+int(descs%8))
		whole, parts := map[string]*State{}, map[string]*State{}
		leases := map[string][]int64{}
		now := t0
		for n := range 300 {
			switch r.IntN(4) {
			case 0: // same instant
			case 1:
				now += r.Int64N(1000)
			case 2:
				now += r.Int64N(int64(time.Second / time.Microsecond))
			case 3:
				now += r.Int64N(int64(time.Minute / time.Microsecond))
			}
			c := randomCall(r, limits, false, leases)
			if len(c.reqs) == 0 {
				continue
			}
			before := snapshot(whole, c.reqs, now)
			want := make([]Result, len(c.reqs))
			Decide(c.reqs, statesOf(whole, c.reqs), now, want)
			// (Give-backs and renews apply whatever the verdict.)
			if Refused(c.reqs, want) && !slices.ContainsFunc(c.reqs, func(q Request) bool { return q.ConsumeWhenOver || q.Op != Take }) {
				if after := snapshot(whole, c.reqs, now); !slices.EqualFunc(after, before, slices.Equal) {
					t.Fatalf("seed %d, call %d at %d: refused %+v, yet its counters changed", seed, n, now-t0, c.reqs)
				}
			}
			got := decideParts(parts, c, now)
			if !slices.Equal(got, want) {
				t.Fatalf("seed %d, call %d at %d: %+v\nparts and refunds: %+v\nDecide:            %+v", seed, n, now-t0, c.reqs, got, want)
			}
			for i, q := range c.reqs {
				if want[i].Lease != 0 {
					leases[q.Key] = append(leases[q.Key], want[i].Lease)
				}
			}
		}
	})
}

// snapshot returns the decisions of the counters of reqs in m at now
// (those of a fresh counter for a key m lacks).
func snapshot(m map[string]*State, reqs []Request, now int64) [][]Result {
	out := make([][]Result, len(reqs))
	for i, q := range reqs {
		if q.Limit.Ban() {
			continue
		}
		var st State
		if m[q.Key] != nil {
			st = clone(*m[q.Key])
		}
		st.Admits(q.Limit, now, 0) // brought to now, as Decide brings it
		out[i] = decisions(st, q.Limit, now)
	}
	return out
}

// TestDecideSameCounterAddsUp: two requests of one call on one counter
// are decided as one request of their hits together, and a ban on the
// same key touches nothing.
func TestDecideSameCounterAddsUp(t *testing.T) {
	l := Limit{Algorithm: FixedWindow, Requests: 3, Window: time.Minute}
	ban := Limit{Algorithm: FixedWindow, Window: time.Minute}
	var st State
	reqs := []Request{
		{Key: "k", Limit: l, Hits: 2, Group: 0, Mode: Shadow},
		{Key: "k", Limit: ban, Hits: 1, Group: 1, Mode: Shadow},
		{Key: "k", Limit: l, Hits: 2, Group: 2, Mode: Shadow},
		{Key: "k", Limit: l, Hits: 1, Group: 3, Mode: Shadow},
	}
	res := make([]Result, len(reqs))
	Decide(reqs, []*State{&st, nil, &st, &st}, t0, res)
	overs := []bool{res[0].OverLimit, res[1].OverLimit, res[2].OverLimit, res[3].OverLimit}
	if want := []bool{false, true, true, false}; !slices.Equal(overs, want) {
		t.Errorf("over = %v, want %v (2 fit, the ban never, 2+2 not, 2+1 does)", overs, want)
	}
	if st.N != 3 || res[0].Remaining != 0 {
		t.Errorf("count %d, remaining %d; want 3 counted, 0 remaining", st.N, res[0].Remaining)
	}
}

// TestDecidePartsTokenBucketDebt pins the one way Cluster's protocol
// departs from Decide: a token bucket that a ConsumeWhenOver request has
// put in debt, and whose other request's hits are refunded, may end an
// ulp off (x-a-h+h against x-a), which shows as a microsecond in
// ResetAfter or RetryAfter. Here A (consume_when_over) and B share a
// bucket holding 1.0004 tokens; the call is refused by a ban on another
// descriptor, so Cluster refunds B's hit; a check of one hit then finds
// RetryAfter a microsecond apart.
func TestDecidePartsTokenBucketDebt(t *testing.T) {
	tb := Limit{Algorithm: TokenBucket, Requests: 2, Window: time.Minute}
	ban := Limit{Algorithm: FixedWindow, Window: time.Minute}
	c := call{
		reqs: []Request{
			{Key: "d0|tb", Limit: tb, Hits: 3, Group: 0, Mode: Shadow, ConsumeWhenOver: true},
			{Key: "d0|tb", Limit: tb, Hits: 1, Group: 1},
			{Key: "d1|ban", Limit: ban, Hits: 1, Group: 2},
		},
		desc: []int{0, 0, 1},
	}
	whole, parts := map[string]*State{}, map[string]*State{}
	first := []Request{{Key: "d0|tb", Limit: tb, Hits: 1}}
	Decide(first, statesOf(whole, first), t0, make([]Result, 1))
	Decide(first, statesOf(parts, first), t0, make([]Result, 1))

	now := t0 + 12962
	want := make([]Result, len(c.reqs))
	Decide(c.reqs, statesOf(whole, c.reqs), now, want)
	got := decideParts(parts, c, now)
	// Then a check of one hit, which both refuse, with the bucket's debt
	// in RetryAfter.
	check := []Request{{Key: "d0|tb", Limit: tb, Hits: 1}}
	want = append(want, Result{})
	Decide(check, statesOf(whole, check), now, want[len(c.reqs):])
	got = append(got, Result{})
	Decide(check, statesOf(parts, check), now, got[len(c.reqs):])
	for i := range want {
		g, w := got[i], want[i]
		if g.OverLimit != w.OverLimit || g.Remaining != w.Remaining ||
			(g.ResetAfter-w.ResetAfter).Abs() > time.Microsecond || (g.RetryAfter-w.RetryAfter).Abs() > time.Microsecond {
			t.Errorf("request %d: parts and refunds %+v, Decide %+v: more than a microsecond apart", i, g, w)
		}
		if g != w {
			t.Logf("request %d: parts and refunds %+v, Decide %+v", i, g, w)
		}
	}
	if gt, wt := parts["d0|tb"].Tokens, whole["d0|tb"].Tokens; gt != wt {
		t.Logf("tokens after the call: parts and refunds %v, Decide %v", gt, wt)
	}
}

// BenchmarkDecide decides a call of one take on a sliding window, the
// common call, on a counter that admits it: Decide's own cost, without a
// store's locks or lookups.
func BenchmarkDecide(b *testing.B) {
	l := Limit{Algorithm: SlidingWindow, Requests: 1 << 30, Window: time.Hour}
	reqs := []Request{{Key: "k", Limit: l, Hits: 1}}
	var st State
	states := []*State{&st}
	res := make([]Result, 1)
	now := t0
	for b.Loop() {
		now++
		Decide(reqs, states, now, res)
	}
}
