package redis_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/backendtest"
	"github.com/ratelimitd/ratelimitd/backend/redis"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// BenchmarkOverrides: what a replica's poll of the overrides costs on
// standalone Redis, one call at a time, over a set of 1,000 records of
// 300 bytes: "unchanged", the poll of every 250 ms while nothing changes
// (one GET); "changed", a full read of the set, as after each change; and
// "reset", an operator's reset of a descriptor's 2 counters (their keys
// deleted, the reset noted).
func BenchmarkOverrides(b *testing.B) {
	const records = 1000
	srv := redistest.Start(b)
	s := benchStore(b, srv.Addr, redis.Options{})
	rec := []byte(strings.Repeat("r", 300))
	var v uint64
	for i := range records {
		var err error
		if v, err = s.PutOverride(b.Context(), "id-"+strconv.Itoa(i), rec, records); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("unchanged", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if recs, _, err := s.Overrides(b.Context(), v); err != nil || recs != nil {
				b.Fatal(recs, err)
			}
		}
	})
	b.Run("changed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if recs, _, err := s.Overrides(b.Context(), v-1); err != nil || len(recs) != records {
				b.Fatal(len(recs), err)
			}
		}
	})
	b.Run("reset", func(b *testing.B) {
		l := backend.Limit{Algorithm: backend.SlidingWindow, Requests: 100, Window: time.Minute}
		l2 := backend.Limit{Algorithm: backend.TokenBucket, Requests: 100, Window: time.Hour}
		reqs := []backend.Request{{Key: backendtest.CounterKey("k", l), Limit: l}, {Key: backendtest.CounterKey("k", l2), Limit: l2}}
		b.ReportAllocs()
		for b.Loop() {
			if err := s.Reset(b.Context(), reqs); err != nil {
				b.Fatal(err)
			}
		}
	})
}
