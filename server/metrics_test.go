package server_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/metricstest"
	"github.com/ratelimitd/ratelimitd/server"
)

const metricsRules = `
domain: m
descriptors:
  - key: k
    value: v
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: s
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: user
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: path
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 10}
  - key: free
    rate_limit: {unlimited: true}
  - key: ten
    rate_limit: {unit: minute, requests_per_unit: 10}
`

// scrape GETs ts's /metrics, checked by promlint.
func scrape(t *testing.T, ts *httptest.Server) metricstest.Families {
	t.Helper()
	return metricstest.Scrape(t, ts.Client(), ts.URL+"/metrics")
}

// TestMetrics: after known traffic over every face, /metrics has the
// expected per-rule, decision, store and config series, and promlint
// passes over them.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHarness(t, parseRules(t, metricsRules), server.Options{Registry: reg})
	ts := httpServer(t, h)

	for range 5 { // limit 3: 3 within (the third near the limit), 2 over
		h.should(t, request("m", desc("k", "v")))
	}
	for range 2 { // limit 1 in shadow mode: 1 within and near, 1 over in shadow
		if resp := h.should(t, request("m", desc("s", "x"))); resp.GetOverallCode() != ok {
			t.Fatalf("shadow rule: overall %v, want OK", resp.GetOverallCode())
		}
	}
	h.should(t, request("m", desc("user", "alice")))
	h.should(t, request("m", desc("user", "bob")))
	h.should(t, request("m", desc("path", "/a", "method", "GET")))
	h.should(t, request("m", desc("free", "x")))
	h.should(t, request("m", desc("nope", "x"))) // matches no rule: no series
	_, err := h.envoy.ShouldRateLimit(t.Context(), request("", desc("k", "v")))
	wantCode(t, "ShouldRateLimit with an empty domain", err, codes.InvalidArgument)
	// ten=x: 9 hits take it past 8, the near threshold (1 near); then,
	// in a call that k=v refuses, 1 more hit is within its limit but
	// consumes nothing, so it is not near it.
	h.should(t, request("m", hits(9, desc("ten", "x"))))
	if resp := h.should(t, request("m", desc("k", "v"), desc("ten", "x"))); resp.GetOverallCode() != over {
		t.Fatalf("k=v with ten=x: overall %v, want OVER_LIMIT", resp.GetOverallCode())
	}
	h.shouldNative(t, nrequest("m", ndesc("k", "v")))
	if code, body, _ := do(t, ts, "POST", "/json", `{"domain":"m","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`); code != http.StatusTooManyRequests {
		t.Fatalf("POST /json = %d %s, want 429", code, body)
	}

	mfs := scrape(t, ts)
	mfs.Want(t, map[string]float64{
		`ratelimitd_rule_hits_total{domain=m,rule=k=v}`:            8,
		`ratelimitd_rule_within_limit_total{domain=m,rule=k=v}`:    3,
		`ratelimitd_rule_near_limit_total{domain=m,rule=k=v}`:      1,
		`ratelimitd_rule_over_limit_total{domain=m,rule=k=v}`:      5,
		`ratelimitd_rule_within_limit_total{domain=m,rule=ten}`:    10,
		`ratelimitd_rule_near_limit_total{domain=m,rule=ten}`:      1,
		`ratelimitd_rule_shadow_mode_total{domain=m,rule=k=v}`:     0,
		`ratelimitd_rule_hits_total{domain=m,rule=s}`:              2,
		`ratelimitd_rule_within_limit_total{domain=m,rule=s}`:      1,
		`ratelimitd_rule_near_limit_total{domain=m,rule=s}`:        1,
		`ratelimitd_rule_over_limit_total{domain=m,rule=s}`:        1,
		`ratelimitd_rule_shadow_mode_total{domain=m,rule=s}`:       1,
		`ratelimitd_rule_hits_total{domain=m,rule=user=alice}`:     1,
		`ratelimitd_rule_hits_total{domain=m,rule=user=bob}`:       1,
		`ratelimitd_rule_hits_total{domain=m,rule=path=/a.method}`: 1,
		`ratelimitd_rule_hits_total{domain=m,rule=free}`:           1,
		`ratelimitd_rule_within_limit_total{domain=m,rule=free}`:   1,

		`ratelimitd_decisions_total{api=envoy,code=ok}`:          11,
		`ratelimitd_decisions_total{api=envoy,code=over_limit}`:  3,
		`ratelimitd_decisions_total{api=envoy,code=error}`:       1,
		`ratelimitd_decisions_total{api=native,code=over_limit}`: 1,
		`ratelimitd_decisions_total{api=json,code=over_limit}`:   1,
		`ratelimitd_decision_duration_seconds{api=envoy}`:        15,
		`ratelimitd_decision_duration_seconds{api=native}`:       1,
		// Every request with a limit to count called the store: k=v 8
		// times (once with ten=x), ten=x alone once, s twice, user twice
		// and path once.
		`ratelimitd_backend_duration_seconds`:           14,
		`ratelimitd_backend_errors_total{kind=error}`:   0,
		`ratelimitd_config_loads_total{result=success}`: 1,
		`ratelimitd_config_last_load_successful`:        1,

		`grpc_server_handled_total{grpc_type=unary,grpc_service=envoy.service.ratelimit.v3.RateLimitService,grpc_method=ShouldRateLimit,grpc_code=OK}`:              14,
		`grpc_server_handled_total{grpc_type=unary,grpc_service=envoy.service.ratelimit.v3.RateLimitService,grpc_method=ShouldRateLimit,grpc_code=InvalidArgument}`: 1,
		`grpc_server_handled_total{grpc_type=unary,grpc_service=ratelimit.v1.RateLimitService,grpc_method=ShouldRateLimit,grpc_code=OK}`:                            1,
	})
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "rule" && strings.Contains(lp.GetValue(), "nope") {
					t.Errorf("%s has a series for a descriptor that matched no rule: %v", mf.GetName(), m.GetLabel())
				}
			}
		}
	}
	if v, ok := mfs.Value("ratelimitd_config_last_load_success_timestamp_seconds", ""); !ok || v == 0 {
		t.Errorf("ratelimitd_config_last_load_success_timestamp_seconds = %v, %v; want the load time", v, ok)
	}

	// A rejected rule set counts an error; the next good one clears it.
	h.srv.RejectRules(errors.New("rules.yaml:3:1: bad"))
	scrape(t, ts).Want(t, map[string]float64{
		`ratelimitd_config_loads_total{result=error}`: 1,
		`ratelimitd_config_last_load_successful`:      0,
	})
	h.srv.SetRules(parseRules(t, metricsRules))
	scrape(t, ts).Want(t, map[string]float64{
		`ratelimitd_config_loads_total{result=success}`: 2,
		`ratelimitd_config_last_load_successful`:        1,
	})
}

// TestNearLimitRatio: the ratio moves the near-limit threshold.
func TestNearLimitRatio(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHarness(t, parseRules(t, metricsRules), server.Options{Registry: reg, NearLimitRatio: 0.3})
	for range 3 { // limit 3, threshold floor(0.9) = 0: every hit is near
		h.should(t, request("m", desc("k", "v")))
	}
	scrape(t, httpServer(t, h)).Want(t, map[string]float64{
		`ratelimitd_rule_near_limit_total{domain=m,rule=k=v}`: 3,
	})
}

// failingStore fails every Take with err.
type failingStore struct{ err error }

func (s failingStore) Take(context.Context, []backend.Request, []backend.Result) error { return s.err }

// TestStoreFailureMetrics: store failures are counted by kind, and the
// failure mode's answers by mode.
func TestStoreFailureMetrics(t *testing.T) {
	tests := []struct {
		name string
		err  error
		kind string
	}{
		{"deadline", fmt.Errorf("redis: take: %w", context.DeadlineExceeded), "timeout"},
		{"read timeout", fmt.Errorf("redis: take: read tcp: %w", os.ErrDeadlineExceeded), "timeout"},
		{"breaker", fmt.Errorf("redis: take: %w: redis", backend.ErrUnavailable), "breaker_open"},
		{"refused", errors.New("dial tcp 127.0.0.1:6379: connection refused"), "error"},
	}
	for _, mode := range []server.FailureMode{server.FailAllow, server.FailDeny, server.FailError} {
		for _, tt := range tests {
			t.Run(mode.String()+"/"+tt.name, func(t *testing.T) {
				reg := prometheus.NewRegistry()
				srv := server.New(failingStore{tt.err}, parseRules(t, metricsRules), server.Options{Registry: reg, FailureMode: mode})
				// Each mode answers its own way; only the counts matter here.
				_, _ = srv.Envoy().ShouldRateLimit(t.Context(), request("m", desc("k", "v")))
				_, _ = srv.Native().ShouldRateLimit(t.Context(), nrequest("m", ndesc("k", "v")))
				ts := httptest.NewServer(srv.Handler())
				defer ts.Close()
				mfs := scrape(t, ts)
				mfs.Want(t, map[string]float64{
					"ratelimitd_backend_errors_total{kind=" + tt.kind + "}":             2,
					"ratelimitd_failure_mode_answers_total{mode=" + mode.String() + "}": 2,
				})
				// Nothing was decided, so no rule counted anything.
				if v, ok := mfs.Value("ratelimitd_rule_hits_total", "domain=m,rule=k=v"); ok {
					t.Errorf("ratelimitd_rule_hits_total{rule=k=v} = %v after store failures, want no series", v)
				}
			})
		}
	}
}

// TestConfigEndpoint: GET /config shows the rules in force.
func TestConfigEndpoint(t *testing.T) {
	h := newHarness(t, nil, server.Options{})
	ts := httpServer(t, h)
	if code, _, _ := do(t, ts, "GET", "/config", ""); code != http.StatusServiceUnavailable {
		t.Errorf("GET /config before rules = %d, want 503", code)
	}
	h.srv.SetRules(parseRules(t, metricsRules))
	code, body, hdr := do(t, ts, "GET", "/config", "")
	if code != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "application/yaml") {
		t.Fatalf("GET /config = %d %s, want 200 application/yaml", code, hdr.Get("Content-Type"))
	}
	// What /config shows loads back to the same rules.
	domains, err := config.Parse("config.yaml", []byte(body))
	if err != nil {
		t.Fatalf("GET /config is not a valid rules file: %v\n%s", err, body)
	}
	if len(domains) != 1 || domains[0].Domain != "m" || len(domains[0].Descriptors) != 6 {
		t.Errorf("GET /config = %q, want domain m with its 6 descriptors", body)
	}
	if code, _, _ := do(t, ts, "GET", "/metrics", ""); code != http.StatusNotFound {
		t.Errorf("GET /metrics without a Registry = %d, want 404", code)
	}
}
