package server_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/server"
)

// TestOperatorRoutes: Handler serves every endpoint; Handlers serves the
// operators' (/config, /metrics, /rlqs, /rlconfig, /ui/, /hotkeys,
// /explain) on admin only, and the callers' and probes' on public only.
func TestOperatorRoutes(t *testing.T) {
	rules := loadRules(t, "gateway.yaml")
	opts := func() server.Options {
		return server.Options{
			RLQS: true, EnvoyproxyEndpoints: true, Registry: prometheus.NewRegistry(),
			HotKeys: server.HotKeysOptions{Enabled: true},
		}
	}
	operator := []string{"/config", "/metrics", "/rlqs", "/rlconfig", "/ui/", "/ui/ui.js", "/ui/api/rules", "/ui/api/rates", "/ui/api/status", "/hotkeys"}
	public := []string{"/healthz", "/readyz", "/healthcheck"}
	jsonBody := `{"domain": "gateway", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.1"}]}]}`
	operatorPost := []string{"/explain"}
	publicPost := []string{"/json"}

	all := httpServer(t, newHarness(t, rules, opts()))
	for _, p := range append(operator, public...) {
		if code, body, _ := do(t, all, "GET", p, ""); code != http.StatusOK {
			t.Errorf("Handler: GET %s = %d %q, want 200", p, code, body)
		}
	}
	for _, p := range append(operatorPost, publicPost...) {
		if code, body, _ := do(t, all, "POST", p, jsonBody); code != http.StatusOK {
			t.Errorf("Handler: POST %s = %d %q, want 200", p, code, body)
		}
	}

	h := newHarness(t, rules, opts())
	pub, adm := h.srv.Handlers()
	pubTS, admTS := httptest.NewServer(pub), httptest.NewServer(adm)
	t.Cleanup(pubTS.Close)
	t.Cleanup(admTS.Close)
	split := func(method string, paths []string, body string, served, notServed *httptest.Server, servedName, otherName string) {
		t.Helper()
		for _, p := range paths {
			if code, got, _ := do(t, served, method, p, body); code != http.StatusOK {
				t.Errorf("%s: %s %s = %d %q, want 200", servedName, method, p, code, got)
			}
			if code, _, _ := do(t, notServed, method, p, body); code != http.StatusNotFound {
				t.Errorf("%s: %s %s = %d, want 404", otherName, method, p, code)
			}
		}
	}
	split("GET", operator, "", admTS, pubTS, "admin", "public")
	split("POST", operatorPost, jsonBody, admTS, pubTS, "admin", "public")
	split("GET", public, "", pubTS, admTS, "public", "admin")
	split("POST", publicPost, jsonBody, pubTS, admTS, "public", "admin")
}

// TestOperatorHosts: OperatorHosts answers the operators' endpoints only
// to a Host that is an IP address, localhost or a name given, and 421 to
// any other, as on the admin handler so on the one handler that serves
// everything; the callers' endpoints answer whatever the Host.
func TestOperatorHosts(t *testing.T) {
	rules := loadRules(t, "gateway.yaml")
	opts := server.Options{Registry: prometheus.NewRegistry(), HotKeys: server.HotKeysOptions{Enabled: true}}
	all := httptest.NewServer(server.OperatorHosts(newHarness(t, rules, opts).srv.Handler(), "admin.internal", "Ops.Example.:9090"))
	t.Cleanup(all.Close)
	_, adm := newHarness(t, rules, server.Options{HotKeys: server.HotKeysOptions{Enabled: true}}).srv.Handlers()
	admin := httptest.NewServer(server.OperatorHosts(adm, "admin.internal"))
	t.Cleanup(admin.Close)
	jsonBody := `{"domain": "gateway", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.1"}]}]}`

	good := []string{"", "127.0.0.1", "127.0.0.1:8080", "10.1.2.3:9090", "[::1]:9090", "[fe80::1%25eth0]:80", "localhost", "localhost:9090",
		"LOCALHOST.:9090", "admin.internal", "Admin.Internal.:443"}
	bad := []string{"evil.example", "evil.example:9090", "localhost.evil.example", "127.0.0.1.evil.example:80", "admin.internal.evil.example", "internal"}
	for _, ts := range []*httptest.Server{all, admin} {
		for _, host := range good {
			for _, p := range []string{"/config", "/ui/", "/ui/api/status", "/hotkeys"} {
				if code, body := doHost(t, ts, "GET", p, host, ""); code != http.StatusOK {
					t.Errorf("GET %s with Host %q = %d %q, want 200", p, host, code, body)
				}
			}
			if code, body := doHost(t, ts, "POST", "/explain", host, jsonBody); code != http.StatusOK {
				t.Errorf("POST /explain with Host %q = %d %q, want 200", host, code, body)
			}
		}
		for _, host := range bad {
			for _, p := range []string{"/config", "/ui/", "/ui/api/status", "/hotkeys"} {
				if code, _ := doHost(t, ts, "GET", p, host, ""); code != http.StatusMisdirectedRequest {
					t.Errorf("GET %s with Host %q = %d, want 421", p, host, code)
				}
			}
			if code, _ := doHost(t, ts, "POST", "/explain", host, jsonBody); code != http.StatusMisdirectedRequest {
				t.Errorf("POST /explain with Host %q = %d, want 421", host, code)
			}
		}
	}
	for _, host := range []string{"ops.example", "ops.example:9090"} {
		if code, body := doHost(t, all, "GET", "/metrics", host, ""); code != http.StatusOK {
			t.Errorf("GET /metrics with Host %q, a name given with a port and a dot = %d %q, want 200", host, code, body)
		}
	}
	if code, _ := doHost(t, all, "GET", "/metrics", "evil.example", ""); code != http.StatusMisdirectedRequest {
		t.Errorf("GET /metrics with Host evil.example = %d, want 421", code)
	}
	// The callers' endpoints answer any name.
	for _, host := range bad {
		if code, body := doHost(t, all, "GET", "/readyz", host, ""); code != http.StatusOK {
			t.Errorf("GET /readyz with Host %q = %d %q, want 200", host, code, body)
		}
		if code, body := doHost(t, all, "POST", "/json", host, jsonBody); code != http.StatusOK && code != http.StatusTooManyRequests {
			t.Errorf("POST /json with Host %q = %d %q, want a decision (200 or 429)", host, code, body)
		}
	}
}

// doHost sends one HTTP request to ts with the Host header host (none
// when empty, as HTTP/1.0 may) and returns the status code and body.
func doHost(t *testing.T, ts *httptest.Server, method, path, host, body string) (int, string) {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), method, path, strings.NewReader(body))
	req.Host = host
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	ts.Config.Handler.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

// TestUIPage: /ui/ serves the embedded page with a policy that allows
// only its own files.
func TestUIPage(t *testing.T) {
	ts := httpServer(t, newHarness(t, loadRules(t, "gateway.yaml"), server.Options{}))
	code, body, hdr := do(t, ts, "GET", "/ui/", "")
	if code != http.StatusOK || !strings.Contains(body, `<script src="ui.js"`) {
		t.Fatalf("GET /ui/ = %d %.200q, want 200 and the page", code, body)
	}
	if csp := hdr.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy %q, want the page's own files only", csp)
	}
	for _, f := range []string{"/ui/ui.js", "/ui/ui.css"} {
		if code, body, _ := do(t, ts, "GET", f, ""); code != http.StatusOK || len(body) < 100 {
			t.Errorf("GET %s = %d (%d bytes), want 200 and the file", f, code, len(body))
		}
	}
	// The page builds its DOM from text only.
	_, js, _ := do(t, ts, "GET", "/ui/ui.js", "")
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
		if strings.Contains(js, bad) {
			t.Errorf("ui.js uses %s", bad)
		}
	}
}

// TestUIRules: /ui/api/rules is the rule tree: nested rules under their
// parents, with limits, modes, file and line.
func TestUIRules(t *testing.T) {
	rules := parseRules(t, `
domain: edge
descriptors:
  - key: tenant
    value: acme
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window}
    descriptors:
      - key: path
        rate_limits:
          - {unit: second, requests_per_unit: 2, algorithm: token_bucket, burst: 4, name: fast}
          - {unit: hour, requests_per_unit: 100}
  - key: health
    rate_limit: {unlimited: true}
`)
	ts := httpServer(t, newHarness(t, rules, server.Options{}))
	code, body, _ := do(t, ts, "GET", "/ui/api/rules", "")
	if code != http.StatusOK {
		t.Fatalf("GET /ui/api/rules = %d %q", code, body)
	}
	type limit struct {
		Name, Algorithm, Window string
		Requests, Burst         uint64
	}
	type rule struct {
		Key, Value, Path string
		Line             int
		Limits           []limit
		Unlimited        bool
		ShadowMode       bool `json:"shadow_mode"`
		Children         []rule
	}
	var got struct {
		Domains []struct {
			Domain string
			Rules  []rule
		}
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	if len(got.Domains) != 1 || got.Domains[0].Domain != "edge" {
		t.Fatalf("domains %+v, want edge", got.Domains)
	}
	want := []rule{
		{Key: "health", Path: "health", Line: 13, Limits: []limit{}, Unlimited: true, Children: []rule{}},
		{Key: "tenant", Value: "acme", Path: "tenant=acme", Line: 4, ShadowMode: true,
			Limits: []limit{{Algorithm: "fixed_window", Window: "minute", Requests: 10}},
			Children: []rule{{Key: "path", Path: "tenant=acme.path", Line: 9, Children: []rule{}, Limits: []limit{
				{Name: "fast", Algorithm: "token_bucket", Window: "second", Requests: 2, Burst: 4},
				{Algorithm: "sliding_window", Window: "hour", Requests: 100},
			}}}},
	}
	if diff := cmp.Diff(want, got.Domains[0].Rules); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}
}

// TestUIRates: the rates are the rule counters' growth each second,
// admitted and refused, the busiest rule first; a second without a
// sample counts nothing; a rule without traffic over the window leaves.
func TestUIRates(t *testing.T) {
	h := newHarness(t, loadRules(t, "gateway.yaml"), server.Options{})
	ts := httpServer(t, h)
	base := time.Unix(1_800_000_000, 0)
	h.srv.SampleRatesAt(base) // the base: counts nothing
	ip := request("gateway", desc("remote_address", "10.0.0.1"))
	acme := request("gateway", desc("tenant", "acme"))
	for range 6 { // 4 admitted, 2 refused
		h.should(t, ip)
	}
	h.should(t, acme)
	h.srv.SampleRatesAt(base.Add(time.Second))
	for range 3 {
		h.should(t, ip) // refused: the fixed window's minute is the clock's, not the sampler's
	}
	h.srv.SampleRatesAt(base.Add(3 * time.Second)) // second 2 had no sample

	type rates struct {
		End     int64
		Seconds int
		Rules   []struct {
			Domain, Rule      string
			Admitted, Refused []uint32
		}
		More int
	}
	get := func(q string) rates {
		t.Helper()
		code, body, _ := do(t, ts, "GET", "/ui/api/rates"+q, "")
		if code != http.StatusOK {
			t.Fatalf("GET /ui/api/rates%s = %d %q", q, code, body)
		}
		var r rates
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatalf("body %q: %v", body, err)
		}
		return r
	}
	r := get("")
	if r.End != base.Unix()+3 || r.Seconds != 4 || len(r.Rules) != 2 {
		t.Fatalf("rates = %+v, want 4 seconds to %d, 2 rules", r, base.Unix()+3)
	}
	type series struct {
		Rule              string
		Admitted, Refused []uint32
	}
	var got []series
	for _, x := range r.Rules {
		got = append(got, series{x.Rule, x.Admitted, x.Refused})
	}
	want := []series{
		{"remote_address", []uint32{0, 4, 0, 0}, []uint32{0, 2, 0, 3}},
		{"tenant=acme", []uint32{0, 1, 0, 0}, []uint32{0, 0, 0, 0}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rates (-want +got):\n%s", diff)
	}
	if r := get("?limit=1"); len(r.Rules) != 1 || r.Rules[0].Rule != "remote_address" || r.More != 1 {
		t.Errorf("?limit=1: %+v, want remote_address and 1 more", r)
	}
	if code, _, _ := do(t, ts, "GET", "/ui/api/rates?limit=x", ""); code != http.StatusBadRequest {
		t.Errorf("?limit=x = %d, want 400", code)
	}

	// Five minutes on, the traffic has left the window.
	h.srv.SampleRatesAt(base.Add(3*time.Second + server.RateSeconds*time.Second))
	if r := get(""); len(r.Rules) != 0 || r.Seconds != server.RateSeconds {
		t.Errorf("after %d s without traffic: %+v, want no rule over %d s", server.RateSeconds, r, server.RateSeconds)
	}
}

// TestUIStatus: /ui/api/status says what /readyz says, as JSON.
func TestUIStatus(t *testing.T) {
	ts := httpServer(t, newHarness(t, loadRules(t, "gateway.yaml"), server.Options{FailureMode: server.FailDeny}))
	code, body, _ := do(t, ts, "GET", "/ui/api/status", "")
	var st struct {
		Ready       bool
		Store       string
		FailureMode string `json:"failure_mode"`
		RulesLoaded bool   `json:"rules_loaded"`
	}
	if err := json.Unmarshal([]byte(body), &st); code != http.StatusOK || err != nil {
		t.Fatalf("GET /ui/api/status = %d %q (%v)", code, body, err)
	}
	if !st.Ready || st.Store != "ok" || st.FailureMode != "deny" || !st.RulesLoaded {
		t.Errorf("status %+v, want ready, store ok, failure mode deny, rules loaded", st)
	}
}

// TestUIRatesReload: a reload keeps the rates going, measured from the
// counts before it; a rule whose metrics carry request values has none.
func TestUIRatesReload(t *testing.T) {
	const yaml = `
domain: edge
descriptors:
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: user
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
`
	h := newHarness(t, parseRules(t, yaml), server.Options{})
	ts := httpServer(t, h)
	base := time.Unix(1_800_000_000, 0)
	h.srv.SampleRatesAt(base)
	ip, user := request("edge", desc("ip", "10.0.0.1")), request("edge", desc("user", "alice"))
	for range 3 {
		h.should(t, ip)
		h.should(t, user)
	}
	h.srv.SampleRatesAt(base.Add(time.Second))
	h.srv.SetRules(parseRules(t, yaml)) // the same rules, loaded again
	h.srv.SampleRatesAt(base.Add(2 * time.Second))
	for range 2 {
		h.should(t, ip)
	}
	h.srv.SampleRatesAt(base.Add(3 * time.Second))

	code, body, _ := do(t, ts, "GET", "/ui/api/rates", "")
	var r struct {
		Rules []struct {
			Rule     string
			Admitted []uint32
		}
	}
	if err := json.Unmarshal([]byte(body), &r); code != http.StatusOK || err != nil {
		t.Fatalf("GET /ui/api/rates = %d %q (%v)", code, body, err)
	}
	if len(r.Rules) != 1 || r.Rules[0].Rule != "ip" {
		t.Fatalf("rates of %+v, want ip's only", r.Rules)
	}
	if diff := cmp.Diff([]uint32{0, 3, 0, 2}, r.Rules[0].Admitted); diff != "" {
		t.Errorf("ip admitted (-want +got):\n%s", diff)
	}
}
