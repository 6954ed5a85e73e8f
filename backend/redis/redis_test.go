package redis_test

import (
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/backendtest"
	"github.com/ratelimitd/ratelimitd/backend/redis"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// newStore returns a Store on client, closed at the end of the test.
//
// A store without a Timeout gets a patient one: the first call dials and
// loads the scripts, which can take longer than DefaultTimeout under
// -race on a busy machine. The tests of timeouts set theirs.
func newStore(t *testing.T, client goredis.UniversalClient, opts redis.Options) *redis.Store {
	t.Helper()
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Second
	}
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
// one Redis deployment; with eval, the stores run their script with
// EVALSHA, as on Redis before 7.0.
func conformance(t *testing.T, url string, opts redis.Options, eval bool) {
	client := newClient(t, url)
	backendtest.Run(t, func(t *testing.T, now func() time.Time) backend.Store {
		o := opts
		o.Prefix = t.Name() + ":" // one store per test, each on its own keys
		o.Now = now
		o.Timeout = 2 * time.Second // -race on a shared machine
		s := newStore(t, client, o)
		if eval {
			redis.EvalOnly(s)
		}
		return s
	})
}

func TestConformanceStandalone(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	t.Run("local cache", func(t *testing.T) { conformance(t, "redis://"+srv.Addr, redis.Options{}, false) })
	t.Run("no local cache", func(t *testing.T) { conformance(t, "redis://"+srv.Addr, redis.Options{LocalCache: -1}, false) })
	t.Run("EVALSHA", func(t *testing.T) { conformance(t, "redis://"+srv.Addr, redis.Options{}, true) })
	t.Run("unbatched", func(t *testing.T) { conformance(t, "redis://"+srv.Addr, redis.Options{NoBatch: true}, false) })
}

func TestConformanceCluster(t *testing.T) {
	redistest.Require(t)
	c := redistest.StartCluster(t, 3)
	// The local cache is off: on Cluster it may remember a refusal caused
	// by hits another call is about to give back, and the suite's clock
	// stands still (see Store).
	t.Run("FCALL", func(t *testing.T) { conformance(t, c.URL(), redis.Options{LocalCache: -1}, false) })
	t.Run("EVALSHA", func(t *testing.T) { conformance(t, c.URL(), redis.Options{LocalCache: -1}, true) })
}

func TestConformanceSentinel(t *testing.T) {
	redistest.Require(t)
	s := redistest.StartSentinel(t)
	conformance(t, s.URL(), redis.Options{}, false)
}

func TestNewClient(t *testing.T) {
	c, err := redis.NewClient("redis-cluster://127.0.0.1:1?addr=127.0.0.1:2", redis.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	opt := c.(*goredis.ClusterClient).Options()
	if opt.MaxRedirects > 0 || opt.MaxRetries > 0 || !opt.ContextTimeoutEnabled || opt.ReadTimeout != redis.DefaultIOTimeout {
		t.Errorf("cluster options: MaxRedirects %d, MaxRetries %d, ContextTimeoutEnabled %v, ReadTimeout %v; want no re-sends, context deadlines, %v",
			opt.MaxRedirects, opt.MaxRetries, opt.ContextTimeoutEnabled, opt.ReadTimeout, redis.DefaultIOTimeout)
	}
	c2, err := redis.NewClient("redis://127.0.0.1:1/2?dial_timeout=7ms", redis.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if o := c2.(*goredis.Client).Options(); o.DB != 2 || o.DialTimeout != 7*time.Millisecond || o.MaxRetries > 0 {
		t.Errorf("redis:// options: DB %d, DialTimeout %v, MaxRetries %d; want 2, 7ms (the URL's), no retries", o.DB, o.DialTimeout, o.MaxRetries)
	}

	for _, bad := range []struct{ url, want string }{
		{"memcached://h:1", "unknown scheme"},
		{"redis-sentinel://h:26379", "master_name"},
		{"redis://user:secret@h:notaport/0", "xxxxx"},
		{"h:6379", "want scheme"},
	} {
		_, err := redis.NewClient(bad.url, redis.ClientOptions{})
		if err == nil || !strings.Contains(err.Error(), bad.want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("NewClient(%q) error = %v, want one mentioning %q, without the password", bad.url, err, bad.want)
		}
	}
	if _, err := redis.NewClient("redis://h:1", redis.ClientOptions{CAFile: "/nonexistent"}); err == nil {
		t.Error("NewClient with a missing CA file: no error")
	}
}

// TestUnixSocket: a unix:// URL reaches Redis on its unix socket, with a
// database, and a store on it decides and counts there.
func TestUnixSocket(t *testing.T) {
	redistest.Require(t)
	sock := t.TempDir() + "/redis.sock"
	srv := redistest.Start(t, "--unixsocket", sock, "--unixsocketperm", "700")
	s := newStore(t, newClient(t, "unix://"+sock+"?db=3"), redis.Options{Timeout: 2 * time.Second})
	l := backend.Limit{Algorithm: backend.FixedWindow, Requests: 1, Window: time.Hour}
	reqs := []backend.Request{{Key: "unix", Limit: l, Hits: 1}}
	res := make([]backend.Result, 1)
	for i, over := range []bool{false, true} {
		if err := s.Take(t.Context(), reqs, res); err != nil {
			t.Fatalf("call %d over the unix socket: %v", i, err)
		}
		if res[0].OverLimit != over {
			t.Errorf("call %d: OverLimit %v, want %v", i, res[0].OverLimit, over)
		}
	}
	tcp := goredis.NewClient(&goredis.Options{Addr: srv.Addr, DB: 3})
	defer tcp.Close()
	if keys, err := tcp.Keys(t.Context(), "*").Result(); err != nil || len(keys) == 0 {
		t.Errorf("database 3 over TCP holds %v (%v); want the counter written over the socket", keys, err)
	}
	for _, bad := range []string{"unix-cluster:///tmp/s", "unix-sentinel:///tmp/s"} {
		if _, err := redis.NewClient(bad, redis.ClientOptions{}); err == nil || !strings.Contains(err.Error(), "unknown scheme") {
			t.Errorf("NewClient(%q) error = %v, want unknown scheme", bad, err)
		}
	}
	if _, err := redis.NewClient("unix:///tmp/s", redis.ClientOptions{CAFile: "ca.pem"}); err == nil {
		t.Error("NewClient(unix://) with TLS files: no error")
	}
}

func TestRedact(t *testing.T) {
	for _, tt := range []struct{ url, want string }{
		{"redis://h:6379/0", "redis://h:6379/0"},
		{"redis://user:secret@h:6379/0", "redis://user:xxxxx@h:6379/0"},
		{"redis://:secret@h:6379", "redis://:xxxxx@h:6379"},
		{"redis://user:p@ss@h:6379", "redis://user:xxxxx@h:6379"},
		{"redis://user@h:6379", "redis://user@h:6379"},
		{"redis://user:secret@h:notaport/0", "redis://user:xxxxx@h:notaport/0"},
		{"redis://user:pa?ss@h:6379", "redis://user:xxxxx@h:6379"},
		{"redis://user:pa/ss@h:6379/1", "redis://user:xxxxx@h:6379/1"},
		{"redis-sentinel://s1:26379?addr=s2:26379&master_name=m&sentinel_password=secret&password=secret",
			"redis-sentinel://s1:26379?addr=s2:26379&master_name=m&sentinel_password=xxxxx&password=xxxxx"},
		{"h:6379", "h:6379"},
		{"unix://:secret@/run/redis.sock?db=1", "unix://:xxxxx@/run/redis.sock?db=1"},
		{"redis:/:secret@h:6379", "redis:xxxxx@h:6379"},
		{"redis//user:secret@h:6379", "redis//user:xxxxx@h:6379"},
	} {
		if got := redis.Redact(tt.url); got != tt.want {
			t.Errorf("Redact(%q) = %q, want %q", tt.url, got, tt.want)
		}
	}
}
