package server_test

import (
	"net/http"
	"testing"

	"github.com/ratelimitd/ratelimitd/server"
)

// TestEnvoyproxyEndpoints: with EnvoyproxyEndpoints, /healthcheck answers
// as the reference's (500 without rules and after Shutdown, 200 "OK"
// between) and /rlconfig lists every rule with a limit, with what
// compilation decided; without the option, neither exists.
func TestEnvoyproxyEndpoints(t *testing.T) {
	h := newHarness(t, nil, server.Options{EnvoyproxyEndpoints: true})
	ts := httpServer(t, h)
	if code, body, _ := do(t, ts, "GET", "/healthcheck", ""); code != http.StatusInternalServerError || body != "" {
		t.Errorf("GET /healthcheck without rules = %d %q, want 500 and no body", code, body)
	}
	if code, _, _ := do(t, ts, "GET", "/rlconfig", ""); code != http.StatusServiceUnavailable {
		t.Errorf("GET /rlconfig without rules = %d, want 503", code)
	}

	h.srv.SetRules(parseRules(t, `domain: web
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: tenant
    value: acme
    descriptors:
      - key: path
        value: /v1/*
        shadow_mode: true
        rate_limits:
          - {window: 90s, requests_per_unit: 5, algorithm: token_bucket, burst: 2, name: search}
          - {unit: day, requests_per_unit: 1000}
  - key: health
    rate_limit: {unlimited: true}
---
domain: api
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: fixed_window}
`))
	if code, body, _ := do(t, ts, "GET", "/healthcheck", ""); code != http.StatusOK || body != "OK" {
		t.Errorf("GET /healthcheck = %d %q, want 200 OK", code, body)
	}
	want := `api.k: 1 per second fixed_window
web.health: unlimited
web.remote_address: 10 per minute sliding_window
web.tenant=acme.path=/v1/*: 5 per 1m30s token_bucket burst=2 name=search + 1000 per day sliding_window shadow_mode
`
	if code, body, hdr := do(t, ts, "GET", "/rlconfig", ""); code != http.StatusOK || body != want || hdr.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Errorf("GET /rlconfig = %d %s\n%s\nwant 200 text/plain\n%s", code, hdr.Get("Content-Type"), body, want)
	}

	h.srv.Shutdown()
	if code, _, _ := do(t, ts, "GET", "/healthcheck", ""); code != http.StatusInternalServerError {
		t.Errorf("GET /healthcheck after Shutdown = %d, want 500", code)
	}

	plain := httpServer(t, newHarness(t, parseRules(t, "domain: d\n"), server.Options{}))
	for _, path := range []string{"/healthcheck", "/rlconfig"} {
		if code, _, _ := do(t, plain, "GET", path, ""); code != http.StatusNotFound {
			t.Errorf("GET %s without EnvoyproxyEndpoints = %d, want 404", path, code)
		}
	}
}
