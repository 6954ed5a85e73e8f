package fairshare

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/backendtest"
	"github.com/ratelimitd/ratelimitd/backend/memory"
)

// faulty is a real store that fails its exchanges while down is set, and
// counts the calls and requests it took.
type faulty struct {
	backend.ShareStore
	down            atomic.Bool
	calls, requests atomic.Int64
}

func (f *faulty) ExchangeShares(ctx context.Context, reqs []backend.ShareRequest, res []backend.ShareResult) error {
	if f.down.Load() {
		return fmt.Errorf("exchange: %w", backend.ErrUnavailable)
	}
	f.calls.Add(1)
	f.requests.Add(int64(len(reqs)))
	return f.ShareStore.ExchangeShares(ctx, reqs, res)
}

// replicas returns n Pools on one memory store and the shared test clock.
// Their loops only turn when woken (they tick not): the tests turn them
// with turn, a sync interval (a second) each.
func replicas(t *testing.T, n int) ([]*Pool, *backendtest.Clock, *faulty) {
	t.Helper()
	clk := backendtest.NewClock(t0)
	mem := memory.New(memory.Options{Now: clk.Now})
	t.Cleanup(func() { mem.Close() })
	store := &faulty{ShareStore: mem}
	pools := make([]*Pool, n)
	for i := range pools {
		pools[i] = manual(NewPool(PoolOptions{
			Store:    store,
			Replica:  fmt.Sprintf("replica-%d", i),
			Interval: time.Second,
			Now:      clk.Now,
		}))
		t.Cleanup(pools[i].Close)
	}
	return pools, clk, store
}

// manual stops p's loop from ticking, and returns it.
func manual(p *Pool) *Pool {
	p.manual = true
	p.watching = make(chan struct{})
	return p
}

// watched waits until p's loop watches the store, and has p take the
// turn that the store's first notification ("": anything may have
// changed) asks for.
func watched(t testing.TB, p *Pool) {
	t.Helper()
	p.mu.Lock()
	w := p.watching
	p.mu.Unlock()
	if w != nil {
		<-w
	}
	p.turn(t.Context(), false)
}

// poolClient is a client of one replica in the pool simulations.
type poolClient struct {
	id     string
	pool   *Pool
	demand float64 // requests per second
}

// report has c report its demand over interval (first report: nothing
// elapsed) on bucket, and exchanges the bucket at once if the replica has
// no grant for it, as the RLQS service does for a new bucket.
func (c *poolClient) report(t *testing.T, bucket string, limit float64, interval time.Duration, now time.Time) {
	t.Helper()
	n := uint64(math.Round(c.demand * interval.Seconds()))
	if !c.pool.ReportFor(bucket, c.id, n, 0, 2*interval, now) {
		t.Fatalf("%s: report refused", c.id)
	}
	if err := c.pool.Exchange(t.Context(), []Need{{Bucket: bucket, Limit: limit, TTL: 2 * interval}}); err != nil {
		t.Fatalf("%s: Exchange: %v", c.id, err)
	}
}

// sumShares returns the sum of the clients' shares on bucket, and checks
// that each has one.
func sumShares(t *testing.T, clients []*poolClient, bucket string, limit float64, now time.Time) (float64, []float64) {
	t.Helper()
	var sum float64
	shares := make([]float64, len(clients))
	for i, c := range clients {
		s, ok := c.pool.Share(bucket, c.id, limit, now)
		if !ok {
			t.Fatalf("%s has no share", c.id)
		}
		shares[i] = s
		sum += s
	}
	return sum, shares
}

// TestPoolAcrossReplicas runs clients of uneven, shifting demand spread
// over three replicas on one store, on an injected clock: reports every
// 10 s, exchanges every second. After every exchange the shares of all
// the clients of all the replicas sum to at most the limit, and from two
// reporting intervals after each shift every share is within 5% of the
// max-min share of the true demands (Allocate over all of them). It runs
// with the replicas exchanging every bucket at every turn, and as the
// loop does, only those whose entries moved or that another replica's
// change concerns: the same bounds hold, with fewer store requests.
func TestPoolAcrossReplicas(t *testing.T) {
	every := simulateReplicas(t, true)
	changed := simulateReplicas(t, false)
	t.Logf("store requests: %d exchanging every bucket at every turn, %d exchanging what changed", every, changed)
	if changed >= every/2 {
		t.Errorf("exchanging what changed took %d store requests, want under half the %d of exchanging every bucket", changed, every)
	}
}

// simulateReplicas runs TestPoolAcrossReplicas's clients, each turn
// exchanging every bucket (all) or what needs it, and returns the store
// requests made.
func simulateReplicas(t *testing.T, all bool) int64 {
	const (
		bucket   = "edge/tenant=acme"
		limit    = 1000.0
		interval = 10 * time.Second
		epochs   = 6
		epoch    = 6 * interval
	)
	pools, clk, store := replicas(t, 3)
	r := rand.New(rand.NewPCG(3, 4))
	clients := make([]*poolClient, 12)
	for i := range clients {
		clients[i] = &poolClient{id: fmt.Sprintf("envoy-%d", i), pool: pools[i%3]}
	}
	demands := make([]float64, len(clients))
	want := make([]float64, len(clients))
	now := t0
	for e := range epochs {
		for i, c := range clients {
			c.demand = 5 * math.Exp(r.Float64()*math.Log(100)) // 5 to 500 per second
			demands[i] = c.demand
		}
		Allocate(limit, demands, want)
		for s := time.Duration(0); s < epoch; s += time.Second {
			if s%interval == 0 {
				for _, c := range clients {
					c.report(t, bucket, limit, interval, now)
				}
				if e == 0 && s == 0 {
					for _, p := range pools { // the store tells them of each other from now on
						watched(t, p)
					}
				}
			}
			for _, p := range pools {
				p.turn(t.Context(), all)
				sum, _ := sumShares(t, clients, bucket, limit, now)
				if sum > limit*(1+1e-9) {
					t.Fatalf("all=%v, epoch %d, %v: shares sum to %.3f, over the limit %v", all, e, s, sum, limit)
				}
			}
			if s >= 2*interval {
				_, shares := sumShares(t, clients, bucket, limit, now)
				for i := range shares {
					if math.Abs(shares[i]-want[i]) > 0.05*want[i] {
						t.Fatalf("all=%v, epoch %d, %v after the shift: %s (demand %.1f) has %.2f, want the max-min share %.2f",
							all, e, s, clients[i].id, demands[i], shares[i], want[i])
					}
				}
			}
			now = now.Add(time.Second)
			clk.Set(now)
		}
	}
	return store.requests.Load()
}

// TestPoolNewReplicaWaitsForGrant: a replica that joins a bucket the
// others use whole gets nothing until they ask for less. A replica asks
// by what it knew before the exchange: the first learns of the newcomer
// at its next exchange and asks for half at the one after; the newcomer
// then gets the other half, and every client has an equal share.
func TestPoolNewReplicaWaitsForGrant(t *testing.T) {
	const bucket, limit = "edge/k=v", 90.0
	pools, _, _ := replicas(t, 2)
	a := &poolClient{id: "a", pool: pools[0], demand: 1000}
	b := &poolClient{id: "b", pool: pools[1], demand: 1000}
	a.report(t, bucket, limit, time.Second, t0)
	if s, _ := pools[0].Share(bucket, "a", limit, t0); s != limit {
		t.Fatalf("alone: share %v, want the whole limit %v", s, limit)
	}
	b.report(t, bucket, limit, time.Second, t0)
	if s, _ := pools[1].Share(bucket, "b", limit, t0); s != 0 {
		t.Errorf("newcomer while the other holds the whole limit: share %v, want 0", s)
	}
	pools[0].turn(t.Context(), true) // a's replica learns of b's demand
	pools[1].turn(t.Context(), true)
	if s, _ := pools[1].Share(bucket, "b", limit, t0); s != 0 {
		t.Errorf("newcomer before the other asked for less: share %v, want 0", s)
	}
	pools[0].turn(t.Context(), true) // a's replica asks for half
	pools[1].turn(t.Context(), true) // b's replica is granted the other half
	for _, c := range []*poolClient{a, b} {
		if s, _ := c.pool.Share(bucket, c.id, limit, t0); math.Abs(s-limit/2) > 1e-9 {
			t.Errorf("%s after both exchanged: share %v, want %v", c.id, s, limit/2)
		}
	}
}

// TestPoolLapse: while the store fails, a replica keeps its grant until
// its entry would expire in the store (when the last share handed out
// expires, plus the longest share's time to live, for the shares handed
// out before the next exchange, plus one more, the renewal's slack), then
// Lapsed reports true; the next exchange that works renews it.
func TestPoolLapse(t *testing.T) {
	const bucket, limit = "edge/k=v", 10.0
	pools, clk, store := replicas(t, 1)
	p := pools[0]
	if !p.Lapsed(bucket, t0, time.Second) {
		t.Fatal("Lapsed before any exchange: false, want true")
	}
	c := &poolClient{id: "a", pool: p, demand: 5}
	c.report(t, bucket, limit, 10*time.Second, t0) // a share for 20 s: the entry stands 60 s
	if p.Lapsed(bucket, t0, 20*time.Second) {
		t.Fatal("Lapsed right after an exchange: true, want false")
	}
	store.down.Store(true)
	clk.Set(t0.Add(10 * time.Second))
	p.turn(t.Context(), true)
	if p.Lapsed(bucket, t0.Add(10*time.Second), 20*time.Second) {
		t.Error("Lapsed 10 s into a 60 s entry, for 20 s: true, want false")
	}
	if !p.Lapsed(bucket, t0.Add(41*time.Second), 20*time.Second) {
		t.Error("Lapsed 41 s into a 60 s entry, for 20 s: false, want true (it would outlive the entry)")
	}
	now := t0.Add(41 * time.Second)
	clk.Set(now)
	if !p.ReportFor(bucket, "a", 5, 0, 20*time.Second, now) {
		t.Fatal("report refused")
	}
	if err := p.Exchange(t.Context(), []Need{{Bucket: bucket, Limit: limit, TTL: 20 * time.Second}}); !errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("Exchange of a lapsing bucket with the store down: %v, want ErrUnavailable", err)
	}
	store.down.Store(false)
	c.report(t, bucket, limit, 10*time.Second, now)
	if p.Lapsed(bucket, now, 20*time.Second) {
		t.Error("Lapsed after the store came back: true, want false")
	}
}

// TestPoolLimitChange: a new limit has the bucket exchanged again, so
// that a raised limit reaches the grant at once.
func TestPoolLimitChange(t *testing.T) {
	const bucket = "edge/k=v"
	pools, _, _ := replicas(t, 1)
	p := pools[0]
	c := &poolClient{id: "a", pool: p, demand: 1000}
	c.report(t, bucket, 10, time.Second, t0)
	if s, _ := p.Share(bucket, "a", 10, t0); s != 10 {
		t.Fatalf("share %v, want 10", s)
	}
	if err := p.Exchange(t.Context(), []Need{{Bucket: bucket, Limit: 20}}); err != nil {
		t.Fatal(err)
	}
	if s, _ := p.Share(bucket, "a", 20, t0); s != 20 {
		t.Errorf("after the limit rose to 20: share %v, want 20", s)
	}
}

// TestPoolLoopEnds: the loop runs while the pool holds buckets; once the
// last client is forgotten, and the share it was handed has expired, its
// entry leaves the store (another replica may take the whole limit) and
// the loop ends; Close ends it too.
func TestPoolLoopEnds(t *testing.T) {
	const bucket, limit = "edge/k=v", 10.0
	pools, clk, _ := replicas(t, 2)
	a := &poolClient{id: "a", pool: pools[0], demand: 1000}
	a.report(t, bucket, limit, time.Second, t0) // a share for 2 s
	pools[0].mu.Lock()
	running := pools[0].running
	pools[0].mu.Unlock()
	if !running {
		t.Fatal("no loop after the first exchange")
	}
	now := t0.Add(3 * time.Second)
	clk.Set(now)
	pools[0].Forget("a", now)
	pools[0].loops.Wait() // the loop removes the entry, then ends
	b := &poolClient{id: "b", pool: pools[1], demand: 1000}
	b.report(t, bucket, limit, time.Second, now)
	if s, _ := pools[1].Share(bucket, "b", limit, now); s != limit {
		t.Errorf("after the other replica's client left: share %v, want the whole limit %v", s, limit)
	}
	pools[1].Close()
	pools[1].Close() // twice is fine
}

// TestPoolForgetKeepsGrant: a client forgotten while its share is in
// force keeps its replica's grant standing until the share expires.
func TestPoolForgetKeepsGrant(t *testing.T) {
	const bucket, limit = "edge/k=v", 10.0
	pools, _, _ := replicas(t, 2)
	a := &poolClient{id: "a", pool: pools[0], demand: 1000}
	a.report(t, bucket, limit, 10*time.Second, t0) // a share for 20 s
	pools[0].Forget("a", t0.Add(time.Second))
	pools[0].turn(t.Context(), true)
	b := &poolClient{id: "b", pool: pools[1], demand: 1000}
	b.report(t, bucket, limit, time.Second, t0.Add(time.Second))
	if s, _ := pools[1].Share(bucket, "b", limit, t0.Add(time.Second)); s != 0 {
		t.Errorf("while the forgotten client's share is in force: the other replica's share %v, want 0", s)
	}
}

// gatedStore holds a removal (a request of TTL 0) in the store until
// released.
type gatedStore struct {
	backend.ShareStore
	entered, release chan struct{}
}

func (g *gatedStore) ExchangeShares(ctx context.Context, reqs []backend.ShareRequest, res []backend.ShareResult) error {
	if len(reqs) == 1 && reqs[0].TTL <= 0 {
		close(g.entered)
		<-g.release
	}
	return g.ShareStore.ExchangeShares(ctx, reqs, res)
}

// TestPoolRemovalRace: a client that reports on a bucket while the pool
// removes the bucket's entry from the store gets a fresh exchange after
// the removal, not the grant being removed, so that the shares of both
// replicas stay within the limit.
func TestPoolRemovalRace(t *testing.T) {
	const bucket, limit = "edge/k=v", 100.0
	pools, clk, store := replicas(t, 2)
	g := &gatedStore{ShareStore: store, entered: make(chan struct{}), release: make(chan struct{})}
	pools[0].opts.Store = g
	a := &poolClient{id: "a", pool: pools[0], demand: 1000}
	a.report(t, bucket, limit, time.Second, t0)
	now := t0.Add(3 * time.Second) // a's share has expired
	clk.Set(now)
	pools[0].Forget("a", now) // the loop removes the entry, held in the store
	<-g.entered
	reported := make(chan float64)
	go func() {
		c := &poolClient{id: "c", pool: pools[0], demand: 1000}
		c.report(t, bucket, limit, time.Second, now) // waits for the removal
		s, _ := pools[0].Share(bucket, "c", limit, now)
		reported <- s
	}()
	close(g.release)
	sc := <-reported
	b := &poolClient{id: "b", pool: pools[1], demand: 1000}
	b.report(t, bucket, limit, time.Second, now)
	sb, _ := pools[1].Share(bucket, "b", limit, now)
	if sc+sb > limit {
		t.Errorf("shares %v and %v across the replicas sum past the limit %v", sc, sb, limit)
	}
}

// TestPoolConcurrent reports, shares, exchanges and forgets from many
// goroutines on two replicas, for the race detector, checking at the end
// that the replicas' grants sum to at most the limit.
func TestPoolConcurrent(t *testing.T) {
	const limit = 100.0
	pools, _, _ := replicas(t, 2)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			p := pools[g%2]
			for i := range 200 {
				bucket := fmt.Sprintf("edge/k=%d", i%5)
				id := fmt.Sprintf("c%d", g)
				p.ReportFor(bucket, id, 10, 0, time.Second, t0.Add(time.Duration(i)*time.Millisecond))
				_ = p.Exchange(context.Background(), []Need{{Bucket: bucket, Limit: limit}})
				p.Share(bucket, id, limit, t0.Add(time.Duration(i)*time.Millisecond))
				if i%50 == 49 {
					p.Forget(id, t0.Add(time.Duration(i)*time.Millisecond))
				}
				if i%20 == 0 {
					p.turn(t.Context(), true)
				}
			}
		})
	}
	wg.Wait()
	for i := range 5 {
		bucket := fmt.Sprintf("edge/k=%d", i)
		var sum float64
		for _, p := range pools {
			if g, _, ok := p.Grant(bucket); ok {
				sum += g
			}
		}
		if sum > limit*(1+1e-9) {
			t.Errorf("%s: grants sum to %v, over %v", bucket, sum, limit)
		}
	}
}

// TestPoolFailedExchange: an exchange that fails may still have been
// applied, so a replica that asked for less than it held keeps to what
// it asked.
func TestPoolFailedExchange(t *testing.T) {
	const bucket, limit = "edge/k=v", 90.0
	pools, _, store := replicas(t, 2)
	a := &poolClient{id: "a", pool: pools[0], demand: 1000}
	b := &poolClient{id: "b", pool: pools[1], demand: 1000}
	a.report(t, bucket, limit, time.Second, t0)
	b.report(t, bucket, limit, time.Second, t0)
	pools[0].turn(t.Context(), true) // a's replica learns of b: it will ask for half
	store.down.Store(true)
	pools[0].turn(t.Context(), true)
	if g, _, _ := pools[0].Grant(bucket); g != limit/2 {
		t.Errorf("grant after a failed exchange that asked for half: %v, want %v", g, limit/2)
	}
	if s, _ := pools[0].Share(bucket, "a", limit, t0); s > limit/2 {
		t.Errorf("share after a failed exchange that asked for half: %v, want at most %v", s, limit/2)
	}
}

// TestPoolIdleEntriesCostNothing: the buckets of clients that left, whose
// shares are still in force, are exchanged once, for as long as those
// shares live, and never again: turns make no store call until they
// expire, and then none either (the store drops them on its own).
func TestPoolIdleEntriesCostNothing(t *testing.T) {
	const n, limit, ttl = 1000, 100.0, 10 * time.Minute
	pools, clk, store := replicas(t, 1)
	p := pools[0]
	needs := make([]Need, n)
	for i := range needs {
		needs[i] = Need{Bucket: fmt.Sprintf("edge/k=%d", i), Limit: limit, TTL: ttl}
		if !p.ReportFor(needs[i].Bucket, "gone", 1, 0, ttl, t0) {
			t.Fatal("report refused")
		}
	}
	p.Forget("gone", t0) // its stream ended: its shares stay in force for 10 minutes
	if err := p.Exchange(t.Context(), needs); err != nil {
		t.Fatal(err)
	}
	watched(t, p)
	before := store.requests.Load()
	for s := time.Second; s <= 2*ttl+time.Minute; s += time.Second {
		clk.Set(t0.Add(s))
		p.turn(t.Context(), false)
		if s < ttl && p.Lapsed(needs[0].Bucket, t0.Add(s), 0) {
			t.Fatalf("at +%v: the grant lapsed while the store answers", s)
		}
	}
	if got := store.requests.Load() - before; got != 0 {
		t.Errorf("%d store requests over 21 minutes of turns for %d buckets nobody reports, want 0", got, n)
	}
	p.mu.Lock()
	left := len(p.entries)
	p.mu.Unlock()
	if left != 0 {
		t.Errorf("%d entries held after every share expired, want 0", left)
	}
}

// TestPoolRenewsBeforeLapse: a client reporting the same demand every
// 10 s needs its bucket's grant renewed before its entry in the store
// lapses, not at every turn: its grant never lapses while the store
// answers, and the bucket costs a store request every few reporting
// intervals.
func TestPoolRenewsBeforeLapse(t *testing.T) {
	const bucket, limit, interval = "edge/k=v", 100.0, 10 * time.Second
	pools, clk, store := replicas(t, 1)
	p := pools[0]
	c := &poolClient{id: "steady", pool: p, demand: 20}
	const period = 10 * time.Minute
	for s := time.Duration(0); s < period; s += time.Second {
		now := t0.Add(s)
		clk.Set(now)
		if s%interval == 0 {
			c.report(t, bucket, limit, interval, now)
			if s == 0 {
				watched(t, p)
			}
		}
		p.turn(t.Context(), false)
		if p.Lapsed(bucket, now, 2*interval) {
			t.Fatalf("at +%v: the grant lapsed while the store answers", s)
		}
	}
	got := store.requests.Load()
	t.Logf("%d store requests over %v of reports every %v (%d turns)", got, period, interval, int(period/time.Second))
	if limit := int64(period/interval)/3 + 2; got > limit {
		t.Errorf("%d store requests, want at most one per three reporting intervals and the first two, %d", got, limit)
	}
}

// TestPoolChunks: an exchange of many buckets makes calls of at most
// Chunk buckets; in a turn, a call that fails leaves its buckets, and
// those after it, for the next turn, which exchanges them once the store
// answers; Exchange goes on past it.
func TestPoolChunks(t *testing.T) {
	const n, chunk, limit = 1000, 100, 10.0
	clk := backendtest.NewClock(t0)
	mem := memory.New(memory.Options{Now: clk.Now})
	t.Cleanup(func() { mem.Close() })
	store := &sizes{ShareStore: mem}
	p := manual(NewPool(PoolOptions{Store: store, Replica: "r", Interval: time.Second, Chunk: chunk, Now: clk.Now}))
	t.Cleanup(p.Close)
	needs := make([]Need, n)
	for i := range needs {
		needs[i] = Need{Bucket: fmt.Sprintf("edge/k=%d", i), Limit: limit, TTL: time.Minute}
		p.ReportFor(needs[i].Bucket, "c", 1, 0, time.Minute, t0)
	}
	if err := p.Exchange(t.Context(), needs); err != nil {
		t.Fatal(err)
	}
	if got := store.seen(); len(got) != n/chunk || slices.Max(got) != chunk {
		t.Fatalf("calls of %v buckets, want %d calls of %d", got, n/chunk, chunk)
	}
	watched(t, p) // the first notification has every bucket exchanged again
	store.seen()
	store.failAt.Store(3) // the third call fails
	p.turn(t.Context(), true)
	if got := store.seen(); len(got) != 3 {
		t.Fatalf("after a failed call: %d calls (%v), want 3 (the turn stops at the failure)", len(got), got)
	}
	p.mu.Lock()
	pending := len(p.pending)
	p.mu.Unlock()
	if pending != n-2*chunk {
		t.Errorf("%d buckets left for the next turn, want %d", pending, n-2*chunk)
	}
	p.turn(t.Context(), false)
	if got := store.seen(); len(got) != (n-2*chunk)/chunk {
		t.Errorf("the next turn made calls of %v buckets, want %d calls", got, (n-2*chunk)/chunk)
	}

	// The exchange of a report's new buckets goes on past a failed call:
	// only that call's buckets wait for the loop.
	fresh := make([]Need, n)
	for i := range fresh {
		fresh[i] = Need{Bucket: fmt.Sprintf("edge/new=%d", i), Limit: limit, TTL: time.Minute}
		p.ReportFor(fresh[i].Bucket, "c", 1, 0, time.Minute, t0)
	}
	store.failAt.Store(2)
	if err := p.Exchange(t.Context(), fresh); err == nil {
		t.Error("Exchange with a failed call: no error")
	}
	if got := store.seen(); len(got) != n/chunk {
		t.Errorf("Exchange with its second call failing made calls of %v buckets, want all %d", got, n/chunk)
	}
	lapsed := 0
	for _, f := range fresh {
		if p.Lapsed(f.Bucket, t0, 0) {
			lapsed++
		}
	}
	if lapsed != chunk {
		t.Errorf("%d new buckets without a grant, want the failed call's %d", lapsed, chunk)
	}
}

// sizes is a real store that records the size of each call, and fails
// the failAt'th call after the last seen.
type sizes struct {
	backend.ShareStore
	mu     sync.Mutex
	calls  []int
	failAt atomic.Int64
}

func (s *sizes) ExchangeShares(ctx context.Context, reqs []backend.ShareRequest, res []backend.ShareResult) error {
	s.mu.Lock()
	s.calls = append(s.calls, len(reqs))
	fail := int64(len(s.calls)) == s.failAt.Load()
	s.mu.Unlock()
	if fail {
		return fmt.Errorf("exchange: %w", backend.ErrUnavailable)
	}
	return s.ShareStore.ExchangeShares(ctx, reqs, res)
}

// seen returns the sizes of the calls since the last seen, and forgets
// them.
func (s *sizes) seen() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.calls
	s.calls = nil
	s.failAt.Store(0)
	return c
}

// TestPoolNewcomerByNotification: a replica that joins a bucket the other
// holds whole gets its share from the turns alone, without the other
// exchanging every bucket: the store tells the other of the newcomer.
func TestPoolNewcomerByNotification(t *testing.T) {
	const bucket, limit = "edge/k=v", 90.0
	pools, _, _ := replicas(t, 2)
	a := &poolClient{id: "a", pool: pools[0], demand: 1000}
	b := &poolClient{id: "b", pool: pools[1], demand: 1000}
	a.report(t, bucket, limit, time.Second, t0)
	watched(t, pools[0])
	b.report(t, bucket, limit, time.Second, t0)
	watched(t, pools[1])
	for turn := range 3 {
		for _, p := range pools {
			p.turn(t.Context(), false)
		}
		if s, _ := pools[1].Share(bucket, "b", limit, t0); s == limit/2 {
			t.Logf("the newcomer has half after %d turns of each replica", turn+1)
			return
		}
	}
	s, _ := pools[1].Share(bucket, "b", limit, t0)
	t.Errorf("the newcomer after 3 turns of each replica: share %v, want %v", s, limit/2)
}

// TestPoolCountsEveryFailedCall: a call that fails before it reaches the
// store (here its context has ended) is observed as failed, as a store
// call that fails is, each once.
func TestPoolCountsEveryFailedCall(t *testing.T) {
	const bucket = "edge/k=v"
	clk := backendtest.NewClock(t0)
	mem := memory.New(memory.Options{Now: clk.Now})
	t.Cleanup(func() { mem.Close() })
	store := &faulty{ShareStore: mem}
	var failed, ok atomic.Int64
	p := manual(NewPool(PoolOptions{
		Store: store, Replica: "r", Interval: time.Second, Now: clk.Now,
		Observe: func(_ int, err error) {
			if err != nil {
				failed.Add(1)
			} else {
				ok.Add(1)
			}
		},
	}))
	t.Cleanup(p.Close)
	if !p.ReportFor(bucket, "a", 1, 0, 20*time.Second, t0) {
		t.Fatal("report refused")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := p.Exchange(ctx, []Need{{Bucket: bucket, Limit: 10, TTL: 20 * time.Second}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Exchange on an ended context: %v, want context.Canceled", err)
	}
	if got := failed.Load(); got != 1 {
		t.Errorf("failed calls observed after a call that never reached the store: %d, want 1", got)
	}
	store.down.Store(true)
	if err := p.Exchange(t.Context(), []Need{{Bucket: bucket, Limit: 10, TTL: 20 * time.Second}}); !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("Exchange with the store down: %v, want ErrUnavailable", err)
	}
	if got := failed.Load(); got != 2 {
		t.Errorf("failed calls observed after a store call failed: %d, want 2 (each once)", got)
	}
	store.down.Store(false)
	if err := p.Exchange(t.Context(), []Need{{Bucket: bucket, Limit: 10, TTL: 20 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	if failed.Load() != 2 || ok.Load() != 1 {
		t.Errorf("observed %d failed and %d ok calls, want 2 and 1", failed.Load(), ok.Load())
	}
}

// TestPoolMoved: an exchange that moves a bucket's grant signals Moved,
// and TakeMoved hands the bucket over once.
func TestPoolMoved(t *testing.T) {
	const bucket = "edge/k=v"
	pools, _, _ := replicas(t, 1)
	p := pools[0]
	c := &poolClient{id: "a", pool: p, demand: 5}
	c.report(t, bucket, 10, 10*time.Second, t0) // the first grant moves it
	select {
	case <-p.Moved():
	default:
		t.Fatal("Moved did not signal after the first grant")
	}
	if got := p.TakeMoved(nil); !slices.Equal(got, []string{bucket}) {
		t.Errorf("TakeMoved: %q, want [%q]", got, bucket)
	}
	if got := p.TakeMoved(nil); len(got) != 0 {
		t.Errorf("TakeMoved again: %q, want none", got)
	}
}

// TestPoolWithoutStore: a Pool without a store divides each limit among
// its own clients, never exchanges, and no grant lapses.
func TestPoolWithoutStore(t *testing.T) {
	const bucket = "edge/k=v"
	p := NewPool(PoolOptions{})
	t.Cleanup(p.Close)
	for _, c := range []string{"a", "b"} {
		if !p.ReportFor(bucket, c, 1, 0, 20*time.Second, t0) {
			t.Fatalf("%s: report refused", c)
		}
	}
	if err := p.Exchange(t.Context(), []Need{{Bucket: bucket, Limit: 10, TTL: 20 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	if p.Shared() || p.Lapsed(bucket, t0, 20*time.Second) {
		t.Errorf("Shared %v, Lapsed %v: want false, false", p.Shared(), p.Lapsed(bucket, t0, 20*time.Second))
	}
	if s, ok := p.Share(bucket, "a", 10, t0); !ok || s != 5 {
		t.Errorf("share of a: %v, %v; want 5, true", s, ok)
	}
}
