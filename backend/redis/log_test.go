package redis_test

import (
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/backendtest"
	"github.com/ratelimitd/ratelimitd/backend/redis"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// TestLogHeaderKept: a call that drops a sliding log's expired entries
// writes the log's header back even when it counts nothing (a check, a
// refusal), so that later calls need not recount the whole log.
func TestLogHeaderKept(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	clock := backendtest.NewClock(backendtest.T0)
	const prefix = "rl-test:"
	s := newStore(t, newClient(t, "redis://"+srv.Addr), redis.Options{LocalCache: -1, Now: clock.Now, Prefix: prefix})
	rdb := srv.Client(t)
	l := backend.Limit{Algorithm: backend.SlidingLog, Requests: 4, Window: time.Minute}
	r := descriptors(1, l)[0]
	// (Redis expires the log in real time: its newest entry is kept far
	// from the manual clock's window edge.)
	for _, at := range []time.Duration{0, 10 * time.Second, 20 * time.Second, 50 * time.Second} {
		clock.Set(backendtest.T0.Add(at))
		mustTake(t, s, r)
	}
	for i, hits := range []uint64{0, 5} { // a check, then a refusal
		// The oldest entry expires; the call counts nothing.
		clock.Set(backendtest.T0.Add(time.Minute + time.Duration(i)*10*time.Second))
		if res := mustTake(t, s, backend.Request{Key: r.Key, Limit: l, Hits: hits}); hits > 0 != res[0].OverLimit {
			t.Fatalf("%d hits: %+v", hits, res[0])
		}
		head, err := rdb.LIndex(t.Context(), prefix+"v2:"+r.Key, 0).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(head) != 8 {
			t.Errorf("after a call of %d hits that dropped an entry: the log starts with %d bytes, not its 8-byte header", hits, len(head))
		}
	}
}
