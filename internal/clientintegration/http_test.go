package clientintegration_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ratelimitd/ratelimitd/client"
)

// httpRules are the HTTP tests' rate limits.
const httpRules = `
domain: web
descriptors:
  - key: api_key
    rate_limit: {algorithm: fixed_window, unit: minute, requests_per_unit: 2}
  - key: remote_address
    rate_limit: {algorithm: fixed_window, unit: minute, requests_per_unit: 1}
  - key: path
    value: /login
    descriptors:
      - key: method
        value: POST
        rate_limit: {name: login, algorithm: fixed_window, unit: minute, requests_per_unit: 1}
  - key: path
    value: "GET /items/{id}"
    descriptors:
      - key: method
        rate_limit: {name: items, algorithm: fixed_window, unit: minute, requests_per_unit: 1}
`

// newHTTPHarness is newHarness with httpRules.
func newHTTPHarness(t *testing.T) *harness { return newHarnessRules(t, httpRules) }

// next is a handler that counts its calls and answers 200 "ok".
type next struct{ calls int }

func (n *next) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	n.calls++
	io.WriteString(w, "ok")
}

// serve runs one request through h and returns the response.
func serve(h http.Handler, r *http.Request) *http.Response {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec.Result()
}

func request(method, target, remote string, header ...string) *http.Request {
	r := httptest.NewRequest(method, target, nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	return r
}

// problem is the 429 body.
type problem struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail"`
	ViolatedPolicies []string `json:"violated-policies"`
}

func readProblem(t *testing.T, resp *http.Response) problem {
	t.Helper()
	if got, want := resp.Header.Get("Content-Type"), "application/problem+json"; got != want {
		t.Errorf("Content-Type = %q, want %q", got, want)
	}
	var p problem
	dec := json.NewDecoder(resp.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("decoding the problem body: %v", err)
	}
	return p
}

func wantHeaders(t *testing.T, step string, resp *http.Response, want map[string]string) {
	t.Helper()
	for name, v := range want {
		if got := resp.Header.Values(name); v == "" && len(got) != 0 || v != "" && (len(got) != 1 || got[0] != v) {
			t.Errorf("%s: header %s = %q, want %q", step, name, got, v)
		}
	}
}

// TestHTTPServerHeaders: with the default descriptors (client IP, route
// and method), an allowed request passes with the IETF headers; a refused
// one gets 429, Retry-After and a quota-exceeded problem, and next is not
// called; a locally remembered refusal is answered the same way.
func TestHTTPServerHeaders(t *testing.T) {
	h := newHTTPHarness(t)
	n := &next{}
	mw := client.HTTPMiddleware(h.client(), "web")(n)
	h.at(15 * time.Second)

	resp := serve(mw, request("POST", "/login", "192.0.2.1:1234"))
	if resp.StatusCode != http.StatusOK || n.calls != 1 {
		t.Fatalf("first request: status %d, next called %d times; want 200, 1", resp.StatusCode, n.calls)
	}
	wantHeaders(t, "allowed", resp, map[string]string{
		"RateLimit-Policy":  `"remote_address";q=1;w=60, "login";q=1;w=60`,
		"RateLimit":         `"remote_address";r=0;t=45, "login";r=0;t=45`,
		"Retry-After":       "",
		"X-RateLimit-Limit": "",
	})

	for i, wantLocal := range []bool{false, true} {
		rpcs := h.rpcs.Load()
		resp = serve(mw, request("POST", "/login", "192.0.2.1:1234"))
		if resp.StatusCode != http.StatusTooManyRequests || n.calls != 1 {
			t.Fatalf("refused %d: status %d, next called %d times; want 429, 1", i, resp.StatusCode, n.calls)
		}
		if local := h.rpcs.Load() == rpcs; local != wantLocal {
			t.Errorf("refused %d: decided locally %v, want %v", i, local, wantLocal)
		}
		wantHeaders(t, "refused", resp, map[string]string{
			"RateLimit-Policy": `"remote_address";q=1;w=60, "login";q=1;w=60`,
			"RateLimit":        `"remote_address";r=0;t=45, "login";r=0;t=45`,
			"Retry-After":      "45",
		})
		got := readProblem(t, resp)
		want := problem{
			Type:             "https://iana.org/assignments/http-problem-types#quota-exceeded",
			Title:            "Request cannot be satisfied as assigned quota has been exceeded",
			Status:           429,
			Detail:           "Too many requests; retry in 45 s.",
			ViolatedPolicies: []string{"remote_address", "login"},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("refused %d: problem mismatch (-want +got):\n%s", i, diff)
		}
	}

	// Another client, another route: its own counters.
	resp = serve(mw, request("GET", "/search", "192.0.2.2:1234"))
	if resp.StatusCode != http.StatusOK || n.calls != 2 {
		t.Errorf("other client: status %d, next called %d times; want 200, 2", resp.StatusCode, n.calls)
	}
	wantHeaders(t, "other client", resp, map[string]string{
		"RateLimit-Policy": `"remote_address";q=1;w=60`,
		"RateLimit":        `"remote_address";r=0;t=45`,
	})
}

// TestHTTPRetryAfterRoundsUp: Retry-After is whole seconds, rounded up.
func TestHTTPRetryAfterRoundsUp(t *testing.T) {
	h := newHTTPHarness(t)
	mw := client.HTTPMiddleware(h.client(client.WithRefusalCache(0)), "web", client.WithClientIP())(&next{})
	h.at(59*time.Second + 100*time.Millisecond)
	serve(mw, request("GET", "/", "192.0.2.1:1"))
	resp := serve(mw, request("GET", "/", "192.0.2.1:1"))
	wantHeaders(t, "refused", resp, map[string]string{"Retry-After": "1"})
}

// TestHTTPXRateLimit: WithXRateLimitHeaders adds the legacy headers of the
// tightest limit, allowed or refused.
func TestHTTPXRateLimit(t *testing.T) {
	h := newHTTPHarness(t)
	n := &next{}
	mw := client.HTTPMiddleware(h.client(), "web",
		client.WithAPIKeyHeader("X-API-Key"), client.WithXRateLimitHeaders())(n)
	h.at(10*time.Second + 500*time.Millisecond)
	for i, want := range []struct {
		status    int
		remaining string
	}{{200, "1"}, {200, "0"}, {429, "0"}} {
		resp := serve(mw, request("GET", "/", "192.0.2.1:1", "X-API-Key", "k1"))
		if resp.StatusCode != want.status {
			t.Errorf("request %d: status %d, want %d", i, resp.StatusCode, want.status)
		}
		wantHeaders(t, "X-RateLimit", resp, map[string]string{
			"X-RateLimit-Limit":     "2",
			"X-RateLimit-Remaining": want.remaining,
			"X-RateLimit-Reset":     "50",
			"RateLimit-Policy":      `"api_key";q=2;w=60`,
		})
	}
}

// TestHTTPAPIKey: each API key has its own counter; a request without one
// has no descriptor and passes without asking ratelimitd.
func TestHTTPAPIKey(t *testing.T) {
	h := newHTTPHarness(t)
	n := &next{}
	mw := client.HTTPMiddleware(h.client(), "web", client.WithAPIKeyHeader("X-API-Key"))(n)
	steps := []struct {
		key        string
		wantStatus int
	}{{"k1", 200}, {"k1", 200}, {"k1", 429}, {"k2", 200}, {"", 200}, {"", 200}}
	for i, st := range steps {
		rpcs := h.rpcs.Load()
		r := request("GET", "/", "192.0.2.1:1")
		if st.key != "" {
			r.Header.Set("X-API-Key", st.key)
		}
		resp := serve(mw, r)
		if resp.StatusCode != st.wantStatus {
			t.Errorf("step %d (key %q): status %d, want %d", i, st.key, resp.StatusCode, st.wantStatus)
		}
		if st.key == "" {
			if h.rpcs.Load() != rpcs || resp.Header.Get("RateLimit") != "" {
				t.Errorf("step %d: no key, but ratelimitd was asked (headers %v)", i, resp.Header)
			}
		}
	}
	if n.calls != 5 {
		t.Errorf("next called %d times, want 5", n.calls)
	}
}

// TestHTTPClientIP: the middleware keys by ClientIP: an untrusted peer by
// itself, whatever X-Forwarded-For says; a trusted proxy's clients each by
// the address the proxy reports.
func TestHTTPClientIP(t *testing.T) {
	h := newHTTPHarness(t)
	mw := client.HTTPMiddleware(h.client(), "web",
		client.WithClientIP(netip.MustParsePrefix("10.0.0.0/8")))(&next{})
	steps := []struct {
		remote, xff string
		wantStatus  int
	}{
		{"10.0.0.1:1", "203.0.113.7, 10.0.0.2", 200},
		{"10.0.0.3:1", "203.0.113.8", 200},  // another client, same proxies
		{"10.0.0.1:1", "203.0.113.7", 429},  // same client, other proxy path
		{"192.0.2.9:1", "203.0.113.9", 200}, // untrusted: keyed by the peer
		{"192.0.2.9:1", "203.0.113.10", 429},
	}
	for i, st := range steps {
		resp := serve(mw, request("GET", "/", st.remote, "X-Forwarded-For", st.xff))
		if resp.StatusCode != st.wantStatus {
			t.Errorf("step %d: peer %s, X-Forwarded-For %q: status %d, want %d", i, st.remote, st.xff, resp.StatusCode, st.wantStatus)
		}
	}
}

// TestHTTPPattern: inside a ServeMux, the default route is the matched
// pattern, so /items/1 and /items/2 share the items limit.
func TestHTTPPattern(t *testing.T) {
	h := newHTTPHarness(t)
	mw := client.HTTPMiddleware(h.client(), "web", client.WithRoute(nil))
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", mw(&next{}))
	for i, want := range []int{200, 429} {
		resp := serve(mux, request("GET", "/items/"+string(rune('1'+i)), "192.0.2.1:1"))
		if resp.StatusCode != want {
			t.Errorf("GET /items/%d: status %d, want %d", i+1, resp.StatusCode, want)
		}
	}
}

// TestHTTPDescriptors: the caller's descriptors are sent after the others.
func TestHTTPDescriptors(t *testing.T) {
	h := newHTTPHarness(t)
	mw := client.HTTPMiddleware(h.client(), "web",
		client.WithHTTPDescriptors(func(r *http.Request) []client.Descriptor {
			return []client.Descriptor{client.D("api_key", r.URL.Query().Get("key"))}
		}))(&next{})
	resp := serve(mw, request("GET", "/?key=q1", "192.0.2.1:1"))
	wantHeaders(t, "custom", resp, map[string]string{"RateLimit": `"api_key";r=1;t=60`})
}
