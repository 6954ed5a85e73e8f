package client_test

import (
	"crypto/sha256"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/ratelimitd/ratelimitd/client"
	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

func sum256(s string) []byte { b := sha256.Sum256([]byte(s)); return b[:] }

// TestEntryEncoding: each value is sent in the form ratelimitd counts it
// by: valid UTF-8 up to 1024 bytes as value, other bytes as raw_value, and
// anything longer as value_sha256, its SHA-256 digest. None of them fails
// the call.
func TestEntryEncoding(t *testing.T) {
	f := &fakeRLS{}
	c := client.New(newFakeRLS(t, f), client.WithTimeout(0))
	long := strings.Repeat("x", 1025)
	longBad := strings.Repeat("\xff", 1025)
	d, err := c.ShouldRateLimit(t.Context(), "web",
		client.D("k", "a", "k", "", "k", "é"),
		client.D("k", "k\xff", "k", "\xc3"),
		client.D("k", strings.Repeat("x", 1024), "k", long, "k", longBad))
	if err != nil || d.Err != nil || !d.Allowed {
		t.Fatalf("ShouldRateLimit = %+v, %v; want allowed by ratelimitd", d, err)
	}
	want := []*ratelimitv1.ShouldRateLimitRequest{{
		Domain: "web",
		Descriptors: []*ratelimitv1.Descriptor{
			{Entries: []*ratelimitv1.Entry{{Key: "k", Value: "a"}, {Key: "k"}, {Key: "k", Value: "é"}}},
			{Entries: []*ratelimitv1.Entry{{Key: "k", RawValue: []byte("k\xff")}, {Key: "k", RawValue: []byte("\xc3")}}},
			{Entries: []*ratelimitv1.Entry{
				{Key: "k", Value: strings.Repeat("x", 1024)},
				{Key: "k", ValueSha256: sum256(long)},
				{Key: "k", ValueSha256: sum256(longBad)},
			}},
		},
	}}
	if diff := cmp.Diff(want, f.requests(), protocmp.Transform()); diff != "" {
		t.Errorf("requests received mismatch (-want +got):\n%s", diff)
	}
}

// TestRequestSize: a request of exactly 1 MiB, ratelimitd's largest, is
// sent; one byte more is an InvalidArgument error, found without an RPC,
// not a failure the policy would hide.
func TestRequestSize(t *testing.T) {
	const maxSize = 1 << 20
	ds := exactRequest(t, "api", maxSize)
	last := &ds[len(ds)-1].Entries[len(ds[len(ds)-1].Entries)-1]
	f := &fakeRLS{}
	c := client.New(newFakeRLS(t, f), client.WithTimeout(0))
	ask(t, c, "api", ds...)
	if got := proto.Size(f.requests()[0]); got != maxSize {
		t.Errorf("request received: %d bytes, want %d", got, maxSize)
	}

	last.Value += "v"
	if _, err := client.Request("api", ds); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Request(%d + 1 bytes): error %v, want InvalidArgument", maxSize, err)
	}
	_, err := c.ShouldRateLimit(t.Context(), "api", ds...)
	wantCode(t, "ShouldRateLimit(1 MiB + 1 byte)", err, codes.InvalidArgument)
	if got := f.rpcs(); got != 1 {
		t.Errorf("%d RPCs, want 1: none for the request over 1 MiB", got)
	}
}

// FuzzRequest: whatever the domain, key and value, the Client either
// refuses the request with InvalidArgument or builds one that encodes,
// within 1 MiB, with the value in exactly the field ratelimitd expects.
func FuzzRequest(f *testing.F) {
	f.Add("api", "api_key", "k1", uint64(1), 1)
	f.Add("api", "api_key", "k\xff", uint64(0), 64)
	f.Add("a\xffi", "k", "", uint64(1<<32), 65)
	f.Add("api", "k\xc3", strings.Repeat("\xff", 2000), uint64(7), 3)
	f.Fuzz(func(t *testing.T, domain, key, value string, hits uint64, n int) {
		n = min(max(n, 0), 100)
		ds := make([]client.Descriptor, n)
		for i := range ds {
			ds[i] = client.Descriptor{Entries: []client.Entry{{Key: key, Value: value}, {Key: "k", Value: value}}, Hits: hits}
		}
		if err := client.Check(domain, ds); err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("Check: %v, want InvalidArgument", err)
			}
			return
		}
		req, err := client.Request(domain, ds)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("Request: %v, want InvalidArgument", err)
			}
			return
		}
		b, err := proto.Marshal(req)
		if err != nil {
			t.Fatalf("proto.Marshal of a checked request: %v", err)
		}
		if len(b) > 1<<20 {
			t.Fatalf("request of %d bytes, over 1 MiB", len(b))
		}
		e := req.GetDescriptors()[0].GetEntries()[0]
		var want *ratelimitv1.Entry
		switch {
		case len(value) > 1024:
			want = &ratelimitv1.Entry{Key: key, ValueSha256: sum256(value)}
		case !utf8.ValidString(value):
			want = &ratelimitv1.Entry{Key: key, RawValue: []byte(value)}
		default:
			want = &ratelimitv1.Entry{Key: key, Value: value}
		}
		if diff := cmp.Diff(want, e, protocmp.Transform()); diff != "" {
			t.Errorf("entry mismatch (-want +got):\n%s", diff)
		}
	})
}

// exactRequest returns descriptors whose request to domain is exactly size
// bytes: entries of 1000-byte values, then one whose key and value lengths
// make up the rest.
func exactRequest(t *testing.T, domain string, size int) []client.Descriptor {
	t.Helper()
	sizeOf := func(ds []client.Descriptor) int {
		req, err := client.Request(domain, ds)
		if err != nil {
			return size + 1
		}
		return proto.Size(req)
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
