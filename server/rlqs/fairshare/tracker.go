package fairshare

import (
	"container/list"
	"math"
	"sync"
	"time"
)

// Defaults for the zero fields of Options.
const (
	// DefaultTTL is how long a client that stops reporting keeps its place:
	// three reports at a 10 s interval.
	DefaultTTL = 30 * time.Second
	// DefaultMaxBuckets bounds the buckets a Tracker holds.
	DefaultMaxBuckets = 100_000
	// DefaultMaxClientsPerBucket bounds the clients one bucket holds.
	DefaultMaxClientsPerBucket = 1024
	// DefaultMaxClients bounds the clients held over all buckets.
	DefaultMaxClients = 500_000
)

// Options configures a Tracker. Zero fields take the Default values.
type Options struct {
	// TTL is how long after its last report a client counts as live. It
	// should be a few reporting intervals.
	TTL time.Duration
	// MaxBuckets bounds the buckets held. A report on a new bucket when
	// the Tracker is full first drops the least recently reported bucket if
	// none of its clients is live any more; otherwise the report is refused.
	MaxBuckets int
	// MaxClientsPerBucket bounds the clients of one bucket. A report from a
	// new client when the bucket is full first drops its expired clients;
	// if none had expired, the report is refused.
	MaxClientsPerBucket int
	// MaxClients bounds the clients held over all buckets, a client on two
	// buckets counting twice. A report from a new client when the Tracker
	// holds that many first drops the least recently reported bucket if it
	// has expired, then the bucket's own expired clients; if that freed
	// nothing, the report is refused.
	MaxClients int
}

// withDefaults returns o with its zero or negative fields set to the defaults.
func (o Options) withDefaults() Options {
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.MaxBuckets <= 0 {
		o.MaxBuckets = DefaultMaxBuckets
	}
	if o.MaxClientsPerBucket <= 0 {
		o.MaxClientsPerBucket = DefaultMaxClientsPerBucket
	}
	if o.MaxClients <= 0 {
		o.MaxClients = DefaultMaxClients
	}
	return o
}

// Tracker keeps, per bucket (a string key the caller builds) and per client
// (a string id), the demand each client reported, as reports arrive, and the
// shares Allocate gives them. A client that stops reporting is forgotten
// after its TTL. Safe for concurrent use. Time comes from the caller (an
// injected clock), never from time.Now inside.
//
// Demand is the rate of the client's latest interval, (allowed+denied) over
// the time since its previous report, unsmoothed: a demand shift that falls
// inside one interval is wholly in the next, so each share reaches the
// max-min share of the new demands by the second report after the shift.
// Noise within an interval is what Headroom absorbs. A client's first report
// on a bucket only starts its first interval (how long it had been counting
// is unknown); until its second report its demand is unknown and counted as
// +Inf, so it gets the same share as the largest clients.
//
// Memory is bounded by Options.MaxBuckets, MaxClientsPerBucket and
// MaxClients: new buckets and clients beyond them are refused, not evicted,
// unless the oldest bucket or some clients have outlived the TTL, so that a
// flood of new bucket ids cannot push out the buckets in use. A bucket costs
// about 550 bytes besides its clients and a client about 200 (with ids of
// about 15 bytes), so the defaults hold at most about 155 MB.
//
// One mutex guards the Tracker; reports come once per interval per client
// and bucket. Share recomputes a bucket's allocation, in
// O(n log n) for its n clients, only after a report, an expiry, a
// forgotten client or a change of limit.
type Tracker struct {
	opts Options

	mu      sync.Mutex
	buckets map[string]*bucket
	// lru orders the buckets by last report, most recent at the front.
	lru *list.List
	// byClient indexes, per client id, the buckets it reported on.
	byClient map[string]map[*bucket]struct{}
	// nclients counts the clients of all buckets.
	nclients int
}

// bucket is one bucket's clients and its cached allocation.
type bucket struct {
	key     string
	elem    *list.Element
	clients []*client
	index   map[string]int
	// until is the latest time any of its clients is kept to.
	until time.Time

	// The allocation cache: valid for cachedLimit while nothing was
	// reported or forgotten, from computedAt to expiresAt (when the
	// earliest live client expires).
	valid       bool
	cachedLimit float64
	computedAt  time.Time
	expiresAt   time.Time

	// The pool's part (see SetPool): the demands of the clients of other
	// replicas, counted in the allocation, and this replica's grant, which
	// the shares of its own clients never exceed in sum; no grant (NaN)
	// leaves them uncapped.
	others []float64
	grant  float64

	// Scratch for allocate: demands and shares of the clients, then of
	// the others; sorted for allocate.
	demands, shares, sorted []float64
}

// client is one client's state on one bucket.
type client struct {
	id string
	// last is the time of its latest report that closed an interval.
	last time.Time
	// until is when it expires: the TTL, or the keep of ReportFor if
	// longer, after its latest report.
	until time.Time
	// assigned is when the share last handed out for it expires at the
	// client: the keep of ReportFor after its latest report (zero before
	// one with a keep).
	assigned time.Time
	keep     time.Duration // of the latest ReportFor with one
	// departed marks a client that Forget dropped while a share handed
	// out to it was still in force: it stays counted until assigned.
	departed bool
	// pending counts requests reported at or before last (a report that
	// came with no time elapsed), to add to the next interval.
	pending float64
	// demand is the latest interval's rate, or +Inf before the second
	// report.
	demand float64
}

// NewTracker returns an empty Tracker with opts, whose zero fields take the
// defaults DefaultTTL, DefaultMaxBuckets and DefaultMaxClientsPerBucket.
func NewTracker(opts Options) *Tracker {
	return &Tracker{
		opts:     opts.withDefaults(),
		buckets:  make(map[string]*bucket),
		lru:      list.New(),
		byClient: make(map[string]map[*bucket]struct{}),
	}
}

// Report records that client used allowed and was denied denied requests on
// bucket since its last report (the RLQS usage report), at now. Demand is
// (allowed+denied) over the time since the client's previous report on the
// bucket. The first report on a bucket only starts the client's first
// interval: its counts are dropped, and its demand is unknown (+Inf) until
// the next. A report at or before the previous one's time (no time elapsed)
// adds its counts to the next interval. Report returns false when it was
// refused because the Tracker or the bucket is full (see Options).
func (t *Tracker) Report(bucket, client string, allowed, denied uint64, now time.Time) bool {
	return t.ReportFor(bucket, client, allowed, denied, 0, now)
}

// ReportFor is Report that also keeps client on bucket for at least keep
// after now, when that is longer than the TTL: a caller that hands out a
// share valid for keep (an assignment's time to live) keeps it counted in
// the others' shares for as long as it is in force.
func (t *Tracker) ReportFor(bucket, client string, allowed, denied uint64, keep time.Duration, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.bucketFor(bucket, now)
	if b == nil {
		return false
	}
	c := t.clientFor(b, client, now)
	if c == nil {
		if len(b.clients) == 0 {
			t.dropBucket(b) // new, or all its clients expired
		}
		return false
	}
	if c.departed { // it came back before its share expired
		c.departed = false
		t.index(c.id, b)
	}
	c.record(float64(allowed)+float64(denied), now)
	if until := now.Add(max(keep, t.opts.TTL)); until.After(c.until) {
		c.until = until
	}
	if keep > 0 {
		c.assigned, c.keep = now.Add(keep), keep
	}
	if c.until.After(b.until) {
		b.until = c.until
	}
	t.lru.MoveToFront(b.elem)
	b.valid = false
	return true
}

// record adds a report of count requests at now to c.
func (c *client) record(count float64, now time.Time) {
	if c.last.IsZero() {
		c.last = now
		c.demand = math.Inf(1)
		return
	}
	elapsed := now.Sub(c.last).Seconds()
	if elapsed <= 0 {
		c.pending += count
		return
	}
	c.demand = (c.pending + count) / elapsed
	c.pending = 0
	c.last = now
}

// bucketFor returns the bucket named key, adding it if there is room (after
// dropping the least recently reported bucket if it has expired at now), or
// nil.
func (t *Tracker) bucketFor(key string, now time.Time) *bucket {
	if b, ok := t.buckets[key]; ok {
		return b
	}
	if len(t.buckets) >= t.opts.MaxBuckets && !t.dropOldest(nil, now) {
		return nil
	}
	b := &bucket{key: key, index: make(map[string]int), grant: math.NaN()}
	b.elem = t.lru.PushFront(b)
	t.buckets[key] = b
	return b
}

// clientFor returns b's client id, adding it if there is room (after
// dropping b's clients expired at now), or nil.
func (t *Tracker) clientFor(b *bucket, id string, now time.Time) *client {
	if i, ok := b.index[id]; ok {
		return b.clients[i]
	}
	if len(b.clients) >= t.opts.MaxClientsPerBucket {
		t.expire(b, now)
		if len(b.clients) >= t.opts.MaxClientsPerBucket {
			return nil
		}
	}
	if t.nclients >= t.opts.MaxClients {
		t.dropOldest(b, now)
		t.expire(b, now)
		if t.nclients >= t.opts.MaxClients {
			return nil
		}
	}
	c := &client{id: id}
	b.index[id] = len(b.clients)
	b.clients = append(b.clients, c)
	t.nclients++
	t.index(id, b)
	return c
}

// index records that client id reports on b.
func (t *Tracker) index(id string, b *bucket) {
	set := t.byClient[id]
	if set == nil {
		set = make(map[*bucket]struct{})
		t.byClient[id] = set
	}
	set[b] = struct{}{}
}

// Share returns client's rate on bucket under limit (requests per second) at
// now, recomputing the bucket's allocation over its live clients (those that
// reported within the TTL) with Allocate when a report, a forgotten client,
// an expiry or another limit changed it.
//
// A client the bucket does not hold (never reported, refused at a bound,
// expired or forgotten) gets no share: ok is false and rate 0, as when the
// bucket is unknown or has no live clients. Only the clients held have
// shares, so the shares handed out sum to at most limit; a client must
// Report (again) before it gets one.
func (t *Tracker) Share(bucket, client string, limit float64, now time.Time) (rate float64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buckets[bucket]
	if b == nil {
		return 0, false
	}
	t.expire(b, now)
	if len(b.clients) == 0 {
		t.dropBucket(b)
		return 0, false
	}
	i, known := b.index[client]
	if !known {
		return 0, false
	}
	b.allocate(limit, now)
	return b.shares[i], true
}

// allocate fills b.shares for limit at now, unless the cache holds them:
// the first len(b.clients) entries are the clients' shares, within the
// grant if the bucket has one.
func (b *bucket) allocate(limit float64, now time.Time) {
	if b.valid && sameLimit(b.cachedLimit, limit) && !now.Before(b.computedAt) && !now.After(b.expiresAt) {
		return
	}
	n := len(b.clients)
	b.targets(limit)
	if !math.IsNaN(b.grant) {
		var sum float64
		for _, s := range b.shares[:n] {
			sum += s
		}
		if sum > b.grant {
			clampSum(b.grant, b.shares[:n])
		}
	}
	b.valid, b.cachedLimit, b.computedAt = true, limit, now
	b.expiresAt = b.earliestUntil()
}

// targets fills b.shares with the allocation of limit over b's clients
// and the others, the clients first, uncapped by the grant.
func (b *bucket) targets(limit float64) {
	n := len(b.clients) + len(b.others)
	b.demands = grow(b.demands, n)
	b.shares = grow(b.shares, n)
	b.sorted = grow(b.sorted, n)
	for i, c := range b.clients {
		b.demands[i] = c.demand
	}
	copy(b.demands[len(b.clients):], b.others)
	allocate(limit, b.demands, b.shares, b.sorted)
}

// earliestUntil returns the earliest expiry among b's clients, which must
// not be empty.
func (b *bucket) earliestUntil() time.Time {
	e := b.clients[0].until
	for _, c := range b.clients[1:] {
		if c.until.Before(e) {
			e = c.until
		}
	}
	return e
}

// sameLimit reports whether a and b are the same limit, NaN included.
func sameLimit(a, b float64) bool {
	return a == b || (math.IsNaN(a) && math.IsNaN(b))
}

// grow returns s resliced to n entries, reallocated if its capacity is less.
func grow(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n, n+n/4)
	}
	return s[:n]
}

// expire drops b's clients expired at now: their last report is more than
// the TTL (or ReportFor's keep) before now.
func (t *Tracker) expire(b *bucket, now time.Time) {
	for i := 0; i < len(b.clients); {
		if now.After(b.clients[i].until) {
			t.removeClient(b, i)
			continue
		}
		i++
	}
}

// removeClient drops b's client at index i, moving the last one into its
// place.
func (t *Tracker) removeClient(b *bucket, i int) {
	c := b.clients[i]
	last := len(b.clients) - 1
	b.clients[i] = b.clients[last]
	b.index[b.clients[i].id] = i
	b.clients[last] = nil
	b.clients = b.clients[:last]
	delete(b.index, c.id)
	t.nclients--
	if set := t.byClient[c.id]; set != nil {
		delete(set, b)
		if len(set) == 0 {
			delete(t.byClient, c.id)
		}
	}
	b.valid = false
}

// dropOldest drops the least recently reported bucket, unless it is keep,
// if it has expired at now (every client it had has expired), and reports
// whether it did.
func (t *Tracker) dropOldest(keep *bucket, now time.Time) bool {
	oldest := t.lru.Back()
	if oldest == nil {
		return false
	}
	b := oldest.Value.(*bucket)
	if b == keep || !now.After(b.until) {
		return false
	}
	t.dropBucket(b)
	return true
}

// dropBucket removes b and its clients.
func (t *Tracker) dropBucket(b *bucket) {
	for len(b.clients) > 0 {
		t.removeClient(b, len(b.clients)-1)
	}
	t.lru.Remove(b.elem)
	delete(t.buckets, b.key)
}

// Forget drops client (its stream ended) from every bucket at now. A
// client whose last share (the keep of ReportFor) is still in force at now
// stays counted, with the demand it last reported, until that share
// expires: the client may enforce it until then, and the others must not
// be handed its part before. A bucket left with no clients is dropped.
func (t *Tracker) Forget(client string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for b := range t.byClient[client] {
		c := b.clients[b.index[client]]
		if c.assigned.After(now) {
			c.departed, c.until = true, c.assigned
			b.valid = false
			continue
		}
		t.removeClient(b, b.index[client])
		if len(b.clients) == 0 {
			t.dropBucket(b)
		}
	}
	delete(t.byClient, client)
}

// ForgetOn drops client from bucket alone at now, as Forget does from
// every bucket: a client whose stream no longer holds the bucket (its
// assignment expired unrenewed, or was taken back). A share still in force
// stays counted until it expires.
func (t *Tracker) ForgetOn(bucket, client string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buckets[bucket]
	if b == nil {
		return
	}
	i, ok := b.index[client]
	if !ok {
		return
	}
	c := b.clients[i]
	if c.assigned.After(now) {
		c.departed, c.until = true, c.assigned
		b.valid = false
		return
	}
	t.removeClient(b, i)
	if len(b.clients) == 0 {
		t.dropBucket(b)
	}
}

// SetPool sets what the other replicas sharing bucket's limit hold: the
// demands of their clients, which the allocation counts beside this
// Tracker's clients, and the rate granted to this replica, which the
// shares of this Tracker's clients never exceed in sum (NaN: no cap). It
// does nothing to a bucket the Tracker does not hold. others is copied.
func (t *Tracker) SetPool(bucket string, others []float64, grant float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buckets[bucket]
	if b == nil {
		return
	}
	b.others = append(b.others[:0], others...)
	b.grant = grant
	b.valid = false
}

// pooled reports whether the Tracker holds bucket with a grant.
func (t *Tracker) pooled(bucket string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buckets[bucket]
	return b != nil && !math.IsNaN(b.grant)
}

// Wanted is what a replica should publish of a bucket: see Tracker.Want.
type Wanted struct {
	// Rate is the sum of the live clients' shares in the allocation of the
	// limit over them and the others of SetPool, uncapped by the grant.
	Rate float64
	// Demands are the live clients' demands.
	Demands []float64
	// Until is how long the replica's grant must stand: until the last
	// share handed out to the clients expires (see ReportFor's keep; for
	// a client reported without one, until it expires), plus Keep, so
	// that a share handed out before the next exchange is covered too;
	// not after now when no share is in force.
	Until time.Time
	// Keep is the longest keep of ReportFor among the clients.
	Keep time.Duration
	// Live tells that some client has not left (see Forget): shares may
	// still be handed out from the grant. Without one, Until only falls.
	Live bool
}

// Want returns what this replica should ask for bucket under limit at now,
// appending the demands to dst; ok is false when the bucket has no live
// client.
func (t *Tracker) Want(bucket string, limit float64, now time.Time, dst []float64) (w Wanted, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w.Demands = dst
	b := t.buckets[bucket]
	if b == nil {
		return w, false
	}
	t.expire(b, now)
	if len(b.clients) == 0 {
		t.dropBucket(b)
		return w, false
	}
	b.targets(limit)
	b.valid = false // b.shares holds the targets, not the capped shares
	for i, c := range b.clients {
		w.Rate += b.shares[i]
		w.Demands = append(w.Demands, c.demand)
		hold := c.assigned
		if hold.IsZero() {
			hold = c.until
		}
		if hold.After(w.Until) {
			w.Until = hold
		}
		w.Keep = max(w.Keep, c.keep)
		w.Live = w.Live || !c.departed
	}
	if w.Until.After(now) {
		w.Until = w.Until.Add(w.Keep)
	}
	w.Rate = min(w.Rate, limit)
	return w, true
}

// bucketsOf returns the keys of the buckets client reported on.
func (t *Tracker) bucketsOf(client string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	keys := make([]string, 0, len(t.byClient[client]))
	for b := range t.byClient[client] {
		keys = append(keys, b.key)
	}
	return keys
}

// Len returns how many buckets, and clients over all buckets, the Tracker
// holds, expired ones included until they are dropped.
func (t *Tracker) Len() (buckets, clients int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.buckets), t.nclients
}
