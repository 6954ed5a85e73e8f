package backend

import (
	"math"
	"time"
)

// State is one counter's state under one Limit. The zero State is a fresh
// counter. Its methods are the reference definition of every Algorithm:
// pure functions of (state, now, limit, hits), in whole microseconds since
// the Unix epoch, which every Store must reproduce decision for decision
// (the Redis scripts port them; backendtest holds the shared cases).
//
// Each method first brings the state to now (rolls windows, refills
// buckets, drops expired log entries), which changes no decision. A clock
// that steps backwards is treated as standing still.
//
// The fields mean, per algorithm:
//
//	FixedWindow    T: start of the current window; N: its count.
//	SlidingWindow  T: start of the current window; N: its count; P: the previous window's count.
//	SlidingLog     Log: counted hits, oldest first; N: their sum.
//	TokenBucket    T: time of the last refill; Tokens: the bucket's content (starts full).
//	GCRA           T: the theoretical arrival time (TAT).
//	Concurrency    Log: the held leases, one entry (stamp, hits) each, oldest first; N: their sum;
//	               T: the newest stamp it gave, held or not.
//
// A Concurrency limit is a sliding log whose window is the lease: a lease
// holds its hits from its stamp until a GiveBack releases it or its stamp
// is a Window old (it lapses, as a sliding log's entry expires). Its
// stamps are unique: Add and Renew stamp a lease max(now, T + 1), later
// than any stamp the counter gave before, released or not, so that a
// GiveBack or Renew names exactly one lease (Result.Lease), and a stale
// lease (released, lapsed) never one taken since. The state is kept (see
// Expiry) until now passes T, after which any new stamp is later still.
//
// ResetAfter is, per algorithm: fixed and sliding window, the end of the
// current epoch-aligned window; sliding log, the oldest counted hit's time
// plus the window; concurrency, the oldest held lease's expiry; token
// bucket, the time until the bucket is full; GCRA, TAT minus now; a ban,
// the end of the current window.
type State struct {
	T      int64
	N      uint64
	P      uint64
	Tokens float64
	Log    *Log // nil until a sliding log first counts a hit
}

// Micros returns t in microseconds since the Unix epoch, the clock of State.
func Micros(t time.Time) int64 { return t.UnixMicro() }

// Admits reports whether l admits hits more on st at now (µs). hits zero
// checks only: it is refused iff the counter is already past the limit.
// A ban admits nothing.
func (st *State) Admits(l Limit, now int64, hits uint64) bool {
	if l.Ban() {
		return false
	}
	st.advance(l, now)
	switch l.Algorithm {
	case FixedWindow, SlidingLog, Concurrency:
		return addSat(st.N, hits) <= l.Requests
	case SlidingWindow:
		return float64(addSat(st.N, hits))+st.weightedPrev(l, now) <= float64(l.Requests)
	case TokenBucket:
		return st.Tokens >= float64(hits)
	case GCRA:
		b := l.Capacity()
		if hits > b {
			return false
		}
		// tat-now <= (b-hits)·T, written so that a saturated TAT cannot overflow.
		return max(st.T, now)-now <= int64(b-hits)*l.Interval()
	}
	return false
}

// Add counts hits on st at now (µs) without checking the limit: the caller
// has checked Admits, or records usage past the limit on purpose
// (Request.ConsumeWhenOver). A ban counts nothing.
//
// It returns the stamp that Refund needs to give these hits back: the
// start of the window they were counted in (fixed and sliding window),
// the time of the log entry holding them (sliding log), the lease's
// unique stamp (concurrency), or 0 (token bucket, GCRA, and when nothing
// was counted).
func (st *State) Add(l Limit, now int64, hits uint64) (stamp int64) {
	if l.Ban() || hits == 0 {
		return 0
	}
	st.advance(l, now)
	switch l.Algorithm {
	case FixedWindow, SlidingWindow:
		st.N = addSat(st.N, hits)
		return st.T
	case SlidingLog:
		if st.Log == nil {
			st.Log = new(Log)
		}
		t := max(now, st.Log.newest())
		st.Log.push(t, hits)
		st.N = addSat(st.N, hits)
		return t
	case Concurrency:
		if st.Log == nil {
			st.Log = new(Log)
		}
		// A stamp of its own: a full log (reached only past the limit,
		// ConsumeWhenOver) folds the hits into its newest lease, moved
		// to t, as a sliding log does.
		st.T = max(now, st.T+1)
		st.Log.push(st.T, hits)
		st.N = addSat(st.N, hits)
		return st.T
	case TokenBucket:
		st.Tokens -= float64(hits)
	case GCRA:
		st.T = addSatInt(max(st.T, now), mulSatInt(int64(min(hits, math.MaxInt64)), l.Interval()))
	}
	return 0
}

// Refund gives back, at now (µs), hits that Add counted on st and
// stamped with stamp, as far as they still count: the reference of
// take.lua's "refund", with which Redis Cluster undoes a slot's share of
// a call that another slot refused (see DecidePart).
//
// Per algorithm: fixed and sliding window take the hits off the current
// window's count if stamp is its start, and give nothing back once the
// window has moved on (a sliding window's previous count is left as is);
// sliding log and concurrency take them off the entry stamped stamp,
// dropping it when it empties, and give nothing back once that entry has
// expired (or a full log has folded it into a newer one), and
// concurrency takes back the stamp if it is the newest it gave (so that
// refunds in the reverse order of their adds give back every stamp, as
// Cluster's refunds do); token bucket puts the tokens
// back, up to a full bucket; GCRA moves the TAT back, not before now. A
// ban or zero hits gives nothing back.
//
// Refund right after an Add that Admits allowed, at the same now, gives
// st back its decisions: every later Admits and Result is as if Add had
// not run. Hits added past the limit (a token bucket in debt, as
// ConsumeWhenOver leaves it) may come back an ulp off: a float's
// x-h+h need not be x once x-h is negative.
func (st *State) Refund(l Limit, now int64, hits uint64, stamp int64) {
	if l.Ban() || hits == 0 {
		return
	}
	st.advance(l, now)
	switch l.Algorithm {
	case FixedWindow, SlidingWindow:
		if st.T == stamp {
			st.N = subSat(st.N, hits)
		}
	case SlidingLog:
		st.N = subSat(st.N, st.Log.take(stamp, hits))
	case Concurrency:
		st.N = subSat(st.N, st.Log.take(stamp, hits))
		if stamp == st.T {
			// The lease was never given to the caller: its stamp may be
			// given again, as if it had never been (Add stamps from
			// max(now, T+1), and the stamp was max(now, T'+1) for the
			// T' before it).
			st.T = stamp - 1
		}
	case TokenBucket:
		st.Tokens = min(st.Tokens+float64(hits), float64(l.Capacity()))
	case GCRA:
		st.T = max(st.T-mulSatInt(int64(min(hits, math.MaxInt64)), l.Interval()), now)
	}
}

// GiveBack gives hits back to st at now (µs), as a Request whose Op is
// GiveBack does: never past the limit, so that a give-back on a fresh or
// full budget changes nothing.
//
// Per algorithm: fixed and sliding window lower the current window's
// count, not below zero (a sliding window's previous count is left as
// is); sliding log drops its newest entries, hits worth (the last one
// it reaches only in part); token bucket puts the tokens back, up to a
// full bucket; GCRA moves the TAT back, not before now. Concurrency, when
// lease is not zero, releases the lease stamped lease whole, whatever
// hits says, and frees nothing if it is no longer held (lapsed, or
// already released); when lease is zero, it frees the newest held slots,
// hits worth, as a sliding log does (so that an anonymous give-back
// leaves the older leases, maybe a crashed holder's, to lapse on time).
// A release never frees more than is held. A ban gives nothing back, and
// so does zero hits but for a release by lease.
func (st *State) GiveBack(l Limit, now int64, hits uint64, lease int64) {
	if l.Ban() || (hits == 0 && (l.Algorithm != Concurrency || lease == 0)) {
		return
	}
	st.advance(l, now)
	switch l.Algorithm {
	case FixedWindow, SlidingWindow:
		st.N = subSat(st.N, hits)
	case SlidingLog:
		st.N = subSat(st.N, st.Log.dropNewest(hits))
	case Concurrency:
		if lease != 0 {
			st.N = subSat(st.N, st.Log.take(lease, math.MaxUint64))
		} else {
			st.N = subSat(st.N, st.Log.dropNewest(hits))
		}
	case TokenBucket:
		st.Tokens = min(st.Tokens+float64(hits), float64(l.Capacity()))
	case GCRA:
		st.T = max(st.T-mulSatInt(int64(min(hits, math.MaxInt64)), l.Interval()), now)
	}
}

// Renew extends, at now (µs), the lease of a Concurrency limit stamped
// lease to a full Window from now: it moves the lease's hits to a new
// stamp, as Add stamps them, without checking the limit (they are held
// already), and returns that stamp. It returns false, changing
// nothing, when no held lease is stamped lease (it lapsed, or was
// released), and on any other algorithm or a ban, which hold no leases.
func (st *State) Renew(l Limit, now int64, lease int64) (int64, bool) {
	if l.Ban() || l.Algorithm != Concurrency || lease == 0 {
		return 0, false
	}
	st.advance(l, now)
	n := st.Log.take(lease, math.MaxUint64)
	if n == 0 {
		return 0, false
	}
	st.T = max(now, st.T+1)
	st.Log.push(st.T, n)
	return st.T, true
}

// Result reports st's remaining capacity, reset and, when over is set, the
// time until hits more would be admitted, at now (µs).
func (st *State) Result(l Limit, now int64, hits uint64, over bool) Result {
	if l.Ban() {
		reset := FromMicros(windowEnd(l, now) - now)
		return Result{OverLimit: true, ResetAfter: reset, RetryAfter: reset}
	}
	st.advance(l, now)
	r := Result{OverLimit: over}
	w := l.window()
	switch l.Algorithm {
	case FixedWindow:
		r.Remaining = subSat(l.Requests, st.N)
		r.ResetAfter = FromMicros(st.T + w - now)
	case SlidingWindow:
		if left := float64(l.Requests) - (float64(st.N) + st.weightedPrev(l, now)); left > 0 {
			r.Remaining = uint64(left)
		}
		r.ResetAfter = FromMicros(st.T + w - now)
	case SlidingLog, Concurrency:
		r.Remaining = subSat(l.Requests, st.N)
		if st.Log.Len() > 0 {
			r.ResetAfter = FromMicros(st.Log.at(0).t + w - now)
		}
	case TokenBucket:
		if st.Tokens > 0 {
			r.Remaining = uint64(st.Tokens)
		}
		r.ResetAfter = FromMicros(ceilDiv(float64(l.Capacity())-st.Tokens, l, w))
	case GCRA:
		tat, t := max(st.T, now), l.Interval()
		if room := int64(l.Capacity())*t - (tat - now); room > 0 {
			r.Remaining = uint64(room / t)
		}
		r.ResetAfter = FromMicros(tat - now)
	}
	if over {
		r.RetryAfter = FromMicros(st.retryAfter(l, now, hits))
	}
	return r
}

// Expiry returns the instant (µs) from which st is as good as a fresh
// State under l, so a store may forget it.
func (st *State) Expiry(l Limit) int64 {
	w := l.window()
	switch l.Algorithm {
	case FixedWindow:
		return st.T + w
	case SlidingWindow:
		return st.T + 2*w
	case SlidingLog:
		if st.Log.Len() == 0 {
			return 0
		}
		return st.Log.newest() + w
	case Concurrency:
		// Kept while a lease is held, and until now passes the newest
		// stamp given, so that no stamp is given twice.
		if st.Log.Len() == 0 {
			return st.T + 1
		}
		return max(st.Log.newest()+w, st.T+1)
	case TokenBucket:
		if l.Ban() {
			return 0
		}
		return addSatInt(st.T, ceilDiv(float64(l.Capacity())-st.Tokens, l, w))
	case GCRA:
		return st.T
	}
	return 0
}

// advance brings st to now without changing any decision.
func (st *State) advance(l Limit, now int64) {
	w := l.window()
	switch l.Algorithm {
	case FixedWindow, SlidingWindow:
		start := now - now%w
		if start <= st.T {
			return // same window, or the clock stepped back
		}
		if l.Algorithm == SlidingWindow && start == st.T+w {
			st.P = st.N
		} else {
			st.P = 0
		}
		st.T, st.N = start, 0
	case SlidingLog, Concurrency:
		if st.Log == nil {
			return
		}
		for st.Log.len > 0 && st.Log.at(0).t <= now-w {
			st.N = subSat(st.N, st.Log.at(0).n)
			st.Log.pop()
		}
		st.Log.shrink()
	case TokenBucket:
		b := float64(l.Capacity())
		if st.T == 0 {
			st.T, st.Tokens = now, b // a fresh bucket starts full
			return
		}
		if now > st.T {
			refill := float64(float64(now-st.T)*float64(l.Requests)) / float64(w)
			st.Tokens = min(b, st.Tokens+refill)
			st.T = now
		}
	}
}

// weightedPrev returns the part of the previous window's count that the
// sliding window still covers at now.
func (st *State) weightedPrev(l Limit, now int64) float64 {
	w := l.window()
	elapsed := min(max(now-st.T, 0), w)
	return float64(float64(st.P)*float64(w-elapsed)) / float64(w)
}

// retryAfter returns the time (µs) until hits more would be admitted if
// nothing else were counted; st is advanced to now.
func (st *State) retryAfter(l Limit, now int64, hits uint64) int64 {
	at, possible := st.retryAt(l, now, hits)
	if !possible {
		return l.window()
	}
	// The closed forms below use floats where the predicate does; rounding
	// may leave them a microsecond off either way. Step until Admits agrees.
	at = max(at, now+1)
	admits := func(at int64) bool {
		probe := *st
		if st.Log != nil {
			// Admits only moves a log's head, never writes its entries: a
			// copy of the header is enough to probe without changing st.
			lc := *st.Log
			probe.Log = &lc
		}
		return probe.Admits(l, at, hits)
	}
	for i := 0; i < 4 && at > now+1 && admits(at-1); i++ {
		at--
	}
	for i := 0; i < 4 && !admits(at); i++ {
		at++
	}
	return at - now
}

// retryAt returns the first instant (µs) from which hits more would be
// admitted if nothing else were counted, or false if hits exceed what l
// can ever admit at once.
func (st *State) retryAt(l Limit, now int64, hits uint64) (int64, bool) {
	w := l.window()
	switch l.Algorithm {
	case FixedWindow:
		return st.T + w, hits <= l.Requests
	case SlidingWindow:
		if hits > l.Requests {
			return 0, false
		}
		// While the current count fits, wait for the previous window's
		// weight to fall; otherwise for the next window, where this
		// window's count becomes the weighted one.
		t, prev, room := st.T, st.P, uint64(0)
		if n := addSat(st.N, hits); n <= l.Requests {
			room = l.Requests - n
		} else {
			t, prev, room = st.T+w, st.N, l.Requests-hits
		}
		if prev == 0 {
			return t, true
		}
		// At most a window back: room < prev but for a request whose
		// own hits fit and an earlier one of its call did not.
		return t + w - int64(min(float64(room)*float64(w)/float64(prev), float64(w))), true
	case SlidingLog, Concurrency:
		if hits > l.Requests {
			return 0, false
		}
		n := addSat(st.N, hits)
		if n <= l.Requests {
			return now, true
		}
		need := n - l.Requests // hits that must expire first
		for i := 0; i < st.Log.Len(); i++ {
			e := st.Log.at(i)
			if e.n >= need {
				return e.t + w, true
			}
			need -= e.n
		}
		return now, true
	case TokenBucket:
		if hits > l.Capacity() {
			return 0, false
		}
		return addSatInt(now, ceilDiv(float64(hits)-st.Tokens, l, w)), true
	case GCRA:
		b := l.Capacity()
		if hits > b {
			return 0, false
		}
		return max(st.T, now) - int64(b-hits)*l.Interval(), true
	}
	return now, true
}

// windowEnd returns the end (µs) of the epoch-aligned window of l holding now.
func windowEnd(l Limit, now int64) int64 {
	w := l.window()
	return now - now%w + w
}

// ceilDiv returns the microseconds that l takes to refill tokens (rounded
// up), as a token bucket refills Requests per w.
func ceilDiv(tokens float64, l Limit, w int64) int64 {
	if tokens <= 0 {
		return 0
	}
	us := math.Ceil(float64(tokens*float64(w)) / float64(l.Requests))
	if us >= math.MaxInt64 {
		return math.MaxInt64 // a debt recorded past the limit (ConsumeWhenOver)
	}
	return int64(us)
}

// FromMicros converts µs, the unit of State, to a Duration: negative is
// zero, and a duration too long for a Duration saturates.
func FromMicros(us int64) time.Duration {
	if us > math.MaxInt64/int64(time.Microsecond) {
		return math.MaxInt64 // a saturated GCRA TAT
	}
	return time.Duration(max(us, 0)) * time.Microsecond
}

func addSat(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}

func subSat(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return 0
}

func addSatInt(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func mulSatInt(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}
