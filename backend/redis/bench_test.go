package redis_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/redis"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// BenchmarkTake: calls of 1 and 3 descriptors from 32 concurrent callers
// (as the load benchmark's) on standalone Redis, over 10,000 keys: batched
// into shared script runs (the default), and one script run per call.
func BenchmarkTake(b *testing.B) {
	srv := redistest.Start(b)
	for _, bc := range []struct {
		name string
		opts redis.Options
	}{
		{"batch", redis.Options{}},
		{"per-call", redis.Options{NoBatch: true}},
	} {
		for _, descs := range []int{1, 3} {
			b.Run(bc.name+"/descriptors="+strconv.Itoa(descs), func(b *testing.B) {
				client, err := redis.NewClient("redis://"+srv.Addr, redis.ClientOptions{ReadTimeout: time.Second, WriteTimeout: time.Second})
				if err != nil {
					b.Fatal(err)
				}
				defer client.Close()
				bc.opts.LocalCache = -1
				s, err := redis.New(client, bc.opts)
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				l := backend.Limit{Requests: 1 << 30, Window: time.Hour}
				keys := make([]string, 10_000)
				for i := range keys {
					keys[i] = string(backend.AppendKeySuffix(backend.AppendKeyPart(nil, "u"+strconv.Itoa(i)), l))
				}
				var next atomic.Uint64
				b.SetParallelism(16) // 16 × GOMAXPROCS (2) = 32 callers
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					reqs := make([]backend.Request, descs)
					res := make([]backend.Result, descs)
					for pb.Next() {
						for i := range reqs {
							reqs[i] = backend.Request{Key: keys[next.Add(1)%uint64(len(keys))], Limit: l, Hits: 1, Group: i}
						}
						if err := s.Take(b.Context(), reqs, res); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}
