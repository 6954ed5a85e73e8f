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
