package redis_test

import (
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/redis"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// TestHugeCountsRecorded: hits recorded past the limit (consume_when_over)
// beyond what a Redis integer holds saturate the window's count, as
// backend.State saturates it, instead of failing the script run (and with
// it every call batched beside).
func TestHugeCountsRecorded(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	for _, a := range []backend.Algorithm{backend.FixedWindow, backend.SlidingWindow} {
		for _, hits := range []uint64{1 << 62, 1 << 63, 1<<64 - 1} {
			s := newStore(t, newClient(t, "redis://"+srv.Addr), redis.Options{LocalCache: -1})
			l := backend.Limit{Algorithm: a, Requests: 5, Window: time.Hour}
			r := descriptors(1, l)[0]
			r.ConsumeWhenOver = true
			r.Hits = hits
			for range 3 {
				if res := mustTake(t, s, r); !res[0].OverLimit || res[0].Remaining != 0 {
					t.Errorf("%v, %d hits: %+v, want over", a, hits, res[0])
				}
			}
			r.Hits, r.ConsumeWhenOver = 1, false
			if res := mustTake(t, s, r); !res[0].OverLimit {
				t.Errorf("%v after %d hits recorded: %+v, want over", a, hits, res[0])
			}
			if err := srv.Client(t).FlushAll(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestManyRequests: a call of more counters than Lua unpacks at once
// (8,000 values) is decided.
func TestManyRequests(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	s := newStore(t, newClient(t, "redis://"+srv.Addr), redis.Options{LocalCache: -1, Timeout: 10 * time.Second})
	// Sliding windows: two counters each, this window's and the last.
	reqs := descriptors(4100, backend.Limit{Algorithm: backend.SlidingWindow, Requests: 3, Window: time.Hour})
	for want := uint64(2); want > 0; want-- {
		res := mustTake(t, s, reqs...)
		for i, r := range res {
			if r.OverLimit || r.Remaining != want {
				t.Fatalf("request %d: %+v, want %d remaining", i, r, want)
			}
		}
	}
}
