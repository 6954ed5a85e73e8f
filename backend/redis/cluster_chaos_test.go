package redis_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/backendtest"
	"github.com/ratelimitd/ratelimitd/backend/redis"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// Tests of a Redis Cluster store whose slots move, or whose master fails
// over, while callers use it. They run through the store's public API
// only, on a clock that stands still (windows never turn, buckets never
// refill: every hit taken stays counted) and without the local cache
// (every call goes to Redis), and read the counters afterwards through
// the store too (a call of zero hits), so that they hold whatever the
// store's keys and scripts look like.

// chaosWorkers is how many goroutines call the store at once.
const chaosWorkers = 8

// chaosTimeout is the stores' Timeout: long enough that -race on two
// shared cores does not fail calls on its own, and shorter than the
// cluster's failure detection (redistest.ClusterNodeTimeout), so that a
// call that started before a master died and succeeded was decided by
// that master.
const chaosTimeout = 500 * time.Millisecond

// A chaosDescriptor is one descriptor of a call: its limits, each on a
// counter of the load (indices into chaosLoad.counters), sharing a tag.
type chaosDescriptor []int

// A chaosLoad runs calls on a store from chaosWorkers goroutines, each
// call one of kinds (lists of descriptors), in turn, and records what
// each call did to each counter.
type chaosLoad struct {
	s        *redis.Store
	counters []backend.Request // Hits 1
	kinds    [][]chaosDescriptor

	mu sync.Mutex
	// admitted is, per counter, the hits of the calls that were admitted.
	admitted []uint64 // requires mu
	// maybe is, per counter, the hits of the calls that failed: each may
	// or may not have counted.
	maybe []uint64 // requires mu
	// samples is, per counter, the count that each admitted call of one
	// descriptor of one limit left on it (Capacity - Remaining), and when
	// the call started: with hits of 1 and no refund on the counter, each
	// count is reported once.
	samples [][]chaosSample // requires mu
	// refusedAt is, per counter, when a call of it alone was first refused.
	refusedAt []time.Time // requires mu
	// streak is, per kind, how many of its calls succeeded in a row.
	streak []int // requires mu
	// calls and failed are, per kind, how many calls were made and failed.
	calls, failed []int        // requires mu
	ok            int          // requires mu; calls that succeeded
	refused       int          // requires mu; calls refused, of those
	errs          []chaosError // requires mu; calls that failed

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

type chaosSample struct {
	count uint64
	start time.Time
}

type chaosError struct {
	start, end time.Time
	err        error
}

// newChaosLoad returns a load of kinds on counters; it does not start.
func newChaosLoad(s *redis.Store, counters []backend.Request, kinds [][]chaosDescriptor) *chaosLoad {
	return &chaosLoad{
		s: s, counters: counters, kinds: kinds,
		admitted:  make([]uint64, len(counters)),
		maybe:     make([]uint64, len(counters)),
		samples:   make([][]chaosSample, len(counters)),
		refusedAt: make([]time.Time, len(counters)),
		streak:    make([]int, len(kinds)),
		calls:     make([]int, len(kinds)),
		failed:    make([]int, len(kinds)),
		stop:      make(chan struct{}),
	}
}

// counter returns a one-hit request on a counter of the tag desc with l,
// keyed as the engine keys a descriptor's limit.
func counter(desc string, l backend.Limit) backend.Request {
	k := backend.AppendKeyPart(nil, "chaos")
	k = backend.AppendKeyPart(k, "key")
	k = backend.AppendKeyPart(k, desc)
	return backend.Request{Key: string(backend.AppendKeySuffix(k, l)), Tag: desc, Limit: l, Hits: 1}
}

// call returns the requests of a call of kind k.
func (l *chaosLoad) call(k int) ([]backend.Request, []int) {
	var reqs []backend.Request
	var idx []int
	for g, d := range l.kinds[k] {
		for _, c := range d {
			r := l.counters[c]
			r.Group = g
			reqs = append(reqs, r)
			idx = append(idx, c)
		}
	}
	return reqs, idx
}

// take makes one call of kind k on s and records it.
func (l *chaosLoad) take(s *redis.Store, k int) {
	reqs, idx := l.call(k)
	res := make([]backend.Result, len(reqs))
	start := time.Now()
	err := s.Take(context.Background(), reqs, res)
	end := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls[k]++
	if err != nil {
		l.errs = append(l.errs, chaosError{start: start, end: end, err: err})
		l.failed[k]++
		l.streak[k] = 0
		for _, c := range idx {
			l.maybe[c]++
		}
		return
	}
	l.ok++
	l.streak[k]++
	if backend.Refused(reqs, res) {
		l.refused++
		if len(reqs) == 1 && l.refusedAt[idx[0]].IsZero() {
			l.refusedAt[idx[0]] = end
		}
		return
	}
	for i, c := range idx {
		l.admitted[c]++
		if len(reqs) == 1 {
			l.samples[c] = append(l.samples[c], chaosSample{count: reqs[i].Limit.Capacity() - res[i].Remaining, start: start})
		}
	}
}

// warm makes one call of each of kinds (all if none) on a patient store
// on the same client (dialing, version checks and loading the library
// take longer than chaosTimeout under -race), recorded as any other.
func (l *chaosLoad) warm(t *testing.T, patient *redis.Store, kinds ...int) {
	t.Helper()
	if kinds == nil {
		for k := range l.kinds {
			kinds = append(kinds, k)
		}
	}
	for _, k := range kinds {
		l.take(patient, k)
	}
	if n := l.errors(); n > 0 {
		t.Fatalf("warm-up: %d calls failed: %v", n, l.errs[0].err)
	}
}

// start starts the workers, which call until stopped.
func (l *chaosLoad) start() {
	for w := range chaosWorkers {
		l.wg.Go(func() {
			for i := w; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				l.take(l.s, i%len(l.kinds))
			}
		})
	}
}

// halt stops the workers and waits for their calls to end; it may be
// called again.
func (l *chaosLoad) halt() {
	l.stopOnce.Do(func() { close(l.stop) })
	l.wg.Wait()
}

func (l *chaosLoad) errors() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.errs)
}

// waitFor waits until cond, called with l.mu held, holds, failing t with
// what after within.
func (l *chaosLoad) waitFor(t *testing.T, within time.Duration, what string, cond func() bool) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		l.mu.Lock()
		ok := cond()
		var last error
		if len(l.errs) > 0 {
			last = l.errs[len(l.errs)-1].err
		}
		l.mu.Unlock()
		if ok {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s (last error: %v)", within, what, last)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// recovered waits until every kind of call has succeeded n times in a row,
// failing t after within.
func (l *chaosLoad) recovered(t *testing.T, within time.Duration, n int) time.Time {
	t.Helper()
	return l.waitFor(t, within, fmt.Sprintf("every kind of call succeeding %d times in a row", n), func() bool {
		return slices.Min(l.streak) >= n
	})
}

// count reads a counter's count through the store: a call of zero hits.
func count(t *testing.T, s *redis.Store, r backend.Request) uint64 {
	t.Helper()
	r.Hits, r.Group = 0, 0
	return r.Limit.Capacity() - mustTake(t, s, r)[0].Remaining
}

// errorKinds sums errors by the start of their last cause's message
// ("MOVED", "ASK", "circuit breaker open", ...), for the log.
func errorKinds(errs []chaosError) map[string]int {
	kinds := map[string]int{}
	for _, e := range errs {
		msg := e.err.Error()
		switch {
		case errors.Is(e.err, redis.ErrUnavailable):
			msg = "circuit breaker open"
		case errors.Is(e.err, context.DeadlineExceeded):
			msg = "timeout"
		default:
			msg = strings.TrimPrefix(msg, "redis: take: ")
			if i := strings.IndexAny(msg, " :"); i > 0 {
				msg = msg[:i]
			}
		}
		kinds[msg]++
	}
	return kinds
}

// chaosStore returns a store on the cluster client for these tests, a
// patient one for the warm-up and the final counts, and the log that
// counts the store's breaker changes.
func chaosStore(t *testing.T, url string, opts redis.Options) (*redis.Store, *redis.Store, *breakerLog) {
	t.Helper()
	client := newClient(t, url)
	opts.Now = func() time.Time { return backendtest.T0 }
	opts.LocalCache = -1
	patient := opts
	patient.Timeout = 5 * time.Second
	logs := &breakerLog{}
	opts.Timeout, opts.Logger = chaosTimeout, slog.New(logs)
	return newStore(t, client, opts), newStore(t, client, patient), logs
}

// TestClusterReshardUnderLoad: callers keep deciding while the slots of
// their counters move between masters, three times around: each counter
// admits no more than its limit, and counts exactly the hits of the calls
// admitted, give or take those of calls that failed (each may have
// counted or not); calls fail only while slots move, and all succeed
// again within a few seconds of the last move.
//
// Calls over two and three descriptors in different slots are refused
// when one slot is full, and the other slots give back what they took
// (refunds); one descriptor has two limits, two keys in one slot.
func TestClusterReshardUnderLoad(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	s, patient, logs := chaosStore(t, cl.URL(), redis.Options{Prefix: "reshard:"})
	const limitA, limitB, big = 150, 250, 1_000_000
	counters := []backend.Request{
		counter("a", hourly(limitA)),
		counter("b", backend.Limit{Algorithm: backend.TokenBucket, Requests: limitB, Window: time.Hour}),
		counter("c", hourly(big)),
		counter("c", backend.Limit{Algorithm: backend.TokenBucket, Requests: big, Window: time.Hour}),
		counter("d", hourly(big)),
	}
	a, b, c, d := chaosDescriptor{0}, chaosDescriptor{1}, chaosDescriptor{2, 3}, chaosDescriptor{4}
	load := newChaosLoad(s, counters, [][]chaosDescriptor{{a}, {b}, {c, a}, {a, b, c}, {d}})
	const still = 4 // the kind of call on d, whose slot stays where it is

	// The slots that hold the counters, found by their keys: d's first.
	load.warm(t, patient, still)
	dKeys := cl.Keys(t, "reshard:*")
	load.warm(t, patient, 0, 1, 2, 3)
	dSlot := -1
	if len(dKeys) == 1 {
		dSlot = cl.Slot(t, dKeys[0])
	}
	var slots []int
	for _, k := range cl.Keys(t, "reshard:*") {
		if slot := cl.Slot(t, k); slot != dSlot && !slices.Contains(slots, slot) {
			slots = append(slots, slot)
		}
	}
	if len(slots) < 2 || dSlot < 0 {
		t.Fatalf("the keys of a, b and c are in slots %v, d's in %d; want several slots, and d's apart", slots, dSlot)
	}

	load.start()
	defer load.halt()
	// Each move comes once the calls have gone on for a while: 30 more
	// successful calls.
	const between = 30
	moves, began := 0, time.Now()
	var moveTime time.Duration
	for range 3 {
		for _, slot := range slots {
			owner := cl.SlotOwner(t, slot)
			to := cl.Nodes[(slices.Index(cl.Nodes, owner)+1)%len(cl.Nodes)]
			m := time.Now()
			cl.MoveSlot(t, slot, to)
			moveTime += time.Since(m)
			moves++
			load.mu.Lock()
			want := load.ok + between
			load.mu.Unlock()
			load.waitFor(t, 10*time.Second, fmt.Sprintf("%d more calls succeeding after move %d", between, moves),
				func() bool { return load.ok >= want })
		}
	}
	ended := time.Now()
	// Every kind of call succeeds again 20 times in a row, and the
	// limited counters are full (calls of them alone refused).
	back := load.recovered(t, 5*time.Second, 20)
	load.waitFor(t, 10*time.Second, "counters a and b refusing", func() bool {
		return !load.refusedAt[0].IsZero() && !load.refusedAt[1].IsZero()
	})
	load.halt()

	l := load
	t.Logf("%d moves of %d slots (%v moving, %v in all), %d workers: %d calls decided (%d refused), %d failed %v; refunds %d, refund failures %d",
		moves, len(slots), moveTime.Round(time.Millisecond), ended.Sub(began).Round(time.Millisecond), chaosWorkers, l.ok, l.refused, len(l.errs), errorKinds(l.errs), s.Refunds(), s.RefundFailures())
	t.Logf("every kind of call succeeded 20 times in a row %v after the last move", back.Sub(ended).Round(time.Millisecond))
	t.Logf("calls on d, whose slot never moved: %d failed of %d; breakers opened %d times",
		l.failed[still], l.calls[still], logs.count()[slog.LevelWarn])
	if s.Refunds() == 0 {
		t.Error("no call was refunded: the calls over several slots prove nothing")
	}
	for _, e := range l.errs {
		if e.start.Before(began) || e.start.After(back) {
			t.Errorf("a call failed outside the moves and the recovery (started %v after the first move, recovered at %v): %v",
				e.start.Sub(began), back.Sub(began), e.err)
		}
	}
	for i, r := range counters {
		got := count(t, patient, r)
		t.Logf("counter %s (%v of %d): admitted %d, counted %d, failed calls on it %d",
			r.Tag, r.Limit.Algorithm, r.Limit.Capacity(), l.admitted[i], got, l.maybe[i])
		if l.admitted[i] > r.Limit.Capacity() {
			t.Errorf("counter %s: %d hits admitted, over its limit %d", r.Tag, l.admitted[i], r.Limit.Capacity())
		}
		// Every admitted hit stays counted (none lost); beyond them only
		// the hits of failed calls and of refunds that failed may count
		// (none counted twice).
		if hi := l.admitted[i] + l.maybe[i] + s.RefundFailures(); got < l.admitted[i] || got > hi {
			t.Errorf("counter %s counts %d, want between the %d hits admitted and %d (those, the failed calls' and the failed refunds')",
				r.Tag, got, l.admitted[i], hi)
		}
	}
}
