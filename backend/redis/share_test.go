package redis_test

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/backendtest"
	"github.com/ratelimitd/ratelimitd/backend/redis"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// shareConformance runs backendtest.RunShares with every store on a fresh
// prefix of one Redis deployment.
func shareConformance(t *testing.T, url string, opts redis.Options) {
	client := newClient(t, url)
	backendtest.RunShares(t, func(t *testing.T, now func() time.Time) backend.ShareStore {
		o := opts
		o.Prefix = t.Name() + ":" // one store per test, each on its own keys
		o.Now = now
		o.Timeout = 2 * time.Second // -race on a shared machine
		return newStore(t, client, o)
	})
}

func TestShareConformanceStandalone(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	shareConformance(t, "redis://"+srv.Addr, redis.Options{})
}

func TestShareConformanceCluster(t *testing.T) {
	redistest.Require(t)
	c := redistest.StartCluster(t, 3)
	shareConformance(t, c.URL(), redis.Options{})
}

func TestShareConformanceSentinel(t *testing.T) {
	redistest.Require(t)
	shareConformance(t, redistest.StartSentinel(t).URL(), redis.Options{})
}

// share is a request of replica on bucket for want of a limit of 10,
// standing ttl.
func share(bucket, replica string, want float64, ttl time.Duration) backend.ShareRequest {
	return backend.ShareRequest{Bucket: bucket, Replica: replica, Limit: 10, Want: want, Demands: []float64{want}, TTL: ttl}
}

// exchange runs one ExchangeShares call and returns its results and error.
func exchange(t *testing.T, s *redis.Store, reqs ...backend.ShareRequest) ([]backend.ShareResult, error) {
	t.Helper()
	res := make([]backend.ShareResult, len(reqs))
	err := s.ExchangeShares(t.Context(), reqs, res)
	return res, err
}

// TestShareKeyOnRedisClock: on Redis's clock (no Options.Now), a bucket is
// one key, named with the prefix and a hash tag, that lives as long as
// its latest entry, and goes with its last entry.
func TestShareKeyOnRedisClock(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	s := newStore(t, newClient(t, "redis://"+srv.Addr), redis.Options{Prefix: "p:", Timeout: 2 * time.Second})
	res, err := exchange(t, s, share("b", "r1", 6, 10*time.Second), share("b", "r2", 6, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Granted != 6 || res[1].Granted != 4 {
		t.Errorf("grants = %v, %v; want 6, 4", res[0].Granted, res[1].Granted)
	}
	key := redis.ShareKey("p:", "b")
	if !strings.HasPrefix(key, "p:rlqs:v1:{") || !strings.HasSuffix(key, "}") {
		t.Errorf("ShareKey(p:, b) = %q, want p:rlqs:v1:{digest}", key)
	}
	if keys := rdb.Keys(t.Context(), "*").Val(); !slices.Equal(keys, []string{key}) {
		t.Errorf("keys in Redis = %q, want [%q]", keys, key)
	}
	if ttl := rdb.PTTL(t.Context(), key).Val(); ttl <= 10*time.Second || ttl > 20*time.Second {
		t.Errorf("PTTL of the bucket's key = %v, want the latest entry's, (10 s, 20 s]", ttl)
	}
	if _, err := exchange(t, s, share("b", "r1", 6, 0), share("b", "r2", 6, 0)); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(t.Context(), key).Val(); n != 0 {
		t.Errorf("the bucket's key exists after its last entry left")
	}
}

// TestShareScriptFlushed: a Redis that lost the script (a restart,
// SCRIPT FLUSH) gets it again, and the call succeeds.
func TestShareScriptFlushed(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	s := newStore(t, newClient(t, "redis://"+srv.Addr), redis.Options{Timeout: 2 * time.Second})
	for i := range 2 {
		if err := rdb.ScriptFlush(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		res, err := exchange(t, s, share("a", "r1", 6, time.Minute), share("b", "r1", 7, time.Minute), share("a", "r2", 6, time.Minute))
		if err != nil {
			t.Fatalf("call %d after SCRIPT FLUSH: %v", i, err)
		}
		if got, want := []float64{res[0].Granted, res[1].Granted, res[2].Granted}, []float64{6, 7, 4}; !slices.Equal(got, want) {
			t.Errorf("call %d after SCRIPT FLUSH: grants %v, want %v", i, got, want)
		}
	}
}

// TestShareRedisDown: a Redis that has gone fails the calls, then, once
// the breaker has opened, fails them with backend.ErrUnavailable; on
// Cluster, a call that touches a node that has gone.
func TestShareRedisDown(t *testing.T) {
	redistest.Require(t)
	t.Run("standalone", func(t *testing.T) {
		srv := redistest.Start(t)
		s := newStore(t, newClient(t, "redis://"+srv.Addr), redis.Options{Timeout: 2 * time.Second, BreakerOpenDelay: time.Hour})
		if _, err := exchange(t, s, share("b", "r1", 6, time.Minute)); err != nil {
			t.Fatal(err)
		}
		srv.Kill()
		shareDown(t, s, share("b", "r1", 6, time.Minute))
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t, 3)
		s := newStore(t, newClient(t, c.URL()), redis.Options{Timeout: 2 * time.Second, BreakerOpenDelay: time.Hour})
		prefix := redis.DefaultPrefix
		down := c.NodeForKey(t, redis.ShareKey(prefix, "b"))
		var up string // a bucket on another node
		for i := 0; up == ""; i++ {
			if b := "u" + strconv.Itoa(i); c.NodeForKey(t, redis.ShareKey(prefix, b)) != down {
				up = b
			}
		}
		if _, err := exchange(t, s, share("b", "r1", 6, time.Minute), share(up, "r1", 6, time.Minute)); err != nil {
			t.Fatal(err)
		}
		down.Kill()
		shareDown(t, s, share(up, "r1", 6, time.Minute), share("b", "r1", 6, time.Minute))
		if res, err := exchange(t, s, share(up, "r2", 6, time.Minute)); err != nil || res[0].Granted != 4 {
			t.Errorf("a call on a node that is up: granted %v, error %v; want 4, none", res[0].Granted, err)
		}
	})
}

// shareDown checks that calls of reqs fail, and fail with
// backend.ErrUnavailable once the breaker has opened.
func shareDown(t *testing.T, s *redis.Store, reqs ...backend.ShareRequest) {
	t.Helper()
	for i := range redis.DefaultBreakerFailures + 1 {
		_, err := exchange(t, s, reqs...)
		switch {
		case err == nil:
			t.Fatalf("call %d on a Redis that has gone: no error", i)
		case i == redis.DefaultBreakerFailures && !errors.Is(err, backend.ErrUnavailable):
			t.Errorf("call %d, after %d failures: %v, want an error wrapping backend.ErrUnavailable", i, i, err)
		}
	}
}

// TestShareTimeout: a Redis slower than the store's timeout fails a call
// whose caller set no deadline of its own.
func TestShareTimeout(t *testing.T) {
	redistest.Require(t)
	var faults redistest.Faults
	s := faultyStore(t, "redis://"+redistest.Start(t).Addr, &faults, redis.Options{Timeout: 100 * time.Millisecond}, 0)
	faults.Delay(time.Second)
	defer faults.Delay(0)
	if _, err := exchange(t, s, share("b", "r1", 6, time.Minute)); err == nil {
		t.Error("ExchangeShares on a Redis slower than the store's timeout: no error")
	}
}
