package server

import (
	"path/filepath"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimitd/ratelimitd/server/requestlog"
)

// BenchmarkLogRequest measures the request log's own work on the decision
// path, apart from the decision: the sampling draw and, for a sampled
// request, copying its descriptors into a record and handing it to the
// writer (which runs on another goroutine, and whose drops are counted).
func BenchmarkLogRequest(b *testing.B) {
	req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}}},
	}}
	for _, bm := range []struct {
		name    string
		sample  float64 // <0: no log
		maxSize int     // MiB, 0: no rotation
	}{{"off", -1, 0}, {"sample_1", 1, 0}, {"sample_1_rotating", 1, 1}, {"sample_0.01", 0.01, 0}} {
		b.Run(bm.name, func(b *testing.B) {
			var opts Options
			if bm.sample >= 0 {
				l, err := requestlog.Open(filepath.Join(b.TempDir(), "requests.log"), requestlog.Options{Sample: bm.sample, MaxSize: bm.maxSize, MaxBackups: 1})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { l.Close() })
				opts.RequestLog = l
			}
			s := New(nil, nil, opts)
			sc := s.getScratch()
			if err := envoyFromProto(sc, req); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				s.logRequest(sc)
			}
		})
	}
}
