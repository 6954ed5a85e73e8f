package redis_test

import (
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/redis"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// TestFunctionFlush: the function library comes back after FUNCTION FLUSH,
// on standalone Redis and on Cluster.
func TestFunctionFlush(t *testing.T) {
	redistest.Require(t)
	t.Run("standalone", func(t *testing.T) {
		srv := redistest.Start(t)
		for _, opts := range []redis.Options{{LocalCache: -1}, {LocalCache: -1, NoBatch: true}} {
			s := newStore(t, newClient(t, "redis://"+srv.Addr), opts)
			reqs := descriptors(1, hourly(3))
			mustTake(t, s, reqs...)
			if err := srv.Client(t).FunctionFlush(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
			if r := mustTake(t, s, reqs...); r[0].Remaining != 1 {
				t.Errorf("NoBatch %v, after FUNCTION FLUSH: %+v, want 1 remaining", opts.NoBatch, r[0])
			}
			if err := srv.Client(t).FlushAll(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t, 3)
		s := newStore(t, newClient(t, c.URL()), redis.Options{LocalCache: -1, Timeout: 5 * time.Second})
		reqs := descriptors(6, hourly(3))
		mustTake(t, s, reqs...)
		for _, n := range c.Nodes {
			if err := n.Client(t).FunctionFlush(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if r := mustTake(t, s, reqs...); r[0].Remaining != 1 {
			t.Errorf("after FUNCTION FLUSH: %+v, want 1 remaining", r[0])
		}
		for _, n := range c.Nodes {
			if err := n.Client(t).FunctionFlush(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if r := mustTake(t, s, reqs[0]); r[0].Remaining != 0 {
			t.Errorf("after FUNCTION FLUSH: %+v, want 0 remaining", r[0])
		}
	})
}

// TestClusterFunctionFlushNodeDown: a master that lost the function
// library gets it back while another master is down.
func TestClusterFunctionFlushNodeDown(t *testing.T) {
	redistest.Require(t)
	c := redistest.StartCluster(t, 3)
	client := newClient(t, c.URL())
	reqs := descriptors(30, hourly(1000))
	mustTake(t, newStore(t, client, redis.Options{LocalCache: -1, Timeout: 5 * time.Second}), reqs...)
	s := newStore(t, client, redis.Options{LocalCache: -1, Timeout: time.Second})
	var nodes []*goredis.Client
	for _, n := range c.Nodes {
		nodes = append(nodes, n.Client(t))
	}
	node := func(r backend.Request) *redistest.Server {
		for _, n := range nodes {
			if keys, _ := n.Keys(t.Context(), "*"+r.Key+"@*").Result(); len(keys) == 1 {
				return c.NodeForKey(t, keys[0])
			}
		}
		t.Fatalf("no node holds a key ending in %q", r.Key)
		return nil
	}
	down := node(reqs[0])
	var flushed *redistest.Server
	var on []backend.Request
	for _, r := range reqs {
		if n := node(r); n != down && (flushed == nil || n == flushed) {
			flushed = n
			on = append(on, r)
		}
	}
	if err := flushed.Client(t).FunctionFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	down.Kill()
	// Before the Cluster notices (cluster-node-timeout): slots of live
	// masters still serve.
	if _, err := take(t, s, on...); err != nil {
		t.Errorf("Take on a flushed live master's slots, another master down: %v", err)
	}
}

// TestFunctionDenied: where the user may not run FUNCTION LOAD or FCALL
// (an ACL, a renamed command), the store runs its script with EVALSHA.
func TestFunctionDenied(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	for user, rule := range map[string]string{"noload": "-function", "nofcall": "-fcall"} {
		if err := srv.Client(t).Do(t.Context(), "ACL", "SETUSER", user, "on", ">pw", "~*", "+@all", rule).Err(); err != nil {
			t.Fatal(err)
		}
		s := newStore(t, newClient(t, "redis://"+user+":pw@"+srv.Addr), redis.Options{LocalCache: -1})
		countDown(t, user, s, descriptors(1, hourly(3)))
		if err := srv.Client(t).FlushAll(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestClusterFunctionDenied: TestFunctionDenied on Cluster, over several
// slots.
func TestClusterFunctionDenied(t *testing.T) {
	redistest.Require(t)
	c := redistest.StartCluster(t, 3)
	for user, rule := range map[string]string{"noload": "-function", "nofcall": "-fcall"} {
		for _, n := range c.Nodes {
			if err := n.Client(t).Do(t.Context(), "ACL", "SETUSER", user, "on", ">pw", "~*", "+@all", rule).Err(); err != nil {
				t.Fatal(err)
			}
		}
		url := strings.Replace(c.URL(), "://", "://"+user+":pw@", 1)
		s := newStore(t, newClient(t, url), redis.Options{LocalCache: -1, Timeout: 5 * time.Second})
		countDown(t, user, s, descriptors(6, hourly(3)))
		for _, n := range c.Nodes {
			if err := n.Client(t).FlushAll(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// countDown takes reqs, whose limits admit 3, twice, and checks that the
// first request has 2 then 1 remaining: that the store decides, and
// counts.
func countDown(t *testing.T, name string, s backend.Store, reqs []backend.Request) {
	t.Helper()
	for want := uint64(2); want > 0; want-- {
		res, err := take(t, s, reqs...)
		if err != nil {
			t.Fatalf("%s: Take() error: %v", name, err)
		}
		if res[0].Remaining != want {
			t.Errorf("%s: %+v, want %d remaining", name, res[0], want)
		}
	}
}
