package server_test

import (
	"fmt"
	"testing"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/ratelimitd/ratelimitd/server"
)

// TestRLQS: the server serves the Rate Limit Quota Service on its gRPC
// server, with its codec, and hands it the rules it reloads.
func TestRLQS(t *testing.T) {
	const rules = `
domain: edge
descriptors:
  - key: path
    rate_limit: {unit: second, requests_per_unit: %d}
`
	h := newHarness(t, parseRules(t, fmt.Sprintf(rules, 5)), server.Options{RLQS: true})
	st, err := rlqsv3.NewRateLimitQuotaServiceClient(h.conn).StreamRateLimitQuotas(t.Context())
	if err != nil {
		t.Fatalf("StreamRateLimitQuotas: %v", err)
	}
	id := &rlqsv3.BucketId{Bucket: map[string]string{"path": "/"}}
	err = st.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{BucketId: id, NumRequestsAllowed: 1}}})
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	perFill := func() uint32 {
		t.Helper()
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		return resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket().GetTokensPerFill().GetValue()
	}
	if got := perFill(); got != 5 {
		t.Errorf("tokens per fill %d, want 5", got)
	}
	h.srv.SetRules(parseRules(t, fmt.Sprintf(rules, 7)))
	if got := perFill(); got != 7 {
		t.Errorf("after the reload: tokens per fill %d, want 7", got)
	}
}

// TestRLQSEndsAtShutdown: EndHealthWatches ends the RLQS streams too, with
// Unavailable, so that GracefulStop need not wait for their clients.
func TestRLQSEndsAtShutdown(t *testing.T) {
	h := newHarness(t, parseRules(t, "domain: edge\n"), server.Options{RLQS: true})
	st, err := rlqsv3.NewRateLimitQuotaServiceClient(h.conn).StreamRateLimitQuotas(t.Context())
	if err != nil {
		t.Fatalf("StreamRateLimitQuotas: %v", err)
	}
	h.srv.Shutdown()
	h.srv.EndHealthWatches()
	if _, err := st.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("Recv after EndHealthWatches: %v, want Unavailable", err)
	}
}

// TestRLQSOff: without Options.RLQS the service is not served, nor named
// by gRPC health.
func TestRLQSOff(t *testing.T) {
	h := newHarness(t, parseRules(t, "domain: edge\n"), server.Options{})
	st, err := rlqsv3.NewRateLimitQuotaServiceClient(h.conn).StreamRateLimitQuotas(t.Context())
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("StreamRateLimitQuotas without Options.RLQS: %v, want Unimplemented", err)
	}
	resp, err := healthpb.NewHealthClient(h.conn).Check(t.Context(), &healthpb.HealthCheckRequest{Service: rlqsv3.RateLimitQuotaService_ServiceDesc.ServiceName})
	if status.Code(err) != codes.NotFound {
		t.Errorf("health of RLQS without Options.RLQS: %v %v, want NotFound", resp, err)
	}
}
