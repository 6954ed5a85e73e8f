package rlqs

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimitd/ratelimitd/backend/memory"
	rlqsv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/wire/rlqs/v1"
)

// discardStream is a grpc.ServerStream that encodes what is sent, as
// gRPC's codec would, and drops it.
type discardStream struct {
	ctx  context.Context
	sent int
}

func (d *discardStream) SetHeader(metadata.MD) error  { return nil }
func (d *discardStream) SendHeader(metadata.MD) error { return nil }
func (d *discardStream) SetTrailer(metadata.MD)       {}
func (d *discardStream) Context() context.Context     { return d.ctx }
func (d *discardStream) RecvMsg(any) error            { return nil }
func (d *discardStream) SendMsg(m any) error {
	b, err := proto.Marshal(m.(proto.Message))
	d.sent += len(b)
	return err
}

// BenchmarkReport measures the service's CPU per usage report, from its
// wire bytes to its answer's: decoding, matching, the fair-share
// bookkeeping and the answer's encoding, for reports naming 1 and 100
// buckets of a limited rule, shared through a memory store (its exchange
// with the store runs on its own goroutine each sync interval, not per
// report; a report of new buckets would exchange them at once). gRPC's transport is left out: it
// is the same for any service. ns/bucket divides by the buckets reported.
func BenchmarkReport(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("buckets=%d", n), func(b *testing.B) {
			clk := &clock{now: time.Unix(1_700_000_000, 0)}
			mem := memory.New(memory.Options{Now: clk.Now})
			defer mem.Close()
			s := New(rulesOf(b, oneRule), Options{Store: mem, Replica: "bench", Now: clk.Now})
			defer s.EndStreams()
			msg := &rlqsv3.RateLimitQuotaUsageReports{Domain: "web"}
			for i := range n {
				msg.BucketQuotaUsages = append(msg.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
					BucketId:           &rlqsv3.BucketId{Bucket: map[string]string{"path": fmt.Sprintf("/api/v1/items/%d", i)}},
					TimeElapsed:        durationpb.New(time.Second),
					NumRequestsAllowed: 40,
					NumRequestsDenied:  2,
				})
			}
			report := reporter(b, s, msg)
			report() // the buckets' first report, and their exchange
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				// The clock stands still: advanced a second a report, it
				// would outrun the pool's loop, which renews the grants
				// each second of real time, and the benchmark would count
				// an exchange every few reports that a daemon makes once
				// per sync interval (BenchmarkExchangeShares measures it).
				report()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/bucket")
		})
	}
}

var _ grpc.ServerStream = (*discardStream)(nil)

// reporter opens a stream of s that discards its answers, and returns a
// function that has it take msg, from its wire bytes, as a report; the
// stream ends with b.
func reporter(b *testing.B, s *Service, msg *rlqsv3.RateLimitQuotaUsageReports) func() {
	wire, err := proto.Marshal(msg)
	if err != nil {
		b.Fatal(err)
	}
	st := s.newStream(&discardStream{ctx: b.Context()})
	b.Cleanup(func() { s.endStream(st) })
	st.ruleset = s.rules.Load()
	return func() {
		m := new(rlqsv1.RateLimitQuotaUsageReports)
		if err := proto.Unmarshal(wire, m); err != nil {
			b.Fatal(err)
		}
		if err := st.report(readReports(m)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReportUnmatched measures the service's CPU per bucket id that
// no rule matches, in reports of 1000: what a client flooding the service
// with such bucket ids costs it (they are answered, never held).
func BenchmarkReportUnmatched(b *testing.B) {
	const n = 1000
	clk := &clock{now: time.Unix(1_700_000_000, 0)}
	s := New(rulesOf(b, oneRule), Options{Now: clk.Now})
	defer s.EndStreams()
	msg := &rlqsv3.RateLimitQuotaUsageReports{Domain: "web"}
	for i := range n {
		msg.BucketQuotaUsages = append(msg.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqsv3.BucketId{Bucket: map[string]string{"nope": fmt.Sprint("k-", i)}},
			TimeElapsed:        durationpb.New(300 * time.Second),
			NumRequestsAllowed: 1,
		})
	}
	report := reporter(b, s, msg)
	b.ReportAllocs()
	for b.Loop() {
		report()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/bucket")
}

// BenchmarkBucketMemory measures the heap a bucket held costs, with one
// client each on the memory store: its stream's entry and view, the
// tracker's and the pool's entries, the store's share entry. One op holds
// 10,000 buckets over 10 streams; B/bucket is the heap they keep.
func BenchmarkBucketMemory(b *testing.B) {
	const streams, perStream = 10, 1000
	var perBucket float64
	for b.Loop() {
		clk := &clock{now: time.Unix(1_700_000_000, 0)}
		mem := memory.New(memory.Options{Now: clk.Now})
		// The benchmark's streams have no connection: one account.
		s := New(rulesOf(b, oneRule), Options{Store: mem, Replica: "bench", Now: clk.Now, Bounds: Bounds{PerConnection: streams * perStream}})
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for k := range streams {
			msg := &rlqsv3.RateLimitQuotaUsageReports{Domain: "web"}
			for i := range perStream {
				msg.BucketQuotaUsages = append(msg.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
					BucketId:           &rlqsv3.BucketId{Bucket: map[string]string{"path": fmt.Sprintf("/api/v1/items/%d/%d", k, i)}},
					TimeElapsed:        durationpb.New(time.Second),
					NumRequestsAllowed: 40,
				})
			}
			reporter(b, s, msg)()
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if held(s) != streams*perStream {
			b.Fatalf("%d buckets held, want %d", held(s), streams*perStream)
		}
		perBucket = float64(after.HeapAlloc-before.HeapAlloc) / (streams * perStream)
		s.EndStreams()
		mem.Close()
	}
	b.ReportMetric(perBucket, "B/bucket")
}
