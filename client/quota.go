package client

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Defaults of a Quota.
const (
	// DefaultReportingInterval is how often, by default, a Quota reports
	// its buckets' usage to ratelimitd (ratelimitd's assignments then
	// live twice as long).
	DefaultReportingInterval = 5 * time.Second
	// DefaultQuotaMaxBuckets is how many buckets a Quota holds at most by
	// default.
	DefaultQuotaMaxBuckets = 10000
	// QuotaIdleIntervals is how many reporting intervals a bucket may go
	// unused before the Quota forgets it.
	QuotaIdleIntervals = 3
)

// ErrNoAssignment is Decision.Err when a Quota's failure policy decided:
// a bucket had no assignment in force (none received yet, or expired
// because ratelimitd could not be reached), or the Quota held as many
// buckets as it may.
var ErrNoAssignment = errors.New("client: quota: no assignment in force from ratelimitd")

// quotaConfig is what the QuotaOptions set (nil, 0: the defaults).
type quotaConfig struct {
	interval   time.Duration
	failClosed bool
	maxBuckets int
	logger     *slog.Logger
	now        func() time.Time // nil: time.Now, and the coarse clock
}

// WithReportingInterval sets how often a Quota reports its buckets' use
// to ratelimitd (whose assignments then live twice as long, at least
// 1 s). 0 means DefaultReportingInterval; a negative d makes NewQuota
// fail.
func WithReportingInterval(d time.Duration) QuotaOption {
	return quotaOption(func(c *quotaConfig) { c.interval = d })
}

// WithMaxBuckets bounds the buckets a Quota holds; past it, new buckets
// are decided by the failure policy. 0 means DefaultQuotaMaxBuckets; a
// negative n makes NewQuota fail.
func WithMaxBuckets(n int) QuotaOption {
	return quotaOption(func(c *quotaConfig) { c.maxBuckets = n })
}

// A Quota decides locally whether work may proceed, under assignments
// that ratelimitd sends over the Rate Limit Quota Service (RLQS), the
// protocol of Envoy's rate_limit_quota filter. Each descriptor is a
// bucket, whose entries are the bucket id; the Quota reports each
// bucket's use to ratelimitd over one stream, and ratelimitd answers with
// the bucket's assignment: a token bucket (this client's share of the
// rule's limit), allow all, or deny all, for a time to live.
//
// See the package documentation for when to use a Quota rather than a
// Client. A Quota is safe for concurrent use by multiple goroutines; it
// runs goroutines (the reporting stream's, and a coarse clock's), which
// Close ends.
type Quota struct {
	conn       grpc.ClientConnInterface
	domain     string
	interval   time.Duration
	failClosed bool
	maxBuckets int64
	logger     *slog.Logger
	now        func() time.Time
	manual     bool // now is WithClock's
	epoch      time.Time

	seed    maphash.Seed
	shards  [quotaShards]quotaShard
	buckets atomic.Int64 // held
	wake    chan struct{}
	failOpn atomic.Uint64

	// The coarse clock: see quota_clock.go.
	clock     atomic.Int64
	clockOn   atomic.Bool // clock is ticking
	clockUsed atomic.Bool // since the last tick
	clockWake chan struct{}
	clockDone chan struct{}

	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

var _ RateLimiter = (*Quota)(nil)

// NewQuota returns a Quota deciding under the rules of domain (1 to 256
// bytes of UTF-8), speaking RLQS to ratelimitd over conn, which the
// caller keeps and closes after Close. By default it fails open, reports
// every DefaultReportingInterval and holds up to DefaultQuotaMaxBuckets
// buckets: see WithFailClosed, WithReportingInterval, WithMaxBuckets,
// WithLogger and WithClock. It starts its goroutines: the reporting
// stream's, which connects in the background (until a bucket's first
// assignment arrives, the failure policy decides it), and, without
// WithClock, the coarse clock's. The error is non-nil only for a bad
// argument: a nil conn, a malformed domain, a negative interval or bound.
func NewQuota(conn grpc.ClientConnInterface, domain string, opts ...QuotaOption) (*Quota, error) {
	var c quotaConfig
	for _, opt := range opts {
		opt.applyQuota(&c)
	}
	switch {
	case conn == nil:
		return nil, errors.New("client: NewQuota: conn is nil")
	case domain == "" || len(domain) > maxDomain || !utf8.ValidString(domain):
		return nil, fmt.Errorf("client: NewQuota: domain %q: want 1 to %d bytes of UTF-8", domain, maxDomain)
	case c.interval < 0:
		return nil, fmt.Errorf("client: NewQuota: WithReportingInterval(%v) is negative", c.interval)
	case c.maxBuckets < 0:
		return nil, fmt.Errorf("client: NewQuota: WithMaxBuckets(%d) is negative", c.maxBuckets)
	}
	q := &Quota{
		conn:       conn,
		domain:     domain,
		interval:   cmp.Or(c.interval, DefaultReportingInterval),
		failClosed: c.failClosed,
		maxBuckets: int64(cmp.Or(c.maxBuckets, DefaultQuotaMaxBuckets)),
		logger:     c.logger,
		now:        c.now,
		seed:       maphash.MakeSeed(),
		wake:       make(chan struct{}, 1),
		done:       make(chan struct{}),
		clockWake:  make(chan struct{}, 1),
		clockDone:  make(chan struct{}),
	}
	q.manual = q.now != nil
	if !q.manual {
		q.now = time.Now
	}
	if q.logger == nil {
		q.logger = slog.Default()
	}
	q.epoch = q.now()
	ctx, cancel := context.WithCancel(context.Background())
	q.cancel = cancel
	go q.run(ctx)
	if !q.manual {
		go q.runClock(ctx)
	} else {
		close(q.clockDone)
	}
	return q, nil
}

// Close ends the reporting stream and the Quota's goroutines, and returns
// when they have ended. Assignments received still decide until they expire;
// new buckets get the failure policy. Close always returns nil.
func (q *Quota) Close() error {
	q.closeOnce.Do(func() {
		q.cancel()
		<-q.done
		<-q.clockDone
	})
	return nil
}

// Domain returns the domain whose rules decide.
func (q *Quota) Domain() string { return q.domain }

// FailOpens reports how many calls the failure policy allowed (a bucket
// without an assignment in force, or past MaxBuckets) when failing open.
func (q *Quota) FailOpens() uint64 { return q.failOpn.Load() }

// Allow reports whether the work described by descriptors may proceed:
// only if each descriptor's bucket admits it, and a refused call consumes
// nothing. A descriptor takes Hits tokens (0 means 1) from a token
// bucket, a CheckOnly one none; the counts reported are of hits. Allow
// neither blocks nor calls ratelimitd, and allocates nothing for up to 8
// descriptors (but on a bucket's first use). The error is non-nil, and
// the answer false, only for a malformed call (codes.InvalidArgument): no
// descriptors, over 64 of them, a descriptor without entries or over 32,
// with an empty key, a key twice, or a LimitOverride (which RLQS cannot
// carry).
//
// A refusal that takes tokens from one bucket and then finds another
// empty gives them back: for that moment, a concurrent call may find the
// first bucket emptier than it is.
func (q *Quota) Allow(descriptors ...Descriptor) (bool, error) {
	v, err := q.decide(descriptors)
	return v.allowed, err
}

// ShouldRateLimit is Allow as a RateLimiter, for the interceptors,
// Limiter and HTTPMiddleware: domain must be the Quota's. The Decision
// has no Headers; when refused by a token bucket, its RetryAfter is the
// time until that bucket's next fill, and Statuses mark the descriptor
// that refused. When the failure policy decided, Decision.Err is
// ErrNoAssignment. ctx is not used: the decision is local. An assignment
// without a time to live holds until replaced.
func (q *Quota) ShouldRateLimit(_ context.Context, domain string, descriptors ...Descriptor) (Decision, error) {
	if domain != q.domain {
		return Decision{}, status.Errorf(codes.InvalidArgument, "client: quota: domain %q is not the Quota's %q", domain, q.domain)
	}
	v, err := q.decide(descriptors)
	if err != nil {
		return Decision{}, err
	}
	d := Decision{Allowed: v.allowed}
	switch {
	case v.policy:
		d.Err = ErrNoAssignment
	case !v.allowed:
		d.RetryAfter = v.retry
		d.Statuses = make([]Status, len(descriptors))
		d.Statuses[v.refused] = Status{OverLimit: true, RetryAfter: v.retry}
	}
	return d, nil
}

// quotaSmall is how many descriptors a call may have without allocating.
const quotaSmall = 8

// verdict is the outcome of one call.
type verdict struct {
	allowed bool
	// policy is set when the failure policy decided: it refused, or it
	// allowed a descriptor and nothing refused.
	policy  bool
	refused int           // the descriptor that refused
	retry   time.Duration // until the refusing token bucket's next fill
}

// slot is one descriptor of a call being decided.
type slot struct {
	b    *quotaBucket // nil past MaxBuckets
	tb   *tokens      // the token bucket taken from, to refund
	hits uint64
}

// decide decides a call: it looks up every descriptor's bucket (creating
// it, and so reporting it, even when an earlier one refuses), then takes
// from each in order, refunding what it took when one refuses.
func (q *Quota) decide(ds []Descriptor) (verdict, error) {
	if err := checkQuota(ds); err != nil {
		return verdict{}, err
	}
	now := q.nanos()
	var small [quotaSmall]slot
	slots := small[:0]
	if len(ds) > quotaSmall {
		slots = make([]slot, 0, len(ds))
	}
	for _, d := range ds {
		s := slot{b: q.lookup(d.Entries, now), hits: max(d.Hits, 1)}
		if d.CheckOnly {
			s.hits = 0
		}
		slots = append(slots, s)
	}
	v := verdict{allowed: true}
	for i := range slots {
		if ok := q.take(&slots[i], now, &v); !ok {
			v.allowed, v.refused = false, i
			for j := range i {
				if tb := slots[j].tb; tb != nil {
					tb.refund(slots[j].hits)
				}
			}
			break
		}
	}
	for _, s := range slots {
		if s.b != nil && !s.b.used.Load() { // read first: writes are dearer
			s.b.used.Store(true)
		}
		switch {
		case s.b == nil:
		case v.allowed:
			s.b.allowed.Add(s.hits)
		default:
			s.b.denied.Add(s.hits)
		}
	}
	if v.policy && v.allowed {
		q.failOpn.Add(1)
	}
	return v, nil
}

// take decides one slot, noting in v whether the failure policy decided
// and, when a token bucket refuses, until when.
func (q *Quota) take(s *slot, now int64, v *verdict) bool {
	for {
		var a *assigned
		if s.b != nil {
			a = s.b.assignment(now)
		}
		switch {
		case a == nil:
			v.policy = true
			return !q.failClosed
		case a.kind == allowAll:
			return true
		case a.kind == denyAll:
			v.policy = false
			return false
		}
		ok, retry, stale := a.tb.take(s.hits, now)
		switch {
		case stale: // replaced meanwhile: decide on the new assignment
			if s.b.a.Load() == a { // stored right after its token bucket
				runtime.Gosched()
			}
			continue
		case ok:
			s.tb = a.tb
		default:
			v.policy, v.retry = false, retry
		}
		return ok
	}
}

// checkQuota returns InvalidArgument for a malformed call.
func checkQuota(ds []Descriptor) error {
	if len(ds) == 0 || len(ds) > maxDescriptors {
		return status.Errorf(codes.InvalidArgument, "client: quota: %d descriptors, want 1 to %d", len(ds), maxDescriptors)
	}
	for i, d := range ds {
		if len(d.Entries) == 0 || len(d.Entries) > maxEntries {
			return status.Errorf(codes.InvalidArgument, "client: quota: descriptor %d has %d entries, want 1 to %d", i, len(d.Entries), maxEntries)
		}
		if d.Limit != nil {
			return status.Errorf(codes.InvalidArgument, "client: quota: descriptor %d has a limit override, which a Quota cannot apply", i)
		}
		for j, e := range d.Entries {
			if e.Key == "" {
				return status.Errorf(codes.InvalidArgument, "client: quota: descriptor %d entry %d has an empty key", i, j)
			}
			for k := range j {
				if d.Entries[k].Key == e.Key {
					return status.Errorf(codes.InvalidArgument, "client: quota: descriptor %d repeats key %q (entries %d and %d): a bucket id is a map", i, e.Key, k, j)
				}
			}
		}
	}
	return nil
}

// quotaShards is the number of shards of the bucket map.
const quotaShards = 64

// quotaShard is one shard of the bucket map: readers load its map
// without locking; writers, under mu, replace it by a modified copy.
type quotaShard struct {
	mu sync.Mutex
	m  atomic.Pointer[map[uint64][]*quotaBucket]
}

// quotaBucket is one bucket: a descriptor's entries, as a bucket id.
type quotaBucket struct {
	hash    uint64
	entries []Entry // no key twice
	a       atomic.Pointer[assigned]
	// What every call writes, on a cache line of its own (the fields
	// above are read by every call), and one line only: the state of the
	// assignment's token bucket (see tokens) and the counts since the
	// last report.
	_               [64]byte
	state           atomic.Uint64
	allowed, denied atomic.Uint64
	used            atomic.Bool // since the last report, CheckOnly calls too
	_               [36]byte

	// Owned by the reporting goroutine.
	reportedOn uint64 // the stream generation of its last report
	lastReport int64  // nanos of its last report, or its creation
	idle       int    // intervals without use
}

// matches reports whether the bucket's id is entries (as a map: in any
// order; entries repeats no key).
func (b *quotaBucket) matches(entries []Entry) bool {
	if len(entries) != len(b.entries) {
		return false
	}
next:
	for _, e := range entries {
		for _, f := range b.entries {
			if f.Key == e.Key {
				if f.Value != e.Value {
					return false
				}
				continue next
			}
		}
		return false
	}
	return true
}

// assignment returns the bucket's assignment in force at now, nil if none.
func (b *quotaBucket) assignment(now int64) *assigned {
	a := b.a.Load()
	if a == nil || now >= a.expires {
		return nil
	}
	return a
}

// assigned is an assignment received: immutable but for its token bucket.
type assigned struct {
	kind    int
	expires int64   // nanos; math.MaxInt64 for none
	tb      *tokens // for a tokenBucket
}

// tokens is a token bucket: perFill tokens every fill nanoseconds from
// base, up to max. Its state is one word, updated by compare-and-swap, on
// the line of its bucket's counters so that a call writes one cache line:
// from the top, a tag (tagBits) naming the token bucket the word is
// for, the number of the last fill (counted from base, wrapping), and the
// tokens held (the low bits, as many as max needs, at most 32). A new
// assignment that changes the bucket's parameters starts the word afresh
// under the next tag: a call then under way on the old token bucket finds
// the tag changed, changes nothing and decides on the new assignment (it
// would have to be held up through 2^tagBits replacements of its bucket's
// parameters to find its own tag again). Fills are counted right while
// calls come less than half the fill numbers apart: 2^23 fills when max
// needs 32 bits (2.3 hours for fills of a millisecond), 2^39 when it needs
// 16; a bucket unused for QuotaIdleIntervals is forgotten long before.
type tokens struct {
	max, perFill uint64 // max < 2^32
	fill, base   int64
	tag          uint64         // this token bucket's tag, in place (<< 64-tagBits)
	shift        uint           // the tokens' bits; the fill number's start
	fills        uint64         // the mask of fill numbers (unshifted)
	state        *atomic.Uint64 // its bucket's
}

// tagBits is the width of the tag in a token bucket's state.
const tagBits = 8

// newTokens returns a token bucket holding n tokens at now, whose state is
// state, tagged next after the token bucket whose state state held. Only
// one goroutine may replace a bucket's token bucket (the reporter's).
func newTokens(a action, n uint64, now int64, state *atomic.Uint64) *tokens {
	t := &tokens{max: min(a.maxTokens, math.MaxUint32), perFill: a.perFill, fill: int64(a.fillInterval), base: now, state: state}
	t.shift = uint(bits.Len64(t.max))
	t.fills = 1<<(64-tagBits-t.shift) - 1
	t.tag = (state.Load()>>(64-tagBits) + 1) << (64 - tagBits)
	t.state.Store(t.tag | min(n, t.max))
	return t
}

// owns reports whether state s is t's: has t's tag.
func (t *tokens) owns(s uint64) bool { return s&^(math.MaxUint64>>tagBits) == t.tag }

// fillAt returns the number of the fill at now (wrapping).
func (t *tokens) fillAt(now int64) uint64 { return uint64(max(now-t.base, 0)/t.fill) & t.fills }

// filled returns the tokens of state s, which is t's, after the fills up
// to fill number at, and the state's new fill number.
func (t *tokens) filled(s, at uint64) (uint64, uint64) {
	n, last := s&(1<<t.shift-1), s>>t.shift&t.fills
	d := (at - last) & t.fills
	if d == 0 || d > t.fills>>1 { // another call counted a later fill
		return n, last
	}
	if n < t.max && t.perFill != 0 {
		if need := (t.max - n + t.perFill - 1) / t.perFill; d >= need {
			n = t.max
		} else {
			n += d * t.perFill
		}
	}
	return n, at
}

// take takes n tokens at now if the bucket holds them, after adding the
// fills due; else it returns the time until the next fill. It reports
// stale, taking nothing, when another token bucket replaced t: the caller
// decides on the bucket's assignment now in force.
func (t *tokens) take(n uint64, now int64) (ok bool, retry time.Duration, stale bool) {
	at := t.fillAt(now)
	for {
		s := t.state.Load()
		if !t.owns(s) {
			return false, 0, true
		}
		held, last := t.filled(s, at)
		if held < n {
			next := t.base + (int64(now-t.base)/t.fill+1)*t.fill
			return false, time.Duration(next - now), false
		}
		if t.state.CompareAndSwap(s, t.tag|last<<t.shift|(held-n)) {
			return true, 0, false
		}
	}
}

// refund gives back n tokens taken, unless another token bucket replaced
// t meanwhile (which started from t's tokens, with or without those).
func (t *tokens) refund(n uint64) {
	mask := uint64(1)<<t.shift - 1
	for {
		s := t.state.Load()
		if !t.owns(s) {
			return
		}
		held := min(t.max, s&mask+n)
		if t.state.CompareAndSwap(s, s&^mask|held) {
			return
		}
	}
}

// level returns the tokens held, without the fills due: none once
// another token bucket replaced t.
func (t *tokens) level() uint64 {
	s := t.state.Load()
	if !t.owns(s) {
		return 0
	}
	return s & (1<<t.shift - 1)
}

// hashEntries hashes entries as a map: the same whatever their order. It
// hashes them in the order of their keys (insertion-sorted: a descriptor
// has few entries), each key and value after their lengths: copied into
// one buffer and hashed at once when short, else streamed.
func hashEntries(seed maphash.Seed, entries []Entry) uint64 {
	var order [maxEntries]uint8
	n := min(len(entries), maxEntries)
	size := 0
	for i := range n {
		j := i
		for ; j > 0 && entries[order[j-1]].Key > entries[i].Key; j-- {
			order[j] = order[j-1]
		}
		order[j] = uint8(i)
		size += 8 + len(entries[i].Key) + len(entries[i].Value)
	}
	var buf [128]byte
	if size <= len(buf) {
		b := buf[:0]
		for _, i := range order[:n] {
			e := entries[i]
			b = binary.LittleEndian.AppendUint32(b, uint32(len(e.Key)))
			b = binary.LittleEndian.AppendUint32(b, uint32(len(e.Value)))
			b = append(b, e.Key...)
			b = append(b, e.Value...)
		}
		return maphash.Bytes(seed, b)
	}
	var h maphash.Hash
	h.SetSeed(seed)
	for _, i := range order[:n] {
		e := entries[i]
		_, _ = h.Write(binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(buf[:0], uint32(len(e.Key))), uint32(len(e.Value))))
		_, _ = h.WriteString(e.Key)
		_, _ = h.WriteString(e.Value)
	}
	return h.Sum64()
}

// shard returns the shard of hash h.
func (q *Quota) shard(h uint64) *quotaShard { return &q.shards[h>>58] }

// find returns the bucket whose id is entries, nil if none.
func (q *Quota) find(h uint64, entries []Entry) *quotaBucket {
	m := q.shard(h).m.Load()
	if m == nil {
		return nil
	}
	for _, b := range (*m)[h] {
		if b.matches(entries) {
			return b
		}
	}
	return nil
}

// lookup returns the bucket whose id is entries, creating it (and waking
// the reporter, which reports it at once) when there is none; nil past
// MaxBuckets.
func (q *Quota) lookup(entries []Entry, now int64) *quotaBucket {
	h := hashEntries(q.seed, entries)
	if b := q.find(h, entries); b != nil {
		return b
	}
	b := q.insert(h, entries, now)
	if b != nil {
		select {
		case q.wake <- struct{}{}:
		default: // already woken
		}
	}
	return b
}

// insert adds a bucket for entries unless one was added meanwhile, and
// returns it; nil past MaxBuckets.
func (q *Quota) insert(h uint64, entries []Entry, now int64) *quotaBucket {
	s := q.shard(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := q.find(h, entries); b != nil {
		return b
	}
	if q.buckets.Load() >= q.maxBuckets {
		return nil
	}
	b := &quotaBucket{hash: h, entries: append([]Entry(nil), entries...), lastReport: now}
	s.replace(h, func(bs []*quotaBucket) []*quotaBucket { return append(bs, b) })
	q.buckets.Add(1)
	return b
}

// remove forgets b, unless it is gone already.
func (q *Quota) remove(b *quotaBucket) {
	s := q.shard(b.hash)
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.m.Load()
	if m == nil {
		return
	}
	i := -1
	for j, x := range (*m)[b.hash] {
		if x == b {
			i = j
		}
	}
	if i < 0 {
		return
	}
	s.replace(b.hash, func(bs []*quotaBucket) []*quotaBucket {
		return append(bs[:i:i], bs[i+1:]...)
	})
	q.buckets.Add(-1)
}

// replace stores a copy of the shard's map in which the buckets of hash h
// are f's result (f gets a copy it may append to). Callers hold s.mu.
func (s *quotaShard) replace(h uint64, f func([]*quotaBucket) []*quotaBucket) {
	old := s.m.Load()
	m := make(map[uint64][]*quotaBucket, 1)
	if old != nil {
		m = make(map[uint64][]*quotaBucket, len(*old)+1)
		for k, v := range *old {
			m[k] = v
		}
	}
	bs := f(append([]*quotaBucket(nil), m[h]...))
	if len(bs) == 0 {
		delete(m, h)
	} else {
		m[h] = bs
	}
	s.m.Store(&m)
}

// each calls f with every bucket held.
func (q *Quota) each(f func(b *quotaBucket)) {
	for i := range q.shards {
		m := q.shards[i].m.Load()
		if m == nil {
			continue
		}
		for _, bs := range *m {
			for _, b := range bs {
				f(b)
			}
		}
	}
}

// apply applies one action received to its bucket, if still held.
func (q *Quota) apply(a action, now int64) {
	b := q.find(hashEntries(q.seed, a.entries), a.entries)
	switch {
	case b == nil:
		return
	case a.abandon:
		q.remove(b)
		return
	case a.unknown:
		b.a.Store(nil)
		return
	}
	n := &assigned{kind: a.kind, expires: math.MaxInt64}
	if a.lifetime > 0 {
		n.expires = now + int64(a.lifetime)
	}
	if a.kind == tokenBucket { // its state first: see Quota.take
		n.tb = nextTokens(b.a.Load(), a, now, &b.state)
	}
	b.a.Store(n)
}

// nextTokens returns the token bucket of action a, whose bucket's
// assignment was old: old's own when a's parameters are the same (a
// renewal) and its fill count far from wrapping, else a new one holding
// old's tokens (none over a's max), or full without one.
func nextTokens(old *assigned, a action, now int64, state *atomic.Uint64) *tokens {
	if old == nil || old.tb == nil {
		return newTokens(a, a.maxTokens, now, state)
	}
	t := old.tb
	if t.max == min(a.maxTokens, math.MaxUint32) && t.perFill == a.perFill && t.fill == int64(a.fillInterval) && uint64(max(now-t.base, 0)/t.fill) < t.fills>>2 {
		return t
	}
	return newTokens(a, t.level(), now, state)
}
