package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ratelimitd/ratelimitd/backend/memory"
	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/grpctest"
	"github.com/ratelimitd/ratelimitd/server"
	"github.com/ratelimitd/ratelimitd/server/admin"
)

const overridesRules = `
domain: edge
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 2}
`

const opToken = "ops-0123456789abcdef"

// overridesServer serves a Server with the overrides API over gRPC
// (bufconn) and HTTP, with the token file's tokens (none: "").
func overridesServer(t *testing.T, tokenFile string) (*server.Server, ratelimitv1.OverridesServiceClient, *grpc.ClientConn, http.Handler) {
	t.Helper()
	store := memory.New(memory.Options{})
	t.Cleanup(func() { store.Close() })
	tokens, err := admin.LoadTokens(tokenFile, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(store, parseRules(t, overridesRules), server.Options{AdminTokens: tokens})
	g := grpc.NewServer(srv.GRPCOptions()...)
	srv.Register(g)
	conn, _ := grpctest.Serve(t, g)
	return srv, ratelimitv1.NewOverridesServiceClient(conn), conn, srv.Handler()
}

func bearer(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

func tokenFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("ops:"+opToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func runtimeOverride(value string, n uint32) *ratelimitv1.Override {
	return &ratelimitv1.Override{
		Domain:    "edge",
		Entries:   []*ratelimitv1.Entry{{Key: "api_key", Value: value}},
		Limits:    []*ratelimitv1.OverrideLimit{{RequestsPerUnit: n, Unit: "minute"}},
		Reason:    "incident 42",
		ExpiresAt: timestamppb.New(time.Now().Add(time.Hour)),
	}
}

func TestOverridesServiceGRPC(t *testing.T) {
	_, client, conn, _ := overridesServer(t, tokenFile(t))
	ctx := bearer(t.Context(), opToken)
	set, err := client.SetOverride(ctx, &ratelimitv1.SetOverrideRequest{Override: runtimeOverride("k-1", 5)})
	if err != nil {
		t.Fatal(err)
	}
	if o := set.GetOverride(); o.GetVersion() != 1 || o.GetSetBy() != "ops" || o.GetExpiresAt() == nil {
		t.Errorf("SetOverride = %v, want version 1 by ops, with its expiry", o)
	}
	native := ratelimitv1.NewRateLimitServiceClient(conn)
	admitted := 0
	for range 7 {
		resp, err := native.ShouldRateLimit(t.Context(), &ratelimitv1.ShouldRateLimitRequest{
			Domain:      "edge",
			Descriptors: []*ratelimitv1.Descriptor{{Entries: []*ratelimitv1.Entry{{Key: "api_key", Value: "k-1"}}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetCode() == ratelimitv1.Code_CODE_OK {
			admitted++
		}
	}
	if admitted != 5 {
		t.Errorf("admitted %d of 7 under the override, want 5", admitted)
	}
	list, err := client.ListOverrides(ctx, &ratelimitv1.ListOverridesRequest{Domain: "edge"})
	if err != nil || len(list.GetOverrides()) != 1 || list.GetOverrides()[0].GetReason() != "incident 42" {
		t.Errorf("ListOverrides = %v, %v; want the override", list, err)
	}
	reset, err := client.ResetCounters(ctx, &ratelimitv1.ResetCountersRequest{Domain: "edge", Entries: runtimeOverride("k-1", 0).GetEntries()})
	if err != nil || reset.GetCounters() != 2 {
		t.Errorf("ResetCounters = %v, %v; want 2 counters", reset, err)
	}
	if _, err := client.DeleteOverride(ctx, &ratelimitv1.DeleteOverrideRequest{Domain: "edge", Entries: runtimeOverride("k-1", 0).GetEntries()}); err != nil {
		t.Errorf("DeleteOverride = %v", err)
	}
	_, err = client.DeleteOverride(ctx, &ratelimitv1.DeleteOverrideRequest{Domain: "edge", Entries: runtimeOverride("k-1", 0).GetEntries()})
	if status.Code(err) != codes.NotFound {
		t.Errorf("DeleteOverride again = %v, want NotFound", err)
	}
}

func TestOverridesServiceGRPCRefusals(t *testing.T) {
	_, client, _, _ := overridesServer(t, tokenFile(t))
	good := bearer(t.Context(), opToken)
	bad := runtimeOverride("k-1", 5)
	bad.Limits[0].Unit = "fortnight"
	raw := runtimeOverride("k-1", 5)
	raw.Entries[0] = &ratelimitv1.Entry{Key: "api_key", RawValue: []byte{0xff}}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		o    *ratelimitv1.Override
		code codes.Code
		want string
	}{
		{"no token", t.Context(), runtimeOverride("k-1", 5), codes.Unauthenticated, "Bearer token is required"},
		{"wrong token", bearer(t.Context(), "nope-0123456789abcdef"), runtimeOverride("k-1", 5), codes.Unauthenticated, "Bearer token is required"},
		{"unknown unit", good, bad, codes.InvalidArgument, `unknown unit "fortnight"`},
		{"raw value", good, raw, codes.InvalidArgument, "raw_value"},
		{"no override", good, nil, codes.InvalidArgument, "domain is empty"},
	} {
		_, err := client.SetOverride(tc.ctx, &ratelimitv1.SetOverrideRequest{Override: tc.o})
		if st := status.Convert(err); st.Code() != tc.code || !strings.Contains(st.Message(), tc.want) {
			t.Errorf("%s: SetOverride = %v, want %v with %q", tc.name, err, tc.code, tc.want)
		}
	}
	if _, err := client.ListOverrides(t.Context(), &ratelimitv1.ListOverridesRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("ListOverrides without a token = %v, want Unauthenticated", err)
	}

	_, open, _, _ := overridesServer(t, "")
	for _, ctx := range []context.Context{t.Context(), good} {
		_, err := open.SetOverride(ctx, &ratelimitv1.SetOverrideRequest{Override: runtimeOverride("k-1", 5)})
		if st := status.Convert(err); st.Code() != codes.PermissionDenied || !strings.Contains(st.Message(), "--admin-token-file") {
			t.Errorf("SetOverride without a token file = %v, want PermissionDenied naming --admin-token-file", err)
		}
	}
	if _, err := open.ListOverrides(t.Context(), &ratelimitv1.ListOverridesRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("ListOverrides without a token file = %v, want PermissionDenied", err)
	}
}

// TestOverridesOnOperatorsEndpoints: the HTTP API is an operators'
// endpoint (on the admin handler, behind the Host check), /explain names
// the override as its limits' source, and /readyz says the overrides'
// state.
func TestOverridesOnOperatorsEndpoints(t *testing.T) {
	srv, client, conn, h := overridesServer(t, tokenFile(t))
	if _, err := client.SetOverride(bearer(t.Context(), opToken), &ratelimitv1.SetOverrideRequest{Override: runtimeOverride("k-1", 5)}); err != nil {
		t.Fatal(err)
	}
	public, adm := srv.Handlers()
	for _, tc := range []struct {
		name string
		h    http.Handler
		host string
		code int
	}{
		{"admin handler", adm, "127.0.0.1", 200},
		{"public handler when split", public, "127.0.0.1", 404},
		{"unknown host", server.OperatorHosts(h), "evil.example", 421},
		{"known host", server.OperatorHosts(h), "localhost:8080", 200},
	} {
		req := httptest.NewRequest("GET", "/v1/overrides", nil)
		req.Host = tc.host
		req.Header.Set("Authorization", "Bearer "+opToken)
		w := httptest.NewRecorder()
		tc.h.ServeHTTP(w, req)
		if w.Code != tc.code {
			t.Errorf("%s: GET /v1/overrides = %d %s, want %d", tc.name, w.Code, w.Body, tc.code)
		}
	}

	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("POST", "/explain", strings.NewReader(
		`{"domain":"edge","descriptors":[{"entries":[{"key":"api_key","value":"k-1"}]}]}`)))
	var ex struct {
		Descriptors []struct {
			RuntimeOverride *struct {
				Reason    string `json:"reason"`
				SetBy     string `json:"set_by"`
				ExpiresAt string `json:"expires_at"`
				Version   uint64 `json:"version"`
			} `json:"runtime_override"`
			Limits []struct {
				RequestsPerUnit uint64 `json:"requests_per_unit"`
			} `json:"limits"`
		} `json:"descriptors"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &ex); err != nil {
		t.Fatalf("/explain: %v: %s", err, w.Body)
	}
	d := ex.Descriptors[0]
	if ro := d.RuntimeOverride; ro == nil || ro.Reason != "incident 42" || ro.SetBy != "ops" || ro.Version != 1 || ro.ExpiresAt == "" ||
		len(d.Limits) != 1 || d.Limits[0].RequestsPerUnit != 5 {
		t.Errorf("/explain = %s, want the override (reason, set_by, version, expires_at) and its limit", w.Body)
	}

	// The native Explain names it too.
	nex, err := ratelimitv1.NewRateLimitServiceClient(conn).Explain(t.Context(), &ratelimitv1.ExplainRequest{Request: &ratelimitv1.ShouldRateLimitRequest{
		Domain: "edge", Descriptors: []*ratelimitv1.Descriptor{{Entries: []*ratelimitv1.Entry{{Key: "api_key", Value: "k-1"}}}}}})
	if ro := nex.GetDescriptors()[0].GetRuntimeOverride(); err != nil || ro.GetReason() != "incident 42" || ro.GetSetBy() != "ops" ||
		ro.GetVersion() != 1 || ro.GetExpiresAt() == nil {
		t.Errorf("native Explain = %v, %v; want the override (reason, set_by, version, expires_at)", nex, err)
	}

	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/readyz", nil))
	body, _ := io.ReadAll(w.Body)
	if !strings.Contains(string(body), "overrides: ok (1 in force") {
		t.Errorf("/readyz = %q, want the overrides' state", body)
	}

}

// TestRuntimeOverrideWinsOverTheRequests: an operator's override
// replaces the limit a request gives itself (Envoy's limit override), as
// the rule's.
func TestRuntimeOverrideWinsOverTheRequests(t *testing.T) {
	srv, client, _, _ := overridesServer(t, tokenFile(t))
	if _, err := client.SetOverride(bearer(t.Context(), opToken), &ratelimitv1.SetOverrideRequest{Override: runtimeOverride("k-1", 5)}); err != nil {
		t.Fatal(err)
	}
	req := request("edge", override(1, typev3.RateLimitUnit_MINUTE, 1, desc("api_key", "k-1")))
	admitted := 0
	for range 7 {
		resp, err := srv.Envoy().ShouldRateLimit(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetOverallCode() == ok {
			admitted++
		}
	}
	if admitted != 5 {
		t.Errorf("admitted %d of 7 with the request's limit of 1 and the operator's of 5, want 5", admitted)
	}
}

// TestEnvoyLeaseUnderRuntimeOverride: an operator's override that makes
// a descriptor's limit a concurrency limit takes slots, so the admitted
// Envoy answer names its lease as it does under a rule's concurrency
// limit, and a give-back with that lease frees the slot.
func TestEnvoyLeaseUnderRuntimeOverride(t *testing.T) {
	srv, client, _, _ := overridesServer(t, tokenFile(t))
	o := runtimeOverride("k-1", 1)
	o.Limits[0].Algorithm = "concurrency"
	if _, err := client.SetOverride(bearer(t.Context(), opToken), &ratelimitv1.SetOverrideRequest{Override: o}); err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Envoy().ShouldRateLimit(t.Context(), request("edge", desc("api_key", "k-1")))
	if err != nil || resp.GetOverallCode() != ok {
		t.Fatalf("acquire under the override: %v, %v; want OK", resp, err)
	}
	lease := envoyLease(resp, "api_key")
	if lease == "" {
		t.Fatalf("acquire under a concurrency override: metadata %v, want the lease under api_key", resp.GetDynamicMetadata())
	}
	if resp, err := srv.Envoy().ShouldRateLimit(t.Context(), request("edge", desc("api_key", "k-1"))); err != nil || resp.GetOverallCode() == ok {
		t.Fatalf("second acquire of 1 slot: %v, %v; want refused", resp, err)
	}
	if resp, err := srv.Envoy().ShouldRateLimit(t.Context(), request("edge", releaseOf(desc("api_key", "k-1"), lease))); err != nil || resp.GetOverallCode() != ok {
		t.Fatalf("release by lease: %v, %v; want OK", resp, err)
	}
	if resp, err := srv.Envoy().ShouldRateLimit(t.Context(), request("edge", desc("api_key", "k-1"))); err != nil || resp.GetOverallCode() != ok {
		t.Errorf("acquire after the release: %v, %v; want OK", resp, err)
	}
}
