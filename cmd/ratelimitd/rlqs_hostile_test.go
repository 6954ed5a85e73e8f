package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimitd/ratelimitd/internal/metricstest"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// hostileRules limit each path to 100 requests a second.
const hostileRules = `domain: web
descriptors:
  - key: path
    rate_limit: {unit: second, requests_per_unit: 100}
`

// rlqsConn is a gRPC connection of its own to addr.
func rlqsConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// flood returns a first report of n buckets named key=prefix0,
// key=prefix1, ... with a 300 s reporting interval (the longest
// assignments).
func flood(key, prefix string, n int) *rlqsv3.RateLimitQuotaUsageReports {
	m := &rlqsv3.RateLimitQuotaUsageReports{Domain: "web"}
	for i := range n {
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqsv3.BucketId{Bucket: map[string]string{key: fmt.Sprint(prefix, i)}},
			TimeElapsed:        durationpb.New(300 * time.Second),
			NumRequestsAllowed: 1000,
		})
	}
	return m
}

// reportAll opens a stream on conn, sends m, and reads the answer, which
// names its buckets unless the service refused some. It returns the
// stream, open.
func reportAll(t *testing.T, ctx context.Context, conn *grpc.ClientConn, m *rlqsv3.RateLimitQuotaUsageReports) rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient {
	t.Helper()
	st, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(m); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatalf("the answer to %d buckets: %v", len(m.BucketQuotaUsages), err)
	}
	return st
}

// TestRLQSHostileClients runs, against a real daemon on memory and on
// Redis, the two floods that once switched a quota off:
//
//   - one connection opens 100 streams, each reporting the same 1000
//     bucket ids that match no rule, with 300 s reporting intervals
//     (100,000 buckets, per stream, the service's bound): they are
//     answered and held nowhere;
//   - two connections open 8 streams each, reporting 1000 limited
//     buckets each, and close them: 16,000 buckets stay counted while
//     their assignments (10 minutes) are in force, and are exchanged with
//     the store when reported and when their streams end, not at every
//     sync interval (100 ms here, in which 16,000 Redis scripts do not
//     fit: the exchanges timed out and the grants lapsed, with Redis
//     healthy).
//
// Meanwhile a well-behaved client on a connection of its own reports its
// bucket every 200 ms for 3 s, and gets its token bucket every time,
// never the failure mode's ALLOW_ALL.
func TestRLQSHostileClients(t *testing.T) {
	if testing.Short() {
		t.Skip("117,000 buckets")
	}
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			args := []string{"--config", writeRules(t, hostileRules), "--rlqs-sync-interval", "100ms", "--failure-mode", "allow"}
			if backend == "redis" {
				args = append(args, "--backend", "redis://"+redistest.Start(t).Addr)
			}
			p := startProcess(t, args...)
			// A bound against hanging on a service that never answers,
			// not a timing assertion.
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()

			attacker := rlqsConn(t, p.grpc)
			unmatched := flood("nope", "", 1000)
			for range 100 {
				reportAll(t, ctx, attacker, unmatched)
			}
			for c := range 2 {
				conn := rlqsConn(t, p.grpc)
				for i := range 8 {
					st := reportAll(t, ctx, conn, flood("path", fmt.Sprintf("/churn-%d-%d-", c, i), 1000))
					if err := st.CloseSend(); err != nil {
						t.Fatal(err)
					}
					for {
						if _, err := st.Recv(); err != nil {
							break // ended
						}
					}
				}
			}
			// The churned buckets are exchanged when first reported, and
			// once more when their streams end (their entries shrink to
			// the shares in force): wait until that is done, before
			// counting what the next sync intervals cost.
			metrics := func() metricstest.Families { return metricstest.Scrape(t, nil, "http://"+p.http+"/metrics") }
			exchanged := func() float64 {
				v, _ := metrics().Value("ratelimitd_rlqs_store_exchanged_buckets_total", "")
				return v
			}
			last := -1.0
			eventually(t, "the churned buckets exchanged, and no more", func() bool {
				n := exchanged()
				settled := n >= 32_000 && n == last
				last = n
				time.Sleep(300 * time.Millisecond) // three sync intervals
				return settled
			})

			victim, err := rlqsv3.NewRateLimitQuotaServiceClient(rlqsConn(t, p.grpc)).StreamRateLimitQuotas(ctx)
			if err != nil {
				t.Fatal(err)
			}
			before := exchanged()
			id := map[string]string{"path": "/victim"}
			for i := range 15 {
				m := &rlqsv3.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
					{BucketId: &rlqsv3.BucketId{Bucket: id}, NumRequestsAllowed: 10, TimeElapsed: durationpb.New(200 * time.Millisecond)},
				}}
				if i == 0 {
					m.Domain, m.BucketQuotaUsages[0].TimeElapsed = "web", nil
				}
				if err := victim.Send(m); err != nil {
					t.Fatal(err)
				}
				resp, err := victim.Recv()
				if err != nil {
					t.Fatal(err)
				}
				if n := len(resp.GetBucketAction()); n != 1 {
					t.Fatalf("report %d of the well-behaved client: %d actions, want 1, its bucket's", i, n)
				}
				if s := resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy(); s.GetTokenBucket() == nil {
					t.Fatalf("report %d of the well-behaved client: %v, want its token bucket", i, s)
				}
				time.Sleep(200 * time.Millisecond) // the client's reporting interval
			}
			after := exchanged()
			t.Logf("%v: %.0f bucket entries exchanged with the store while the well-behaved client reported for 3 s (30 sync intervals)", backend, after-before)
			// The victim's bucket, at most once a sync interval, and the
			// churned buckets none: not 16,000 per interval.
			if after-before > 100 {
				t.Errorf("%.0f bucket entries exchanged in 3 s, want at most 100: the idle buckets are exchanged again", after-before)
			}
			if v, _ := metrics().Value("ratelimitd_rlqs_buckets_refused_total", "bound=service"); v != 0 {
				t.Errorf("%v buckets refused at the service's bound: the buckets no rule matches took places", v)
			}
		})
	}
}
