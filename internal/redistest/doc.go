// Package redistest starts real redis-server and redis-sentinel processes
// for tests: a standalone server ([Start]), a Redis Cluster ([StartCluster],
// or [StartClusterWithReplicas], whose slots a test can move with
// [Cluster.MoveSlot] and whose masters it can fail over with
// [Cluster.Failover] while clients use them) and a Sentinel group
// ([StartSentinel]).
//
// Every process listens on a free loopback port, keeps its data and log in
// t.TempDir(), persists nothing, and is killed (with any process it forked)
// by a t.Cleanup, so tests never touch a shared server on :6379 and may run
// in parallel. Startup failures report the tail of the process's log.
//
// The binaries come from PATH. [Require] skips a test when one is missing,
// or fails it when the CI environment variable is "true"; every Start
// function calls it first. .ci/install-redis installs them on Debian.
//
// Call the Start functions and the methods that take a testing.TB from the
// test's own goroutine, since they may call t.Fatal.
//
// Usage:
//
//	func TestStore(t *testing.T) {
//		srv := redistest.Start(t)
//		rdb := srv.Client(t)
//		if err := rdb.Set(t.Context(), "k", "v", 0).Err(); err != nil {
//			t.Fatal(err)
//		}
//		srv.Kill()     // the server is gone: commands fail
//		srv.Restart(t) // back on the same Addr, empty
//	}
package redistest
