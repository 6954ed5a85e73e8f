package fairshare

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
)

// DefaultSyncInterval is how often a Pool exchanges its buckets' entries
// with the store when PoolOptions.Interval is zero.
const DefaultSyncInterval = time.Second

// PoolOptions configures a Pool.
type PoolOptions struct {
	// Tracker configures the Pool's Tracker, the book of this replica's
	// clients.
	Tracker Options
	// Store is where the replicas sharing the limits meet.
	Store backend.ShareStore
	// Replica names this replica in the store: unique among the replicas
	// sharing it.
	Replica string
	// Interval is how often every bucket is exchanged with the store;
	// zero means DefaultSyncInterval.
	Interval time.Duration
	// Timeout bounds one exchange; zero means Interval.
	Timeout time.Duration
	// Changed, when set, is called after an exchange moved a bucket's
	// grant or the other replicas' demands on it, so that the caller
	// reassigns its clients' shares. It must not call back into the Pool
	// while it runs (it runs on the Pool's goroutine); waking another
	// goroutine is fine.
	Changed func(bucket string)
	// Observe, when set, is called after each exchange with the store,
	// with its error.
	Observe func(err error)
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
// clients of all the replicas; a replica whose clients' demand grows waits
// for the others to ask for less, which they do at the exchange after the
// one that shows them its demand, so shares settle within three exchanges
// of a change.
//
// Every bucket is exchanged each Interval while this replica has a live
// client on it, so a bucket costs one store operation per replica per
// Interval, whatever its request rate. A bucket new to the replica, or
// whose limit changed, is exchanged at once (Exchange, or the next turn of
// the loop). A bucket that loses its last client has its entry removed, so
// that the others may take its grant.
//
// When the store cannot be reached, the replica keeps to the grants it
// holds until their entries expire in the store, when the others may take
// them: Lapsed then reports true, and the caller answers as its failure
// mode says.
type Pool struct {
	*Tracker
	opts PoolOptions
	log  *slog.Logger
	now  func() time.Time

	// xsem serializes exchanges, so that the last grant applied is the
	// store's; a caller waits for it no longer than its context allows.
	xsem chan struct{}

	mu      sync.Mutex
	entries map[string]*entry
	running bool          // the loop runs
	kick    chan struct{} // wakes the loop before its tick
	stop    chan struct{} // closed by Close
	done    chan struct{} // closed by the loop when it returns; nil before it ran
	closed  bool
	failing bool // the last exchange failed: logged once per outage
}

// entry is the Pool's state of one bucket.
type entry struct {
	limit float64
	// until is when the replica's entry in the store expires: its grant
	// lapses then, unless an exchange renews it.
	until   time.Time
	granted float64
	others  []float64
	local   int  // this replica's live clients at the last exchange
	dirty   bool // exchange at the next turn: its limit or clients changed
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
	p := &Pool{
		Tracker: NewTracker(opts.Tracker),
		opts:    opts,
		log:     opts.Logger,
		now:     opts.Now,
		entries: make(map[string]*entry),
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		xsem:    make(chan struct{}, 1),
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

// Exchange exchanges, in one store call within the Timeout (waiting for
// an exchange under way included), the buckets of needs whose grant is
// not in force for their TTL, or was given for another limit, so that
// the clients that just reported on them get shares that count the other
// replicas'. The others are left to the loop, and cost no store call. The
// store's error is returned; the buckets then stay Lapsed.
func (p *Pool) Exchange(ctx context.Context, needs []Need) error {
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
	ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	return p.exchange(ctx, buckets)
}

// reapply gives the grant of e back to the Tracker's bucket if the Tracker
// holds it afresh (it dropped it when its clients expired). p.mu must be
// held.
func (p *Pool) reapply(bucket string, e *entry) {
	if !math.IsNaN(e.granted) && !p.Tracker.pooled(bucket) {
		p.Tracker.SetPool(bucket, e.others, e.granted)
	}
}

// Share is Tracker.Share; a limit other than the one last exchanged for
// the bucket has it exchanged again at once.
func (p *Pool) Share(bucket, client string, limit float64, now time.Time) (float64, bool) {
	p.mu.Lock()
	if e := p.entries[bucket]; e != nil && e.limit != limit {
		e.limit, e.dirty = limit, true
		p.wake()
	}
	p.mu.Unlock()
	return p.Tracker.Share(bucket, client, limit, now)
}

// Forget is Tracker.Forget; the buckets it changed are exchanged at the
// loop's next turn, which comes at once: those left without a client in
// force are removed from the store.
func (p *Pool) Forget(client string, now time.Time) {
	buckets := p.Tracker.bucketsOf(client)
	p.Tracker.Forget(client, now)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range buckets {
		if e := p.entries[b]; e != nil {
			e.dirty = true
		}
	}
	p.wake()
}

// Lapsed reports whether bucket has no grant in force for the next ttl
// after now: never exchanged, or its entry in the store expires before
// then (the store has been out of reach). An assignment made now and valid
// for ttl must then not come from the grant.
func (p *Pool) Lapsed(bucket string, now time.Time, ttl time.Duration) bool {
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

// live reports whether e holds a grant in force at t.
func (e *entry) live(t time.Time) bool {
	return !math.IsNaN(e.granted) && !t.After(e.until)
}

// Close stops the loop and waits for it. The entries stay in the store
// until they expire: the clients keep their assignments that long.
func (p *Pool) Close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.stop)
	}
	done := p.done
	p.mu.Unlock()
	if done != nil {
		<-done
	}
}

// ensureLoop starts the loop if it is not running. p.mu must be held.
func (p *Pool) ensureLoop() {
	if p.running || p.closed || len(p.entries) == 0 {
		return
	}
	p.running = true
	p.done = make(chan struct{})
	go p.loop(p.done)
}

// wake has the loop take a turn now. p.mu must be held.
func (p *Pool) wake() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// loop exchanges every bucket each Interval, and at once when woken; it
// returns when Close is called, or when no bucket is left.
func (p *Pool) loop(done chan struct{}) {
	defer close(done)
	ctx := context.Background() // the loop ends by p.stop
	tick := time.NewTicker(p.opts.Interval)
	defer tick.Stop()
	for {
		all := false
		select {
		case <-p.stop:
			p.exit()
			return
		case <-tick.C:
			all = true
		case <-p.kick:
		}
		if !p.turn(ctx, all) {
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

// turn exchanges every bucket (all) or those dirty or gone, and reports
// whether the loop should go on: false when no bucket is left, the loop
// then being marked stopped.
func (p *Pool) turn(ctx context.Context, all bool) bool {
	p.mu.Lock()
	buckets := make([]string, 0, len(p.entries))
	for b, e := range p.entries {
		if all || e.dirty {
			buckets = append(buckets, b)
		}
	}
	p.mu.Unlock()
	if len(buckets) > 0 {
		ctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
		_ = p.exchange(ctx, buckets) // logged there; the grants lapse in time
		cancel()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.entries) == 0 {
		p.running = false
		return false
	}
	return true
}

// exchange exchanges buckets with the store in one call, applies the
// grants, and calls Changed for the buckets that moved.
func (p *Pool) exchange(ctx context.Context, buckets []string) error {
	select {
	case p.xsem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("waiting for the exchange under way: %w", ctx.Err())
	}
	defer func() { <-p.xsem }()
	now := p.now()
	reqs := make([]backend.ShareRequest, 0, len(buckets))
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
		r := backend.ShareRequest{Bucket: b, Replica: p.opts.Replica, Limit: e.limit}
		want, demands, until, ok := p.Tracker.Want(b, e.limit, now, nil)
		if ok && until.After(now) {
			r.Want, r.Demands, r.TTL = want, demands, until.Sub(now)
		} else {
			// No share in force: the entry goes, whether or not the store
			// hears it (it then expires there on its own).
			delete(p.entries, b)
		}
		reqs = append(reqs, r)
	}
	p.mu.Unlock()
	if len(reqs) == 0 {
		return nil
	}
	res := make([]backend.ShareResult, len(reqs))
	err := p.opts.Store.ExchangeShares(ctx, reqs, res)
	if p.opts.Observe != nil {
		p.opts.Observe(err)
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
		if !p.failing {
			p.log.Warn("RLQS shares: store exchange failed; buckets keep their grants until they expire", "buckets", len(reqs), "err", err)
		}
		p.failing = true
		p.mu.Unlock()
		return err
	}
	if p.failing {
		p.log.Info("RLQS shares: store exchange works again")
		p.failing = false
	}
	var moved []string
	for i, r := range reqs {
		e := p.entries[r.Bucket]
		if e == nil || r.TTL <= 0 {
			continue
		}
		e.dirty = false
		e.until = now.Add(r.TTL)
		g, o := res[i].Granted, res[i].Others
		switch {
		case g != e.granted || !slices.Equal(o, e.others):
			e.granted, e.others = g, append(e.others[:0], o...)
			p.Tracker.SetPool(r.Bucket, e.others, e.granted)
			moved = append(moved, r.Bucket)
		case len(r.Demands) != e.local:
			// A client came or went: the others' shares moved.
			moved = append(moved, r.Bucket)
			p.reapply(r.Bucket, e)
		default:
			p.reapply(r.Bucket, e)
		}
		e.local = len(r.Demands)
	}
	p.mu.Unlock()
	if p.opts.Changed != nil {
		for _, b := range moved {
			p.opts.Changed(b)
		}
	}
	return nil
}
