package rlqs

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratelimitd/ratelimitd/internal/grpctest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const oneRule = `
domain: web
descriptors:
  - key: path
    rate_limit: {unit: second, requests_per_unit: 100}
`

// TestDeparture: when a client's stream ends, its share stays counted
// until the assignment it was sent expires (it may enforce it until
// then); after that the others get the part it leaves.
func TestDeparture(t *testing.T) {
	_, conn, clk := serve(t, rulesOf(t, oneRule))
	id := map[string]string{"path": "/api"}
	a := newClient(t, conn, clk, "web")
	b := newClient(t, conn, clk, "web")
	a.report(usage{id: id, allowed: 1})
	b.report(usage{id: id, allowed: 1})
	a.until(func() bool { return rate(a.strategy(id)) == 50 })
	if err := b.st.CloseSend(); err != nil {
		t.Fatalf("CloseSend: %v", err)
	}
	if _, err := b.st.Recv(); err == nil {
		t.Fatal("b's stream goes on after CloseSend")
	}
	a.report(usage{id: id, allowed: 1, elapsed: time.Second})
	if got := rate(a.strategy(id)); got != 50 {
		t.Errorf("while b's assignment is in force: %v per second, want 50", got)
	}
	clk.Advance(ttlFor(DefaultReportingInterval) + time.Second)
	a.report(usage{id: id, allowed: 1, elapsed: time.Second})
	if got := rate(a.strategy(id)); got != 100 {
		t.Errorf("once b's assignment expired: %v per second, want 100", got)
	}
}

// TestBounds: a bucket id with too many keys, or too many bytes, gets no
// assignment, and the stream goes on.
func TestBounds(t *testing.T) {
	s, conn, clk := serve(t, rulesOf(t, oneRule))
	c := newClient(t, conn, clk, "web")
	big := map[string]string{"path": "/"}
	for i := range MaxBucketEntries {
		big[fmt.Sprint("k", i)] = "v"
	}
	long := map[string]string{"path": strings.Repeat("x", MaxBucketIDBytes-len("path")+1)}
	ok := map[string]string{"path": "/ok"}
	// The stream answers in order: once ok is answered, big and long were
	// decided.
	err := c.st.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "web", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: &rlqsv3.BucketId{Bucket: big}, NumRequestsAllowed: 1},
		{BucketId: &rlqsv3.BucketId{Bucket: long}, NumRequestsAllowed: 1},
	}})
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	c.sent = true
	c.report(usage{id: ok, allowed: 1})
	if c.strategy(big) != nil || c.strategy(long) != nil || rate(c.strategy(ok)) != 100 {
		t.Errorf("got %v and %v for the oversized bucket ids and %v for the other; want none, none and 100 per second",
			c.strategy(big), c.strategy(long), c.strategy(ok))
	}
	if got := testutil.ToFloat64(s.metrics.refused.WithLabelValues("bucket_id")); got != 2 {
		t.Errorf("buckets refused at the bucket id's bounds: %v, want 2", got)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	clk := &clock{now: time.Unix(1_700_000_000, 0)}
	s := New(rulesOf(t, oneRule), Options{Now: clk.Now, Registry: reg})
	g := grpc.NewServer()
	s.Register(g)
	conn, _ := grpctest.Serve(t, g)
	c := newClient(t, conn, clk, "web")
	c.report(usage{id: map[string]string{"path": "/a"}, allowed: 3, denied: 2},
		usage{id: map[string]string{"path": "/b"}, allowed: 1}, usage{id: map[string]string{"nope": "x"}, allowed: 1})

	for _, tc := range []struct {
		c    prometheus.Collector
		want float64
	}{
		{s.metrics.streams, 1},
		{s.metrics.ruleStreams.WithLabelValues("web", "path"), 1},
		{s.metrics.buckets.WithLabelValues("web", "path"), 2},
		{s.metrics.assignedRate.WithLabelValues("web", "path"), 200},
		{s.metrics.rate.WithLabelValues("web", "path"), 100},
		{s.metrics.reports.WithLabelValues("web", "path", "allowed"), 4},
		{s.metrics.reports.WithLabelValues("web", "path", "denied"), 2},
	} {
		if got := testutil.ToFloat64(tc.c); got != tc.want {
			t.Errorf("%v: got %v, want %v", tc.c, got, tc.want)
		}
	}
	// The bucket no rule matches was answered, never held: no series.
	if n, err := testutil.GatherAndCount(reg, "ratelimitd_rlqs_buckets", "ratelimitd_rlqs_open_streams"); err != nil || n != 2 {
		t.Errorf("registry: %d series, %v; want 2", n, err)
	}

	// When the stream ends, its buckets go. (The deadline only stops a
	// hang.)
	if err := c.st.CloseSend(); err != nil {
		t.Fatalf("CloseSend: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for testutil.ToFloat64(s.metrics.streams) != 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the stream was never closed")
		case <-time.After(time.Millisecond):
		}
	}
	for _, c := range []prometheus.Collector{s.metrics.buckets.WithLabelValues("web", "path"), s.metrics.assignedRate.WithLabelValues("web", "path"), s.metrics.ruleStreams.WithLabelValues("web", "path")} {
		if got := testutil.ToFloat64(c); got != 0 {
			t.Errorf("%v after the stream ended: %v, want 0", c, got)
		}
	}
}

// TestInvalidReports: a report that names another domain than the
// stream's, or an empty bucket id, ends the stream with InvalidArgument.
func TestInvalidReports(t *testing.T) {
	_, conn, clk := serve(t, rulesOf(t, oneRule))
	for name, second := range map[string]*rlqsv3.RateLimitQuotaUsageReports{
		"other domain": {Domain: "other"},
		"empty bucket id": {BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			{BucketId: &rlqsv3.BucketId{}},
		}},
	} {
		c := newClient(t, conn, clk, "web")
		c.report(usage{id: map[string]string{"path": "/"}, allowed: 1})
		if err := c.st.Send(second); err != nil {
			t.Fatalf("%s: Send: %v", name, err)
		}
		if _, err := c.st.Recv(); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: Recv: %v, want InvalidArgument", name, err)
		}
	}
}

// TestShadowModeOption: the service's ShadowMode assigns ALLOW_ALL where
// a limit applies.
func TestShadowModeOption(t *testing.T) {
	clk := &clock{now: time.Unix(1_700_000_000, 0)}
	s := New(rulesOf(t, oneRule), Options{Now: clk.Now, ShadowMode: true})
	g := grpc.NewServer()
	s.Register(g)
	conn, _ := grpctest.Serve(t, g)
	c := newClient(t, conn, clk, "web")
	id := map[string]string{"path": "/"}
	c.report(usage{id: id, allowed: 1})
	st := c.strategy(id)
	if _, ok := st.GetStrategy().(*typev3.RateLimitStrategy_BlanketRule_); !ok || st.GetBlanketRule() != typev3.RateLimitStrategy_ALLOW_ALL {
		t.Errorf("got %v, want ALLOW_ALL", st)
	}
}

// TestFirstReportNeedsDomain: a first report without a domain ends the
// stream with InvalidArgument, rather than keying its buckets under no
// domain.
func TestFirstReportNeedsDomain(t *testing.T) {
	_, conn, clk := serve(t, rulesOf(t, oneRule))
	c := newClient(t, conn, clk, "")
	err := c.st.Send(&rlqsv3.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"path": "/"}}, NumRequestsAllowed: 1},
	}})
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	if _, err := c.st.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Recv: %v, want InvalidArgument", err)
	}
}
