package fairshare

import (
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/backendtest"
	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/backend/redis"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// BenchmarkPoolTurn measures what one sync interval of a replica holding
// 100,000 buckets costs when 1% of them change: a client of each bucket
// reports every 10 s (a tenth of them each second), the demand of 1,000
// of those moving. "changed" is the loop's turn, exchanging what changed
// or is about to lapse; "every" exchanges every bucket, as each turn did
// before. One op is one sync interval (a second of the injected clock);
// requests/op counts the bucket entries sent to the store.
func BenchmarkPoolTurn(b *testing.B) {
	stores := map[string]func(b *testing.B, now func() time.Time) backend.ShareStore{
		"memory": func(b *testing.B, now func() time.Time) backend.ShareStore {
			m := memory.New(memory.Options{Now: now})
			b.Cleanup(func() { m.Close() })
			return m
		},
		"redis": func(b *testing.B, now func() time.Time) backend.ShareStore {
			srv := redistest.Start(b)
			c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
			b.Cleanup(func() { c.Close() })
			s, err := redis.New(c, redis.Options{Now: now, Timeout: 10 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		},
	}
	for _, name := range []string{"memory", "redis"} {
		for _, mode := range []string{"changed", "every"} {
			b.Run(name+"/"+mode, func(b *testing.B) {
				const n, changed, limit, interval = 100_000, 1000, 100.0, 10 * time.Second
				clk := backendtest.NewClock(t0)
				store := &faulty{ShareStore: stores[name](b, clk.Now)}
				p := manual(NewPool(PoolOptions{Store: store, Replica: "r", Interval: time.Second, Now: clk.Now}))
				b.Cleanup(p.Close)
				buckets := make([]string, n)
				needs := make([]Need, n)
				for i := range buckets {
					buckets[i] = fmt.Sprintf("edge/tenant=%d", i)
					needs[i] = Need{Bucket: buckets[i], Limit: limit, TTL: 2 * interval}
					p.ReportFor(buckets[i], "envoy", 0, 0, 2*interval, t0) // the first report starts the first interval
				}
				if err := p.Exchange(b.Context(), needs); err != nil {
					b.Fatal(err)
				}
				watched(b, p)
				now, sec := t0, 0
				step := func() {
					sec++
					now = t0.Add(time.Duration(sec) * time.Second)
					clk.Set(now)
					// A tenth of the buckets report; the first changed of
					// them with a demand that moves (20 or 40 per second),
					// the others the same 20 per second.
					for i := sec % 10; i < n; i += 10 {
						demand := uint64(200)
						if i/10%100 < changed/(n/1000) && sec/10%2 == 1 {
							demand = 400
						}
						p.ReportFor(buckets[i], "envoy", demand, 0, 2*interval, now)
					}
					p.turn(b.Context(), mode == "every")
				}
				for range 30 { // past the first reports' unknown demands
					step()
				}
				before := store.requests.Load()
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					step()
				}
				b.ReportMetric(float64(store.requests.Load()-before)/float64(b.N), "requests/op")
			})
		}
	}
}
