package fairshare

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
)

// DefaultSyncInterval is how often a Pool looks for buckets to exchange
// with the store when PoolOptions.Interval is zero.
const DefaultSyncInterval = time.Second

// DefaultChunk bounds the buckets of one store call when PoolOptions.Chunk
// is zero.
const DefaultChunk = 256

// What moves a bucket's entry enough to be exchanged again (see
// entry.changed): a client's demand by more than demandMoves of itself
// and minMove of the limit, or the rate asked for by more than minMove of
// the limit. Demands are measured over a reporting interval and noisy;
// smaller moves change no share by much, and wait for the entry's renewal.
const (
	demandMoves = 0.10
	minMove     = 0.01
)

// PoolOptions configures a Pool.
type PoolOptions struct {
	// Tracker configures the Pool's Tracker, the book of this replica's
	// clients.
	Tracker Options
	// Store is where the replicas sharing the limits meet; nil divides
	// each limit among this replica's clients only (the Pool is then its
	// Tracker, and never exchanges).
	Store backend.ShareStore
	// Replica names this replica in the store: unique among the replicas
	// sharing it.
	Replica string
	// Interval is how often the Pool looks for buckets to exchange: those
	// whose entries changed, or are about to lapse; zero means
	// DefaultSyncInterval.
	Interval time.Duration
	// Timeout bounds each store call; zero means Interval.
	Timeout time.Duration
	// Chunk bounds the buckets of one store call; zero means
	// DefaultChunk. An exchange of more buckets makes several calls, one
	// after another, each with its own Timeout.
	Chunk int
	// Observe, when set, is called after each store call, with the number
	// of buckets it exchanged and its error, and for each call that
	// failed before it reached the store (the call under way took its
	// whole Timeout, or the context ended), with that error. It must only
	// count.
	Observe func(buckets int, err error)
	// Logger receives the Pool's logs; nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Pool divides each bucket's limit among the clients of every replica
// sharing a backend.ShareStore, max-min fair by their demands.
//
// Each replica holds an entry per bucket in the store: the demands of its
// own clients, and the rate the store granted it. A replica asks for what
// its clients get in the allocation of the limit over all the demands it
// knows (Tracker.Want); the store grants it that, or what the other
// replicas' grants leave, and hands back their demands (SetPool). Its
// clients' shares are their part of that allocation, scaled down to fit
// the grant. Since the store grants atomically, the grants in force never
// add up to more than the limit, so neither do the shares of all the
// clients of all the replicas.
//
// A bucket is exchanged when something changed, never merely because it
// is held, so that the store's work grows with what changes, not with what
// is held:
//
//   - at once, when it is new to the replica or its limit changed
//     (Exchange, or Share with another limit);
//   - at the Pool's next turn (every Interval), when its clients' demands
//     moved (by more than demandMoves) since the replica last published
//     them, or a client came or went;
//   - at the next turn, when the store tells that another replica changed
//     its entry on the bucket (ShareStore.WatchShares): the replica learns
//     the others' demands, and asks for less, or finds more left;
//   - before its entry in the store would lapse, if a client still needs
//     its grant then (the entry lives as long as the shares handed out
//     from it: Tracker.Want), at least two Intervals and a Timeout ahead;
//   - never again once no share handed out from its grant is in force:
//     the entry is removed from the store (if it has not expired there).
//
// A replica whose clients' demand grows waits for the others to ask for
// less, which they do at the turn after the store tells them of it; so
// shares settle within three turns of a change, as when every bucket was
// exchanged at every turn. A store call carries at most Chunk buckets, the ones
// nearest to lapsing first, each call with its own Timeout, so that one
// slow call fails only its own buckets: in a turn of the loop, those after
// it are left for the next turn, when the nearest to lapsing go first.
//
// When the store cannot be reached, the replica keeps to the grants it
// holds until their entries expire in the store, when the others may take
// them: Lapsed then reports true, and the caller answers as its failure
// mode says. Every failed call is counted (PoolOptions.Observe) and
// logged, once per outage.
//
// The caller learns which buckets an exchange moved (their grant, or the
// other replicas' demands: its clients' shares changed) by receiving from
// Moved and taking them with TakeMoved; the Pool never calls back into it.
//
// Without a store, a Pool is its Tracker: Exchange does nothing, and no
// grant ever lapses.
type Pool struct {
	*Tracker
	opts PoolOptions
	log  *slog.Logger
	now  func() time.Time

	// xsem serializes store calls, so that the last grant applied is the
	// store's; a caller waits for it no longer than its context allows.
	xsem chan struct{}

	mu      sync.Mutex
	entries map[string]*entry
	pending map[string]struct{} // buckets to look at in the next turn
	checks  checks              // when to look at a bucket at the latest
	running bool                // the loop runs
	kick    chan struct{}       // wakes the loop before its tick
	stop    chan struct{}       // closed by Close
	loops   sync.WaitGroup      // the loops running: one, and one ending at most
	closed  bool
	failing bool // the last store call failed: logged once per outage

	// moved holds the buckets that exchanges moved since TakeMoved last
	// took them (at most one per entry); movedc signals it is not empty.
	moved  map[string]struct{}
	movedc chan struct{}

	// Hooks of the package's tests: manual stops the loop's ticker (the
	// tests turn the Pool themselves); watching, when set, is closed once
	// the loop watches the store.
	manual   bool
	watching chan struct{}
}

// entry is the Pool's state of one bucket.
type entry struct {
	limit float64
	// until is when the replica's entry in the store expires: its grant
	// lapses then, unless an exchange renews it.
	until   time.Time
	granted float64
	others  []float64
	// want and demands are what the store holds of the replica's entry:
	// the rate asked for and the clients' demands, sorted.
	want    float64
	demands []float64
	// forced has the bucket exchanged at the next turn whatever moved:
	// its limit changed, another replica changed its entry.
	forced bool
	// othersExpire is when the first of the other replicas' entries
	// expires, as of the last exchange (zero for none): their grant is
	// free then, and nobody tells (the replica may be gone).
	othersExpire time.Time
	// check is when a check of the bucket is due in Pool.checks, zero for
	// none.
	check time.Time
}

// NewPool returns a Pool over opts.Store. Its loop runs while it holds
// buckets; Close stops it.
func NewPool(opts PoolOptions) *Pool {
	if opts.Interval <= 0 {
		opts.Interval = DefaultSyncInterval
	}
	if opts.Timeout <= 0 {
		opts.Timeout = opts.Interval
	}
	if opts.Chunk <= 0 {
		opts.Chunk = DefaultChunk
	}
	p := &Pool{
		Tracker: NewTracker(opts.Tracker),
		opts:    opts,
		log:     opts.Logger,
		now:     opts.Now,
		entries: make(map[string]*entry),
		pending: make(map[string]struct{}),
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		xsem:    make(chan struct{}, 1),
		moved:   make(map[string]struct{}),
		movedc:  make(chan struct{}, 1),
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.now == nil {
		p.now = time.Now
	}
	return p
}

// Need names a bucket, its limit in requests per second, and how long
// the assignment about to be made from its grant lives.
type Need struct {
	Bucket string
	Limit  float64
	TTL    time.Duration
}

// Exchange exchanges at once, within the Timeout per store call (waiting
// for a call under way included), the buckets of needs whose grant is not
// in force for their TTL, or was given for another limit, so that the
// clients that just reported on them get shares that count the other
// replicas'. The others are left to the loop, and cost no store call. The
// store's first error is returned (each failed call is also counted and
// logged); the buckets it failed then stay Lapsed. Without a store it
// does nothing.
func (p *Pool) Exchange(ctx context.Context, needs []Need) error {
	if p.opts.Store == nil {
		return nil
	}
	now := p.now()
	var buckets []string
	p.mu.Lock()
	for _, n := range needs {
		e := p.entries[n.Bucket]
		if e == nil {
			e = &entry{limit: n.Limit, granted: math.NaN()}
			p.entries[n.Bucket] = e
		}
		switch {
		case e.limit != n.Limit || !e.live(now.Add(n.TTL)):
			e.limit = n.Limit
			if !slices.Contains(buckets, n.Bucket) {
				buckets = append(buckets, n.Bucket)
			}
		default:
			p.reapply(n.Bucket, e)
		}
	}
	p.ensureLoop() //nolint:contextcheck // the loop outlives the call that starts it: Close ends it
	p.mu.Unlock()
	if len(buckets) == 0 {
		return nil
	}
	return p.exchange(ctx, buckets, true, false)
}

// reapply gives the grant of e back to the Tracker's bucket if the Tracker
// holds it afresh (it dropped it when its clients expired). p.mu must be
// held.
func (p *Pool) reapply(bucket string, e *entry) {
	if !math.IsNaN(e.granted) && !p.Tracker.pooled(bucket) {
		p.Tracker.SetPool(bucket, e.others, e.granted)
	}
}

// ReportFor is Tracker.ReportFor; the bucket is looked at in the next
// turn, and exchanged if its client's demand moved.
func (p *Pool) ReportFor(bucket, client string, allowed, denied uint64, keep time.Duration, now time.Time) bool {
	if !p.Tracker.ReportFor(bucket, client, allowed, denied, keep, now) {
		return false
	}
	if p.opts.Store == nil {
		return true // nothing to exchange: the Tracker alone, unlocked
	}
	p.mu.Lock()
	if p.entries[bucket] != nil {
		p.pending[bucket] = struct{}{}
	}
	p.mu.Unlock()
	return true
}

// Share is Tracker.Share; a limit other than the one last exchanged for
// the bucket has it exchanged again at once.
func (p *Pool) Share(bucket, client string, limit float64, now time.Time) (float64, bool) {
	if p.opts.Store == nil {
		return p.Tracker.Share(bucket, client, limit, now)
	}
	p.mu.Lock()
	if e := p.entries[bucket]; e != nil && e.limit != limit {
		e.limit = limit
		p.force(bucket, e)
	}
	p.mu.Unlock()
	return p.Tracker.Share(bucket, client, limit, now)
}

// Forget is Tracker.Forget; the buckets it changed are looked at in the
// loop's next turn, which comes at once: those whose clients changed (a
// client whose share had expired is gone) are exchanged, those left
// without a client in force are removed from the store. A client whose
// share is still in force stays counted, and changes nothing yet.
func (p *Pool) Forget(client string, now time.Time) {
	if p.opts.Store == nil {
		p.Tracker.Forget(client, now)
		return
	}
	buckets := p.Tracker.bucketsOf(client)
	p.Tracker.Forget(client, now)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range buckets {
		if p.entries[b] != nil {
			p.pending[b] = struct{}{}
		}
	}
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// ForgetOn is Tracker.ForgetOn; the bucket is looked at in the next turn,
// and its entry exchanged if its clients changed.
func (p *Pool) ForgetOn(bucket, client string, now time.Time) {
	p.Tracker.ForgetOn(bucket, client, now)
	if p.opts.Store == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.entries[bucket] != nil {
		p.pending[bucket] = struct{}{}
	}
}

// notified is the Pool's WatchShares callback: another replica changed
// its entry on bucket, or on any bucket (""). The bucket is exchanged at
// the loop's next turn, not at once: a replica that gave some of its grant
// back has pushed the smaller shares to its clients by the time the others
// take it up, as when every bucket was exchanged each Interval.
func (p *Pool) notified(bucket string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if bucket == "" {
		for b, e := range p.entries {
			p.mark(b, e)
		}
		if p.watching != nil {
			close(p.watching)
			p.watching = nil
		}
		return
	}
	if e := p.entries[bucket]; e != nil {
		p.mark(bucket, e)
	}
}

// mark has bucket, whose entry is e, exchanged at the loop's next turn.
// p.mu must be held.
func (p *Pool) mark(bucket string, e *entry) {
	e.forced = true
	p.pending[bucket] = struct{}{}
}

// force marks bucket, whose entry is e, and has the loop's next turn come
// at once. p.mu must be held.
func (p *Pool) force(bucket string, e *entry) {
	p.mark(bucket, e)
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Lapsed reports whether bucket has no grant in force for the next ttl
// after now: never exchanged, or its entry in the store expires before
// then (the store has been out of reach). An assignment made now and valid
// for ttl must then not come from the grant.
func (p *Pool) Lapsed(bucket string, now time.Time, ttl time.Duration) bool {
	if p.opts.Store == nil {
		return false // no grant to lapse: the limit is this replica's
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.entries[bucket]
	return e == nil || !e.live(now.Add(ttl))
}

// Grant returns the rate granted to this replica on bucket and how many
// clients of other replicas share it, as of the last exchange; ok is false
// before a grant.
func (p *Pool) Grant(bucket string) (granted float64, others int, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.entries[bucket]
	if e == nil || math.IsNaN(e.granted) {
		return 0, 0, false
	}
	return e.granted, len(e.others), true
}

// Replica returns this replica's name in the store.
func (p *Pool) Replica() string { return p.opts.Replica }

// Shared reports whether the Pool shares its limits through a store.
func (p *Pool) Shared() bool { return p.opts.Store != nil }

// Moved returns a channel that receives when exchanges have moved some
// buckets (their grant, or the other replicas' demands on them) since
// TakeMoved last took them. The channel is the Pool's, never closed: a
// receiver ends by its own signal.
func (p *Pool) Moved() <-chan struct{} { return p.movedc }

// TakeMoved returns the buckets that exchanges moved since its last call,
// appended to dst, and forgets them.
func (p *Pool) TakeMoved(dst []string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for b := range p.moved {
		dst = append(dst, b)
	}
	clear(p.moved)
	return dst
}

// live reports whether e holds a grant in force at t.
func (e *entry) live(t time.Time) bool {
	return !math.IsNaN(e.granted) && !t.After(e.until)
}

// changed reports whether a replica asking for want with its clients'
// demands (sorted) has moved enough from what the store holds of it to
// exchange again (see demandMoves).
func (e *entry) changed(want float64, demands []float64) bool {
	if len(demands) != len(e.demands) || math.Abs(want-e.want) > minMove*e.limit {
		return true
	}
	for i, d := range demands {
		old := e.demands[i]
		if math.IsInf(d, 0) || math.IsInf(old, 0) {
			if d != old {
				return true
			}
			continue
		}
		if diff := math.Abs(d - old); diff > demandMoves*max(d, old) && diff > minMove*e.limit {
			return true
		}
	}
	return false
}

// margin is how long before its entry in the store lapses a bucket whose
// grant is still needed, for shares that live keep, is renewed: two turns
// of the loop and a store call's Timeout, so that one failed call still
// leaves time for another; at most half of keep, so that a renewal,
// which makes the entry stand keep longer than the shares need, is not
// due again at once.
func (p *Pool) margin(keep time.Duration) time.Duration {
	return min(2*p.opts.Interval+p.opts.Timeout, keep/2)
}

// schedule has bucket, whose entry is e, looked at by at, unless a check
// is due before. p.mu must be held.
func (p *Pool) schedule(bucket string, e *entry, at time.Time) {
	if !e.check.IsZero() && !at.Before(e.check) {
		return
	}
	e.check = at
	heap.Push(&p.checks, check{at: at, bucket: bucket})
}

// Close stops the loop and waits for it. The entries stay in the store
// until they expire: the clients keep their assignments that long.
func (p *Pool) Close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.stop)
	}
	p.mu.Unlock()
	p.loops.Wait() // a loop that was ending when another started included
}

// ensureLoop starts the loop if it is not running. p.mu must be held.
func (p *Pool) ensureLoop() {
	if p.running || p.closed || len(p.entries) == 0 {
		return
	}
	p.running = true
	p.loops.Add(1)
	go p.loop()
}

// loop takes a turn each Interval, and at once when woken, while it
// watches the store for other replicas' changes; it returns when Close
// is called, or when no bucket is left.
func (p *Pool) loop() {
	defer p.loops.Done()
	ctx, cancel := context.WithCancel(context.Background()) // the loop ends by p.stop
	watched := make(chan struct{})
	go func() { // ends with the loop, by cancel
		defer close(watched)
		if err := p.opts.Store.WatchShares(ctx, p.opts.Replica, p.notified); err != nil {
			p.log.Warn("RLQS shares: cannot watch the store for other replicas' changes; buckets are exchanged when they change here, or lapse", "err", err)
		}
	}()
	defer func() {
		cancel()
		<-watched
	}()
	var ticks <-chan time.Time
	if !p.manual {
		tick := time.NewTicker(p.opts.Interval)
		defer tick.Stop()
		ticks = tick.C
	}
	for {
		select {
		case <-p.stop:
			p.exit()
			return
		case <-ticks:
		case <-p.kick:
		}
		if !p.turn(ctx, false) {
			return
		}
	}
}

// exit marks the loop stopped.
func (p *Pool) exit() {
	p.mu.Lock()
	p.running = false
	p.mu.Unlock()
}

// turn exchanges the buckets that need it (every bucket, when all), and
// reports whether the loop should go on: false when no bucket is left,
// the loop then being marked stopped. Buckets whose call failed are
// looked at again at the next turn.
func (p *Pool) turn(ctx context.Context, all bool) bool {
	now := p.now()
	p.mu.Lock()
	var buckets []string
	if all {
		buckets = slices.Collect(maps.Keys(p.entries))
		clear(p.pending)
	} else {
		for len(p.checks) > 0 && !p.checks[0].at.After(now) {
			c := heap.Pop(&p.checks).(check)
			if e := p.entries[c.bucket]; e != nil && e.check.Equal(c.at) {
				e.check = time.Time{}
				p.pending[c.bucket] = struct{}{}
			}
		}
		buckets = slices.Collect(maps.Keys(p.pending))
		clear(p.pending)
	}
	// The entries nearest to lapsing first.
	slices.SortFunc(buckets, func(a, b string) int {
		ea, eb := p.entries[a], p.entries[b]
		if ea == nil || eb == nil {
			return 0
		}
		return ea.until.Compare(eb.until)
	})
	p.mu.Unlock()
	failed := false
	if len(buckets) > 0 {
		// Each failed call was counted and logged by exchange, and its
		// buckets left for the next turn.
		failed = p.exchange(ctx, buckets, all, true) != nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.entries) == 0 && !failed {
		p.running = false
		return false
	}
	return true
}

// exchange exchanges buckets with the store, Chunk at a time, each call
// within the Timeout. It sends each bucket that needs it (all of them when
// force): see Pool. A call that fails leaves its buckets for the next
// turn; so do the calls after it when stop is set (the loop's turns: the
// store is slow or down, and the rest, farther from lapsing, can wait),
// while Exchange, for the buckets a report brings, goes on with them.
// Every failed call is counted and logged (see failed). It returns the
// first error.
func (p *Pool) exchange(ctx context.Context, buckets []string, force, stop bool) error {
	var first error
	for i := 0; i < len(buckets); i += p.opts.Chunk {
		if first != nil && stop {
			p.leave(buckets[i:], force)
			break
		}
		chunk := buckets[i:min(i+p.opts.Chunk, len(buckets))]
		err := ctx.Err()
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
			err = p.exchangeChunk(cctx, chunk, force)
			cancel()
		}
		if err != nil {
			p.leave(chunk, force)
			p.failed(len(chunk), err)
			if first == nil {
				first = err
			}
		}
	}
	return first
}

// leave has the buckets looked at again at the next turn, forced if they
// were (their exchange failed).
func (p *Pool) leave(buckets []string, forced bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range buckets {
		if e := p.entries[b]; e != nil {
			p.pending[b] = struct{}{}
			e.forced = e.forced || forced
		}
	}
}

// failed counts, and logs once per outage, a call of n buckets that
// failed with err; a store call that failed was observed already.
func (p *Pool) failed(n int, err error) {
	var store *storeError
	if !errors.As(err, &store) && p.opts.Observe != nil {
		p.opts.Observe(n, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.failing {
		p.log.Warn("RLQS shares: store exchange failed; buckets keep their grants until they expire", "buckets", n, "err", err)
	}
	p.failing = true
}

// storeError is the error of a store call, observed when it returned.
type storeError struct{ err error }

func (e *storeError) Error() string { return e.err.Error() }
func (e *storeError) Unwrap() error { return e.err }

// exchangeChunk exchanges the buckets that need it among buckets with the
// store in one call, applies the grants, and records the buckets that
// moved for TakeMoved.
func (p *Pool) exchangeChunk(ctx context.Context, buckets []string, force bool) error {
	select {
	case p.xsem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("waiting for the exchange under way: %w", ctx.Err())
	}
	defer func() { <-p.xsem }()
	now := p.now()
	reqs := make([]backend.ShareRequest, 0, len(buckets))
	keeps := make([]time.Duration, 0, len(buckets))
	// Under p.mu, so that no Exchange finds live the entry of a bucket
	// whose removal is decided here: the entry goes before the store
	// hears of it, and a client reporting meanwhile gets a fresh entry,
	// exchanged after this call.
	p.mu.Lock()
	for _, b := range buckets {
		e := p.entries[b]
		if e == nil {
			continue
		}
		w, ok := p.Tracker.Want(b, e.limit, now, nil)
		slices.Sort(w.Demands)
		// A share may be handed out from the grant, to live Keep, until the
		// entry's renewal is due.
		renew := e.until.Add(-w.Keep - p.margin(w.Keep))
		switch {
		case !ok || !w.Until.After(now):
			// No share in force: the entry goes. The store hears of it
			// if it still holds the entry, so that the others may take
			// its grant at once.
			delete(p.entries, b)
			delete(p.moved, b)
			if e.until.After(now) {
				reqs = append(reqs, backend.ShareRequest{Bucket: b, Replica: p.opts.Replica, Limit: e.limit})
				keeps = append(keeps, 0)
			}
		case force || e.forced || math.IsNaN(e.granted) || e.changed(w.Rate, w.Demands) ||
			(w.Live && !now.Before(renew)) || (!w.Live && !w.Until.Equal(e.until)) ||
			(w.Live && !e.othersExpire.IsZero() && !now.Before(e.othersExpire)):
			// (An entry whose clients all left stands as long as their
			// shares, no longer: without its slack for shares to come.)
			ttl := w.Until.Sub(now)
			if w.Live {
				// One assignment's lifetime more than the shares in force
				// need, so that a bucket whose clients report the same
				// demand is renewed every few of their reports, not at
				// each; a replica that dies holds its grant that much
				// longer.
				ttl += w.Keep
			}
			reqs = append(reqs, backend.ShareRequest{
				Bucket: b, Replica: p.opts.Replica, Limit: e.limit, Want: w.Rate, Demands: w.Demands, TTL: ttl,
			})
			keeps = append(keeps, w.Keep)
		case w.Live:
			p.schedule(b, e, renew)
		default:
			// Its clients have left, and the entry covers the shares
			// they hold: look again when it expires, to drop it.
			p.schedule(b, e, e.until)
		}
	}
	p.mu.Unlock()
	if len(reqs) == 0 {
		return nil
	}
	res := make([]backend.ShareResult, len(reqs))
	err := p.opts.Store.ExchangeShares(ctx, reqs, res)
	if p.opts.Observe != nil {
		p.opts.Observe(len(reqs), err)
	}
	p.mu.Lock()
	if err != nil {
		// The store may have applied the call all the same (an answer
		// lost, one Cluster node of several failing), recording at most
		// Want: a grant above that is no longer the store's.
		for _, r := range reqs {
			if e := p.entries[r.Bucket]; e != nil && r.TTL > 0 && r.Want < e.granted {
				e.granted = r.Want
				p.Tracker.SetPool(r.Bucket, e.others, e.granted)
			}
		}
		p.mu.Unlock()
		return &storeError{err}
	}
	if p.failing {
		p.log.Info("RLQS shares: store exchange works again")
		p.failing = false
	}
	moved := false
	for i, r := range reqs {
		e := p.entries[r.Bucket]
		if e == nil || r.TTL <= 0 {
			continue
		}
		e.forced = false
		e.until = now.Add(r.TTL)
		local := len(e.demands) // this replica's clients at the last exchange
		e.want, e.demands = r.Want, r.Demands
		g, o := res[i].Granted, res[i].Others
		switch {
		case g != e.granted || !slices.Equal(o, e.others):
			e.granted, e.others = g, append(e.others[:0], o...)
			p.Tracker.SetPool(r.Bucket, e.others, e.granted)
			p.moved[r.Bucket], moved = struct{}{}, true
			// What to ask for depends on the others' demands: look again
			// at the next turn.
			p.pending[r.Bucket] = struct{}{}
		case len(r.Demands) != local:
			// A client came or went: the others' shares moved.
			p.moved[r.Bucket], moved = struct{}{}, true
			p.reapply(r.Bucket, e)
		default:
			p.reapply(r.Bucket, e)
		}
		e.othersExpire = time.Time{}
		if d := res[i].OthersExpire; d > 0 {
			e.othersExpire = now.Add(d)
			p.schedule(r.Bucket, e, e.othersExpire)
		}
		// The entry covers every share in force until its clients report
		// again; renew it by then at the latest.
		renew := e.until.Add(-keeps[i] - p.margin(keeps[i]))
		if next := now.Add(p.opts.Interval); renew.Before(next) {
			renew = next
		}
		p.schedule(r.Bucket, e, renew)
	}
	p.mu.Unlock()
	if moved {
		select {
		case p.movedc <- struct{}{}:
		default: // signalled already
		}
	}
	return nil
}

// check is a bucket to look at by a time: see Pool.schedule.
type check struct {
	at     time.Time
	bucket string
}

// checks is a min-heap of checks by time.
type checks []check

func (c checks) Len() int           { return len(c) }
func (c checks) Less(i, j int) bool { return c[i].at.Before(c[j].at) }
func (c checks) Swap(i, j int)      { c[i], c[j] = c[j], c[i] }
func (c *checks) Push(x any)        { *c = append(*c, x.(check)) }
func (c *checks) Pop() any {
	old := *c
	x := old[len(old)-1]
	*c = old[:len(old)-1]
	return x
}
