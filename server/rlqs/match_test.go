package rlqs

import (
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
)

const matchRules = `
domain: web
descriptors:
  - key: tenant
    value: acme
    descriptors:
      - key: path
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: tenant
    value: "a*"
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    value: /x
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: method
    value: GET
    descriptors:
      - key: path
        value: /y
        rate_limit: {unit: second, requests_per_unit: 5}
`

func TestMatch(t *testing.T) {
	d := rulesOf(t, matchRules).Domain("web")
	for _, tc := range []struct {
		name string
		id   map[string]string
		want string // the rule's Path, "" for none
	}{
		{"exact then key-only", map[string]string{"tenant": "acme", "path": "/y"}, "tenant=acme.path"},
		{"exact before wildcard", map[string]string{"tenant": "acme"}, "tenant=acme"},
		{"wildcard before key-only", map[string]string{"tenant": "abc"}, "tenant=a*"},
		{"key-only", map[string]string{"tenant": "zzz"}, "tenant"},
		{"first in file order among keys", map[string]string{"path": "/x", "tenant": "zzz"}, "path=/x"},
		{"earlier key wins even key-only", map[string]string{"path": "/x", "tenant": "acme"}, "tenant=acme.path"},
		{"unused keys ignored", map[string]string{"tenant": "abc", "path": "/x", "extra": "1"}, "tenant=a*"},
		{"walk stops where nothing matches", map[string]string{"method": "GET", "path": "/z"}, "method=GET"},
		{"second level", map[string]string{"method": "GET", "path": "/y"}, "method=GET.path=/y"},
		{"no rule", map[string]string{"other": "1"}, ""},
		{"any bytes", map[string]string{"tenant": "\xff\x00"}, "tenant"},
		{"empty", map[string]string{}, ""},
	} {
		r := match(d, tc.id)
		got := ""
		if r != nil {
			got = r.Path
		}
		if got != tc.want {
			t.Errorf("%s: match(%q) = %q, want %q", tc.name, tc.id, got, tc.want)
		}
	}
}

// TestMatchOrderFree matches the same bucket id built in many insertion
// orders: Go randomizes map iteration, so an order-dependent walk would
// disagree.
func TestMatchOrderFree(t *testing.T) {
	d := rulesOf(t, matchRules).Domain("web")
	for range 100 {
		id := map[string]string{"path": "/y", "method": "GET", "tenant": "zzz", "x": "1"}
		if r := match(d, id); r == nil || r.Path != "tenant" {
			t.Fatalf("match(%q) = %v, want tenant", id, r)
		}
	}
}

func TestBucketKey(t *testing.T) {
	a := bucketKey("d", map[string]string{"a": "b", "c": ""})
	b := bucketKey("d", map[string]string{"a": "bc"})
	if a == b {
		t.Errorf("bucket ids {a:b, c:} and {a:bc} share the key %q", a)
	}
	if bucketKey("d", map[string]string{"a": "b"}) == bucketKey("da", map[string]string{"": "b"}) {
		t.Errorf("domains bleed into bucket keys")
	}
	// The counter keys' encoding of the parts: the descriptor {a: b, c: ""}
	// of domain d, keys in byte order.
	var want []byte
	for _, p := range []string{"d", "a", "b", "c", ""} {
		want = backend.AppendKeyPart(want, p)
	}
	if c := bucketKey("d", map[string]string{"c": "", "a": "b"}); c != string(want) {
		t.Errorf("bucket key %q, want the counter key's parts %q", c, want)
	}
}

// TestBucketFor: shares become token buckets whose rate is at most the
// share and within 2% of it, down to one request a day, and bursts scaled
// by the share.
func TestBucketFor(t *testing.T) {
	r := rulesOf(t, `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 600, algorithm: token_bucket, burst: 60}
`).Domain("d")
	rule := match(r, map[string]string{"k": "v"})
	for _, share := range []float64{10, 2.5, 1.5, 1.99, 1, 0.5, 1e-3, 1e-9, 0, 1e6 + 0.7} {
		a := bucketFor(rule, share, 10)
		switch {
		case share < minShare:
			if a.kind != kindDenyAll {
				t.Errorf("share %v: got %+v, want DENY_ALL", share, a)
			}
		case a.kind != kindBucket || a.rate() > share || a.rate() < share*0.98 || a.maxTokens < a.perFill:
			t.Errorf("share %v: got %+v (%v per second)", share, a, a.rate())
		}
	}
	if a := bucketFor(rule, 5, 10); a.maxTokens != 30 {
		t.Errorf("half the limit: burst %d, want half of 60", a.maxTokens)
	}
}

// TestWorthPushing: a share that falls, or changes kind, is pushed; one
// that rises by at most pushRise is not, and one that rises more is.
func TestWorthPushing(t *testing.T) {
	tb := func(perSecond uint32) assignment {
		return assignment{kind: kindBucket, perFill: perSecond, maxTokens: perSecond, fill: time.Second}
	}
	for _, c := range []struct {
		old, a assignment
		want   bool
	}{
		{tb(100), tb(100), false},
		{tb(100), tb(99), true},
		{tb(100), tb(105), false},
		{tb(100), tb(110), false},
		{tb(100), tb(111), true},
		{tb(100), assignment{kind: kindDenyAll}, true},
		{assignment{kind: kindAllowAll}, tb(100), true},
		{assignment{}, tb(1), true},
	} {
		if got := worthPushing(c.old, c.a); got != c.want {
			t.Errorf("worthPushing(%+v, %+v) = %v, want %v", c.old, c.a, got, c.want)
		}
	}
}
