package fairshare

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/backendtest"
	"github.com/ratelimitd/ratelimitd/backend/memory"
)

// faulty is a real store that fails its exchanges while down is set.
type faulty struct {
	backend.ShareStore
	down atomic.Bool
}

func (f *faulty) ExchangeShares(ctx context.Context, reqs []backend.ShareRequest, res []backend.ShareResult) error {
	if f.down.Load() {
		return fmt.Errorf("exchange: %w", backend.ErrUnavailable)
	}
	return f.ShareStore.ExchangeShares(ctx, reqs, res)
}

// replicas returns n Pools on one memory store and the shared test clock.
// Their loops only turn when woken (the interval is an hour): the tests
// turn them with turn(true), a sync interval each.
func replicas(t *testing.T, n int) ([]*Pool, *backendtest.Clock, *faulty) {
	t.Helper()
	clk := backendtest.NewClock(t0)
	mem := memory.New(memory.Options{Now: clk.Now})
	t.Cleanup(func() { mem.Close() })
	store := &faulty{ShareStore: mem}
	pools := make([]*Pool, n)
	for i := range pools {
		pools[i] = NewPool(PoolOptions{
			Store:    store,
			Replica:  fmt.Sprintf("replica-%d", i),
			Interval: time.Hour,
			Now:      clk.Now,
		})
		t.Cleanup(pools[i].Close)
	}
	return pools, clk, store
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
	if err := c.pool.Exchange(t.Context(), []Need{{Bucket: bucket, Limit: limit}}); err != nil {
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
// max-min share of the true demands (Allocate over all of them).
func TestPoolAcrossReplicas(t *testing.T) {
	const (
		bucket   = "edge/tenant=acme"
		limit    = 1000.0
		interval = 10 * time.Second
		epochs   = 6
		epoch    = 6 * interval
	)
	pools, clk, _ := replicas(t, 3)
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
			}
			for _, p := range pools {
				p.turn(t.Context(), true)
				sum, _ := sumShares(t, clients, bucket, limit, now)
				if sum > limit*(1+1e-9) {
					t.Fatalf("epoch %d, %v: shares sum to %.3f, over the limit %v", e, s, sum, limit)
				}
			}
			if s >= 2*interval {
				_, shares := sumShares(t, clients, bucket, limit, now)
				for i := range shares {
					if math.Abs(shares[i]-want[i]) > 0.05*want[i] {
						t.Fatalf("epoch %d, %v after the shift: %s (demand %.1f) has %.2f, want the max-min share %.2f",
							e, s, clients[i].id, demands[i], shares[i], want[i])
					}
				}
			}
			now = now.Add(time.Second)
			clk.Set(now)
		}
	}
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
// its entry would expire in the store, then Lapsed reports true; the next
// exchange that works renews it.
func TestPoolLapse(t *testing.T) {
	const bucket, limit = "edge/k=v", 10.0
	pools, clk, store := replicas(t, 1)
	p := pools[0]
	if !p.Lapsed(bucket, t0, time.Second) {
		t.Fatal("Lapsed before any exchange: false, want true")
	}
	c := &poolClient{id: "a", pool: p, demand: 5}
	c.report(t, bucket, limit, time.Second, t0) // kept DefaultTTL: the entry stands 30 s
	if p.Lapsed(bucket, t0, 2*time.Second) {
		t.Fatal("Lapsed right after an exchange: true, want false")
	}
	store.down.Store(true)
	clk.Set(t0.Add(20 * time.Second))
	p.turn(t.Context(), true)
	if p.Lapsed(bucket, t0.Add(20*time.Second), 2*time.Second) {
		t.Error("Lapsed 20 s into a 30 s entry, for 2 s: true, want false")
	}
	if !p.Lapsed(bucket, t0.Add(29*time.Second), 2*time.Second) {
		t.Error("Lapsed 29 s into a 30 s entry, for 2 s: false, want true (it would outlive the entry)")
	}
	clk.Set(t0.Add(31 * time.Second)) // the entry has expired in the store
	if err := p.Exchange(t.Context(), []Need{{Bucket: bucket, Limit: limit}}); !errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("Exchange of a lapsed bucket with the store down: %v, want ErrUnavailable", err)
	}
	store.down.Store(false)
	now := t0.Add(31 * time.Second)
	c.report(t, bucket, limit, time.Second, now)
	if p.Lapsed(bucket, now, 2*time.Second) {
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
// last client is forgotten its entries leave the store (another replica
// may take the whole limit) and the loop ends; Close ends it too.
func TestPoolLoopEnds(t *testing.T) {
	const bucket, limit = "edge/k=v", 10.0
	pools, _, _ := replicas(t, 2)
	a := &poolClient{id: "a", pool: pools[0], demand: 1000}
	a.report(t, bucket, limit, time.Second, t0)
	pools[0].mu.Lock()
	done := pools[0].done
	pools[0].mu.Unlock()
	if done == nil {
		t.Fatal("no loop after the first exchange")
	}
	pools[0].Forget("a")
	<-done // the loop removes the entry, then ends
	b := &poolClient{id: "b", pool: pools[1], demand: 1000}
	b.report(t, bucket, limit, time.Second, t0)
	if s, _ := pools[1].Share(bucket, "b", limit, t0); s != limit {
		t.Errorf("after the other replica's client left: share %v, want the whole limit %v", s, limit)
	}
	pools[1].Close()
	pools[1].Close() // twice is fine
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
					p.Forget(id)
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
