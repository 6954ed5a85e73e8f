package redistest_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is a testing.TB whose Skip and Fatal record the message and end
// the goroutine, as the real ones do; everything else goes to the test.
type recorder struct {
	testing.TB
	skipped, fatal string
}

func (r *recorder) Skip(args ...any)  { r.skipped = fmt.Sprint(args...); runtime.Goexit() }
func (r *recorder) Fatal(args ...any) { r.fatal = fmt.Sprint(args...); runtime.Goexit() }
func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls f with a recorder on a goroutine of its own, so that Skip and
// Fatal can end it, and returns the recorder.
func run(t *testing.T, f func(tb testing.TB)) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

func TestRequire(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no redis here
	for _, tt := range []struct {
		ci                    string
		wantSkipped, wantFail bool
	}{
		{ci: "", wantSkipped: true},
		{ci: "false", wantSkipped: true},
		{ci: "true", wantFail: true},
	} {
		t.Setenv("CI", tt.ci)
		r := run(t, redistest.Require)
		if got := r.skipped != ""; got != tt.wantSkipped {
			t.Errorf("CI=%q: Require skipped = %v (%q), want %v", tt.ci, got, r.skipped, tt.wantSkipped)
		}
		if got := r.fatal != ""; got != tt.wantFail {
			t.Errorf("CI=%q: Require failed = %v (%q), want %v", tt.ci, got, r.fatal, tt.wantFail)
		}
		if msg := r.skipped + r.fatal; !strings.Contains(msg, "redis-server") {
			t.Errorf("CI=%q: Require message %q does not name redis-server", tt.ci, msg)
		}
	}
}

func TestStartFailureQuotesLog(t *testing.T) {
	t.Parallel()
	redistest.Require(t)
	r := run(t, func(tb testing.TB) { redistest.Start(tb, "--no-such-directive", "1") })
	for _, want := range []string{"did not start", "last lines of", "Bad directive"} {
		if !strings.Contains(r.fatal, want) {
			t.Errorf("Start with a bad argument failed with %q, want it to contain %q", r.fatal, want)
		}
	}
}

func TestStart(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	begin := time.Now()
	srv := redistest.Start(t, "--maxmemory", "10mb")
	t.Logf("Start took %v", time.Since(begin))
	if host, _, err := net.SplitHostPort(srv.Addr); err != nil || host != "127.0.0.1" {
		t.Fatalf("Addr = %q, want 127.0.0.1:port", srv.Addr)
	}
	if got, want := srv.Info(t, "memory")["maxmemory"], "10485760"; got != want {
		t.Errorf(`Info(t, "memory")["maxmemory"] = %q, want %q`, got, want)
	}
	rdb := srv.Client(t)
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := rdb.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k = %q, %v, want %q", got, err, "v")
	}

	srv.Kill()
	srv.Kill() // idempotent
	// A client of its own, so the one above keeps no broken connections.
	down := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer down.Close()
	if err := down.Ping(ctx).Err(); err == nil {
		t.Fatal("PING after Kill succeeded, want an error")
	}

	addr := srv.Addr
	begin = time.Now()
	srv.Restart(t)
	t.Logf("Restart took %v", time.Since(begin))
	if srv.Addr != addr {
		t.Errorf("Addr after Restart = %q, want %q", srv.Addr, addr)
	}
	if err := down.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	if err := down.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("GET k after Restart: err = %v, want redis.Nil (nothing persists)", err)
	}
	if got, want := srv.Info(t, "memory")["maxmemory"], "10485760"; got != want {
		t.Errorf(`Info(t, "memory")["maxmemory"] after Restart = %q, want %q`, got, want)
	}
	if log := srv.Log(); strings.Count(log, "### redistest:") != 2 || !strings.Contains(log, "Ready to accept connections") {
		t.Errorf("Log() does not show two launches that became ready:\n%s", log)
	}
}

func TestStartCluster(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	begin := time.Now()
	cl := redistest.StartCluster(t, 3)
	t.Logf("StartCluster took %v", time.Since(begin))
	if len(cl.Nodes) != 3 || len(cl.Addrs) != 3 {
		t.Fatalf("StartCluster(t, 3) has %d nodes and %d addrs, want 3 and 3", len(cl.Nodes), len(cl.Addrs))
	}
	if got, want := cl.URL(), "redis-cluster://"+cl.Addrs[0]+"?addr="+cl.Addrs[1]+"&addr="+cl.Addrs[2]; got != want {
		t.Errorf("URL() = %q, want %q", got, want)
	}

	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs})
	defer cc.Close()
	seen := make(map[*redistest.Server]bool)
	for i := 0; len(seen) < len(cl.Nodes); i++ {
		if i == 100 {
			t.Fatalf("100 keys reached only %d of %d nodes", len(seen), len(cl.Nodes))
		}
		key, val := fmt.Sprintf("key%d", i), fmt.Sprintf("val%d", i)
		if err := cc.Set(ctx, key, val, 0).Err(); err != nil {
			t.Fatalf("cluster SET %s: %v", key, err)
		}
		if got, err := cc.Get(ctx, key).Result(); err != nil || got != val {
			t.Fatalf("cluster GET %s = %q, %v, want %q", key, got, err, val)
		}
		node := cl.NodeForKey(t, key)
		seen[node] = true
		// The node NodeForKey names holds the key; the others redirect.
		for _, n := range cl.Nodes {
			got, err := n.Client(t).Get(ctx, key).Result()
			switch {
			case n == node && (err != nil || got != val):
				t.Errorf("GET %s on its node %s = %q, %v, want %q", key, n.Addr, got, err, val)
			case n != node && (err == nil || !strings.HasPrefix(err.Error(), "MOVED")):
				t.Errorf("GET %s on node %s = %q, %v, want a MOVED error", key, n.Addr, got, err)
			}
		}
	}

	// A restarted node rejoins with its slots, empty.
	node := cl.NodeForKey(t, "key0")
	node.Kill()
	begin = time.Now()
	node.Restart(t)
	cl.WaitOK(t)
	t.Logf("Restart of a cluster node and WaitOK took %v", time.Since(begin))
	if got := cl.NodeForKey(t, "key0"); got != node {
		t.Errorf("after Restart NodeForKey(key0) = %s, want %s", got.Addr, node.Addr)
	}
	if err := cc.Set(ctx, "key0", "again", 0).Err(); err != nil {
		t.Errorf("cluster SET key0 after the restart: %v", err)
	}
}

func TestStartSentinel(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	begin := time.Now()
	sg := redistest.StartSentinel(t)
	t.Logf("StartSentinel took %v", time.Since(begin))
	if got, want := sg.URL(), "redis-sentinel://"+sg.Addr+"?master_name="+sg.MasterName; got != want {
		t.Errorf("URL() = %q, want %q", got, want)
	}
	oldMaster, oldReplica := sg.Master, sg.Replica
	if got := sg.MasterAddr(t); got != oldMaster.Addr {
		t.Fatalf("MasterAddr() = %s, want the master %s", got, oldMaster.Addr)
	}

	fc := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    sg.MasterName,
		SentinelAddrs: []string{sg.Addr},
	})
	defer fc.Close()
	if err := fc.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatalf("SET before failover: %v", err)
	}

	begin = time.Now()
	sg.Failover(t)
	t.Logf("Failover took %v", time.Since(begin))
	if sg.Master != oldReplica || sg.Replica != oldMaster {
		t.Errorf("after Failover, Master = %s and Replica = %s, want them swapped", sg.Master.Addr, sg.Replica.Addr)
	}
	if got := sg.MasterAddr(t); got != oldReplica.Addr {
		t.Errorf("MasterAddr() after Failover = %s, want the former replica %s", got, oldReplica.Addr)
	}
	if got := oldMaster.Info(t, "replication")["role"]; got != "slave" {
		t.Errorf("former master's role = %q, want slave", got)
	}

	// The client follows the sentinel to the new master.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var err error
	for {
		if err = fc.Set(wctx, "after", "2", 0).Err(); err == nil || wctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("SET after failover: %v", err)
	}
	if got, err := sg.Master.Client(t).Get(ctx, "after").Result(); err != nil || got != "2" {
		t.Errorf("GET after on the new master = %q, %v, want %q", got, err, "2")
	}
	if got, err := sg.Master.Client(t).Get(ctx, "before").Result(); err != nil || got != "1" {
		t.Errorf("GET before on the new master = %q, %v, want %q (replicated)", got, err, "1")
	}

	// Failover leaves the group ready to fail back.
	begin = time.Now()
	sg.Failover(t)
	t.Logf("second Failover took %v", time.Since(begin))
	if got := sg.MasterAddr(t); got != oldMaster.Addr || sg.Master != oldMaster {
		t.Errorf("MasterAddr() after a second Failover = %s (Master %s), want %s", got, sg.Master.Addr, oldMaster.Addr)
	}
	if got, err := oldMaster.Client(t).Get(ctx, "after").Result(); err != nil || got != "2" {
		t.Errorf("GET after on the master after failing back = %q, %v, want %q", got, err, "2")
	}
}

// TestFaults: a client dialing through Faults sees the writes that carry
// a marker delayed, or failed a given number of times, and the others
// untouched.
func TestFaults(t *testing.T) {
	srv := redistest.Start(t)
	var f redistest.Faults
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Dialer: f.Dial, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	ctx := t.Context()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING through an idle Faults: %v", err)
	}

	f.FailMatching([]byte("marker"), 1)
	if err := c.Echo(ctx, "marker").Err(); err == nil {
		t.Error("ECHO marker with one failure armed: no error")
	}
	if err := c.Echo(ctx, "marker").Err(); err != nil {
		t.Errorf("ECHO marker after the one failure: %v", err)
	}
	if got := f.Failed(); got != 1 {
		t.Errorf("Failed() = %d, want 1", got)
	}

	f.DelayMatching(time.Millisecond, []byte("slow"))
	if err := c.Echo(ctx, "fast").Err(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Echo(context.Background(), "slow").Err() }()
	if err := f.WaitDelayed(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("ECHO slow, delayed: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if err := f.WaitDelayed(wctx, 2); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitDelayed(2) with one write delayed = %v, want the context's deadline", err)
	}
}

// TestClusterMoveSlotAndFailover: a Cluster with replicas moves a slot
// with its keys to another master, and a killed master's replica takes
// over its slots with the keys it had replicated.
func TestClusterMoveSlotAndFailover(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	begin := time.Now()
	cl := redistest.StartClusterWithReplicas(t, 3, 1)
	t.Logf("StartClusterWithReplicas(3, 1) took %v", time.Since(begin))
	if len(cl.Nodes) != 3 || len(cl.Replicas) != 3 {
		t.Fatalf("%d masters and %d replicas, want 3 and 3", len(cl.Nodes), len(cl.Replicas))
	}
	for _, m := range cl.Nodes {
		rs := cl.ReplicasOf(m)
		if len(rs) != 1 {
			t.Fatalf("master %s has %d replicas, want 1", m.Addr, len(rs))
		}
		info := rs[0].Info(t, "replication")
		if info["role"] != "slave" || !strings.HasSuffix(m.Addr, ":"+info["master_port"]) {
			t.Errorf("replica %s of %s reports role %q, master port %q", rs[0].Addr, m.Addr, info["role"], info["master_port"])
		}
	}

	cc := cl.Client(t)
	const key = "{moving}k"
	keys := []string{key, "{moving}other"}
	for _, k := range keys {
		if err := cc.Set(ctx, k, "v", time.Hour).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	slot := cl.Slot(t, key)
	from := cl.SlotOwner(t, slot)
	to := cl.Nodes[(slices.Index(cl.Nodes, from)+1)%3]
	begin = time.Now()
	cl.MoveSlot(t, slot, to)
	t.Logf("MoveSlot of 2 keys took %v", time.Since(begin))
	if got := cl.SlotOwner(t, slot); got != to {
		t.Fatalf("after MoveSlot the slot is served by %s, want %s", got.Addr, to.Addr)
	}
	for _, k := range keys {
		if got, err := to.Client(t).Get(ctx, k).Result(); err != nil || got != "v" {
			t.Errorf("GET %s on the new owner = %q, %v; want v", k, got, err)
		}
		if ttl, err := to.Client(t).TTL(ctx, k).Result(); err != nil || ttl <= 0 {
			t.Errorf("TTL %s on the new owner = %v, %v; want the key's expiry kept", k, ttl, err)
		}
		if err := from.Client(t).Get(ctx, k).Err(); err == nil || !strings.HasPrefix(err.Error(), "MOVED") {
			t.Errorf("GET %s on the former owner: %v, want MOVED", k, err)
		}
	}
	if got := cl.Keys(t, "{moving}*"); len(got) != 2 {
		t.Errorf("Keys({moving}*) = %v, want the 2 keys once", got)
	}

	// The replica has the keys (WAIT), and takes over when its master dies.
	if n, err := to.Client(t).Do(ctx, "WAIT", 1, 1000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 on %s = %d, %v", to.Addr, n, err)
	}
	replica := cl.ReplicasOf(to)[0]
	begin = time.Now()
	next := cl.Failover(t, to)
	t.Logf("Failover took %v", time.Since(begin))
	if next != replica || cl.SlotOwner(t, slot) != replica || !slices.Contains(cl.Addrs, replica.Addr) {
		t.Errorf("after Failover: new master %s, slot owner %s, Addrs %v; want the replica %s", next.Addr, cl.SlotOwner(t, slot).Addr, cl.Addrs, replica.Addr)
	}
	if got := cl.ReplicasOf(next); len(got) != 1 || got[0] != to {
		t.Errorf("ReplicasOf(new master) = %v, want the former master", got)
	}
	if got, err := next.Client(t).Get(ctx, key).Result(); err != nil || got != "v" {
		t.Errorf("GET %s on the promoted replica = %q, %v; want v", key, got, err)
	}

	// The former master, restarted, rejoins as the new master's replica.
	begin = time.Now()
	to.Restart(t)
	cl.WaitOK(t)
	t.Logf("Restart of the former master and WaitOK took %v", time.Since(begin))
	if got := to.Info(t, "replication")["role"]; got != "slave" {
		t.Errorf("restarted former master reports role %q, want slave", got)
	}
}
