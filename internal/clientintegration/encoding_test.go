package clientintegration_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/ratelimitd/ratelimitd/client"
	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

// TestRequestSize: a request of exactly 1 MiB, ratelimitd's largest, is
// sent (and the real ratelimitd accepts it); one byte more is an
// InvalidArgument error, not a failure the policy would hide.
func TestRequestSize(t *testing.T) {
	const maxSize = 1 << 20
	ds := exactRequest(t, "api", maxSize)
	last := &ds[len(ds)-1].Entries[len(ds[len(ds)-1].Entries)-1]

	h := newHarness(t)
	c := h.client()
	ask(t, c, "api", ds...)

	last.Value += "v"
	rpcs := h.rpcs.Load()
	_, err := c.ShouldRateLimit(t.Context(), "api", ds...)
	wantCode(t, "ShouldRateLimit(1 MiB + 1 byte)", err, codes.InvalidArgument)
	if got := h.rpcs.Load() - rpcs; got != 0 {
		t.Errorf("%d RPCs for a request over 1 MiB, want 0", got)
	}
}

// exactRequest returns descriptors whose request to domain is exactly size
// bytes: entries of 1000-byte values, then one whose key and value lengths
// make up the rest.
func exactRequest(t *testing.T, domain string, size int) []client.Descriptor {
	t.Helper()
	sizeOf := func(ds []client.Descriptor) int {
		return proto.Size(nativeRequest(domain, ds))
	}
	build := func(n int, last ...client.Entry) []client.Descriptor {
		var ds []client.Descriptor
		for i, e := 0, (client.Entry{Key: "k", Value: strings.Repeat("v", 1000)}); i < n+len(last); i++ {
			if i >= n {
				e = last[i-n]
			}
			if i%32 == 0 {
				ds = append(ds, client.Descriptor{})
			}
			ds[len(ds)-1].Entries = append(ds[len(ds)-1].Entries, e)
		}
		return ds
	}
	// The most full entries leaving at least 1000 bytes to go...
	lo, hi := 0, size/1000
	for lo < hi {
		if mid := (lo + hi + 1) / 2; sizeOf(build(mid)) <= size-1000 {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	// ... then one entry of up to 1024 + 1024 bytes makes up the rest: one
	// of 300 + 300 bytes leaves extra to go, and each byte more in its key
	// or value is a byte more in the request (lengths over 127 and under
	// 16384 all take two bytes).
	entry := func(k, v int) client.Entry {
		return client.Entry{Key: strings.Repeat("k", k), Value: strings.Repeat("v", v)}
	}
	extra := size - sizeOf(build(lo, entry(300, 300)))
	dk := min(extra, 700)
	if ds := build(lo, entry(300+dk, 300+extra-dk)); sizeOf(ds) == size {
		return ds
	}
	t.Fatalf("no request of exactly %d bytes", size)
	return nil
}

// nativeRequest is the request a Client sends for ds, whose values are
// valid UTF-8 of at most 1024 bytes, and whose hits are 0 (one).
func nativeRequest(domain string, ds []client.Descriptor) *ratelimitv1.ShouldRateLimitRequest {
	req := &ratelimitv1.ShouldRateLimitRequest{Domain: domain}
	for _, d := range ds {
		rd := &ratelimitv1.Descriptor{}
		for _, e := range d.Entries {
			rd.Entries = append(rd.Entries, &ratelimitv1.Entry{Key: e.Key, Value: e.Value})
		}
		req.Descriptors = append(req.Descriptors, rd)
	}
	return req
}
