package client_test

import (
	"crypto/sha256"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimitd/ratelimitd/client"
	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

// entries returns the entries of one descriptor, as D takes them.
func entries(kv ...any) *ratelimitv1.Descriptor {
	d := &ratelimitv1.Descriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		e := &ratelimitv1.Entry{Key: kv[i].(string)}
		switch v := kv[i+1].(type) {
		case string:
			e.Value = v
		case []byte:
			e.RawValue = v
		case [32]byte:
			e.ValueSha256 = v[:]
		}
		d.Entries = append(d.Entries, e)
	}
	return d
}

// TestHTTPRawBytes: a header value or path that is not valid UTF-8 is sent
// as bytes, with the request's other descriptors, and counted: the second
// such request within the fake's limit of 1 per hour is refused (429). It
// neither fails nor lets the request through unlimited.
func TestHTTPRawBytes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		target string
		key    string
		want   []*ratelimitv1.Descriptor
	}{
		{"header", "/items/1", "k\xff", []*ratelimitv1.Descriptor{
			entries("api_key", []byte("k\xff")),
			entries("remote_address", "192.0.2.1"),
			entries("path", "/items/1", "method", "GET"),
		}},
		{"path", "/items/%FF", "k1", []*ratelimitv1.Descriptor{
			entries("api_key", "k1"),
			entries("remote_address", "192.0.2.1"),
			entries("path", []byte("/items/\xff"), "method", "GET"),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeRLS{limit: 1}
			c := client.New(newFakeRLS(t, f), client.WithTimeout(0))
			n := &next{}
			mw := client.HTTPMiddleware(c, "web",
				client.WithAPIKeyHeader("X-API-Key"), client.WithClientIP(), client.WithRoute(nil))(n)
			for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
				resp := serve(mw, request("GET", tc.target, "192.0.2.1:1", "X-API-Key", tc.key))
				if resp.StatusCode != want {
					t.Errorf("request %d: status %d, want %d", i, resp.StatusCode, want)
				}
			}
			if n.calls != 1 {
				t.Errorf("next called %d times, want 1", n.calls)
			}
			reqs := f.requests()
			if len(reqs) != 2 {
				t.Fatalf("ratelimitd received %d requests, want 2", len(reqs))
			}
			if diff := cmp.Diff(tc.want, reqs[0].GetDescriptors(), protocmp.Transform()); diff != "" {
				t.Errorf("descriptors received mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHTTPHugeHeader: a header value far over ratelimitd's largest request
// is sent as its SHA-256 digest, and counted like any other.
func TestHTTPHugeHeader(t *testing.T) {
	f := &fakeRLS{limit: 1}
	c := client.New(newFakeRLS(t, f), client.WithTimeout(0))
	mw := client.HTTPMiddleware(c, "web", client.WithAPIKeyHeader("X-API-Key"), client.WithClientIP())(&next{})
	key := strings.Repeat("k", 2<<20)
	for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
		resp := serve(mw, request("GET", "/", "192.0.2.1:1", "X-API-Key", key))
		if resp.StatusCode != want {
			t.Errorf("request %d: status %d, want %d", i, resp.StatusCode, want)
		}
	}
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("ratelimitd received %d requests, want 2", len(reqs))
	}
	want := []*ratelimitv1.Descriptor{
		entries("api_key", sha256.Sum256([]byte(key))),
		entries("remote_address", "192.0.2.1"),
	}
	if diff := cmp.Diff(want, reqs[0].GetDescriptors(), protocmp.Transform()); diff != "" {
		t.Errorf("descriptors received mismatch (-want +got):\n%s", diff)
	}
}

// TestHTTPFarRetryAfter: a retry-after beyond what a Duration holds (10,000
// years, which decodes to the largest Duration) gives a huge Retry-After,
// not one that wrapped around to 1.
func TestHTTPFarRetryAfter(t *testing.T) {
	f := &fakeRLS{limit: 1, retryAfter: &durationpb.Duration{Seconds: 315576000000}}
	c := client.New(newFakeRLS(t, f), client.WithTimeout(0), client.WithRefusalCache(0))
	mw := client.HTTPMiddleware(c, "web", client.WithClientIP(), client.WithXRateLimitHeaders())(&next{})
	serve(mw, request("GET", "/", "192.0.2.1:1"))
	resp := serve(mw, request("GET", "/", "192.0.2.1:1"))
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429", resp.StatusCode)
	}
	const want = "9223372037" // math.MaxInt64 ns, rounded up
	wantHeaders(t, "far retry-after", resp, map[string]string{"Retry-After": want})
	if p := readProblem(t, resp); !strings.Contains(p.Detail, want) {
		t.Errorf("problem detail %q, want the retry of %s s", p.Detail, want)
	}
}

// TestHTTPClientIPPrefix: the client IP is counted by network: IPv4 per
// address and IPv6 per /64 by default, as the masked address, IPv4-mapped
// IPv6 as IPv4; WithClientIPPrefix changes both lengths.
func TestHTTPClientIPPrefix(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []client.HTTPOption
		remote string
		want   string
	}{
		{"IPv4", nil, "192.0.2.77:1", "192.0.2.77"},
		{"IPv4-mapped", nil, "[::ffff:192.0.2.77]:1", "192.0.2.77"},
		{"IPv6", nil, "[2001:db8:1:2::1]:1", "2001:db8:1:2::"},
		{"IPv6, same /64", nil, "[2001:db8:1:2:ffff:ffff:ffff:ffff]:1", "2001:db8:1:2::"},
		{"IPv6, next /64", nil, "[2001:db8:1:3::1]:1", "2001:db8:1:3::"},
		{"IPv6 with zone", nil, "[fe80::1:2%eth0]:1", "fe80::"},
		{"/24, /48: IPv4", []client.HTTPOption{client.WithClientIPPrefix(24, 48)}, "192.0.2.77:1", "192.0.2.0"},
		{"/24, /48: IPv6", []client.HTTPOption{client.WithClientIPPrefix(24, 48)}, "[2001:db8:1:2::1]:1", "2001:db8:1::"},
		{"/32, /128: IPv6", []client.HTTPOption{client.WithClientIPPrefix(32, 128)}, "[2001:db8:1:2::1]:1", "2001:db8:1:2::1"},
		{"/1, /1", []client.HTTPOption{client.WithClientIPPrefix(1, 1)}, "[2001:db8:1:2::1]:1", "::"},
		{"prefix only, default set", []client.HTTPOption{client.WithClientIPPrefix(16, 64)}, "192.0.2.77:1", "192.0.0.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeRLS{}
			c := client.New(newFakeRLS(t, f), client.WithTimeout(0))
			opts := tc.opts
			if tc.name != "prefix only, default set" {
				opts = append(opts, client.WithClientIP())
			}
			if resp := serve(client.HTTPMiddleware(c, "web", opts...)(&next{}), request("GET", "/", tc.remote)); resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, want 200", resp.StatusCode)
			}
			reqs := f.requests()
			if len(reqs) != 1 {
				t.Fatalf("ratelimitd received %d requests, want 1", len(reqs))
			}
			want := entries("remote_address", tc.want)
			if diff := cmp.Diff(want, reqs[0].GetDescriptors()[0], protocmp.Transform()); diff != "" {
				t.Errorf("peer %s: descriptor mismatch (-want +got):\n%s", tc.remote, diff)
			}
		})
	}
}

// TestWithClientIPPrefixRange: a prefix length out of range is refused
// when the middleware is built.
func TestWithClientIPPrefixRange(t *testing.T) {
	c := client.New(newFakeRLS(t, &fakeRLS{}))
	for _, bits := range [][2]int{{0, 64}, {33, 64}, {-1, 64}, {32, 0}, {32, 129}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("HTTPMiddleware(WithClientIPPrefix(%d, %d)) did not panic", bits[0], bits[1])
				}
			}()
			client.HTTPMiddleware(c, "web", client.WithClientIPPrefix(bits[0], bits[1]))
		}()
	}
	for _, bits := range [][2]int{{1, 1}, {32, 128}} {
		client.HTTPMiddleware(c, "web", client.WithClientIPPrefix(bits[0], bits[1])) // no panic
	}
}
