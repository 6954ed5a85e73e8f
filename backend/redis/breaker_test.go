package redis_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/redis"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// faultyStore returns a store on url whose client dials through faults,
// with Redis I/O timeouts far above any delay the tests inject and pool
// connections per node (0: the default), after one call that dials a
// connection and loads the script.
func faultyStore(t *testing.T, url string, faults *redistest.Faults, opts redis.Options, pool int) *redis.Store {
	t.Helper()
	client, err := redis.NewClient(url, redis.ClientOptions{
		Dialer: faults.Dial, PoolSize: pool,
		DialTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	opts.LocalCache = -1
	// The first call dials, checks the node's version and loads the
	// script: more than a test's short Timeout under -race on a busy
	// machine. A patient store makes it on the same client, whose warm
	// connection the store then uses.
	patient := opts
	patient.Timeout = 5 * time.Second
	mustTake(t, newStore(t, client, patient), descriptors(1, hourly(1000))...)
	return newStore(t, client, opts)
}

// topologies are the deployments the breaker tests run on: standalone
// Redis batched and one script per call, Sentinel (one script per call:
// batched, it is standalone's code) and Cluster.
func topologies(t *testing.T) map[string]func(*testing.T) (string, redis.Options) {
	t.Helper()
	return map[string]func(*testing.T) (string, redis.Options){
		"standalone": func(t *testing.T) (string, redis.Options) {
			return "redis://" + redistest.Start(t).Addr, redis.Options{}
		},
		"standalone unbatched": func(t *testing.T) (string, redis.Options) {
			return "redis://" + redistest.Start(t).Addr, redis.Options{NoBatch: true}
		},
		"sentinel": func(t *testing.T) (string, redis.Options) {
			return redistest.StartSentinel(t).URL(), redis.Options{NoBatch: true}
		},
		"cluster": func(t *testing.T) (string, redis.Options) {
			return redistest.StartCluster(t, 3).URL(), redis.Options{}
		},
	}
}

// shortTakes makes n calls at a 1 ms caller deadline, and checks that
// each one fails.
func shortTakes(t *testing.T, s *redis.Store, n int) {
	t.Helper()
	reqs := descriptors(1, hourly(1000))
	for i := range n {
		ctx, cancel := context.WithTimeout(t.Context(), time.Millisecond)
		err := s.Take(ctx, reqs, make([]backend.Result, 1))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Take %d at a 1 ms deadline on a delayed Redis: %v, want its deadline exceeded", i, err)
		}
	}
}

// TestCallerDeadlineKeepsBreakerClosed: callers that give up at 1 ms on a
// Redis delayed by 100 ms (well within the store's timeout) do not open
// the breaker, on any topology: their deadlines are theirs, not Redis's
// failures.
func TestCallerDeadlineKeepsBreakerClosed(t *testing.T) {
	for name, start := range topologies(t) {
		t.Run(name, func(t *testing.T) {
			url, opts := start(t)
			var faults redistest.Faults
			opts.Timeout = 3 * time.Second
			s := faultyStore(t, url, &faults, opts, 0)
			faults.Delay(100 * time.Millisecond)
			shortTakes(t, s, 5)
			s.Close() // waits for the calls the callers left
			if got := s.State(); got != "ok" {
				t.Errorf("State() after 5 callers gave up at 1 ms = %q, want ok", got)
			}
			s.Breakers(func(node, state string) {
				if state != "closed" {
					t.Errorf("breaker of %s = %s, want closed", node, state)
				}
			})
		})
	}
}

// TestSlowRedisCountsWithoutCallers: a Redis slower than the store's
// timeout opens the breaker even when every caller has gone before it.
func TestSlowRedisCountsWithoutCallers(t *testing.T) {
	for name, start := range topologies(t) {
		if name == "standalone" {
			continue // batched: callers gone before their batch leaves are not sent at all
		}
		t.Run(name, func(t *testing.T) {
			url, opts := start(t)
			if name == "cluster" {
				// Batched per node, like standalone: a call whose caller
				// has gone before its batch leaves is not sent.
				opts.NoBatch = true
			}
			var faults redistest.Faults
			opts.Timeout = 100 * time.Millisecond
			opts.BreakerOpenDelay = time.Hour // no probe meanwhile
			s := faultyStore(t, url, &faults, opts, 0)
			faults.Delay(300 * time.Millisecond)
			shortTakes(t, s, 3)
			s.Close()
			if got := s.State(); got != "open" {
				t.Errorf("State() after 3 calls timed out in the store, their callers gone = %q, want open", got)
			}
		})
	}
}

// TestClusterStartsUnreachable: a store started while the Cluster is down
// opens its fallback breaker; once the Cluster is up, the store's own
// probes drop it and State() returns to ok with no caller traffic.
func TestClusterStartsUnreachable(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	for _, n := range c.Nodes {
		n.Kill() // the ports stay the Cluster's, with no server behind them
	}
	client, err := redis.NewClient(c.URL(), redis.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	s := newStore(t, client, redis.Options{LocalCache: -1, Timeout: 200 * time.Millisecond, BreakerOpenDelay: 50 * time.Millisecond})
	reqs := descriptors(1, hourly(1000))
	for range 3 {
		if _, err := take(t, s, reqs...); err == nil {
			t.Fatal("Take with the Cluster down: no error")
		}
	}
	if got := s.State(); got == "ok" {
		t.Fatalf("State() after 3 failures with the Cluster down = %q, want open or half-open", got)
	}
	for _, n := range c.Nodes {
		n.Restart(t)
	}
	c.WaitOK(t)
	deadline := time.Now().Add(15 * time.Second)
	for s.State() != "ok" {
		if time.Now().After(deadline) {
			breakers := map[string]string{}
			s.Breakers(func(node, state string) { breakers[node] = state })
			t.Fatalf("State() 15 s after the Cluster came up = %q, breakers %v; want ok", s.State(), breakers)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Breakers(func(node, state string) {
		if node == "cluster" {
			t.Errorf("the fallback breaker is still there (%s) once the Cluster is up", state)
		}
	})
	waitTake(t, s, 5*time.Second, reqs...)
}

// TestHeavyCallsFailAlone: heavy calls (64 sliding_log descriptors each)
// made slower than the store's timeout fail alone: 32 ordinary callers
// beside them, with the store's ordinary deadline, all get their
// decisions. There are more heavy calls than connections in the pool:
// they may take only half of it.
func TestHeavyCallsFailAlone(t *testing.T) {
	srv := redistest.Start(t)
	var faults redistest.Faults
	const timeout, pool, heavyCalls = time.Second, 4, 8
	s := faultyStore(t, "redis://"+srv.Addr, &faults, redis.Options{Timeout: timeout, BreakerFailures: 100}, pool)
	heavy := descriptors(64, backend.Limit{Algorithm: backend.SlidingLog, Requests: 10000, Window: time.Hour})
	for i := range heavy {
		heavy[i].Key = "heavy" + heavy[i].Key
	}
	// Every write that carries a heavy call is held back three timeouts.
	faults.DelayMatching(3*timeout, []byte("heavy"))

	heavyErrs := make(chan error, heavyCalls)
	for range heavyCalls {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			heavyErrs <- s.Take(ctx, heavy, make([]backend.Result, len(heavy)))
		}()
	}
	if err := faults.WaitDelayed(t.Context(), 1); err != nil { // heavy calls are on the wire
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	errs := make(chan error, 32*5)
	for c := range 32 {
		wg.Go(func() {
			reqs := descriptors(c+1, hourly(1000))[c:]
			for range 5 {
				if err := s.Take(t.Context(), reqs, make([]backend.Result, 1)); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if failed++; failed == 1 {
			t.Errorf("an ordinary call beside slow heavy ones failed: %v", err)
		}
	}
	if failed > 0 {
		t.Errorf("%d of 160 ordinary calls failed beside %d slow heavy calls, want none", failed, heavyCalls)
	}
	for range heavyCalls {
		if err := <-heavyErrs; err == nil {
			t.Error("a heavy call, held back three timeouts: no error")
		}
	}
}

// TestClusterRefund: a refused call over two slots gives back what the
// admitted slot took, retrying a refund that was not sent; a refund that
// keeps failing is counted, and its hits stay.
func TestClusterRefund(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	var faults redistest.Faults
	s := faultyStore(t, c.URL(), &faults, redis.Options{Timeout: time.Second}, 0)
	reqs := descriptors(2, hourly(100))
	reqs[0].Limit = hourly(1)
	for i := range reqs {
		reqs[i].Key = "refund-test" + reqs[i].Key // not the keys faultyStore used
	}
	remaining := func() uint64 { return mustTake(t, s, reqs[1])[0].Remaining }
	mustTake(t, s, reqs...) // both slots admitted; reqs[0] is at its limit
	before := remaining()

	marker := redis.RefundMarker(1) // the refund of the free slot's request
	faults.FailMatching(marker, 1)
	if res := mustTake(t, s, reqs...); !backend.Refused(reqs, res) {
		t.Fatalf("call over a full and a free slot: admitted %+v", res)
	}
	if faults.Failed() != 1 {
		t.Fatalf("the refund's first write was not failed (%d failures): the test proves nothing", faults.Failed())
	}
	if after := remaining(); after != before-1 {
		t.Errorf("remaining on the free slot %d -> %d after a refused call whose refund was retried, want only the check's own hit counted", before, after)
	}
	if got := s.RefundFailures(); got != 0 {
		t.Errorf("RefundFailures() = %d after a retried refund, want 0", got)
	}

	faults.FailMatching(marker, 0) // every refund fails
	before = remaining()
	if _, err := take(t, s, reqs...); err != nil {
		t.Fatalf("a refused call whose refund fails: %v, want its decision", err)
	}
	faults.FailMatching(nil, 0)
	if got := s.RefundFailures(); got != 1 {
		t.Errorf("RefundFailures() = %d after a refund that kept failing, want 1", got)
	}
	if after := remaining(); after != before-2 {
		t.Errorf("remaining on the free slot %d -> %d after a failed refund, want the refused call's hit to stay counted", before, after)
	}
	want := `
# HELP ratelimitd_backend_refund_failures_total Refunds that failed: a refused call's hits on one part (a Redis Cluster slot, or one of the main and per-second Redis) that stay counted.
# TYPE ratelimitd_backend_refund_failures_total counter
ratelimitd_backend_refund_failures_total 1
`
	if err := testutil.CollectAndCompare(s, strings.NewReader(want), "ratelimitd_backend_refund_failures_total"); err != nil {
		t.Errorf("refund failure metric: %v", err)
	}
}

// TestUnreachedUntilRedisAnswers: a store started while Redis is down is
// "unreached" (no call has opened a breaker, for none was made), and its
// own probe finds Redis when it comes up: the state turns "ok" without a
// call.
func TestUnreachedUntilRedisAnswers(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	srv.Kill() // its address is dead until Restart
	s := newStore(t, newClient(t, "redis://"+srv.Addr), redis.Options{BreakerOpenDelay: 20 * time.Millisecond})
	if got := s.State(); got != "unreached" {
		t.Fatalf("State() with Redis down from the start = %q, want unreached", got)
	}
	srv.Restart(t)
	for deadline := time.Now().Add(30 * time.Second); s.State() != "ok"; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) { // a bound against hanging, not a timing assertion
			t.Fatalf("State() 30 s after Redis came up = %q, want ok", s.State())
		}
	}
}
