package redis_test

import (
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/redis"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// fcalls returns how many FCALLs the node at admin has run
// (INFO commandstats).
func fcalls(t *testing.T, admin *goredis.Client) int {
	t.Helper()
	info, err := admin.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	_, v, ok := strings.Cut(info, "cmdstat_fcall:calls=")
	if !ok {
		return 0
	}
	n, _ := strconv.Atoi(v[:strings.IndexByte(v, ',')])
	return n
}

// TestClusterBatchesPerNode: on a Cluster, concurrent calls of 1 and 3
// descriptors share script runs, one per node and batch, instead of one
// script per descriptor, and every counter counts each call exactly
// once.
func TestClusterBatchesPerNode(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	s := newStore(t, newClient(t, c.URL()), redis.Options{LocalCache: -1, Timeout: 5 * time.Second})
	const callers, calls = 32, 20
	// Caller k's calls: user u<k> alone, or with path p<k%4> and tenant
	// t<k%2>, on counters shared between callers.
	one := descriptors(callers, hourly(1_000_000))
	var wg sync.WaitGroup
	admins := make([]*goredis.Client, len(c.Nodes))
	before := 0
	for i, n := range c.Nodes {
		admins[i] = n.Client(t)
		before += fcalls(t, admins[i])
	}
	shared := descriptors(4, hourly(1_000_000))
	for j := range shared {
		shared[j].Key = "shared" + shared[j].Key
	}
	for k := range callers {
		wg.Go(func() {
			reqs := []backend.Request{one[k]}
			if k%2 == 1 {
				reqs = append(reqs, shared[k%4], shared[(k+1)%4])
			}
			for range calls {
				if _, err := take(t, s, reqs...); err != nil {
					t.Errorf("caller %d: Take() error: %v", k, err)
					return
				}
			}
		})
	}
	wg.Wait()
	after := 0
	for _, a := range admins {
		after += fcalls(t, a)
	}
	parts := callers * calls * 2 // 1 descriptor for half the callers, 3 for the other half
	if got := after - before; got >= parts/2 {
		t.Errorf("%d script runs for %d calls over %d descriptors, want fewer than %d: calls are not batched per node", got, callers*calls, parts, parts/2)
	}
	// Each counter's count, read back with a call of no hits.
	probe := func(r backend.Request) uint64 {
		r.Hits = 0
		return 1_000_000 - mustTake(t, s, r)[0].Remaining
	}
	for k := range callers {
		if got := probe(one[k]); got != calls {
			t.Errorf("user %d counted %d hits, want %d", k, got, calls)
		}
	}
	for j := range shared {
		// shared[j] is in the calls of the odd callers k with k%4 == j or (k+1)%4 == j.
		want := uint64(0)
		for k := 1; k < callers; k += 2 {
			if k%4 == j || (k+1)%4 == j {
				want += calls
			}
		}
		if got := probe(shared[j]); got != want {
			t.Errorf("shared counter %d counted %d hits, want %d", j, got, want)
		}
	}
}

// TestClusterMovedSlotWritesNothing: a call whose keys the store's map of
// slots puts on one node, where one slot has moved to another, writes
// nothing that lasts in that node's batch (a fixed window's count raised
// before the moved key's refusal is given back; a sliding window's read
// of its previous window is refused first), and is decided again per
// slot: each counter counts the call once.
func TestClusterMovedSlotWritesNothing(t *testing.T) {
	for _, alg := range []backend.Algorithm{backend.FixedWindow, backend.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			testMovedSlotWritesNothing(t, backend.Limit{Algorithm: alg, Requests: 100, Window: time.Hour})
		})
	}
}

func testMovedSlotWritesNothing(t *testing.T, l backend.Limit) {
	c := redistest.StartCluster(t, 3)
	client := newClient(t, c.URL())
	s := newStore(t, client, redis.Options{LocalCache: -1, Timeout: 5 * time.Second})
	ctx := t.Context()
	// Two descriptors on one node, in two slots.
	reqs := descriptors(200, l)
	slotOf := func(r *backend.Request) int64 {
		n, err := c.Nodes[0].Client(t).ClusterKeySlot(ctx, redis.HashTag(r)).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	var a, b backend.Request
	var from *redistest.Server
	for i := 0; i < len(reqs) && from == nil; i++ {
		for j := i + 1; j < len(reqs); j++ {
			ni, nj := c.NodeForKey(t, redis.HashTag(&reqs[i])), c.NodeForKey(t, redis.HashTag(&reqs[j]))
			if ni == nj && slotOf(&reqs[i]) != slotOf(&reqs[j]) {
				a, b, from = reqs[i], reqs[j], ni
				break
			}
		}
	}
	if from == nil {
		t.Fatal("no two descriptors on one node")
	}
	mustTake(t, s, a) // the store's map of slots, and the library on every node
	if got := fcalls(t, from.Client(t)); got == 0 {
		t.Fatal("no FCALL on the node of a: the call did not go to its node's batch")
	}

	// Move b's slot, empty, to another node, behind the store's back.
	var to *redistest.Server
	for _, n := range c.Nodes {
		if n != from {
			to = n
			break
		}
	}
	// As redis-cli --cluster reshard does: importing on the new owner,
	// migrating on the old one, then the new owner everywhere, the new
	// owner first (which takes a new config epoch).
	toID, err := to.Client(t).ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	fromID, err := from.Client(t).ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	slot := slotOf(&b)
	setslot := func(n *redistest.Server, args ...any) {
		if err := n.Client(t).Do(ctx, append([]any{"CLUSTER", "SETSLOT", slot}, args...)...).Err(); err != nil {
			t.Fatalf("CLUSTER SETSLOT %d %v on %s: %v", slot, args, n.Addr, err)
		}
	}
	setslot(to, "IMPORTING", fromID)
	setslot(from, "MIGRATING", toID)
	for _, n := range append([]*redistest.Server{to, from}, c.Nodes...) {
		setslot(n, "NODE", toID)
	}
	if got := c.NodeForKey(t, redis.HashTag(&b)); got != to {
		t.Fatalf("b's slot is on %s, want %s", got.Addr, to.Addr)
	}

	runs := fcalls(t, from.Client(t))
	// Per slot, go-redis may fail the call with the old node's MOVED
	// while it reloads its map (the call is then refunded): try again
	// until the call is decided, as a caller would.
	var res []backend.Result
	for try := 0; ; try++ {
		if res, err = take(t, s, a, b); err == nil {
			break
		}
		if try == 50 {
			t.Fatalf("Take(a, b) after b's slot moved: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := fcalls(t, from.Client(t)) - runs; got == 0 {
		t.Error("the call over a and b ran no script on a's node: the test did not try the stale map")
	}
	if redis.Elsewhere(s) == 0 {
		t.Error("no batch answered that its node does not serve b's key: the batch wrote before it checked, or failed")
	}
	if res[0].Remaining != 98 || res[1].Remaining != 99 {
		t.Errorf("Take(a, b) remaining %d, %d; want 98, 99 (a counted twice in all, b once)", res[0].Remaining, res[1].Remaining)
	}
	a.Hits, b.Hits = 0, 0
	if res := mustTake(t, s, a, b); res[0].Remaining != 98 || res[1].Remaining != 99 {
		t.Errorf("counts after the call: remaining %d, %d; want 98, 99", res[0].Remaining, res[1].Remaining)
	}
}

// TestClusterExact: three stores (as three replicas of ratelimitd) on one
// Cluster, 64 callers each, make calls of one descriptor and of three
// (over several nodes, decided in parts and refunded when refused) on
// shared counters, for every algorithm: each counter admits exactly its
// limit, and no refused call leaves hits behind.
func TestClusterExact(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	stores := make([]*redis.Store, 3)
	for i := range stores {
		stores[i] = newStore(t, newClient(t, c.URL()), redis.Options{LocalCache: -1, Timeout: 5 * time.Second})
	}
	const n = 50 // the limit
	for _, alg := range []backend.Algorithm{backend.FixedWindow, backend.SlidingWindow, backend.SlidingLog, backend.TokenBucket, backend.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			l := backend.Limit{Algorithm: alg, Requests: n, Window: time.Hour}
			three := descriptors(3, l)
			for j := range three {
				three[j].Key = alg.String() + three[j].Key
			}
			var admitted, threes sync.Map // by caller: admitted calls
			var wg sync.WaitGroup
			for k := range 3 * 64 {
				wg.Go(func() {
					s := stores[k%3]
					reqs := three[:1]
					if k%2 == 1 {
						reqs = three
					}
					got := 0
					for range 2 * n / 64 * 3 {
						res, err := take(t, s, reqs...)
						if err != nil {
							t.Errorf("Take() error: %v", err)
							return
						}
						if !backend.Refused(reqs, res) {
							got++
						}
					}
					if k%2 == 1 {
						threes.Store(k, got)
					} else {
						admitted.Store(k, got)
					}
				})
			}
			wg.Wait()
			sum := func(m *sync.Map) (total int) {
				m.Range(func(_, v any) bool { total += v.(int); return true })
				return total
			}
			ones, calls3 := sum(&admitted), sum(&threes)
			if ones+calls3 != n {
				t.Errorf("admitted %d calls on the first counter (%d alone, %d with two others), want exactly %d", ones+calls3, ones, calls3, n)
			}
			// The other two counters counted the admitted three-descriptor
			// calls only: refused ones were given back.
			for j := 1; j < 3; j++ {
				r := three[j]
				r.Hits = 0
				if got := n - mustTake(t, stores[0], r)[0].Remaining; got != uint64(calls3) {
					t.Errorf("counter %d counted %d hits, want %d (the admitted calls over three counters)", j, got, calls3)
				}
			}
		})
	}
}

// TestClusterPrunedBatcherDecidesAgain: the batchers of masters that
// left are stopped (see pruneCross), and a call queued on one, or that
// comes to it meanwhile, is decided again per slot: while callers run,
// every batcher is pruned again and again, and no call fails, and each
// counter counts every call once, whether it went through a batch, was
// dropped from a stopped batcher's queue, or went per slot.
func TestClusterPrunedBatcherDecidesAgain(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	s := newStore(t, newClient(t, c.URL()), redis.Options{LocalCache: -1, Timeout: 5 * time.Second})
	const callers, calls = 16, 200
	one := descriptors(callers, hourly(1_000_000))
	shared := descriptors(3, hourly(1_000_000))
	for j := range shared {
		shared[j].Key = "shared" + shared[j].Key
	}
	mustTake(t, s, one[0]) // the library on every node, and the map of slots: one more hit on user 0
	stop := make(chan struct{})
	var pruner sync.WaitGroup
	prunes := 0
	pruner.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if len(redis.CrossNodes(s)) > 0 {
				redis.PruneCross(s, func(string) bool { return false })
				prunes++
			}
			runtime.Gosched()
		}
	})
	var wg sync.WaitGroup
	for k := range callers {
		wg.Go(func() {
			reqs := []backend.Request{one[k]}
			if k%2 == 1 {
				reqs = append(reqs, shared...)
			}
			for range calls {
				if _, err := take(t, s, reqs...); err != nil {
					t.Errorf("caller %d: Take() error: %v", k, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	pruner.Wait()
	if prunes < 10 {
		t.Fatalf("the batchers were pruned %d times, want at least 10: the test did not prune under load", prunes)
	}
	t.Logf("%d prunes, %d calls per caller", prunes, calls)
	probe := func(r backend.Request) uint64 {
		r.Hits = 0
		return 1_000_000 - mustTake(t, s, r)[0].Remaining
	}
	for k := range callers {
		want := uint64(calls)
		if k == 0 {
			want++ // the warm-up call
		}
		if got := probe(one[k]); got != want {
			t.Errorf("user %d counted %d hits, want %d", k, got, want)
		}
	}
	for j := range shared {
		if got := probe(shared[j]); got != calls*callers/2 {
			t.Errorf("shared counter %d counted %d hits, want %d", j, got, calls*callers/2)
		}
	}
}
