package clientintegration_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
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

// do serves one request through h: method and target, from the peer
// remote, with the header fields of kv (name, value, ...).
func do(h http.Handler, method, target, remote string, kv ...string) *http.Response {
	r := httptest.NewRequest(method, target, nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(kv); i += 2 {
		r.Header.Add(kv[i], kv[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Result()
}

// wantHeaders checks the fields of resp named in want: one of that value,
// or none where the value is "".
func wantHeaders(t *testing.T, step string, resp *http.Response, want map[string]string) {
	t.Helper()
	got := make(map[string]string, len(want))
	for name := range want {
		got[name] = strings.Join(resp.Header.Values(name), "\n")
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s: headers mismatch (-want +got):\n%s", step, diff)
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

	resp := do(mw, "POST", "/login", "192.0.2.1:1234")
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
		resp = do(mw, "POST", "/login", "192.0.2.1:1234")
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
		// What ratelimitd decided; the rest of the body is the client's own.
		var got struct {
			Detail   string
			Policies []string `json:"violated-policies"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
			t.Fatalf("refused %d: the problem body: %v", i, err)
		}
		if got.Detail != "Too many requests; retry in 45 s." || !slices.Equal(got.Policies, []string{"remote_address", "login"}) {
			t.Errorf("refused %d: problem detail %q, violated policies %q; want retry in 45 s, remote_address and login", i, got.Detail, got.Policies)
		}
	}

	// Another client, another route: its own counters.
	resp = do(mw, "GET", "/search", "192.0.2.2:1234")
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
	do(mw, "GET", "/", "192.0.2.1:1")
	resp := do(mw, "GET", "/", "192.0.2.1:1")
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
		resp := do(mw, "GET", "/", "192.0.2.1:1", "X-API-Key", "k1")
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
		var kv []string
		if st.key != "" {
			kv = []string{"X-API-Key", st.key}
		}
		resp := do(mw, "GET", "/", "192.0.2.1:1", kv...)
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
		resp := do(mw, "GET", "/", st.remote, "X-Forwarded-For", st.xff)
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
		resp := do(mux, "GET", "/items/"+string(rune('1'+i)), "192.0.2.1:1")
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
	resp := do(mw, "GET", "/?key=q1", "192.0.2.1:1")
	wantHeaders(t, "custom", resp, map[string]string{"RateLimit": `"api_key";r=1;t=60`})
}
