package clientintegration_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/client"
)

// TestHTTPClientIPv6Shared: against ratelimitd, two addresses of one /64
// share the counter of remote_address (1 per minute), another /64 has its
// own.
func TestHTTPClientIPv6Shared(t *testing.T) {
	h := newHTTPHarness(t)
	mw := client.HTTPMiddleware(h.client(), "web", client.WithClientIP())(&next{})
	for i, st := range []struct {
		remote string
		want   int
	}{
		{"[2001:db8:1:2::1]:1", http.StatusOK},
		{"[2001:db8:1:2::2]:1", http.StatusTooManyRequests},
		{"[2001:db8:1:3::1]:1", http.StatusOK},
	} {
		if resp := do(mw, "GET", "/", st.remote); resp.StatusCode != st.want {
			t.Errorf("step %d: peer %s: status %d, want %d", i, st.remote, resp.StatusCode, st.want)
		}
	}
}

// TestHTTPRawBytesRealServer: the same as TestHTTPRawBytes, end to end
// through ratelimitd's own server: a header or path that is not UTF-8,
// and a header over the message size, each under a limit of 1 per hour,
// are counted, and the second request is refused; the client's IP
// descriptor is decided with them (its own limit of 100 lets both pass).
func TestHTTPRawBytesRealServer(t *testing.T) {
	for _, tc := range []struct {
		name, target, key string
	}{
		{"header", "/a", "k\xff"},
		{"path", "/items/%FF", ""}, // no API key: the path alone refuses
		{"huge header", "/a", strings.Repeat("k", 2<<20)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarnessRules(t, `
domain: web
descriptors:
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: path
    value: /items/*
    rate_limit: {unit: hour, requests_per_unit: 1}
`)
			mw := client.HTTPMiddleware(h.client(), "web",
				client.WithAPIKeyHeader("X-API-Key"), client.WithClientIP(),
				client.WithHTTPDescriptors(func(r *http.Request) []client.Descriptor {
					return []client.Descriptor{client.D("path", r.URL.Path)}
				}))(&next{})
			for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
				resp := do(mw, "GET", tc.target, "192.0.2.1:1", "X-API-Key", tc.key)
				if resp.StatusCode != want {
					t.Errorf("request %d: status %d, want %d", i, resp.StatusCode, want)
				}
			}
			if got := h.rpcs.Load(); got != 2 {
				t.Errorf("%d RPCs, want 2 (both requests decided by the server)", got)
			}
		})
	}
}
