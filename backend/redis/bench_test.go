package redis_test

import (
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/redis"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// BenchmarkTake: calls of 1 and 3 descriptors from 32 concurrent callers
// (as the load benchmark's) on standalone Redis, over 10,000 keys: batched
// into shared script runs (the default), one script run per call, batched
// with EVALSHA (Redis before 7.0) instead of FCALL, and batched on the
// script's general path (requests with consume_when_over, which changes
// no decision under these limits but keeps the calls off the lean path). It
// reports Redis's own time in the script per call (redis-µs/op, from INFO
// commandstats), the cost that every replica's calls add up to on one
// Redis, and the part of it in the INCRBY commands the script runs
// (incrby-µs/op).
func BenchmarkTake(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	for _, bc := range []struct {
		name    string
		opts    redis.Options
		eval    bool // EVALSHA, as on Redis before 7.0
		general bool // the general path: consume_when_over
	}{
		{"batch", redis.Options{}, false, false},
		{"per-call", redis.Options{NoBatch: true}, false, false},
		{"batch-evalsha", redis.Options{}, true, false},
		{"batch-general", redis.Options{}, false, true},
	} {
		for _, a := range []backend.Algorithm{backend.SlidingWindow, backend.FixedWindow} {
			for _, descs := range []int{1, 3} {
				b.Run(bc.name+"/"+a.String()+"/descriptors="+strconv.Itoa(descs), func(b *testing.B) {
					s := benchStore(b, srv.Addr, bc.opts)
					if bc.eval {
						redis.EvalOnly(s)
					}
					l := backend.Limit{Algorithm: a, Requests: 1 << 30, Window: time.Hour}
					keys := make([]string, 10_000)
					for i := range keys {
						keys[i] = string(backend.AppendKeySuffix(backend.AppendKeyPart(nil, "u"+strconv.Itoa(i)), l))
					}
					var next atomic.Uint64
					b.SetParallelism(16) // 16 × GOMAXPROCS (2) = 32 callers
					b.ReportAllocs()
					script := scriptTime(b, rdb)
					b.ResetTimer()
					b.RunParallel(func(pb *testing.PB) {
						reqs := make([]backend.Request, descs)
						res := make([]backend.Result, descs)
						for pb.Next() {
							for i := range reqs {
								reqs[i] = backend.Request{Key: keys[next.Add(1)%uint64(len(keys))], Limit: l, Hits: 1, Group: i, ConsumeWhenOver: bc.general}
							}
							if err := s.Take(b.Context(), reqs, res); err != nil {
								b.Error(err)
								return
							}
						}
					})
					b.StopTimer()
					script()
				})
			}
		}
	}
}

// BenchmarkAcquire sets a Concurrency limit's acquire and release beside
// a sliding window's decision, from 32 concurrent callers on standalone
// Redis, batched (the default) and one script run per call: "sliding_window"
// decides one request on one of 10,000 keys (the lean path);
// "acquire+release" takes a slot of a limit of 100 on one of 1,000 keys,
// each holding 5 leases of an hour already, then gives it back by its
// lease: two calls an op, both on the lean path too. redis-µs/op is
// Redis's time in the script per op (the target: an acquire and
// its release cost at most twice a sliding-window decision); ops/script
// how many ops one script run decides (a release batches as any call).
func BenchmarkAcquire(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	const holders = 5
	round := 0 // each round of a benchmark starts keys of its own
	for _, bc := range []struct {
		name string
		opts redis.Options
	}{
		{"batch", redis.Options{}},
		{"per-call", redis.Options{NoBatch: true}},
	} {
		for _, a := range []backend.Algorithm{backend.SlidingWindow, backend.Concurrency} {
			name := "sliding_window"
			nkeys := 10_000
			l := backend.Limit{Algorithm: a, Requests: 1 << 30, Window: time.Hour}
			if a == backend.Concurrency {
				name, nkeys = "acquire+release", 1000
				l.Requests = 100
			}
			b.Run(bc.name+"/"+name, func(b *testing.B) {
				s := benchStore(b, srv.Addr, bc.opts)
				round++
				keys := make([]string, nkeys)
				prefix := "acq" + strconv.Itoa(round) + ":"
				for i := range keys {
					keys[i] = string(backend.AppendKeySuffix(backend.AppendKeyPart(nil, prefix+strconv.Itoa(i)), l))
				}
				if a == backend.Concurrency {
					res := make([]backend.Result, 1)
					for _, k := range keys {
						for range holders {
							if err := s.Take(b.Context(), []backend.Request{{Key: k, Limit: l, Hits: 1}}, res); err != nil || res[0].OverLimit {
								b.Fatalf("holder: %v %+v", err, res[0])
							}
						}
					}
				}
				var next atomic.Uint64
				b.SetParallelism(16) // 16 × GOMAXPROCS (2) = 32 callers
				b.ReportAllocs()
				script := scriptTime(b, rdb)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					reqs := make([]backend.Request, 1)
					res := make([]backend.Result, 1)
					for pb.Next() {
						reqs[0] = backend.Request{Key: keys[next.Add(1)%uint64(len(keys))], Limit: l, Hits: 1}
						if err := s.Take(b.Context(), reqs, res); err != nil || res[0].OverLimit {
							b.Errorf("take: %v %+v", err, res[0])
							return
						}
						if a != backend.Concurrency {
							continue
						}
						reqs[0].Op, reqs[0].Lease = backend.GiveBack, res[0].Lease
						if err := s.Take(b.Context(), reqs, res); err != nil || res[0].Remaining < 100-holders-32 {
							b.Errorf("release: %v %+v", err, res[0])
							return
						}
					}
				})
				b.StopTimer()
				script()
				if redis.FastRuns(s) == 0 {
					b.Error("no call took the lean path")
				}
			})
		}
	}
}

// BenchmarkSlidingLog: one call at a time on a sliding log that holds
// entries entries and keeps holding them: a limit of 10,000 per 10 ms, one
// hit per call, and a clock that moves 10 ms ÷ entries per call, so that
// each call adds an entry and expires one. It reports Redis's time in the
// script per call.
func BenchmarkSlidingLog(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	round := 0 // each round of a benchmark starts a log of its own
	for _, entries := range []int{100, 1_000, 10_000} {
		b.Run("entries="+strconv.Itoa(entries), func(b *testing.B) {
			round++
			clock := time.Unix(1_700_000_000, 0)
			s := benchStore(b, srv.Addr, redis.Options{Now: func() time.Time { return clock }})
			l := backend.Limit{Algorithm: backend.SlidingLog, Requests: 10_000, Window: 10 * time.Millisecond}
			step := l.Window / time.Duration(entries)
			key := string(backend.AppendKeySuffix(backend.AppendKeyPart(nil, "log"+strconv.Itoa(round)), l))
			reqs := []backend.Request{{Key: key, Limit: l, Hits: 1}}
			res := make([]backend.Result, 1)
			for range entries { // fill the log
				clock = clock.Add(step)
				if err := s.Take(b.Context(), reqs, res); err != nil {
					b.Fatal(err)
				}
			}
			script := scriptTime(b, rdb)
			b.ResetTimer()
			for range b.N {
				clock = clock.Add(step)
				if err := s.Take(b.Context(), reqs, res); err != nil {
					b.Fatal(err)
				}
				if res[0].OverLimit {
					b.Fatal("refused: the log is not in its steady state")
				}
			}
			b.StopTimer()
			script()
		})
	}
}

func benchStore(b *testing.B, addr string, opts redis.Options) *redis.Store {
	client, err := redis.NewClient("redis://"+addr, redis.ClientOptions{ReadTimeout: time.Second, WriteTimeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { client.Close() })
	opts.LocalCache = -1
	opts.Timeout = time.Second
	s, err := redis.New(client, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// scriptTime starts measuring Redis's time in the script (FCALL, EVALSHA
// and EVAL, from INFO commandstats); the function it returns reports it
// per op.
func scriptTime(b *testing.B, rdb *goredis.Client) func() {
	// read returns the script's usec and calls, and INCRBY's usec (the
	// commands the script runs count apart from it).
	read := func() (usec, calls, incrby float64) {
		info, err := rdb.Info(b.Context(), "commandstats").Result()
		if err != nil {
			b.Fatal(err)
		}
		for line := range strings.Lines(info) {
			name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
			script := name == "cmdstat_fcall" || name == "cmdstat_evalsha" || name == "cmdstat_eval"
			if !ok || !script && name != "cmdstat_incrby" {
				continue
			}
			for field := range strings.SplitSeq(stats, ",") {
				k, v, _ := strings.Cut(field, "=")
				f, _ := strconv.ParseFloat(v, 64)
				switch {
				case k == "usec" && script:
					usec += f
				case k == "calls" && script:
					calls += f
				case k == "usec":
					incrby = f
				}
			}
		}
		return usec, calls, incrby
	}
	usec0, calls0, incrby0 := read()
	return func() {
		usec, calls, incrby := read()
		b.ReportMetric((usec-usec0)/float64(b.N), "redis-µs/op")
		b.ReportMetric((incrby-incrby0)/float64(b.N), "incrby-µs/op")
		b.ReportMetric(float64(b.N)/max(calls-calls0, 1), "ops/script")
	}
}

// BenchmarkPerSecond: calls of two descriptors, one limited per second and
// one per minute, on one standalone Redis (batched), and over two with a
// PerSecond store (each call decided in a part on each Redis, in
// parallel); from 32 concurrent callers, and from one caller at a time
// (each call's latency).
func BenchmarkPerSecond(b *testing.B) {
	mainSrv, secondSrv := redistest.Start(b), redistest.Start(b)
	sec := backend.Limit{Algorithm: backend.FixedWindow, Requests: 1 << 30, Window: time.Second}
	minute := backend.Limit{Algorithm: backend.FixedWindow, Requests: 1 << 30, Window: time.Minute}
	keys := make([][2]string, 10_000)
	for i := range keys {
		k := backend.AppendKeyPart(nil, "u"+strconv.Itoa(i))
		keys[i] = [2]string{string(backend.AppendKeySuffix(k, sec)), string(backend.AppendKeySuffix(k, minute))}
	}
	for _, stores := range []string{"one-store", "two-stores"} {
		for _, callers := range []int{32, 1} {
			b.Run(stores+"/callers="+strconv.Itoa(callers), func(b *testing.B) {
				var opts redis.Options
				if stores == "two-stores" {
					opts.PerSecond = benchStore(b, secondSrv.Addr, redis.Options{})
				}
				s := benchStore(b, mainSrv.Addr, opts)
				var next atomic.Uint64
				call := func(reqs []backend.Request, res []backend.Result) error {
					k := keys[next.Add(1)%uint64(len(keys))]
					reqs[0] = backend.Request{Key: k[0], Limit: sec, Hits: 1, Group: 0}
					reqs[1] = backend.Request{Key: k[1], Limit: minute, Hits: 1, Group: 0}
					return s.Take(b.Context(), reqs, res)
				}
				b.ReportAllocs()
				b.ResetTimer()
				if callers == 1 {
					reqs, res := make([]backend.Request, 2), make([]backend.Result, 2)
					for range b.N {
						if err := call(reqs, res); err != nil {
							b.Fatal(err)
						}
					}
					return
				}
				b.SetParallelism(callers / runtime.GOMAXPROCS(0))
				b.RunParallel(func(pb *testing.PB) {
					reqs, res := make([]backend.Request, 2), make([]backend.Result, 2)
					for pb.Next() {
						if err := call(reqs, res); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}
