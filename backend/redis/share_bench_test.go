package redis_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/redis"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// BenchmarkExchangeShares: one replica's calls of 1 and 100 buckets, one
// call at a time, on standalone Redis and on a Cluster of 3 masters, over
// 10,000 buckets that each hold the entries of 3 replicas (4 demands
// each). It reports the time per bucket (µs/bucket), Redis's own time in
// the script per bucket (redis-µs/bucket, on all nodes), and the commands
// Redis counts per bucket in INFO commandstats (cmds/bucket: the script's
// run and the commands it runs).
func BenchmarkExchangeShares(b *testing.B) {
	b.Run("standalone", func(b *testing.B) {
		srv := redistest.Start(b)
		benchShares(b, benchStore(b, srv.Addr, redis.Options{}), srv.Client(b))
	})
	b.Run("cluster", func(b *testing.B) {
		c := redistest.StartCluster(b, 3)
		client, err := redis.NewClient(c.URL(), redis.ClientOptions{ReadTimeout: time.Second, WriteTimeout: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { client.Close() })
		s, err := redis.New(client, redis.Options{Timeout: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		nodes := make([]*goredis.Client, len(c.Nodes))
		for i, n := range c.Nodes {
			nodes[i] = n.Client(b)
		}
		benchShares(b, s, nodes...)
	})
}

// benchShares runs BenchmarkExchangeShares on s, whose Redis nodes are
// nodes.
func benchShares(b *testing.B, s *redis.Store, nodes ...*goredis.Client) {
	const buckets, replicas = 10_000, 3
	names := make([]string, buckets)
	for i := range names {
		names[i] = "bucket-" + strconv.Itoa(i)
	}
	request := func(bucket string, r int) backend.ShareRequest {
		return backend.ShareRequest{
			Bucket: bucket, Replica: "replica-" + strconv.Itoa(r), Limit: 1000, Want: 100,
			Demands: []float64{10, 20, 30, 40}, TTL: time.Hour,
		}
	}
	prime := make([]backend.ShareRequest, 0, 100)
	for r := range replicas {
		for i, name := range names {
			prime = append(prime, request(name, r))
			if len(prime) == cap(prime) || i == len(names)-1 {
				if err := s.ExchangeShares(b.Context(), prime, make([]backend.ShareResult, len(prime))); err != nil {
					b.Fatal(err)
				}
				prime = prime[:0]
			}
		}
	}
	for _, batch := range []int{1, 100} {
		b.Run("buckets="+strconv.Itoa(batch), func(b *testing.B) {
			reqs := make([]backend.ShareRequest, batch)
			res := make([]backend.ShareResult, batch)
			stats := commandStats(b, nodes)
			next := 0
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				for i := range reqs {
					reqs[i] = request(names[next%buckets], next%replicas)
					res[i].Others = res[i].Others[:0]
					next++
				}
				if err := s.ExchangeShares(b.Context(), reqs, res); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			n := float64(b.N * batch)
			b.ReportMetric(float64(b.Elapsed().Microseconds())/n, "µs/bucket")
			stats(n)
		})
	}
}

// commandStats starts counting the commands of nodes and their time in
// the script (EVALSHA and EVAL), from INFO commandstats; the function it
// returns reports both per bucket, for n buckets.
func commandStats(b *testing.B, nodes []*goredis.Client) func(n float64) {
	read := func() (calls, script float64) {
		for _, rdb := range nodes {
			info, err := rdb.Info(b.Context(), "commandstats").Result()
			if err != nil {
				b.Fatal(err)
			}
			for line := range strings.Lines(info) {
				name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
				if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" || strings.HasPrefix(name, "cmdstat_cluster") {
					continue
				}
				for field := range strings.SplitSeq(stats, ",") {
					k, v, _ := strings.Cut(field, "=")
					f, _ := strconv.ParseFloat(v, 64)
					switch {
					case k == "calls":
						calls += f
					case k == "usec" && (name == "cmdstat_evalsha" || name == "cmdstat_eval"):
						script += f
					}
				}
			}
		}
		return calls, script
	}
	calls0, script0 := read()
	return func(n float64) {
		calls, script := read()
		b.ReportMetric((calls-calls0)/n, "cmds/bucket")
		b.ReportMetric((script-script0)/n, "redis-µs/bucket")
	}
}
