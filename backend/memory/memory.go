// Package memory is ratelimitd's embedded counter store: sharded maps in
// the daemon's own memory, for a single replica that needs nothing else.
//
// Usage:
//
//	store := memory.New(memory.Options{MaxKeys: 100_000})
//	defer store.Close()
//	err := store.Take(ctx, reqs, res)
package memory

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
)

// Defaults of Options.
const (
	DefaultMaxKeys       = 1_000_000
	DefaultSweepInterval = 10 * time.Second
)

const (
	maxShards = 256
	// evictionSamples is how many keys a full shard looks at to choose
	// the one a new key may replace: the more, the rarer it is that all
	// of them are refusing (see Options.MaxKeys).
	evictionSamples = 8
	// windowShare is the share of a shard's keys, in 1/windowShare, that
	// its admission window holds: 1%, as Caffeine sizes its own by
	// default (see Options.MaxKeys).
	windowShare = 100
	// fullSweepEvery is how often, at most, a full shard sweeps all its
	// expired keys before it evicts a live one.
	fullSweepEvery = int64(time.Second / time.Microsecond)
	// smallCall is how many requests a call may have for Take to keep
	// its working state on the stack.
	smallCall = 4
)

// Options configures a Store. The zero value means the defaults.
type Options struct {
	// MaxKeys bounds the number of counters kept. The store admits and
	// evicts by W-TinyLFU's rule: each shard keeps about 1% of its keys
	// (at least one) in an admission window and the rest in its main
	// region. A new key always gets a counter, so it is limited from its
	// first call: in the main region while it has room (expired counters
	// are dropped first), else in the window, in place of the window's
	// oldest key. That key then leaves the window: into the main region
	// if it has room, else it competes with the main region's counter
	// worth least among 8 sampled (a counter that is not refusing, its
	// last decision having left it room for a hit, before one that is;
	// then the one asked for least often lately; then the one that
	// expires soonest). The one asked for more often lately stays and
	// the other is evicted, starting again from zero; a tie goes to the
	// main region's counter, but to a refusing counter over one that is
	// not, and to the window's key at the counts' maximum (15 sightings
	// since they last halved) unless the main's is refusing. A window key
	// that loses is declined. Zero means DefaultMaxKeys.
	//
	// So a flood of keys seen once cannot push out counters with more
	// history, a refusing counter in the main region goes only when every
	// counter sampled is refusing too and the window's key was asked for
	// more often than it, and one whose count is at its maximum is never
	// evicted. A call that brings more new keys to one shard than its
	// window holds admits the excess by the window's rule at once: a key
	// that loses is decided on a fresh counter, which is not kept. What
	// the store guarantees, and what an attacker can still do, is in
	// docs/operations.md ("The memory store's bound").
	MaxKeys int
	// SweepInterval is how often a background sweep drops expired
	// counters. Zero means DefaultSweepInterval.
	SweepInterval time.Duration
	// Now returns the current time. Nil means the wall clock at New plus
	// the monotonic time elapsed since: one clock read per call, and a
	// clock that never steps backwards when the system's is adjusted.
	Now func() time.Time
}

// Store is an in-memory backend.Store and backend.ShareStore. Every
// algorithm's state, and every share bucket's entries, live in one of up
// to 256 shards, each a map guarded by its own mutex; a call locks the
// shards of its keys in ascending order and decides under those locks, so
// each call is atomic and concurrent calls on other shards do not wait.
//
// At its bound (Options.MaxKeys) a shard admits and evicts by
// W-TinyLFU's rule, under the same lock: how often keys were asked for
// lately is kept in their buckets and, for keys not held, in a sketch
// per shard (see sketch, and for why it is written here rather than
// taken from a cache library), whether a counter is refusing is a flag
// in its bucket, and the admission window is a ring of keys per shard
// (see shard.win).
//
// Store is safe for concurrent use by multiple goroutines. Close stops its
// sweeper.
type Store struct {
	now      func() time.Time
	seeds    [2]maphash.Seed
	shards   []shard
	mask     uint64
	perShard int // keys a shard holds at most
	mainCap  int // of those, keys in its main region: perShard less its window's

	watchers  shareWatchers // see WatchShares
	overrides overrides     // see PutOverride

	evictions atomic.Uint64
	refusing  atomic.Uint64 // evictions of refusing counters
	declined  atomic.Uint64 // new keys not admitted to a main region
	closed    atomic.Bool
	closeOnce sync.Once
	stop      chan struct{} // closed by Close to stop the sweeper
	done      chan struct{} // closed when the sweeper has returned
}

var (
	_ backend.Store      = (*Store)(nil)
	_ backend.ShareStore = (*Store)(nil)
)

type shard struct {
	mu     sync.Mutex
	m      map[hkey]bucket       // requires that mu is held
	logs   map[hkey]*backend.Log // sliding logs (and concurrency leases) of keys in m; requires that mu is held
	shares map[hkey][]shareEntry // entries of share buckets (see share.go); requires that mu is held
	swept  int64                 // µs of the last sweep; requires that mu is held
	// soonest is a µs before which no counter in m expires (a lower
	// bound), so that a sweep before it finds nothing to drop and is
	// skipped; requires that mu is held.
	soonest int64
	freq    sketch // how often keys were asked for lately; requires that mu is held
	// win is the admission window, a FIFO ring of the keys that entered
	// m while its main region was full; a slot is live while its key's
	// bucket names it (bucket.win), and hand is the slot of the oldest
	// key, which the next new key replaces. nwin counts the live slots,
	// so the main region holds len(m)-nwin keys. All require that mu is
	// held.
	win  []hkey
	hand int
	nwin int
	_    [48]byte // keep shards on separate cache lines (TestShardSize)
}

// hkey is a counter's key as the store keeps it: two 64-bit hashes of the
// request's key with independent random seeds. Memory per key is bounded
// whatever the key's length, lookups compare 16 bytes instead of chasing
// the key's bytes, and, the seeds being secret and per process, callers
// cannot choose keys that collide (a chance of about n²/2¹²⁹ for n keys).
type hkey [2]uint64

// bucket is one counter, stored inline in its shard's map. It holds no
// pointer, so the garbage collector never scans the maps, however many
// keys they hold; a sliding log's entries live in shard.logs.
type bucket struct {
	t      int64
	n, p   uint64
	tokens float64
	exp    int64 // µs from which the state is as good as fresh (see State.Expiry)
	// refusing reports that the counter's last decision left it no room
	// for one more hit (Remaining 0): its limit is refusing, and eviction
	// would admit its client again.
	refusing bool
	freq     uint8  // how often the key was asked for lately, as of halving epoch (see sketch)
	epoch    uint16 // the shard's sketch.epoch when freq was set
	win      uint32 // 1 + the key's slot in its shard's window, or 0 in the main region
}

// New returns a Store and starts its sweeper; call Close to stop it.
func New(opts Options) *Store {
	maxKeys := opts.MaxKeys
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	interval := opts.SweepInterval
	if interval <= 0 {
		interval = DefaultSweepInterval
	}
	now := opts.Now
	if now == nil {
		start := time.Now()
		wall := start.Round(0) // without its monotonic reading
		now = func() time.Time { return wall.Add(time.Since(start)) }
	}
	// Enough shards to spread contention, few enough that each holds at
	// least 64 keys, so that sampled eviction has a choice.
	n := min(maxShards, 1<<bits.Len(uint(max(maxKeys/64, 1))-1))
	perShard := maxKeys / n
	// A window of at least one key, but none in a shard of one key, whose
	// main region would then hold none.
	win := min(max(perShard/windowShare, 1), perShard-1)
	s := &Store{
		now:      now,
		seeds:    [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		shards:   make([]shard, n),
		mask:     uint64(n - 1),
		perShard: perShard,
		mainCap:  perShard - win,
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	for i := range s.shards {
		s.shards[i].m = make(map[hkey]bucket)
		s.shards[i].logs = make(map[hkey]*backend.Log)
		s.shards[i].shares = make(map[hkey][]shareEntry)
		s.shards[i].freq = newSketch(perShard)
		s.shards[i].win = make([]hkey, win)
	}
	go s.sweeper(interval)
	return s
}

// Close stops the sweeper and makes later calls to Take fail with
// backend.ErrClosed. It is safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.stop)
		<-s.done
	})
	return nil
}

// Len returns the number of counters held.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// Evictions returns how many live counters were evicted to make room for
// new ones since New: from a main region, or from a window (see
// Declined).
func (s *Store) Evictions() uint64 { return s.evictions.Load() }

// RefusingEvictions returns how many of Evictions were of counters that
// were refusing, each of which let a client over its limit start again
// from zero.
func (s *Store) RefusingEvictions() uint64 { return s.refusing.Load() }

// Declined returns how many new keys were not admitted to a main region
// since New, its counters being asked for as often as they were or more
// (see Options.MaxKeys): keys that left the admission window and were
// evicted (counted in Evictions too), each of which starts again from
// zero on its next call, and keys of a call that brought more new keys to
// a shard than its window holds, whose calls were decided on fresh
// counters that were not kept.
func (s *Store) Declined() uint64 { return s.declined.Load() }

// slot is one request's counter during a call: a copy of its state,
// written back when the call is decided.
type slot struct {
	sh       *shard
	key      hkey
	alias    int    // index of the first slot of this call with the same key
	win      uint32 // the key's bucket.win (first of the small fields, so that they pack in 8 bytes)
	declined bool   // a new key the full shard does not keep
	refusing bool   // some request on the key left it no room
	freq     uint8  // how often the key was asked for lately, this call included
	epoch    uint16 // its shard's sketch.epoch when freq was read
	st       backend.State
}

// usable returns the error of a call named op on s: backend.ErrClosed
// after Close, or ctx's error. (Take, the hot path, checks the same
// inline.)
func (s *Store) usable(ctx context.Context, op string) error {
	if s.closed.Load() {
		return backend.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: %s: %w", op, err)
	}
	return nil
}

// Take implements backend.Store.
func (s *Store) Take(ctx context.Context, reqs []backend.Request, res []backend.Result) error {
	if len(res) != len(reqs) {
		return fmt.Errorf("memory: take: %d results for %d requests", len(res), len(reqs))
	}
	if s.closed.Load() {
		return backend.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: take: %w", err)
	}
	var small [smallCall]slot
	slots := small[:]
	if len(reqs) > len(small) {
		slots = make([]slot, len(reqs))
	}
	slots = slots[:len(reqs)]

	var locked [maxShards / 64]uint64 // a bitmap, so shards lock in ascending order
	for i := range reqs {
		sl := &slots[i]
		// Not s.hash: its cost is over the inliner's budget, and a call
		// per request shows on the hot path.
		sl.key = hkey{maphash.String(s.seeds[0], reqs[i].Key), maphash.String(s.seeds[1], reqs[i].Key)}
		idx := sl.key[0] & s.mask
		sl.sh = &s.shards[idx]
		locked[idx/64] |= 1 << (idx % 64)
		sl.alias = i
		if reqs[i].Limit.Ban() {
			continue // a ban touches no counter: never loaded or stored
		}
		for j := range i {
			if slots[j].key == sl.key && !reqs[j].Limit.Ban() {
				sl.alias = j
				break
			}
		}
	}
	s.lock(&locked, true)
	defer s.lock(&locked, false)

	now := backend.Micros(s.now())
	for i := range slots {
		if sl := &slots[i]; sl.alias == i && !reqs[i].Limit.Ban() {
			s.load(sl, reqs[i].Limit, now, slots[:i])
		}
	}
	decide(slots, reqs, res, now)
	for i := range slots { // a counter left no room for one more hit is refusing
		if !reqs[i].Limit.Ban() && res[i].Remaining == 0 {
			slots[slots[i].alias].refusing = true
		}
	}
	for i := range slots {
		if sl := &slots[i]; sl.alias == i && !reqs[i].Limit.Ban() && !sl.declined {
			s.store(sl, reqs[i].Limit)
		}
	}
	return nil
}

// hash returns the store's key for a request's key or a share bucket's
// name. Take writes it out rather than call it (see there).
func (s *Store) hash(key string) hkey {
	return hkey{maphash.String(s.seeds[0], key), maphash.String(s.seeds[1], key)}
}

// load counts a sighting of sl's key and copies its counter into sl.st. A
// key its shard does not hold yet is admitted, if need be in place of
// another, or, rarely, declined (see admit). It never drops a key that
// busy (this call's earlier slots) holds.
func (s *Store) load(sl *slot, l backend.Limit, now int64, busy []slot) {
	sh := sl.sh
	b, ok := sh.m[sl.key]
	if ok {
		sh.freq.see()
		sl.freq = min(sh.freq.aged(b.freq, b.epoch)+1, maxFreq)
		sl.win = b.win
	} else {
		sl.declined = !s.admit(sh, sl, now, busy)
	}
	sl.epoch = sh.freq.epoch
	sl.st = backend.State{T: b.t, N: b.n, P: b.p, Tokens: b.tokens}
	if l.Algorithm == backend.SlidingLog || l.Algorithm == backend.Concurrency {
		sl.st.Log = sh.logs[sl.key]
	}
}

// store writes sl.st back as its counter.
func (s *Store) store(sl *slot, l backend.Limit) {
	st, sh := &sl.st, sl.sh
	exp := st.Expiry(l)
	sh.m[sl.key] = bucket{
		t: st.T, n: st.N, p: st.P, tokens: st.Tokens, exp: exp,
		refusing: sl.refusing, freq: sl.freq, epoch: sl.epoch, win: sl.win,
	}
	sh.soonest = min(sh.soonest, exp)
	if st.Log != nil {
		sh.logs[sl.key] = st.Log
	}
}

// decide applies backend.Decide to the loaded states of slots: requests
// on one key (one alias) share their first slot's state.
func decide(slots []slot, reqs []backend.Request, res []backend.Result, now int64) {
	if len(slots) > smallCall {
		decideLarge(slots, reqs, res, now)
		return
	}
	// An array, not a slice: pointers stored in a slice's elements escape,
	// and would move a small call's slots to the heap.
	var states [smallCall]*backend.State
	for i := range slots {
		states[i] = &slots[slots[i].alias].st
	}
	backend.Decide(reqs, states[:len(slots)], now, res)
}

// decideLarge is decide for a call of more than smallCall requests, on
// copies of the states, so that no pointer into slots escapes.
func decideLarge(slots []slot, reqs []backend.Request, res []backend.Result, now int64) {
	copies := make([]backend.State, len(slots))
	states := make([]*backend.State, len(slots))
	for i := range slots {
		copies[i] = slots[i].st
		states[i] = &copies[slots[i].alias]
	}
	backend.Decide(reqs, states, now, res)
	for i := range slots {
		slots[i].st = copies[i]
	}
}

// admit counts a sighting of sl's key, which sh does not hold, and gives
// it a counter: in sh's main region if it has room, else in its window
// (see enter). It holds the key's place until the call stores its
// counter, so that the call's other new keys find the shard as full as it
// will be. It reports false only when every window slot holds a key of
// this call and the new key, admitted to the main region by the window's
// rule at once, was asked for no more often than the counter it would
// replace (see Options.MaxKeys): the key is declined. Only a shard whose
// main region is full counts new keys in its sketch: one with room admits
// them all.
func (s *Store) admit(sh *shard, sl *slot, now int64, busy []slot) bool {
	if !inShard(busy, sh) {
		busy = nil // nothing to spare: the sweep and samples need not look
	}
	if s.mainFull(sh) && now-sh.swept >= fullSweepEvery {
		sweepLocked(sh, now, busy)
	}
	if !s.mainFull(sh) {
		sh.freq.see()
		sl.freq = min(sh.freq.estimate(sl.key)+1, maxFreq)
		sh.m[sl.key] = bucket{}
		return true
	}
	sl.freq = sh.freq.add(sl.key)
	if s.enter(sh, sl, now, busy) {
		return true
	}
	if !s.evict(sh, sl.freq, false, now, busy) {
		s.declined.Add(1)
		return false
	}
	sh.m[sl.key] = bucket{}
	return true
}

// mainFull reports whether sh's main region holds as many keys as it may.
func (s *Store) mainFull(sh *shard) bool { return len(sh.m)-sh.nwin >= s.mainCap }

// enter puts sl's new key in sh's window, in the slot of the window's
// oldest key, which leaves the window (see leave); a key that busy (this
// call) holds stays, and goes round once more. It reports false, changing
// nothing, when every slot holds a key of this call, or the window has no
// slot.
func (s *Store) enter(sh *shard, sl *slot, now int64, busy []slot) bool {
	for range sh.win {
		i := sh.hand
		if sh.hand++; sh.hand == len(sh.win) {
			sh.hand = 0
		}
		k := sh.win[i]
		b, live := sh.m[k]
		live = live && b.win == uint32(i)+1
		if live && busy != nil && holds(busy, k) {
			continue
		}
		if live {
			s.leave(sh, k, b, now, busy)
		}
		sh.win[i] = sl.key
		sl.win = uint32(i) + 1
		sh.m[sl.key] = bucket{win: sl.win}
		sh.nwin++
		return true
	}
	return false
}

// leave moves k, whose bucket b is in sh's window, to the main region: at
// once if the main region has room, else if k wins against the main
// region's sampled counter (see evict). A key that loses is evicted and
// declined; the sketch keeps its count, so that it is asked for more
// often than before if it comes back. An expired key is dropped.
func (s *Store) leave(sh *shard, k hkey, b bucket, now int64, busy []slot) {
	if b.exp <= now {
		drop(sh, k, b)
		return
	}
	f := sh.freq.aged(b.freq, b.epoch)
	if s.mainFull(sh) && !s.evict(sh, f, b.refusing, now, busy) {
		drop(sh, k, b)
		sh.freq.raise(k, f)
		s.evictions.Add(1)
		s.declined.Add(1)
		if b.refusing {
			s.refusing.Add(1)
		}
		return
	}
	b.win = 0
	sh.m[k] = b
	sh.nwin--
}

// evict makes room in the full main region of sh for a key asked for fk
// times lately, refusing if rk. It drops an expired key if its sample
// finds one; else it picks the sampled key worth least (see cheaper) and
// drops it if the other key wins (see wins); the sketch keeps the evicted
// key's count. It reports whether it made room, which it also does when
// the sample finds only busy keys: a call holding more keys of one shard
// than its main region holds grows it past its bound.
func (s *Store) evict(sh *shard, fk uint8, rk bool, now int64, busy []slot) bool {
	var victim hkey
	var vb bucket
	vf, n := uint8(0), 0
	for k2, b := range sh.m { // map iteration starts at a random place
		if b.win != 0 || holds(busy, k2) {
			continue
		}
		if b.exp <= now {
			drop(sh, k2, b)
			return true
		}
		if f := sh.freq.aged(b.freq, b.epoch); n == 0 || cheaper(b, f, vb, vf) {
			victim, vb, vf = k2, b, f
		}
		if n++; n == evictionSamples {
			break
		}
	}
	if n == 0 {
		return true
	}
	if !wins(fk, rk, vf, vb.refusing) {
		return false
	}
	drop(sh, victim, vb)
	sh.freq.raise(victim, vf)
	s.evictions.Add(1)
	if vb.refusing {
		s.refusing.Add(1)
	}
	return true
}

// wins reports whether a key asked for fa times lately, refusing if ra,
// takes the place of a main region's counter asked for fb times, refusing
// if rb: if it was asked for more often; on a tie, if it is refusing and
// the other is not (forgetting it would admit its client again), or if
// the count is at its maximum (else a main region full of counts at the
// maximum would keep them forever) and the other is not refusing.
func wins(fa uint8, ra bool, fb uint8, rb bool) bool {
	if fa != fb {
		return fa > fb
	}
	return !rb && (ra || fa == maxFreq)
}

// cheaper reports whether forgetting counter a, whose key was asked for
// fa times lately, admits less traffic that its limit refuses than
// forgetting b, asked for fb times: a counter that is not refusing goes
// before one that is, then the one asked for less often, then the one
// that expires sooner.
func cheaper(a bucket, fa uint8, b bucket, fb uint8) bool {
	if a.refusing != b.refusing {
		return !a.refusing
	}
	if fa != fb {
		return fa < fb
	}
	return a.exp < b.exp
}

// drop forgets k, whose bucket b is in sh.
func drop(sh *shard, k hkey, b bucket) {
	if b.win != 0 {
		sh.nwin--
	}
	delete(sh.m, k)
	delete(sh.logs, k)
}

// inShard reports whether any of slots is in sh.
func inShard(slots []slot, sh *shard) bool {
	for i := range slots {
		if slots[i].sh == sh {
			return true
		}
	}
	return false
}

func holds(slots []slot, k hkey) bool {
	for i := range slots {
		if slots[i].key == k {
			return true
		}
	}
	return false
}

// hashAll hashes the n names name(i) into a new slice, and returns it
// with the bitmap of their shards, for lock. (Take hashes inline: see
// there.)
func (s *Store) hashAll(n int, name func(i int) string) (keys []hkey, shards [maxShards / 64]uint64) {
	keys = make([]hkey, n)
	for i := range keys {
		keys[i] = s.hash(name(i))
		idx := keys[i][0] & s.mask
		shards[idx/64] |= 1 << (idx % 64)
	}
	return keys, shards
}

// lock locks (or unlocks) every shard set in the bitmap, in ascending
// order, so that calls sharing shards cannot deadlock.
func (s *Store) lock(set *[maxShards / 64]uint64, lock bool) {
	for w, word := range set {
		for word != 0 {
			i := w*64 + bits.TrailingZeros64(word)
			word &= word - 1
			if lock {
				s.shards[i].mu.Lock()
			} else {
				s.shards[i].mu.Unlock()
			}
		}
	}
}

// sweeper drops expired buckets every interval until Close.
func (s *Store) sweeper(interval time.Duration) {
	defer close(s.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.sweep()
		}
	}
}

// sweep drops every expired bucket and share entry, one shard at a time.
func (s *Store) sweep() {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		now := backend.Micros(s.now())
		sweepLocked(sh, now, nil)
		sweepSharesLocked(sh, now)
		sh.mu.Unlock()
	}
}

// sweepLocked drops the expired buckets of sh, whose mu must be held,
// but those that busy (the call in progress) holds, unless none can have
// expired yet.
func sweepLocked(sh *shard, now int64, busy []slot) {
	sh.swept = now
	if now < sh.soonest {
		return
	}
	soonest := int64(math.MaxInt64)
	for k, b := range sh.m {
		switch {
		case holds(busy, k):
			// The call stores it again, and lowers soonest then.
		case b.exp <= now:
			drop(sh, k, b)
		default:
			soonest = min(soonest, b.exp)
		}
	}
	sh.soonest = soonest
}
