package client_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/ratelimitd/ratelimitd/client"
	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

// TestRefusalKey: requests that differ never share a remembered refusal.
func TestRefusalKey(t *testing.T) {
	hits := func(n uint64, d client.Descriptor) client.Descriptor { d.Hits = n; return d }
	check := func(d client.Descriptor) client.Descriptor { d.CheckOnly = true; return d }
	type req struct {
		domain string
		ds     []client.Descriptor
	}
	distinct := []req{
		{"a", []client.Descriptor{client.D("b_c", "d")}},
		{"a_b", []client.Descriptor{client.D("c", "d")}},
		{"a", []client.Descriptor{client.D("b", "c_d")}},
		{"a", []client.Descriptor{client.D("b", "c", "d", "")}},
		{"a", []client.Descriptor{client.D("b", "c"), client.D("d", "")}},
		{"a", []client.Descriptor{client.D("b", ""), client.D("c", "d")}},
		{"a", []client.Descriptor{hits(2, client.D("b", "c"))}},
		{"a", []client.Descriptor{check(client.D("b", "c"))}},
		{"a", []client.Descriptor{client.D("b", "c")}},
	}
	seen := map[string]int{}
	for i, r := range distinct {
		k := string(client.RefusalKey(nil, r.domain, r.ds))
		if j, ok := seen[k]; ok {
			t.Errorf("requests %d and %d share the key %q", j, i, k)
		}
		seen[k] = i
	}
	// A long value is keyed by its digest, as ratelimitd counts it: the key
	// stays small, and tells long values apart from each other and from
	// short ones.
	long1 := client.RefusalKey(nil, "a", []client.Descriptor{client.D("b", strings.Repeat("x", 2<<20))})
	long2 := client.RefusalKey(nil, "a", []client.Descriptor{client.D("b", strings.Repeat("x", 2<<20-1)+"y")})
	long1again := client.RefusalKey(nil, "a", []client.Descriptor{client.D("b", strings.Repeat("x", 2<<20))})
	if len(long1) > 64 {
		t.Errorf("key of a 2 MiB value: %d bytes, want its digest's few", len(long1))
	}
	if string(long1) == string(long2) || string(long1) != string(long1again) {
		t.Errorf("keys of long values: same value differs or different values share one")
	}
	for k := range seen {
		if k == string(long1) {
			t.Errorf("a long value shares its key with a short one")
		}
	}
	short := client.RefusalKey(nil, "a", []client.Descriptor{client.D("b", strings.Repeat("x", 1024))})
	if len(short) < 1024 {
		t.Errorf("key of a 1024-byte value: %d bytes, want the value itself", len(short))
	}

	// Hits 0 means 1.
	a := client.RefusalKey(nil, "a", []client.Descriptor{client.D("b", "c")})
	b := client.RefusalKey(nil, "a", []client.Descriptor{hits(1, client.D("b", "c"))})
	if string(a) != string(b) {
		t.Errorf("hits 0 and 1: keys %q and %q, want equal", a, b)
	}
}

func TestD(t *testing.T) {
	got := client.D("path", "/login", "remote_address", "10.0.0.1")
	want := client.Descriptor{Entries: []client.Entry{{"path", "/login"}, {"remote_address", "10.0.0.1"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("D() mismatch (-want +got):\n%s", diff)
	}
	defer func() {
		if recover() == nil {
			t.Error("D(odd count) did not panic")
		}
	}()
	client.D("path") //nolint:staticcheck // SA5012: the odd count is the point
}

// TestInterceptorRawBytes: a binary metadata value that is not valid UTF-8
// is sent as bytes, with the call's other descriptors, and counted: the
// second call within the fake's limit of 1 per hour is refused.
func TestInterceptorRawBytes(t *testing.T) {
	f := &fakeRLS{limit: 1}
	c := client.New(newFakeRLS(t, f), client.WithTimeout(0))
	tg := newTarget(t, []grpc.ServerOption{grpc.ChainUnaryInterceptor(
		client.UnaryServerInterceptor(c, "grpc", client.WithMethodKey(""), client.WithMetadataKey("x-key-bin")))})
	if _, err := tg.check(t, "x-key-bin", "k\xff"); err != nil {
		t.Fatalf("first call: %v", err)
	}
	_, err := tg.check(t, "x-key-bin", "k\xff")
	wantCode(t, "second call", err, codes.ResourceExhausted)
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("ratelimitd received %d requests, want 2", len(reqs))
	}
	want := []*ratelimitv1.Descriptor{entries("x-key-bin", []byte("k\xff"))}
	if diff := cmp.Diff(want, reqs[0].GetDescriptors(), protocmp.Transform()); diff != "" {
		t.Errorf("descriptors received mismatch (-want +got):\n%s", diff)
	}
}
