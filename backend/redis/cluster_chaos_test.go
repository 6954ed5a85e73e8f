package redis_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

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
	// maybe is, per counter, the hits of the calls that failed in a way
	// that may have counted them (see mayHaveCounted).
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
	kind       int
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
		l.errs = append(l.errs, chaosError{start: start, end: end, err: err, kind: k})
		l.failed[k]++
		l.streak[k] = 0
		if mayHaveCounted(err) {
			for _, c := range idx {
				l.maybe[c]++
			}
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

// mayHaveCounted reports whether a failed call may have counted its hits:
// unless each of its errors says that Redis ran nothing (see notRun).
func mayHaveCounted(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if j, ok := e.(interface{ Unwrap() []error }); ok { //nolint:errorlint // the parts of an errors.Join, each on its own
			return slices.ContainsFunc(j.Unwrap(), mayHaveCounted)
		}
	}
	return !notRun(err)
}

// notRun reports whether err, which joins no errors, says that no script
// ran: the store did not try (backend.ErrUnavailable: an open breaker),
// the connection was never made, or Redis refused the command before
// running it: redirected (MOVED, ASK), a slot half moved (TRYAGAIN), or
// the cluster down.
func notRun(err error) bool {
	if errors.Is(err, backend.ErrUnavailable) {
		return true
	}
	if ne, ok := errors.AsType[*net.OpError](err); ok && ne.Op == "dial" {
		return true
	}
	if re, ok := errors.AsType[goredis.Error](err); ok {
		for _, prefix := range []string{"MOVED ", "ASK ", "TRYAGAIN ", "CLUSTERDOWN "} {
			if strings.HasPrefix(re.Error(), prefix) {
				return true
			}
		}
	}
	return false
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

// slotsOf makes one call of each kind, one after the other, as warm does,
// and returns, per kind, the Cluster slots of the keys its call created
// (those matching pattern), without knowing how the store names its keys.
func (l *chaosLoad) slotsOf(t *testing.T, cl *redistest.Cluster, patient *redis.Store, pattern string) [][]int {
	t.Helper()
	slots := make([][]int, len(l.kinds))
	seen := map[string]bool{}
	for k := range l.kinds {
		l.warm(t, patient, k)
		for _, key := range cl.Keys(t, pattern) {
			if seen[key] {
				continue
			}
			seen[key] = true
			if slot := cl.Slot(t, key); !slices.Contains(slots[k], slot) {
				slots[k] = append(slots[k], slot)
			}
		}
	}
	return slots
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

// errorKinds sums the errors of the calls of kind k (all if k < 0) by the
// start of their message ("MOVED", "ASK", "CLUSTERDOWN", "circuit
// breaker open", ...), for the log. It is called once the load halted.
func (l *chaosLoad) errorKinds(k int) map[string]int {
	kinds := map[string]int{}
	for _, e := range l.errs {
		if k >= 0 && e.kind != k {
			continue
		}
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

// failedBetween returns when the first failed call of kind k started and
// the last one ended. It is called once the load halted.
func (l *chaosLoad) failedBetween(k int) (first, last time.Time) {
	for _, e := range l.errs {
		if e.kind != k {
			continue
		}
		if first.IsZero() || e.start.Before(first) {
			first = e.start
		}
		if e.end.After(last) {
			last = e.end
		}
	}
	return first, last
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

	// The slots that hold a, b and c move; d's stays.
	kindSlots := load.slotsOf(t, cl, patient, "reshard:*")
	var slots []int
	for _, k := range kindSlots[:still] {
		for _, slot := range k {
			if !slices.Contains(slots, slot) {
				slots = append(slots, slot)
			}
		}
	}
	if len(slots) < 2 || len(kindSlots[still]) != 1 || slices.Contains(slots, kindSlots[still][0]) {
		t.Fatalf("the keys of a, b and c are in slots %v, d's in %v; want several slots, and d's apart", slots, kindSlots[still])
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
		moves, len(slots), moveTime.Round(time.Millisecond), ended.Sub(began).Round(time.Millisecond), chaosWorkers, l.ok, l.refused, len(l.errs), l.errorKinds(-1), s.Refunds(), s.RefundFailures())
	t.Logf("every kind of call succeeded 20 times in a row %v after the last move", back.Sub(ended).Round(time.Millisecond))
	t.Logf("calls on d, whose slot never moved: %d failed of %d (%v); breakers opened %d times",
		l.failed[still], l.calls[still], l.errorKinds(still), logs.count()[slog.LevelWarn])
	// A redirection is no failure of the node that sends it: a move must
	// not shut off a node's other slots.
	if n := l.failed[still]; n != 0 {
		t.Errorf("%d calls on d, whose slot never moved, failed (%v): a move shut its node off", n, l.errorKinds(still))
	}
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
		t.Logf("counter %s (%v of %d): admitted %d, counted %d, failed calls that may have counted %d",
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

// TestClusterFailoverUnderLoad: callers keep deciding while the master of
// their counters is killed and its replica takes over. Calls on its slots
// fail until the replica is promoted (a second or two: the cluster's own
// detection), and all calls succeed again soon after. The new master
// counts what the replica had: hits that the old master admitted but had
// not yet replicated are lost (Redis Cluster replicates asynchronously),
// and each lost hit is admitted once more. The test measures them: each
// admitted call of one hit on a counter that nothing refunds reports the
// count it left (its Remaining), so a count reported by the old master
// and again by the new one is a lost hit. It asserts the documented
// bound, admitted <= limit + lost, and that nothing else was lost or
// counted twice: the final count is every count reported, plus at most
// the hits of the calls that failed.
func TestClusterFailoverUnderLoad(t *testing.T) {
	cl := redistest.StartClusterWithReplicas(t, 3, 1)
	// Breakers probe every 100 ms, so that decisions resume soon after
	// the promotion.
	s, patient, logs := chaosStore(t, cl.URL(), redis.Options{Prefix: "failover:", BreakerOpenDelay: 100 * time.Millisecond})
	const limit, big = 1000, 1_000_000
	counters := []backend.Request{
		counter("a", hourly(limit)),
		counter("b", backend.Limit{Algorithm: backend.TokenBucket, Requests: limit, Window: time.Hour}),
		counter("d", hourly(big)),
	}
	load := newChaosLoad(s, counters, [][]chaosDescriptor{{{0}}, {{1}}, {{2}}})
	const a, b, d = 0, 1, 2 // counters, and the kinds of call on each alone

	// a and b on one master, which fails; d on another.
	slots := load.slotsOf(t, cl, patient, "failover:*")
	for k, ss := range slots {
		if len(ss) != 1 {
			t.Fatalf("the keys of counter %d are in slots %v, want one", k, ss)
		}
	}
	master := cl.SlotOwner(t, slots[a][0])
	cl.MoveSlot(t, slots[b][0], master)
	if cl.SlotOwner(t, slots[d][0]) == master {
		cl.MoveSlot(t, slots[d][0], cl.Nodes[(slices.Index(cl.Nodes, master)+1)%len(cl.Nodes)])
	}

	load.start()
	defer load.halt()
	const before = 200
	load.waitFor(t, 10*time.Second, fmt.Sprintf("%d hits admitted on a and on b", before), func() bool {
		return load.admitted[a] >= before && load.admitted[b] >= before
	})
	killed := time.Now()
	cl.Failover(t, master)
	promoted := time.Now()
	back := load.recovered(t, 5*time.Second, 20)
	load.waitFor(t, 10*time.Second, "counters a and b refusing", func() bool {
		return !load.refusedAt[a].IsZero() && !load.refusedAt[b].IsZero()
	})
	load.halt()

	l := load
	t.Logf("%d workers: %d calls decided (%d refused), %d failed %v; breakers opened %d times",
		chaosWorkers, l.ok, l.refused, len(l.errs), l.errorKinds(-1), logs.count()[slog.LevelWarn])
	resumed := back
	for _, sm := range l.samples[a] {
		if sm.start.After(killed) && sm.start.Before(resumed) {
			resumed = sm.start
		}
	}
	t.Logf("the replica had taken over, and every node agreed, %v after the kill; calls on a resumed %v after the kill, and every kind of call had succeeded 20 times in a row %v after it",
		promoted.Sub(killed).Round(time.Millisecond), resumed.Sub(killed).Round(time.Millisecond), back.Sub(killed).Round(time.Millisecond))
	first, last := l.failedBetween(d)
	t.Logf("calls on d, on a master that stayed up: %d failed of %d, from %v to %v after the kill (%v)",
		l.failed[d], l.calls[d], first.Sub(killed).Round(time.Millisecond), last.Sub(killed).Round(time.Millisecond), l.errorKinds(d))
	for _, e := range l.errs {
		if e.start.Before(killed.Add(-chaosTimeout)) || e.start.After(back) {
			t.Errorf("a call failed outside the failover and the recovery (started %v after the kill, recovered %v after it): %v",
				e.start.Sub(killed), back.Sub(killed), e.err)
		}
	}
	for _, c := range []int{a, b} {
		r := counters[c]
		lost := failoverCounts(t, r, l.samples[c], killed, count(t, patient, r), l.maybe[c])
		if lim := r.Limit.Capacity(); l.admitted[c] > lim+lost {
			t.Errorf("counter %s: %d hits admitted, over its limit %d and the %d hits lost with the old master", r.Tag, l.admitted[c], lim, lost)
		}
	}
	// The store batches for the masters it uses: not for the one that left.
	if nodes := redis.CrossNodes(s); slices.Contains(nodes, master.Addr) {
		t.Errorf("the store still has a batcher for the killed master %s (batchers: %v)", master.Addr, nodes)
	}
	// d's master never failed: nothing lost, nothing counted twice.
	if got := count(t, patient, counters[d]); got < l.admitted[d] || got > l.admitted[d]+l.maybe[d] {
		t.Errorf("counter d counts %d, want between the %d hits admitted and %d (those and the failed calls')", got, l.admitted[d], l.admitted[d]+l.maybe[d])
	}
}

// failoverCounts checks the counts that the admitted calls on one
// counter reported (samples) across a failover at killed, against the
// counter's final count got, and returns how many hits the failover lost:
// those the old master admitted (calls that started before killed: each
// call ends within chaosTimeout, before the replica can take over) that
// the new master admitted again.
func failoverCounts(t *testing.T, r backend.Request, samples []chaosSample, killed time.Time, got, maybe uint64) uint64 {
	t.Helper()
	old, next := map[uint64]bool{}, map[uint64]bool{}
	for _, sm := range samples {
		m := next
		if sm.start.Before(killed) {
			m = old
		}
		if m[sm.count] {
			t.Errorf("counter %s: count %d reported twice by one master", r.Tag, sm.count)
		}
		m[sm.count] = true
	}
	if len(old) == 0 || len(next) == 0 {
		t.Fatalf("counter %s: %d calls admitted before the kill, %d after: the test proves nothing", r.Tag, len(old), len(next))
	}
	// The new master started from the replica's count, first reported + 1.
	from := slices.Min(slices.Collect(maps.Keys(next))) - 1
	var lost, survived uint64
	for v := range old {
		switch {
		case v > from:
			lost++
		case next[v]:
			t.Errorf("counter %s: count %d, which the replica had, reported again by the new master", r.Tag, v)
		default:
			survived++
		}
	}
	distinct := uint64(len(old)) + uint64(len(next))
	for v := range old {
		if next[v] {
			distinct--
		}
	}
	t.Logf("counter %s (%v of %d): %d admitted by the old master, %d by the new one, which started from %d: %d hits lost with the old master; counts %d at the end, failed calls that may have counted %d",
		r.Tag, r.Limit.Algorithm, r.Limit.Capacity(), len(old), len(next), from, lost, got, maybe)
	// Every count reported is in the final count (none lost but those),
	// and beyond them only the failed calls may have counted (none
	// counted twice).
	if got < distinct || got > distinct+maybe {
		t.Errorf("counter %s counts %d, want between the %d counts reported and %d (those and the failed calls')", r.Tag, got, distinct, distinct+maybe)
	}
	return lost
}
