package redis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/ratelimitd/ratelimitd/backend"
)

// Defaults of Options.
const (
	DefaultPrefix           = "ratelimitd:"
	DefaultTimeout          = 50 * time.Millisecond
	DefaultLocalCache       = 65536
	DefaultBreakerFailures  = 3
	DefaultBreakerOpenDelay = 250 * time.Millisecond
)

// clusterCacheHold bounds how long the local cache remembers a refusal on
// Redis Cluster.
const clusterCacheHold = time.Second

// ErrUnavailable is returned, wrapped, when the store does not try Redis
// because its circuit breaker is open after repeated failures. It wraps
// backend.ErrUnavailable.
var ErrUnavailable = fmt.Errorf("redis: circuit breaker open: %w", backend.ErrUnavailable)

// Options configures a Store. The zero value means the defaults.
type Options struct {
	// Prefix starts every key the store writes. Empty means
	// DefaultPrefix; it must not contain '{' (Cluster hash tags).
	Prefix string
	// Timeout bounds each Redis call, on the store's own context: a call
	// that outlasts it fails, and counts for its node's breaker, whether
	// or not its caller still waits. A caller waits at most Timeout, or
	// until its own context ends. Zero means DefaultTimeout.
	Timeout time.Duration
	// LocalCache is how many over-limit counters the store remembers
	// locally (see Store). Zero means DefaultLocalCache; negative, none.
	LocalCache int
	// BreakerFailures is how many consecutive failures of one Redis node
	// open its circuit breaker: calls to it then fail at once with
	// ErrUnavailable, until the store's own probe of the node (a PING)
	// succeeds. Only the store's failures count, never a caller's
	// deadline or cancellation (see breaker.go). Zero means
	// DefaultBreakerFailures.
	BreakerFailures int
	// BreakerOpenDelay is how long a breaker stays open before the store
	// probes its node, and the pause between probes. Zero means
	// DefaultBreakerOpenDelay.
	BreakerOpenDelay time.Duration
	// Now, when set, is the clock the scripts decide on instead of Redis
	// TIME, and the local cache's clock: for tests on a manual clock.
	Now func() time.Time
	// Logger receives breaker state changes. Nil means slog.Default().
	Logger *slog.Logger
	// NoBatch decides each call in a script run of its own (one per slot
	// on Cluster), instead of batching concurrent calls into one script
	// run (see batch.go, and cross.go on Cluster).
	NoBatch bool
	// PerSecond, when set, is a second store that keeps the counters of
	// the requests whose limit's Window is one second (bans aside: they
	// touch no counter), as envoyproxy/ratelimit's REDIS_PERSECOND does;
	// the store keeps the others. See persecond.go. The store owns
	// PerSecond: its Close closes PerSecond (not PerSecond's client).
	// PerSecond keeps its own Prefix, Timeout, breakers and batches; its
	// LocalCache is not used: the store's own covers every call. It must
	// have no PerSecond of its own.
	PerSecond *Store
}

// Store is a backend.Store and a backend.ShareStore on Redis.
//
// A call refused by Redis is remembered in a small local cache until the
// earliest retry_after of its over-limit counters: the same call again
// (same keys, limits no lower, no consume_when_over) is refused without a
// Redis round trip, reporting what Redis last said. Entries are keyed with
// the limit, so a changed limit takes effect at once. On Cluster it
// remembers a refusal for one second at most, and so it does with a
// PerSecond store.
//
// With Options.PerSecond, the counters of one-second limits are kept in a
// second Redis (see persecond.go); Store then reports both stores'
// breakers, state and refunds, and keeps RLQS shares in its own Redis.
type Store struct {
	client  goredis.UniversalClient
	cluster *goredis.ClusterClient // nil unless client is one
	addr    string                 // standalone Redis's address, for breaker probes
	prefix  string
	timeout time.Duration
	now     func() time.Time // nil: Redis TIME
	cache   *cache
	log     *slog.Logger

	breakerSettings gobreaker.Settings
	openDelay       time.Duration
	mu              sync.Mutex
	breakers        map[string]*node // by name (see breaker.go); requires mu

	// reached is set once Redis has answered (see reach): until then
	// State reports "unreached".
	reached atomic.Bool

	// evalOnly is set once a node has refused FCALL (Redis before 7.0):
	// scripts then run with EVALSHA.
	evalOnly atomic.Bool

	refunds        atomic.Uint64
	fastRuns       atomic.Uint64 // script runs on take.lua's lean path (opFast), for tests
	refundFailures atomic.Uint64
	elsewhere      atomic.Uint64 // calls a cross run's node did not serve, for tests
	batch          *batcher      // nil on Cluster or with NoBatch
	noBatch        bool          // Options.NoBatch
	cross          crossBatchers // on Cluster, the batchers of its masters
	// perSecond keeps the counters of one-second limits (Options.PerSecond),
	// or nil.
	perSecond *Store
	// notes is what the local cache has applied of the reset notes (see
	// applyNotes).
	notes resetNotes
	// heavySlots holds a token per heavy call in flight beside the
	// batches (see heavy): at most half the connection pool, so that
	// heavy calls cannot take every connection from the batches. Nil
	// without batches.
	heavySlots chan struct{}

	base     context.Context // the store's own, for its probes; Close cancels it
	cancel   context.CancelFunc
	closeMu  sync.RWMutex
	closed   bool           // requires closeMu
	inflight sync.WaitGroup // Redis calls whose caller may be gone, and probes; Add requires closeMu and !closed
}

var _ backend.Store = (*Store)(nil)

// New returns a Store on client (a *goredis.Client, *goredis.FailoverClient
// or *goredis.ClusterClient). The Store does not own client: Close the
// client after the Store.
func New(client goredis.UniversalClient, opts Options) (*Store, error) {
	if strings.Contains(opts.Prefix, "{") {
		return nil, fmt.Errorf("redis: key prefix %q must not contain '{'", opts.Prefix)
	}
	if ps := opts.PerSecond; ps != nil && ps.perSecond != nil {
		return nil, errors.New("redis: a per-second store must not have a per-second store of its own")
	}
	s := &Store{
		client:    client,
		prefix:    cmp.Or(opts.Prefix, DefaultPrefix),
		timeout:   cmp.Or(opts.Timeout, DefaultTimeout),
		now:       opts.Now,
		log:       opts.Logger,
		breakers:  make(map[string]*node),
		perSecond: opts.PerSecond,
		noBatch:   opts.NoBatch,
	}
	s.base, s.cancel = context.WithCancel(context.Background())
	if s.log == nil {
		s.log = slog.Default()
	}
	s.cluster, _ = client.(*goredis.ClusterClient)
	// go-redis names a Sentinel client's address "FailoverClient": its
	// master has no fixed address to probe.
	if c, ok := client.(*goredis.Client); ok && c.Options().Addr != "FailoverClient" {
		s.addr = c.Options().Addr
	}
	if s.cluster == nil && !opts.NoBatch {
		s.batch = newBatcher(s, nil)
		pool := 10 * runtime.GOMAXPROCS(0) // go-redis's default
		if c, ok := client.(*goredis.Client); ok && c.Options().PoolSize > 0 {
			pool = c.Options().PoolSize
		}
		s.heavySlots = make(chan struct{}, max(pool/2, 1))
	}
	clock := opts.Now
	if clock == nil {
		clock = time.Now
	}
	if n := cmp.Or(opts.LocalCache, DefaultLocalCache); n > 0 {
		s.cache = newCache(n, clock)
		if s.cluster != nil || s.perSecond != nil {
			// A call over several Cluster slots, or over both stores,
			// may refuse on hits that another call gives back a moment
			// later (see takeSides): such a refusal must not be
			// remembered for long.
			s.cache.maxHold = clusterCacheHold
		}
	}
	failures := uint32(cmp.Or(opts.BreakerFailures, DefaultBreakerFailures))
	s.openDelay = cmp.Or(opts.BreakerOpenDelay, DefaultBreakerOpenDelay)
	s.breakerSettings = gobreaker.Settings{
		MaxRequests:  1,
		Timeout:      s.openDelay,
		IsSuccessful: nodeAnswered,
		ReadyToTrip:  func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
		OnStateChange: func(name string, from, to gobreaker.State) {
			// An outage opens the breaker once, then flaps between open
			// and half-open at every probe: only its start and its end
			// are worth a line at the default level.
			level := slog.LevelDebug
			switch {
			case from == gobreaker.StateClosed:
				level = slog.LevelWarn
			case to == gobreaker.StateClosed:
				level = slog.LevelInfo
			}
			s.log.Log(context.Background(), level, "redis circuit breaker", "node", name, "from", from.String(), "to", to.String())
		},
	}
	if s.begin() {
		go s.reach()
	}
	return s, nil
}

// Close releases the store's own resources, after the Redis calls in
// flight have ended (within the store's timeout); it does not close the
// client. Take fails with backend.ErrClosed afterwards.
func (s *Store) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return nil
	}
	s.closed = true
	s.cancel()
	s.closeMu.Unlock()
	if s.batch != nil {
		s.batch.close(backend.ErrClosed)
	}
	s.closeCross()
	s.inflight.Wait()
	if s.perSecond != nil {
		return s.perSecond.Close()
	}
	return nil
}

// begin registers a goroutine of the store's in inflight, unless the
// store is closed.
func (s *Store) begin() bool {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return false
	}
	s.inflight.Add(1)
	return true
}

// LocalCacheHits reports how many requests the local over-limit cache
// answered over their limit, without Redis: each request of a call the
// cache refused that was over in the refusal it remembers (as
// envoyproxy/ratelimit counts its local cache's hits, per descriptor).
func (s *Store) LocalCacheHits() uint64 {
	if s.cache == nil {
		return 0
	}
	return s.cache.hits.Load()
}

// LocalCacheMisses reports how many requests, with the local cache on,
// it did not answer over their limit: every request of a call that went
// to Redis, and each request within its limit in a call the cache
// refused.
func (s *Store) LocalCacheMisses() uint64 {
	if s.cache == nil {
		return 0
	}
	return s.cache.misses.Load()
}

// LocalCacheEntries reports how many counters' results the local cache
// remembers.
func (s *Store) LocalCacheEntries() int64 {
	if s.cache == nil {
		return 0
	}
	return s.cache.size.Load()
}

// Refunds reports how many calls gave back hits that an admitted part
// took (a Cluster slot, or one of the two stores with PerSecond), because
// another part refused; the PerSecond store's own included.
func (s *Store) Refunds() uint64 {
	n := s.refunds.Load()
	if s.perSecond != nil {
		n += s.perSecond.Refunds()
	}
	return n
}

// RefundFailures reports how many refunds of a part failed (after
// retries within the store's timeout): the hits of a refused call that
// stay counted on one part; the PerSecond store's own included.
func (s *Store) RefundFailures() uint64 {
	n := s.refundFailures.Load()
	if s.perSecond != nil {
		n += s.perSecond.RefundFailures()
	}
	return n
}

// Take implements backend.Store.
//
// The call's Redis work runs on a context of the store's: the caller's
// values, not its cancellation, and the store's Timeout. Take returns at
// the caller's deadline or cancellation if that comes first, and the
// Redis call goes on without it, so that a Redis slower than the timeout
// still counts for its node's breaker and a caller's short deadline never
// does (see breaker.go). Hits of a call whose caller has gone may still be
// counted, as for any call cut short in flight.
func (s *Store) Take(ctx context.Context, reqs []backend.Request, res []backend.Result) error {
	if len(res) != len(reqs) {
		return fmt.Errorf("redis: take: %d results for %d requests", len(res), len(reqs))
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redis: take: %w", err)
	}
	if len(reqs) == 0 {
		return nil
	}
	if s.cache != nil {
		if s.cache.answer(reqs, res) {
			return nil
		}
		s.cache.misses.Add(uint64(len(reqs)))
	}
	var err error
	switch s.route(reqs) {
	case onMain:
		err = s.decide(ctx, reqs, res)
	case onPerSecond:
		err = s.perSecond.decide(ctx, reqs, res)
		if err != nil {
			err = s.sideError(s.perSecond, err)
		}
	default:
		err = s.detach(ctx, reqs, res, true)
	}
	if err != nil {
		return fmt.Errorf("redis: take: %w", err)
	}
	if s.cache != nil {
		s.cache.remember(reqs, res)
	}
	return nil
}

// decide decides a call on s's own counters, without the local cache:
// batched, or in a script run of its own.
func (s *Store) decide(ctx context.Context, reqs []backend.Request, res []backend.Result) error {
	if s.batch != nil && !heavy(reqs) {
		return s.batch.take(ctx, time.Now().Add(s.timeout), &pending{call: s.encode(reqs), res: res})
	}
	if s.crossing() {
		if done, err := s.decideCross(ctx, reqs, res); done {
			return err
		}
	}
	return s.detach(ctx, reqs, res, false)
}

// detach decides the call in a script run of its own (or one per slot on
// Cluster; with across, in parts on both s and its PerSecond store, see
// takeAcross) off the caller's goroutine (see offload). The goroutine
// works on copies of reqs and res: the caller may reuse them once Take
// has returned.
func (s *Store) detach(ctx context.Context, reqs []backend.Request, res []backend.Result, across bool) error {
	stores := []*Store{s}
	if across {
		stores = append(stores, s.perSecond)
	}
	own := slices.Clone(reqs)
	out := make([]backend.Result, len(res))
	_, err := offload(ctx, s, stores, func() (struct{}, error) {
		if across {
			return struct{}{}, s.takeAcross(context.WithoutCancel(ctx), own, out)
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
		defer cancel()
		if s.cluster != nil {
			return struct{}{}, s.takeCluster(rctx, own, out)
		}
		return struct{}{}, s.takeOne(rctx, own, out)
	})
	if err == nil {
		copy(res, out)
	}
	return err
}

// offload runs work on a goroutine, which holds a heavy slot (see
// acquireHeavy) of each of stores and counts among their Redis calls in
// flight (see begin), and waits for it or for ctx. When ctx ends first,
// offload returns ctx's error and work goes on to its end, under its own
// timeout: a Redis slower than that timeout still counts for its node's
// breaker, a caller's short deadline never does (see breaker.go). work
// must therefore use no memory the caller may reuse, and a context
// without the caller's cancellation. s is the store the call came to, for
// errors (see sideError).
func offload[T any](ctx context.Context, s *Store, stores []*Store, work func() (T, error)) (T, error) {
	var zero T
	release := func(n int) {
		for _, st := range stores[:n] {
			st.releaseHeavy()
		}
	}
	for n, st := range stores {
		if err := st.acquireHeavy(ctx); err != nil {
			release(n)
			return zero, s.sideError(st, err)
		}
	}
	for n, st := range stores {
		if !st.begin() {
			for _, done := range stores[:n] {
				done.inflight.Done()
			}
			release(len(stores))
			return zero, backend.ErrClosed
		}
	}
	type outcome struct {
		v   T
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		defer func() {
			release(len(stores))
			for _, st := range stores {
				st.inflight.Done()
			}
		}()
		v, err := work()
		done <- outcome{v, err}
	}()
	select {
	case o := <-done:
		return o.v, o.err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// ErrHeavyBusy is returned, wrapped, when a heavy call finds as many
// heavy calls in flight as the store allows, for the store's timeout.
// It wraps backend.ErrUnavailable.
var ErrHeavyBusy = fmt.Errorf("redis: too many heavy calls in flight: %w", backend.ErrUnavailable)

// acquireHeavy takes a slot for a heavy call beside the batches, waiting
// for one up to the store's timeout or ctx; it does nothing without
// batches.
func (s *Store) acquireHeavy(ctx context.Context) error {
	if s.heavySlots == nil {
		return nil
	}
	select {
	case s.heavySlots <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(s.timeout)
	defer t.Stop()
	select {
	case s.heavySlots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return ErrHeavyBusy
	}
}

func (s *Store) releaseHeavy() {
	if s.heavySlots != nil {
		<-s.heavySlots
	}
}

// takeOne decides the call with one script on a standalone or Sentinel
// Redis; ctx is the store's.
func (s *Store) takeOne(ctx context.Context, reqs []backend.Request, res []backend.Result) error {
	c := getCall()
	defer c.free()
	c.header(opTake, s.nowMicros(), 1)
	c.appendCall(s.prefix, reqs, nil, "", nil, nil)
	c.seal()
	//nolint:contextcheck // a probe that guard may start runs on the store's context, never a call's
	return s.guard("redis", func() error {
		reply, err := s.run(ctx, c)
		if err != nil {
			return err
		}
		return decode(reply, opTake, res, nil, nil)
	})
}

// nowMicros is the scripts' clock: the test clock's reading in µs, or 0,
// which has them read Redis TIME.
func (s *Store) nowMicros() int64 {
	if s.now == nil {
		return 0
	}
	return backend.Micros(s.now())
}
