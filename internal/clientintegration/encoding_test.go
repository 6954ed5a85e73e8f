package clientintegration_test

import (
	"sort"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratelimitd/ratelimitd/client"
)

// TestValidationBounds: the largest requests the Client sends, at each of
// its bounds (which its own tests fix at ratelimitd's documented ones),
// are accepted by the real ratelimitd: hits, key length, domain length,
// descriptors, entries, and the request's size, where one byte more is an
// InvalidArgument error found without an RPC.
func TestValidationBounds(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	hits := client.D(strings.Repeat("k", 1024), strings.Repeat("v", 1024))
	hits.Hits = 1<<32 - 1
	entries := client.Descriptor{}
	for range 32 {
		entries.Entries = append(entries.Entries, client.Entry{Key: "k", Value: "v"})
	}
	descriptors := make([]client.Descriptor, 64)
	for i := range descriptors {
		descriptors[i] = client.D("api_key", "k")
	}
	ask(t, c, strings.Repeat("d", 256), hits)
	ask(t, c, "api", entries)
	ask(t, c, "api", descriptors...)

	largest := largestRequest(t, "api")
	ask(t, c, "api", largest...)
	last := &largest[len(largest)-1].Entries[len(largest[len(largest)-1].Entries)-1]
	last.Value += "v"
	rpcs := h.rpcs.Load()
	_, err := c.ShouldRateLimit(t.Context(), "api", largest...)
	if got := status.Code(err); got != codes.InvalidArgument {
		t.Errorf("ShouldRateLimit(the largest request + 1 byte): %v, want InvalidArgument", err)
	}
	if got := h.rpcs.Load() - rpcs; got != 0 {
		t.Errorf("%d RPCs for a request over the bound, want 0", got)
	}
}

// largestRequest returns the largest request to domain that
// client.Validate accepts, of descriptors of 32 entries with 1000-byte
// values, then one more entry whose value is as long as the size bound
// allows.
func largestRequest(t *testing.T, domain string) []client.Descriptor {
	t.Helper()
	build := func(full, lastLen int) []client.Descriptor {
		var ds []client.Descriptor
		for i := range full + 1 {
			if i%32 == 0 {
				ds = append(ds, client.Descriptor{})
			}
			e := client.Entry{Key: "k", Value: strings.Repeat("v", 1000)}
			if i == full {
				e.Value = strings.Repeat("v", lastLen)
			}
			ds[len(ds)-1].Entries = append(ds[len(ds)-1].Entries, e)
		}
		return ds
	}
	fits := func(ds []client.Descriptor) bool { return client.Validate(domain, ds...) == nil }
	full := sort.Search(64*32, func(n int) bool { return !fits(build(n, 0)) }) - 1
	lastLen := sort.Search(1025, func(n int) bool { return !fits(build(full, n)) }) - 1
	if full < 0 || lastLen < 0 || lastLen == 1024 {
		t.Fatalf("no request at the size bound: %d full entries, a last value of %d bytes", full, lastLen)
	}
	return build(full, lastLen)
}
