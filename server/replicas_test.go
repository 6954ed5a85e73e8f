package server_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/ratelimitd/ratelimitd/backend/redis"
	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/grpctest"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
	"github.com/ratelimitd/ratelimitd/server"
)

// replica is one daemon of several on one Redis: its own store (its
// own connections) and its own gRPC server.
type replica struct {
	envoy  rlsv3.RateLimitServiceClient
	native ratelimitv1.RateLimitServiceClient
}

// startReplicas starts n replicas deciding the rules of files on the
// Redis at url, each with a client of its own.
func startReplicas(t *testing.T, url string, n int, files ...string) []replica {
	t.Helper()
	rs := make([]replica, n)
	for i := range rs {
		client, err := redis.NewClient(url, redis.ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { client.Close() })
		store, err := redis.New(client, redis.Options{Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		srv := server.New(store, loadRules(t, files...), server.Options{})
		t.Cleanup(srv.EndHealthWatches)
		g := grpc.NewServer(srv.GRPCOptions()...)
		srv.Register(g)
		conn, _ := grpctest.Serve(t, g)
		rs[i] = replica{envoy: rlsv3.NewRateLimitServiceClient(conn), native: ratelimitv1.NewRateLimitServiceClient(conn)}
	}
	return rs
}

// TestConcurrencyAcrossReplicas: callers acquire and release slots of one
// concurrency limit (2 at once) through three replicas on one Redis,
// standalone and Cluster, each through a replica picked at random for
// each call: on one tenant by Acquire and Release with leases, on
// another as Envoy does (a hit, then is_negative_hits; the two are not
// mixed on one tenant, since a give-back that names no lease may free a
// lease's slot, which then lapses instead of being released). A caller
// counts itself in once its acquire is admitted and out before it
// releases: the count never exceeds the limit, the limit is reached (the
// test is not vacuous), and every slot is free at the end.
func TestConcurrencyAcrossReplicas(t *testing.T) {
	redistest.Require(t)
	topologies := map[string]func(t *testing.T) string{
		"redis": func(t *testing.T) string { return "redis://" + redistest.Start(t).Addr },
		"redis-cluster": func(t *testing.T) string {
			c := redistest.StartCluster(t, 3)
			return c.URL()
		},
	}
	for name, start := range topologies {
		t.Run(name, func(t *testing.T) {
			reps := startReplicas(t, start(t), 3, "concurrency.yaml")
			const limit, callers, rounds = 2, 4, 40
			for _, tenant := range []string{"leases", "envoy"} {
				var inside, most, admitted atomic.Int64
				var wg sync.WaitGroup
				errs := make(chan error, callers)
				for c := range callers {
					wg.Go(func() {
						rng := rand.New(rand.NewPCG(uint64(c), 7))
						pick := func() replica { return reps[rng.IntN(len(reps))] }
						for range rounds {
							if err := holdOnce(t, pick, tenant, &inside, &most, &admitted, limit); err != nil {
								errs <- err
								return
							}
						}
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Fatal(err)
				}
				if most.Load() > limit {
					t.Errorf("%s: %d callers held slots at once, over the limit of %d", tenant, most.Load(), limit)
				}
				if most.Load() < limit || admitted.Load() < limit*2 {
					t.Errorf("%s: at most %d callers at once and %d admitted: the test did not reach the limit", tenant, most.Load(), admitted.Load())
				}
				// Every slot was given back: the limit is whole again.
				resp, err := reps[0].native.ShouldRateLimit(t.Context(), &ratelimitv1.ShouldRateLimitRequest{Domain: "jobs",
					Descriptors: []*ratelimitv1.Descriptor{{Entries: nativeDesc("exports", tenant).Entries, Hits: new(uint64)}}})
				if err != nil || resp.GetStatuses()[0].GetRemaining() != limit {
					t.Errorf("%s: after every release: %v, %v; want %d remaining", tenant, resp, err, limit)
				}
			}
		})
	}
}

// holdOnce acquires a slot of exports=tenant through a replica from
// pick, by lease for tenant "leases" and as Envoy does otherwise, and if
// admitted counts itself inside for a moment, then out, then releases.
func holdOnce(t *testing.T, pick func() replica, tenant string, inside, most, admitted *atomic.Int64, limit int64) error {
	ctx := t.Context()
	descs := []*ratelimitv1.Descriptor{nativeDesc("exports", tenant)}
	var release func() error
	if tenant == "leases" {
		resp, err := pick().native.Acquire(ctx, &ratelimitv1.AcquireRequest{Domain: "jobs", Descriptors: descs})
		if err != nil {
			return fmt.Errorf("Acquire: %w", err)
		}
		if resp.GetCode() != ratelimitv1.Code_CODE_OK {
			return nil
		}
		release = func() error {
			_, err := pick().native.Release(ctx, &ratelimitv1.ReleaseRequest{Domain: "jobs", Descriptors: descs, LeaseId: resp.GetLease().GetId()})
			return err
		}
	} else {
		resp, err := pick().envoy.ShouldRateLimit(ctx, request("jobs", desc("exports", tenant)))
		if err != nil {
			return fmt.Errorf("ShouldRateLimit: %w", err)
		}
		if resp.GetOverallCode() != ok {
			return nil
		}
		release = func() error {
			_, err := pick().envoy.ShouldRateLimit(ctx, request("jobs", giveBack(desc("exports", tenant))))
			return err
		}
	}
	admitted.Add(1)
	n := inside.Add(1)
	for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
	}
	if n > limit {
		inside.Add(-1)
		return fmt.Errorf("%d callers inside a limit of %d", n, limit)
	}
	time.Sleep(time.Millisecond) // hold it while others try
	inside.Add(-1)
	if err := release(); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}
