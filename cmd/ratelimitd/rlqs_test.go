package main

import (
	"os"
	"path/filepath"
	"testing"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestRLQSFlag: by default the daemon serves Envoy's Rate Limit Quota
// Service on the gRPC port, which answers a usage report with an
// assignment; --rlqs=false leaves it out.
func TestRLQSFlag(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte("domain: edge\ndescriptors:\n  - key: path\n    rate_limit: {unit: second, requests_per_unit: 5}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, "--config", path)
	st, err := rlqsv3.NewRateLimitQuotaServiceClient(d.conn).StreamRateLimitQuotas(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	id := &rlqsv3.BucketId{Bucket: map[string]string{"path": "/"}}
	if err := st.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{BucketId: id, NumRequestsAllowed: 1}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	if got := resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket().GetTokensPerFill().GetValue(); got != 5 {
		t.Errorf("tokens per fill %d, want the limit's 5 for the only client", got)
	}

	off := startDaemon(t, "--config", path, "--rlqs=false")
	st, err = rlqsv3.NewRateLimitQuotaServiceClient(off.conn).StreamRateLimitQuotas(t.Context())
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("StreamRateLimitQuotas with --rlqs=false: %v, want Unimplemented", err)
	}
}
