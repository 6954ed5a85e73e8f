package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/ratelimitd/ratelimitd/client"
	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

// TestHTTPAllowedRefused: against the scripted server, an allowed request
// passes with ratelimitd's headers (and X-RateLimit ones when asked); a
// refused one gets 429, Retry-After and a quota-exceeded problem, and
// next is not called.
func TestHTTPAllowedRefused(t *testing.T) {
	f := &fakeRLS{limit: 1}
	c := client.New(newFakeRLS(t, f), client.WithTimeout(0))
	n := &next{}
	mw := client.HTTPMiddleware(c, "web", client.WithAPIKeyHeader("X-API-Key"), client.WithXRateLimitHeaders())(n)
	resp := serve(mw, request("GET", "/", "192.0.2.1:1", "X-API-Key", "k1"))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: status %d, want 200", resp.StatusCode)
	}
	wantHeaders(t, "allowed", resp, map[string]string{
		"RateLimit-Policy": `"api_key";q=1;w=3600`, "RateLimit": `"api_key";r=0;t=3600`, "Retry-After": "",
		"X-RateLimit-Limit": "1", "X-RateLimit-Remaining": "0",
	})
	for _, step := range []string{"refused", "refused locally"} {
		resp = serve(mw, request("GET", "/", "192.0.2.1:1", "X-API-Key", "k1"))
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("%s: status %d, want 429", step, resp.StatusCode)
		}
		wantHeaders(t, step, resp, map[string]string{"Retry-After": "3600", "RateLimit": `"api_key";r=0;t=3600`})
		p := readProblem(t, resp)
		want := problem{Type: client.QuotaExceeded, Title: "Request cannot be satisfied as assigned quota has been exceeded",
			Status: 429, Detail: "Too many requests; retry in 3600 s.", ViolatedPolicies: []string{"api_key"}}
		if diff := cmp.Diff(want, p); diff != "" {
			t.Errorf("%s: problem mismatch (-want +got):\n%s", step, diff)
		}
	}
	if n.calls != 1 {
		t.Errorf("next called %d times, want 1", n.calls)
	}
	if c.LocalRefusals() != 1 {
		t.Errorf("LocalRefusals() = %d, want 1", c.LocalRefusals())
	}
}

// TestHTTPDefaultDescriptors: without options, a request is keyed by its
// client's address and by route and method; the route is r.Pattern when
// the mux set it.
func TestHTTPDefaultDescriptors(t *testing.T) {
	f := &fakeRLS{}
	c := client.New(newFakeRLS(t, f), client.WithTimeout(0))
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", client.HTTPMiddleware(c, "web")(&next{}))
	serve(mux, request("GET", "/items/7", "192.0.2.1:1"))
	serve(client.HTTPMiddleware(c, "web")(&next{}), request("POST", "/login", "192.0.2.1:1"))
	want := [][]*ratelimitv1.Descriptor{{
		{Entries: []*ratelimitv1.Entry{{Key: "remote_address", Value: "192.0.2.1"}}},
		{Entries: []*ratelimitv1.Entry{{Key: "path", Value: "GET /items/{id}"}, {Key: "method", Value: "GET"}}},
	}, {
		{Entries: []*ratelimitv1.Entry{{Key: "remote_address", Value: "192.0.2.1"}}},
		{Entries: []*ratelimitv1.Entry{{Key: "path", Value: "/login"}, {Key: "method", Value: "POST"}}},
	}}
	var got [][]*ratelimitv1.Descriptor
	for _, r := range f.requests() {
		got = append(got, r.GetDescriptors())
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("descriptors sent mismatch (-want +got):\n%s", diff)
	}
}

// TestHTTPFailures: failing closed answers 503 without Retry-After,
// failing open passes; a malformed descriptor answers 500 whatever the
// policy; a request whose context ended answers 503; none calls next but
// the fail-open one.
func TestHTTPFailures(t *testing.T) {
	f := &fakeRLS{}
	conn := newFakeRLS(t, f)
	unavailable := status.Error(codes.Unavailable, "down")
	f.fail.Store(&unavailable)
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	for _, tc := range []struct {
		name string
		opts []client.Option
		ds   []client.Descriptor
		ctx  context.Context
		want int
	}{
		{"fail open", nil, nil, t.Context(), http.StatusOK},
		{"fail closed", []client.Option{client.WithFailClosed()}, nil, t.Context(), http.StatusServiceUnavailable},
		{"malformed", nil, []client.Descriptor{client.D("", "v")}, t.Context(), http.StatusInternalServerError},
		{"context ended", nil, nil, canceled, http.StatusServiceUnavailable},
	} {
		n := &next{}
		mw := client.HTTPMiddleware(client.New(conn, tc.opts...), "web",
			client.WithHTTPDescriptors(func(*http.Request) []client.Descriptor {
				return append([]client.Descriptor{client.D("k", "v")}, tc.ds...)
			}))(n)
		resp := serve(mw, request("GET", "/", "192.0.2.1:1").WithContext(tc.ctx))
		if resp.StatusCode != tc.want || (n.calls == 1) != (tc.want == http.StatusOK) {
			t.Errorf("%s: status %d, next called %d times; want %d", tc.name, resp.StatusCode, n.calls, tc.want)
		}
		wantHeaders(t, tc.name, resp, map[string]string{"RateLimit": "", "Retry-After": ""})
	}
}

// TestHTTPMalformed: a malformed request, or one over ratelimitd's
// bounds, built from the middleware's own configuration answers 500 with a
// plain-text body and no rate-limit headers, without calling next, even
// when ratelimitd is stopped and the Client fails open.
func TestHTTPMalformed(t *testing.T) {
	f := &fakeRLS{}
	c := client.New(newFakeRLS(t, f))
	f.stop()
	bad := func(ds ...client.Descriptor) client.HTTPOption {
		return client.WithHTTPDescriptors(func(*http.Request) []client.Descriptor { return ds })
	}
	for _, tc := range []struct {
		name   string
		domain string
		opts   []client.HTTPOption
	}{
		{"empty key", "web", []client.HTTPOption{bad(client.D("", "x"))}},
		{"key not UTF-8", "web", []client.HTTPOption{bad(client.D("k\xff", "x"))}},
		{"too many entries", "web", []client.HTTPOption{bad(client.Descriptor{Entries: slices.Repeat([]client.Entry{{Key: "k", Value: "v"}}, 33)})}},
		{"too many descriptors", "web", []client.HTTPOption{bad(slices.Repeat([]client.Descriptor{client.D("k", "v")}, 65)...)}},
		{"empty domain", "", nil},
	} {
		n := &next{}
		resp := serve(client.HTTPMiddleware(c, tc.domain, tc.opts...)(n), request("GET", "/", "192.0.2.1:1"))
		if resp.StatusCode != http.StatusInternalServerError || n.calls != 0 {
			t.Errorf("%s: status %d, next called %d times; want 500, 0", tc.name, resp.StatusCode, n.calls)
		}
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
			t.Errorf("%s: Content-Type %q, want text/plain", tc.name, ct)
		}
		wantHeaders(t, tc.name, resp, map[string]string{"RateLimit": "", "Retry-After": ""})
	}
}

// TestHTTPSkip: a skipped request goes to next without asking ratelimitd
// and without rate-limit headers; the others are asked.
func TestHTTPSkip(t *testing.T) {
	f := &fakeRLS{limit: 1}
	c := client.New(newFakeRLS(t, f), client.WithTimeout(0))
	n := &next{}
	mw := client.HTTPMiddleware(c, "web", client.WithClientIP(),
		client.WithSkip(func(r *http.Request) bool { return r.URL.Path == "/healthz" }))(n)
	for range 3 {
		resp := serve(mw, request("GET", "/healthz", "192.0.2.1:1"))
		if resp.StatusCode != http.StatusOK || resp.Header.Get("RateLimit") != "" {
			t.Errorf("skipped request: status %d, RateLimit %q; want 200 without headers", resp.StatusCode, resp.Header.Get("RateLimit"))
		}
	}
	if got := f.rpcs(); got != 0 {
		t.Errorf("%d RPCs for skipped requests, want 0", got)
	}
	serve(mw, request("GET", "/", "192.0.2.1:1"))
	if resp := serve(mw, request("GET", "/", "192.0.2.1:1")); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("request not skipped: status %d, want 429", resp.StatusCode)
	}
	if n.calls != 4 {
		t.Errorf("next called %d times, want 4", n.calls)
	}
}

// TestHTTPRefusalWriter: WithRefusalWriter writes refusals, given the
// decision, with the rate-limit headers and Retry-After already set; it
// may call WriteTooManyRequests to keep the default answer.
func TestHTTPRefusalWriter(t *testing.T) {
	f := &fakeRLS{limit: 1}
	c := client.New(newFakeRLS(t, f), client.WithTimeout(0))
	var got client.Decision
	mw := client.HTTPMiddleware(c, "web", client.WithClientIP(),
		client.WithRefusalWriter(func(w http.ResponseWriter, r *http.Request, d client.Decision) {
			got = d
			if r.URL.Path == "/default" {
				w.Header().Set("X-Refused-By", "test")
				client.WriteTooManyRequests(w, r, d)
				return
			}
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "slow down")
		}))(&next{})
	serve(mw, request("GET", "/", "192.0.2.1:1"))
	resp := serve(mw, request("GET", "/", "192.0.2.1:1"))
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || string(body) != "slow down" {
		t.Errorf("refused: %d %q, want the writer's 503 \"slow down\"", resp.StatusCode, body)
	}
	wantHeaders(t, "custom refusal", resp, map[string]string{"Retry-After": "3600", "RateLimit": `"remote_address";r=0;t=3600`})
	if got.Allowed || got.RetryAfter != time.Hour {
		t.Errorf("writer given %+v, want the refusal", got)
	}
	resp = serve(mw, request("GET", "/default", "192.0.2.1:1"))
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("X-Refused-By") != "test" {
		t.Errorf("default kept: status %d, X-Refused-By %q; want 429, test", resp.StatusCode, resp.Header.Get("X-Refused-By"))
	}
	readProblem(t, resp)
}

// TestHTTPKeyErrors: a route or descriptor function that fails answers
// 400 without asking ratelimitd nor calling next, by default, and what
// WithKeyErrorHandler writes otherwise; the infallible forms still work.
func TestHTTPKeyErrors(t *testing.T) {
	f := &fakeRLS{}
	c := client.New(newFakeRLS(t, f), client.WithTimeout(0))
	errNoTenant := errors.New("no tenant")
	descs := func(r *http.Request) ([]client.Descriptor, error) {
		if tenant := r.Header.Get("X-Tenant"); tenant != "" {
			return []client.Descriptor{client.D("tenant", tenant)}, nil
		}
		return nil, errNoTenant
	}
	route := func(r *http.Request) (string, error) {
		if strings.HasPrefix(r.URL.Path, "/api/") {
			return "/api/*", nil
		}
		return "", errors.New("unknown route")
	}
	for _, tc := range []struct {
		name string
		opt  client.HTTPOption
		path string
	}{
		{"descriptors", client.WithHTTPDescriptorFunc(descs), "/api/x"},
		{"route", client.WithRouteFunc(route), "/other"},
	} {
		n := &next{}
		resp := serve(client.HTTPMiddleware(c, "web", tc.opt)(n), request("GET", tc.path, "192.0.2.1:1"))
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusBadRequest || n.calls != 0 || strings.Contains(string(body), "unknown route") || strings.Contains(string(body), "no tenant") {
			t.Errorf("%s failing: %d %q, next called %d times; want 400 without the error's text, next not called", tc.name, resp.StatusCode, body, n.calls)
		}
	}
	if got := f.rpcs(); got != 0 {
		t.Errorf("%d RPCs for requests that could not be attributed, want 0", got)
	}

	var handled error
	n := &next{}
	mw := client.HTTPMiddleware(c, "web", client.WithHTTPDescriptorFunc(descs), client.WithRouteFunc(route),
		client.WithKeyErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
			handled = err
			http.Error(w, "who are you?", http.StatusUnauthorized)
		}))(n)
	if resp := serve(mw, request("GET", "/api/x", "192.0.2.1:1")); resp.StatusCode != http.StatusUnauthorized || !errors.Is(handled, errNoTenant) {
		t.Errorf("handler: status %d, handled %v; want 401, the function's error", resp.StatusCode, handled)
	}
	if resp := serve(mw, request("GET", "/api/x", "192.0.2.1:1", "X-Tenant", "acme")); resp.StatusCode != http.StatusOK || n.calls != 1 {
		t.Errorf("attributed request: status %d, want 200", resp.StatusCode)
	}
	want := []*ratelimitv1.Descriptor{
		{Entries: []*ratelimitv1.Entry{{Key: "path", Value: "/api/*"}, {Key: "method", Value: "GET"}}},
		{Entries: []*ratelimitv1.Entry{{Key: "tenant", Value: "acme"}}},
	}
	if diff := cmp.Diff(want, f.requests()[0].GetDescriptors(), protocmp.Transform()); diff != "" {
		t.Errorf("descriptors sent mismatch (-want +got):\n%s", diff)
	}

	// Infallible adapts the old form.
	ds, err := client.Infallible(func(*http.Request) []client.Descriptor { return []client.Descriptor{client.D("a", "b")} })(request("GET", "/", "192.0.2.1:1"))
	if err != nil || len(ds) != 1 || ds[0].Entries[0].Key != "a" {
		t.Errorf("Infallible(f)(r) = %v, %v; want f's descriptors, nil", ds, err)
	}
}

// trusted are the proxies of the ClientIP tests.
var trusted = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("2001:db8:ffff::/48"),
	netip.MustParsePrefix("::ffff:172.16.0.0/108"),  // 172.16.0.0/12
	netip.MustParsePrefix("::ffff:192.168.1.1/128"), // 192.168.1.1/32
	netip.MustParsePrefix("::ffff:0:0/95"),          // shorter than /96: no IPv4 address
}

// TestClientIP: the right-most untrusted address, read only when the peer
// is trusted.
func TestClientIP(t *testing.T) {
	tests := []struct {
		name, remote, header, value string
		want                        string // "" for the zero Addr
	}{
		{"untrusted peer ignores XFF", "192.0.2.1:80", "X-Forwarded-For", "203.0.113.1", "192.0.2.1"},
		{"no header", "10.0.0.1:80", "X-Forwarded-For", "", "10.0.0.1"},
		{"trusted peer", "10.0.0.1:80", "X-Forwarded-For", "203.0.113.1", "203.0.113.1"},
		{"right-most untrusted", "10.0.0.1:80", "X-Forwarded-For", "198.51.100.1, 203.0.113.1, 10.1.1.1", "203.0.113.1"},
		{"all trusted", "10.0.0.1:80", "X-Forwarded-For", "10.2.2.2, 10.1.1.1", "10.2.2.2"},
		{"garbage stops", "10.0.0.1:80", "X-Forwarded-For", "203.0.113.1, nonsense, 10.1.1.1", "10.1.1.1"},
		{"ports and brackets", "10.0.0.1:80", "X-Forwarded-For", "[2001:db8::1]:4711", "2001:db8::1"},
		{"IPv4-mapped", "[::ffff:10.0.0.1]:80", "X-Forwarded-For", "::ffff:203.0.113.1", "203.0.113.1"},
		{"zone dropped", "10.0.0.1:80", "X-Forwarded-For", "fe80::1%eth0", "fe80::1"},
		{"peer without port", "10.0.0.1", "X-Forwarded-For", "203.0.113.1", "203.0.113.1"},
		{"peer unknown", "@", "X-Forwarded-For", "203.0.113.1", ""},
		{"trusted IPv6 peer", "[2001:db8:ffff::1]:80", "X-Forwarded-For", "2001:db8::2", "2001:db8::2"},
		{"Forwarded quoted IPv6", "10.0.0.1:80", "Forwarded", `for="[2001:db8::1]:4711"`, "2001:db8::1"},
		{"Forwarded pairs", "10.0.0.1:80", "Forwarded", `for=192.0.2.60;proto=http;by=203.0.113.43`, "192.0.2.60"},
		{"Forwarded elements", "10.0.0.1:80", "Forwarded", `for=198.51.100.17, For="10.1.1.1";proto="a,b"`, "198.51.100.17"},
		{"Forwarded unknown stops", "10.0.0.1:80", "Forwarded", `for=198.51.100.17, for=unknown, for=10.1.1.1`, "10.1.1.1"},
		{"Forwarded obfuscated", "10.0.0.1:80", "Forwarded", `for=_hidden`, "10.0.0.1"},
		{"Forwarded without for", "10.0.0.1:80", "Forwarded", `by=10.1.1.1`, "10.0.0.1"},
		{"Forwarded unterminated", "10.0.0.1:80", "Forwarded", `for="198.51.100.17`, "10.0.0.1"},
		{"Forwarded ignores XFF", "10.0.0.1:80", "Forwarded", ``, "10.0.0.1"},
		{"IPv4-mapped trusted prefix", "[::ffff:172.16.0.5]:80", "X-Forwarded-For", "203.0.113.1", "203.0.113.1"},
		{"IPv4-mapped trusted host", "172.16.9.9:80", "X-Forwarded-For", "203.0.113.1, ::ffff:192.168.1.1", "203.0.113.1"},
		{"IPv4-mapped short prefix", "100.64.0.1:80", "X-Forwarded-For", "203.0.113.1", "100.64.0.1"},
		{"another list header", "10.0.0.1:80", "X-Client-Chain", "198.51.100.1, 203.0.113.1, 10.1.1.1", "203.0.113.1"},
	}
	for _, tc := range tests {
		r := request("GET", "/", tc.remote, "X-Forwarded-For", "192.0.2.99")
		if tc.header == "X-Forwarded-For" {
			r.Header.Del(tc.header)
		}
		if tc.value != "" {
			r.Header.Set(tc.header, tc.value)
		}
		got := client.ClientIP(r, tc.header, trusted)
		if s := got.String(); !got.IsValid() && tc.want != "" || got.IsValid() && s != tc.want {
			t.Errorf("%s: ClientIP(peer %s, %s: %q) = %v, want %q", tc.name, tc.remote, tc.header, tc.value, got, tc.want)
		}
	}
}

// TestClientIPHeaderLines: several fields of the header are one list.
func TestClientIPHeaderLines(t *testing.T) {
	r := request("GET", "/", "10.0.0.1:1", "Forwarded", "for=198.51.100.1", "Forwarded", "for=203.0.113.1, for=10.9.9.9")
	if got, want := client.ClientIP(r, "Forwarded", trusted), netip.MustParseAddr("203.0.113.1"); got != want {
		t.Errorf("ClientIP = %v, want %v", got, want)
	}
}

// FuzzClientIP: ClientIP never panics, returns only valid, zone-less,
// unmapped addresses, and returns an untrusted peer as is.
func FuzzClientIP(f *testing.F) {
	f.Add("10.0.0.1:80", "203.0.113.1, 10.1.1.1", `for="[2001:db8::1]:4711";proto=https, for=10.0.0.2`)
	f.Add("192.0.2.1:80", "[::1]:1", `for=unknown`)
	f.Add("[2001:db8:ffff::1]:1", "fe80::1%eth0", `For="\"quoted\"";by=x,for`)
	f.Add("@", "", `;;,,=`)
	f.Fuzz(func(t *testing.T, remote, xff, fwd string) {
		r := &http.Request{RemoteAddr: remote, Header: http.Header{
			"X-Forwarded-For": {xff},
			"Forwarded":       {fwd},
		}}
		peer, err := netip.ParseAddrPort(remote)
		for _, header := range []string{"X-Forwarded-For", "Forwarded"} {
			got := client.ClientIP(r, header, trusted)
			if !got.IsValid() {
				continue
			}
			if got.Zone() != "" || got.Is4In6() {
				t.Errorf("ClientIP(%q, %s) = %v, want no zone, unmapped", remote, header, got)
			}
			if err == nil {
				p := peer.Addr().WithZone("").Unmap()
				if !slicesContainsPrefix(trusted, p) && got != p {
					t.Errorf("ClientIP(%q, %s) = %v, want the untrusted peer %v", remote, header, got, p)
				}
			}
		}
	})
}

// slicesContainsPrefix reports whether a, or for an IPv4 address its
// IPv4-mapped form under a prefix of /96 or longer, is in one of ps.
func slicesContainsPrefix(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) || a.Is4() && p.Bits() >= 96 && p.Contains(netip.AddrFrom16(a.As16())) {
			return true
		}
	}
	return false
}
