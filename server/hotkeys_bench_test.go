package server_test

import (
	"strconv"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/server"
)

// overRules refuse all but the first hit of each address in an hour.
const overRules = `
domain: over
descriptors:
  - key: remote_address
    rate_limit:
      unit: hour
      requests_per_unit: 1
`

// BenchmarkHotKeys is BenchmarkShouldRateLimit's decisions with the hot
// keys off and on: the difference is their cost per decision. refused
// decides on one address over its limit; refused_keys on 65,536 of them,
// each over its limit, so that the sketch keeps replacing counters.
func BenchmarkHotKeys(b *testing.B) {
	addrs := make([]*rlsv3.RateLimitRequest, 1<<16)
	for i := range addrs {
		addrs[i] = request("over", desc("remote_address", "10.1."+strconv.Itoa(i>>8)+"."+strconv.Itoa(i&255)))
	}
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "on"
		}
		opts := server.Options{HotKeys: server.HotKeysOptions{Enabled: on}}
		store := memory.New(memory.Options{})
		b.Cleanup(func() { store.Close() })
		envoy := server.New(store, parseRules(b, benchRules), opts).Envoy()
		overStore := memory.New(memory.Options{})
		b.Cleanup(func() { overStore.Close() })
		over := server.New(overStore, parseRules(b, overRules), opts).Envoy()
		oneDesc := request("bench", desc("remote_address", "10.0.0.1"))
		threeDesc := request("bench",
			desc("remote_address", "10.0.0.1"),
			desc("tenant", "acme", "path", "/v1/search"),
			desc("api_key", "k-123"),
		)
		run := func(sub string, rl func(i int) (*rlsv3.RateLimitResponse, error)) {
			b.Run(name+"/"+sub, func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if _, err := rl(i); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		}
		ctx := b.Context()
		run("1desc", func(int) (*rlsv3.RateLimitResponse, error) { return envoy.ShouldRateLimit(ctx, oneDesc) })
		run("3desc", func(int) (*rlsv3.RateLimitResponse, error) { return envoy.ShouldRateLimit(ctx, threeDesc) })
		run("refused", func(int) (*rlsv3.RateLimitResponse, error) { return over.ShouldRateLimit(ctx, addrs[0]) })
		run("refused_keys", func(i int) (*rlsv3.RateLimitResponse, error) {
			return over.ShouldRateLimit(ctx, addrs[i%len(addrs)])
		})
		b.Run(name+"/1desc_parallel_keys", func(b *testing.B) { benchParallelKeys(b, envoy) })
	}
}
