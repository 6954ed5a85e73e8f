package engine

import (
	"strconv"
	"testing"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/config"
)

// BenchmarkMatchOverrides measures what the runtime overrides add to a
// decision's matching (match: bounds, rule, counter-key prefix, and the
// override lookup) of one descriptor whose rule matched, with no
// override, and with 100,000 in force (one of them the request's, or
// none). Target: at most 100 ns/op more with 100,000 than with none.
func BenchmarkMatchOverrides(b *testing.B) {
	ds, err := config.Parse("bench.yaml", []byte("domain: bench\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: second, requests_per_unit: 100}\n"))
	if err != nil {
		b.Fatal(err)
	}
	rules, err := config.Compile(ds)
	if err != nil {
		b.Fatal(err)
	}
	for _, bm := range []struct {
		name  string
		n     int
		value string
	}{{"none", 0, "k-123"}, {"100k_other", 100_000, "other"}, {"100k_applies", 100_000, "k-123"}} {
		b.Run(bm.name, func(b *testing.B) {
			e := New(nil, rules, Options{})
			if bm.n > 0 {
				m := make(map[string]*RuntimeOverride, bm.n)
				limits := []config.RuleLimit{{Limit: backend.Limit{Requests: 5, Window: 1e9}}}
				for i := range bm.n {
					k := OverrideKey("bench", []Entry{{Key: "api_key", Value: "k-" + strconv.Itoa(i)}})
					m[k] = &RuntimeOverride{Limits: limits, Reason: "bench"}
				}
				e.SetOverrides(NewRuntimeOverrides(m))
			}
			sc := new(Scratch)
			b.ReportAllocs()
			for b.Loop() {
				sc.Reset()
				sc.Req.Domain = "bench"
				sc.Req.Entries = append(sc.Req.Entries, Entry{Key: "api_key", Value: bm.value})
				sc.Req.Add(0, 1)
				if _, err := e.match(sc); err != nil {
					b.Fatal(err)
				}
				if got := sc.descs[0].runtime != nil; got != (bm.n > 0 && bm.value == "k-123") {
					b.Fatalf("override applied: %v", got)
				}
			}
		})
	}
}

// TestOverrideKeyIsThePrefix: the key an override is stored under is
// the prefix a decision looks it up by, for the values a rule counts as
// themselves, long ones (by digest) included.
func TestOverrideKeyIsThePrefix(t *testing.T) {
	long := string(make([]byte, MaxEntryBytes+1))
	for _, entries := range [][]Entry{
		{{Key: "api_key", Value: "k-1"}},
		{{Key: "api_key", Value: long}},
		{{Key: "a", Value: "b"}, {Key: "c", Value: ""}},
	} {
		rule := &config.Rule{}
		got := OverrideKey("d", entries)
		want := string(appendKeyPrefix(nil, "d", rule, entries))
		if got != want {
			t.Errorf("OverrideKey(%+v) = %q, want the decision's prefix %q", entries, got, want)
		}
	}
}

// TestOverridesOneSetPerRequest: a request's descriptors are decided
// under one set of overrides, the set in force when matching began,
// while SetOverrides swaps sets between a set that overrides both of
// its descriptors and an empty one.
func TestOverridesOneSetPerRequest(t *testing.T) {
	ds, err := config.Parse("t.yaml", []byte("domain: d\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: second, requests_per_unit: 100}\n"))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := config.Compile(ds)
	if err != nil {
		t.Fatal(err)
	}
	e := New(nil, rules, Options{})
	limits := []config.RuleLimit{{Limit: backend.Limit{Requests: 5, Window: 1e9}}}
	both := NewRuntimeOverrides(map[string]*RuntimeOverride{})
	for _, v := range []string{"a", "b"} {
		both.m[OverrideKey("d", []Entry{{Key: "api_key", Value: v}})] = &RuntimeOverride{Limits: limits, Reason: "t"}
	}
	none := NewRuntimeOverrides(nil)
	done := make(chan struct{})
	swapped := make(chan struct{})
	go func() {
		defer close(swapped)
		for {
			select {
			case <-done:
				return
			default:
				e.SetOverrides(both)
				e.SetOverrides(none)
			}
		}
	}()
	defer func() { close(done); <-swapped }()
	sc := new(Scratch)
	for range 20_000 {
		sc.Reset()
		sc.Req.Domain = "d"
		for i, v := range []string{"a", "b"} {
			sc.Req.Entries = append(sc.Req.Entries, Entry{Key: "api_key", Value: v})
			sc.Req.Add(i, 1)
		}
		if _, err := e.match(sc); err != nil {
			t.Fatal(err)
		}
		if (sc.descs[0].runtime == nil) != (sc.descs[1].runtime == nil) {
			t.Fatalf("descriptors decided under two sets of overrides: %p and %p", sc.descs[0].runtime, sc.descs[1].runtime)
		}
	}
}
