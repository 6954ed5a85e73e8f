package redis_test

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/backendtest"
	"github.com/ratelimitd/ratelimitd/backend/redis"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// newStore returns a Store on client, closed at the end of the test.
func newStore(t *testing.T, client goredis.UniversalClient, opts redis.Options) *redis.Store {
	t.Helper()
	s, err := redis.New(client, opts)
	if err != nil {
		t.Fatalf("redis.New() error: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// newClient returns a client to url with timeouts for -race on a shared
// machine, closed at the end of the test.
func newClient(t *testing.T, url string) goredis.UniversalClient {
	t.Helper()
	c, err := redis.NewClient(url, redis.ClientOptions{DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("NewClient(%q) error: %v", url, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// conformance runs backendtest.Run with every store on a fresh prefix of
// one Redis deployment.
func conformance(t *testing.T, url string, opts redis.Options) {
	client := newClient(t, url)
	n := 0
	backendtest.Run(t, func(t *testing.T, now func() time.Time) backend.Store {
		n++
		o := opts
		o.Prefix = "t" + time.Now().Format("150405.000000") + "-" + string(rune('a'+n%26)) + itoa(n) + ":"
		o.Now = now
		o.Timeout = 2 * time.Second // -race on a shared machine
		return newStore(t, client, o)
	})
}

func itoa(n int) string { return time.Duration(n).String() }

func TestConformanceStandalone(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	t.Run("local cache", func(t *testing.T) { conformance(t, "redis://"+srv.Addr, redis.Options{}) })
	t.Run("no local cache", func(t *testing.T) { conformance(t, "redis://"+srv.Addr, redis.Options{LocalCache: -1}) })
}

func TestConformanceCluster(t *testing.T) {
	redistest.Require(t)
	c := redistest.StartCluster(t, 3)
	// The local cache is off: on Cluster it may remember a refusal caused
	// by hits another call is about to give back, and the suite's clock
	// stands still (see Store).
	conformance(t, c.URL(), redis.Options{LocalCache: -1})
}

func TestConformanceSentinel(t *testing.T) {
	redistest.Require(t)
	s := redistest.StartSentinel(t)
	conformance(t, s.URL(), redis.Options{})
}
