package hotkeys

import (
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/config"
)

// Defaults of Options.
const (
	DefaultK          = 100
	DefaultWindow     = time.Minute
	DefaultMaxDomains = 64
	// MaxK bounds Options.K, and so the memory of a domain: about 3.9 KB
	// per unit of K (4 MB at MaxK), for at most 64 domains.
	MaxK = 1000
)

// shards is how many parts each domain's counters are split into by key
// hash, each under its own lock, so that concurrent decisions seldom wait
// for one another.
const shards = 4

// purgeEvery is how often a shard drops the nearest counters whose peak
// left the window.
const purgeEvery = int64(time.Second)

// Options configures a Tracker. The zero value means the defaults.
type Options struct {
	// K is how many counters each list of a domain shows: the most
	// refused and the nearest their limits. Zero means DefaultK.
	K int
	// Window is how far back the lists look (see Tracker). Zero means
	// DefaultWindow.
	Window time.Duration
	// MaxDomains bounds the domains tracked: decisions in a domain first
	// seen past it are not tracked. Zero means DefaultMaxDomains.
	MaxDomains int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Live, when set, reports whether a domain is still in the rules:
	// the others are dropped when MaxDomains is reached and a new one
	// comes, and left out of View.
	Live func(domain string) bool
}

// An Observation is one decision on a counter, as Observe takes it.
type Observation struct {
	Rule *config.Rule // the rule that matched, nil for a request's own limit outside any rule
	Path string       // the rule's key path, or the request's keys when no rule matched
	Hits uint64
	// Refused means the limit refused the hits, even if shadow mode let
	// them through (then Shadow is set).
	Refused, Shadow bool
	Limit           backend.Limit
	Remaining       uint64
	Reset           time.Duration
}

// A Tracker keeps, per domain, the counters most refused and those that
// came nearest their limits, in memory fixed by Options whatever the
// number of distinct counters.
//
// Refused: a space-saving sketch (Metwally, Agrawal and El Abbadi, 2005)
// of K counters per shard counts refused hits; a counter not held takes
// the slot of the least counted one and inherits its count, which then
// bounds its error. Every counter refused more than 1/K of a shard's
// refused hits is held. The sketch starts afresh every Window, the
// previous one kept beside it: counts cover the last one to two windows.
//
// Nearest: the share of its limit a counter had used after an admitted
// decision, (capacity - remaining) / capacity, the highest seen within
// the last Window with its time. When that peak leaves the window the
// counter is dropped, and comes back at its next decision if its share
// ranks it among the K.
//
// A Tracker is safe for concurrent use.
type Tracker struct {
	k, maxDomains int
	window        int64 // nanoseconds
	seed          maphash.Seed
	base          time.Time
	elapsed       func() int64 // clock nanoseconds since base
	live          func(string) bool

	domains atomic.Pointer[map[string]*domain]
	last    atomic.Pointer[domain] // the domain last looked up in domains
	mu      sync.Mutex             // serializes adding domains
}

// A domain holds one domain's counters.
type domain struct {
	name   string
	shards [shards]shard
}

// heldBits is the size of a shard's held filter, in bits.
const heldBits = 4096

// A shard holds the counters of a domain whose hash falls in it.
//
// Most decisions change nothing: admitted, on a counter no table holds,
// using less of its limit than the least of the nearest. Observe tells
// them without the lock, from three fields written under it: threshold,
// due and held, a filter of the counters the tables hold (a bit per hash,
// set when a table takes a counter, rebuilt when counters leave).
type shard struct {
	mu                sync.Mutex
	refused, previous *table // the current window's sketch and the last one's
	nearest           *table
	windowEnd         int64 // when refused becomes previous
	nextPurge         int64 // when nearest next drops the peaks gone from the window

	threshold atomic.Uint64 // the score a counter must pass to enter nearest
	due       atomic.Int64  // min(windowEnd, nextPurge)
	held      [heldBits / 64]atomic.Uint64
	_         [64]byte // keep shards' locks on separate cache lines
}

// heldBit returns the word and bit of the held filter for hash h (whose
// low bits chose the shard and probe the tables' indexes).
func heldBit(h uint64) (word int, bit uint64) {
	i := (h >> 32) % heldBits
	return int(i / 64), 1 << (i % 64)
}

// mayHold reports whether a table of sh may hold the counter of hash h.
func (sh *shard) mayHold(h uint64) bool {
	w, b := heldBit(h)
	return sh.held[w].Load()&b != 0
}

// hold marks the counter of hash h as held; sh.mu is held.
func (sh *shard) hold(h uint64) {
	w, b := heldBit(h)
	if x := sh.held[w].Load(); x&b == 0 {
		sh.held[w].Store(x | b)
	}
}

// rehold rebuilds the held filter from the tables; sh.mu is held.
func (sh *shard) rehold() {
	var bits [heldBits / 64]uint64
	for _, t := range []*table{sh.refused, sh.previous, sh.nearest} {
		for i := range t.slots {
			w, b := heldBit(t.slots[i].hash)
			bits[w] |= b
		}
	}
	for i := range bits {
		sh.held[i].Store(bits[i])
	}
}

// publish stores what the lock-free check reads; sh.mu is held.
func (sh *shard) publish() {
	th := uint64(0)
	if sh.nearest.full() {
		th = sh.nearest.min()
	}
	// Loads first: an atomic store costs a locked instruction, and these
	// seldom change.
	if sh.threshold.Load() != th {
		sh.threshold.Store(th)
	}
	if due := min(sh.windowEnd, sh.nextPurge); sh.due.Load() != due {
		sh.due.Store(due)
	}
}

// New returns a Tracker with options o.
func New(o Options) *Tracker {
	t := &Tracker{
		k:          min(max(o.K, 0), MaxK),
		maxDomains: o.MaxDomains,
		window:     int64(o.Window),
		seed:       maphash.MakeSeed(),
		base:       time.Now(),
		live:       o.Live,
	}
	if t.live == nil {
		t.live = func(string) bool { return true }
	}
	if t.k == 0 {
		t.k = DefaultK
	}
	if t.window <= 0 {
		t.window = int64(DefaultWindow)
	}
	if t.maxDomains <= 0 {
		t.maxDomains = DefaultMaxDomains
	}
	if now := o.Now; now != nil {
		t.base = now()
		t.elapsed = func() int64 { return int64(now().Sub(t.base)) }
	} else {
		c := &coarseClock{base: t.base}
		t.elapsed = c.elapsed
	}
	t.domains.Store(new(map[string]*domain))
	return t
}

// K returns how many counters each list holds.
func (t *Tracker) K() int { return t.k }

// Window returns how far back the lists look.
func (t *Tracker) Window() time.Duration { return time.Duration(t.window) }

// Observe records one decision in dom on the counter identified by key
// (the descriptor's part of the counter key: domain and entries). It
// keeps nothing of key, and allocates only the first time it sees a
// domain.
func (t *Tracker) Observe(dom string, key []byte, o *Observation) {
	d := t.last.Load()
	if d == nil || d.name != dom {
		if d = (*t.domains.Load())[dom]; d == nil {
			if d = t.addDomain(dom); d == nil {
				return
			}
		}
		t.last.Store(d)
	}
	h := maphash.Bytes(t.seed, key)
	now := t.elapsed()
	sh := &d.shards[h%shards]
	score := nearScore(o)
	if !o.Refused && score <= sh.threshold.Load() && now < sh.due.Load() && !sh.mayHold(h) {
		return // nothing to change
	}
	sh.mu.Lock()
	sh.observe(t, now, h, key, o, score)
	sh.publish()
	sh.mu.Unlock()
}

// nearScore returns the score of o in the nearest list: the bits of the
// share of its limit's capacity the counter had used after it, if
// admitted; else 0.
func nearScore(o *Observation) uint64 {
	c := o.Limit.Capacity()
	if o.Refused || c == 0 || o.Remaining >= c {
		return 0
	}
	return math.Float64bits(float64(c-o.Remaining) / float64(c))
}

// addDomain returns the domain named name, added if there is room.
func (t *Tracker) addDomain(name string) *domain {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.domains.Load()
	if d := old[name]; d != nil {
		return d
	}
	m := make(map[string]*domain, len(old)+1)
	for n, dd := range old {
		if len(old) < t.maxDomains || t.live(n) {
			m[n] = dd
		}
	}
	if len(m) >= t.maxDomains {
		return nil
	}
	d := &domain{name: name}
	now := t.elapsed()
	for i := range d.shards {
		sh := &d.shards[i]
		sh.refused, sh.previous, sh.nearest = newTable(t.k), newTable(t.k), newTable(t.k)
		sh.windowEnd = now + t.window
		sh.publish()
	}
	m[name] = d
	t.domains.Store(&m)
	t.last.Store(nil) // it may be a domain just dropped
	return d
}

// advance starts a new window when the current one is over, and drops
// the nearest counters whose peak left the window; sh.mu is held.
func (sh *shard) advance(t *Tracker, now int64) {
	if now < sh.windowEnd && now < sh.nextPurge {
		return
	}
	if now >= sh.windowEnd {
		sh.refused, sh.previous = sh.previous, sh.refused
		sh.refused.reset()
		if now >= sh.windowEnd+t.window { // idle for a whole window: the last one saw nothing
			sh.previous.reset()
		}
		sh.windowEnd = now + t.window
	}
	if now >= sh.nextPurge {
		sh.nextPurge = now + purgeEvery
		sh.nearest.retain(func(s *slot) bool { return now-s.at <= t.window })
	}
	sh.rehold() // also forgets the counters replaced since the last time
}

// observe records o, whose nearest score is score, in sh; sh.mu is held.
func (sh *shard) observe(t *Tracker, now int64, h uint64, key []byte, o *Observation, score uint64) {
	sh.advance(t, now)
	r := sh.refused
	s := r.find(h, key)
	switch {
	case o.Refused && o.Hits > 0:
		if s < 0 {
			inherit := uint64(0)
			if r.full() {
				inherit = r.min()
			}
			s = r.add(h, key, inherit)
			r.slots[s].err = inherit
			sh.hold(h)
		}
		r.setScore(s, r.slots[s].score+o.Hits)
	case s < 0:
		sh.observeNearest(t, now, h, key, o, score)
		return
	}
	sl := &r.slots[s]
	sl.hits += o.Hits
	sl.at = now
	sl.last.set(o, now)
	if !o.Refused {
		sh.observeNearest(t, now, h, key, o, score)
	}
}

// observeNearest records an admitted decision of score in sh.nearest.
func (sh *shard) observeNearest(t *Tracker, now int64, h uint64, key []byte, o *Observation, score uint64) {
	n := sh.nearest
	s := n.find(h, key)
	switch {
	case s >= 0:
		if sl := &n.slots[s]; score >= sl.score || now-sl.at > t.window { // a peak gone from the window may leave a lower score
			sl.at = now
			n.setScore(s, score)
		}
	case score == 0 || (n.full() && score <= n.min()):
		return
	default:
		s = n.add(h, key, score)
		n.slots[s].at = now
		sh.hold(h)
	}
	sl := &n.slots[s]
	sl.hits += o.Hits
	sl.last.set(o, now)
}

// set records o, seen at now.
func (l *last) set(o *Observation, now int64) {
	*l = last{rule: o.Rule, path: o.Path, limit: o.Limit, remaining: o.Remaining, reset: o.Reset, shadow: o.Shadow, seen: now}
}
