package server_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/ratelimitd/ratelimitd/server"
)

// httpServer serves h's Handler over a real HTTP listener.
func httpServer(t *testing.T, h *harness) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(h.srv.Handler())
	t.Cleanup(ts.Close)
	return ts
}

// do sends one HTTP request and returns the status code and body.
func do(t *testing.T, ts *httptest.Server, method, path, body string) (int, string, http.Header) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, ts.URL+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return resp.StatusCode, string(b), resp.Header
}

// TestHTTPJSON: POST /json decides a protojson RateLimitRequest: 200 and
// the protojson response, 429 when over, 400 for a bad request, 405 for
// another method.
func TestHTTPJSON(t *testing.T) {
	h := newHarness(t, loadRules(t, "gateway.yaml"), server.Options{})
	ts := httpServer(t, h)
	body := `{"domain": "gateway", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.1"}]}]}`
	ip := func(code rlsv3.RateLimitResponse_Code, rem uint32) *rlsv3.RateLimitResponse {
		return response(code, limited(code, "remote_address", 4, minute, rem, time.Minute))
	}
	for i, want := range []struct {
		status int
		resp   *rlsv3.RateLimitResponse
	}{
		{200, ip(ok, 3)}, {200, ip(ok, 2)}, {200, ip(ok, 1)}, {200, ip(ok, 0)},
		{429, ip(over, 0)}, {429, ip(over, 0)},
	} {
		code, got, hdr := do(t, ts, "POST", "/json", body)
		if code != want.status {
			t.Errorf("call %d: POST /json = %d %s, want %d", i, code, got, want.status)
		}
		if ct := hdr.Get("Content-Type"); ct != "application/json" {
			t.Errorf("call %d: Content-Type %q, want application/json", i, ct)
		}
		var resp rlsv3.RateLimitResponse
		if err := protojson.Unmarshal([]byte(got), &resp); err != nil {
			t.Errorf("call %d: body %q is not a protojson RateLimitResponse: %v", i, got, err)
			continue
		}
		if diff := cmp.Diff(want.resp, withoutDecidedBy(t, &resp), protocmp.Transform(), ignoreHeaders); diff != "" {
			t.Errorf("call %d: POST /json response mismatch (-want +got):\n%s", i, diff)
		}
		if len(resp.GetResponseHeadersToAdd()) == 0 {
			t.Errorf("call %d: no response_headers_to_add in the JSON response", i)
		}
	}

	// /json and gRPC share the counters.
	got := h.should(t, request("gateway", hits(0, desc("remote_address", "10.0.0.1"))))
	if diff := cmp.Diff(ip(ok, 0), got, protocmp.Transform(), ignoreHeaders); diff != "" {
		t.Errorf("gRPC after /json (-want +got):\n%s", diff)
	}

	for _, tt := range []struct {
		name, method, body string
		want               int
		msg                string // in the body
	}{
		{"bad JSON", "POST", `{"domain": "gateway", `, 400, ""},
		{"not an object", "POST", `[1, 2]`, 400, ""},
		{"unknown field", "POST", `{"domain": "gateway", "descriptorz": []}`, 400, ""},
		{"empty body", "POST", ``, 400, ""},
		{"empty domain", "POST", `{"domain": "", "descriptors": [{"entries": [{"key": "a", "value": "b"}]}]}`, 400, "domain"},
		{"no descriptors", "POST", `{"domain": "gateway"}`, 400, "descriptors"},
		{"empty key", "POST", `{"domain": "gateway", "descriptors": [{"entries": [{"key": "", "value": "b"}]}]}`, 400, "empty key"},
		{"GET", "GET", ``, 405, ""},
		{"PUT", "PUT", body, 405, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, got, _ := do(t, ts, tt.method, "/json", tt.body)
			if code != tt.want {
				t.Errorf("%s /json %q = %d %q, want %d", tt.method, tt.body, code, got, tt.want)
			}
			if !strings.Contains(got, tt.msg) {
				t.Errorf("%s /json %q: body %q, want it to contain %q", tt.method, tt.body, got, tt.msg)
			}
		})
	}

	// A body over MaxRecvMsgSize is refused.
	big := `{"domain": "gateway", "descriptors": [{"entries": [{"key": "a", "value": "` + strings.Repeat("x", server.MaxRecvMsgSize) + `"}]}]}`
	if code, got, _ := do(t, ts, "POST", "/json", big); code != http.StatusRequestEntityTooLarge {
		t.Errorf("POST /json of %d bytes = %d %.100q, want 413", len(big), code, got)
	}
}

// TestHTTPHealth: /healthz while the process runs; /readyz once rules are
// loaded and until Shutdown.
func TestHTTPHealth(t *testing.T) {
	h := newHarness(t, nil, server.Options{})
	ts := httpServer(t, h)
	check := func(when string, healthz, readyz int) {
		t.Helper()
		if code, body, _ := do(t, ts, "GET", "/healthz", ""); code != healthz {
			t.Errorf("%s: GET /healthz = %d %q, want %d", when, code, body, healthz)
		}
		if code, body, _ := do(t, ts, "GET", "/readyz", ""); code != readyz {
			t.Errorf("%s: GET /readyz = %d %q, want %d", when, code, body, readyz)
		}
	}
	check("without rules", 200, 503)

	// Without rules, every domain is unknown.
	code, body, _ := do(t, ts, "POST", "/json", `{"domain": "gateway", "descriptors": [{"entries": [{"key": "remote_address", "value": "a"}]}]}`)
	if code != 200 {
		t.Errorf("POST /json without rules = %d %q, want 200", code, body)
	}
	var resp rlsv3.RateLimitResponse
	if err := protojson.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatalf("POST /json without rules: %v", err)
	}
	if diff := cmp.Diff(response(ok, okStatus()), &resp, protocmp.Transform()); diff != "" {
		t.Errorf("POST /json without rules (-want +got):\n%s", diff)
	}

	h.srv.SetRules(loadRules(t, "gateway.yaml"))
	if h.srv.Rules() == nil {
		t.Error("Rules() = nil after SetRules")
	}
	check("with rules", 200, 200)

	h.srv.Shutdown()
	check("after Shutdown", 200, 503)
	h.srv.SetRules(loadRules(t, "gateway.yaml"))
	check("new rules after Shutdown", 200, 503)
}
