package server_test

import (
	"encoding/json"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	gostats "github.com/lyft/gostats"

	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/server"
	"github.com/ratelimitd/ratelimitd/server/overrides"
	"github.com/ratelimitd/ratelimitd/server/requestlog"
)

// benchRules never refuse: the benchmarks measure the decision path, not
// the refusals.
const benchRules = `
domain: bench
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 4000000000
  - key: tenant
    value: acme
    rate_limit:
      algorithm: fixed_window
      unit: second
      requests_per_unit: 4000000000
    descriptors:
      - key: path
        rate_limit:
          algorithm: token_bucket
          unit: second
          requests_per_unit: 4000000000
  - key: api_key
    rate_limit:
      algorithm: gcra
      unit: second
      requests_per_unit: 4000000000
`

// BenchmarkShouldRateLimit calls Envoy's ShouldRateLimit in-process (no
// network) on the memory store with the default options (IETF headers).
// Target: ≤ 2 µs/op and ≤ 10 allocs/op for 1desc.
func BenchmarkShouldRateLimit(b *testing.B) {
	store := memory.New(memory.Options{})
	b.Cleanup(func() { store.Close() })
	srv := server.New(store, parseRules(b, benchRules), server.Options{})
	envoy := srv.Envoy()

	oneDesc := request("bench", desc("remote_address", "10.0.0.1"))
	threeDesc := request("bench",
		desc("remote_address", "10.0.0.1"),
		desc("tenant", "acme", "path", "/v1/search"),
		desc("api_key", "k-123"),
	)
	unknownDomain := request("nowhere", desc("remote_address", "10.0.0.1"))

	for _, bm := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
	}{
		{"1desc", oneDesc},
		{"3desc", threeDesc},
		{"unknown_domain", unknownDomain},
	} {
		b.Run(bm.name, func(b *testing.B) {
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				resp, err := envoy.ShouldRateLimit(ctx, bm.req)
				if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
					b.Fatalf("ShouldRateLimit = %v, %v", resp, err)
				}
			}
		})
	}

	// Parallel callers on one key (contended) and on a key each.
	b.Run("1desc_parallel", func(b *testing.B) {
		ctx := b.Context()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := envoy.ShouldRateLimit(ctx, oneDesc); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("1desc_parallel_keys", func(b *testing.B) { benchParallelKeys(b, envoy) })
}

// BenchmarkShouldRateLimitRefused calls Envoy's ShouldRateLimit as
// BenchmarkShouldRateLimit does, on a request its one descriptor's limit
// refuses (after the first call): what a refusal's answer costs, the
// decided_by metadata naming the refusing rule included.
func BenchmarkShouldRateLimitRefused(b *testing.B) {
	store := memory.New(memory.Options{})
	b.Cleanup(func() { store.Close() })
	srv := server.New(store, parseRules(b, `
domain: bench
descriptors:
  - key: remote_address
    rate_limit: {name: per_ip, unit: hour, requests_per_unit: 1}
`), server.Options{})
	envoy := srv.Envoy()
	req := request("bench", desc("remote_address", "10.0.0.1"))
	ctx := b.Context()
	if _, err := envoy.ShouldRateLimit(ctx, req); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := envoy.ShouldRateLimit(ctx, req)
		if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			b.Fatalf("ShouldRateLimit = %v, %v", resp, err)
		}
	}
}

// BenchmarkRequestLog measures what --request-log costs a decision: Envoy's
// ShouldRateLimit in-process on one descriptor, without a log, and with
// one sampling every request (also rotated at 1 MiB, every few thousand
// records) or 1 in 100 (the writer goroutine encodes, writes and rotates
// off the decision path; records it cannot take in time are dropped and
// counted).
func BenchmarkRequestLog(b *testing.B) {
	for _, bm := range []struct {
		name    string
		sample  float64 // <0: no log
		maxSize int     // MiB, 0: no rotation
	}{{"off", -1, 0}, {"sample_1", 1, 0}, {"sample_1_rotating", 1, 1}, {"sample_0.01", 0.01, 0}} {
		b.Run(bm.name, func(b *testing.B) {
			store := memory.New(memory.Options{})
			b.Cleanup(func() { store.Close() })
			var opts server.Options
			if bm.sample >= 0 {
				l, err := requestlog.Open(filepath.Join(b.TempDir(), "requests.log"), requestlog.Options{Sample: bm.sample, MaxSize: bm.maxSize, MaxBackups: 1})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() {
					l.Close()
					written, dropped := l.Counts()
					b.Logf("written %d, dropped %d, rotated %d times", written, dropped, l.Rotations())
				})
				opts.RequestLog = l
			}
			envoy := server.New(store, parseRules(b, benchRules), opts).Envoy()
			req := request("bench", desc("remote_address", "10.0.0.1"))
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := envoy.ShouldRateLimit(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchParallelKeys runs one descriptor per call from parallel
// goroutines, each on an address of its own.
func benchParallelKeys(b *testing.B, envoy rlsv3.RateLimitServiceServer) {
	ctx := b.Context()
	b.ReportAllocs()
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		req := request("bench", &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{
			{Key: "remote_address", Value: "10.0.0." + strconv.FormatInt(next.Add(1), 10)},
		}})
		for pb.Next() {
			if _, err := envoy.ShouldRateLimit(ctx, req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkEnvoyproxyCompat measures what --compat envoyproxy's answers
// and statsd series cost a decision: Envoy's ShouldRateLimit in-process
// on the memory store, as BenchmarkShouldRateLimit, with the default
// options and with EnvoyproxyAnswers and Statsd (a gostats store whose
// sink discards: the flush is off the decision path).
func BenchmarkEnvoyproxyCompat(b *testing.B) {
	for _, bm := range []struct {
		name string
		opts server.Options
	}{
		{"default", server.Options{}},
		{"envoyproxy", server.Options{EnvoyproxyAnswers: true, Statsd: gostats.NewStore(gostats.NewNullSink(), false)}},
	} {
		store := memory.New(memory.Options{})
		b.Cleanup(func() { store.Close() })
		envoy := server.New(store, parseRules(b, benchRules), bm.opts).Envoy()
		for _, req := range []struct {
			name string
			req  *rlsv3.RateLimitRequest
		}{
			{"1desc", request("bench", desc("remote_address", "10.0.0.1"))},
			{"3desc", request("bench", desc("remote_address", "10.0.0.1"), desc("tenant", "acme", "path", "/v1/search"), desc("api_key", "k-123"))},
		} {
			b.Run(bm.name+"/"+req.name, func(b *testing.B) {
				ctx := b.Context()
				b.ReportAllocs()
				for b.Loop() {
					if _, err := envoy.ShouldRateLimit(ctx, req.req); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkShouldRateLimitOverrides calls Envoy's ShouldRateLimit as
// BenchmarkShouldRateLimit's 1desc does, with no runtime override and
// with 100,000 of them in force (of other values of the same rule, and
// of the request's value): what looking the overrides up costs a
// decision. Target: at most 100 ns/op more with 100,000 than with none.
func BenchmarkShouldRateLimitOverrides(b *testing.B) {
	for _, bm := range []struct {
		name    string
		n       int
		applies bool // one of them is the request's
	}{{"none", 0, false}, {"100k_other", 100_000, false}, {"100k_applies", 100_000, true}} {
		b.Run(bm.name, func(b *testing.B) {
			store := memory.New(memory.Options{})
			b.Cleanup(func() { store.Close() })
			srv := server.New(store, parseRules(b, benchRules), server.Options{})
			fillOverrides(b, store, bm.n, bm.applies)
			if err := srv.Overrides().Sync(b.Context()); err != nil {
				b.Fatal(err)
			}
			envoy := srv.Envoy()
			req := request("bench", desc("api_key", "k-123"))
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				resp, err := envoy.ShouldRateLimit(ctx, req)
				if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
					b.Fatalf("ShouldRateLimit = %v, %v", resp, err)
				}
			}
		})
	}
}

// fillOverrides stores n overrides of api_key in domain bench, straight
// into the store (one Set each would read the set back n times): of
// values k-0, k-1..., and with applies, of k-123, the benchmark's.
func fillOverrides(b *testing.B, store *memory.Store, n int, applies bool) {
	b.Helper()
	for i := range n {
		v := "k-" + strconv.Itoa(i)
		if !applies && v == "k-123" {
			v = "other"
		}
		o := overrides.Override{
			Domain: "bench", Entries: []overrides.Entry{{Key: "api_key", Value: v}},
			Limits: []overrides.Limit{{RequestsPerUnit: 4000000000, Unit: "second"}},
			Reason: "bench", Version: 1, SetBy: "bench",
		}
		rec, err := json.Marshal(&o)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := store.PutOverride(b.Context(), o.Key(), rec, n); err != nil {
			b.Fatal(err)
		}
	}
}
