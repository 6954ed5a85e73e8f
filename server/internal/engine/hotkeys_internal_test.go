package engine

import (
	"strconv"
	"testing"

	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/config"
)

// hotBenchRules: a limit no benchmark reaches, and one every address is
// over after its first hit.
const hotBenchRules = `
domain: bench
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 4000000000
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 1
`

// BenchmarkHotKeysDecision measures the hot keys' cost per decision: the
// engine's verdicts step on a decided request, hot keys off and on (the
// difference is their cost). admitted: 65,536 addresses far from their
// limit; refused: one user over its limit; refused_keys: 65,536 users
// over their limits, so that the sketch keeps replacing counters.
func BenchmarkHotKeysDecision(b *testing.B) {
	domains, err := config.Parse("bench.yaml", []byte(hotBenchRules))
	if err != nil {
		b.Fatal(err)
	}
	rules, err := config.Compile(domains)
	if err != nil {
		b.Fatal(err)
	}
	for _, on := range []bool{false, true} {
		store := memory.New(memory.Options{})
		b.Cleanup(func() { store.Close() })
		s := New(store, rules, Options{HotKeys: HotKeysOptions{Enabled: on}})
		decided := func(key string, n int) []*Scratch {
			scs := make([]*Scratch, n)
			for i := range scs {
				sc := new(Scratch)
				for range 2 { // the second time, users are over their limits
					sc.Reset()
					sc.Req.Domain = "bench"
					sc.Req.Entries = append(sc.Req.Entries, Entry{Key: key, Value: "10.1." + strconv.Itoa(i>>8) + "." + strconv.Itoa(i&255)})
					sc.Req.Add(0, 1)
					if err := s.Decide(b.Context(), sc); err != nil {
						b.Fatal(err)
					}
				}
				scs[i] = sc
			}
			return scs
		}
		for _, bm := range []struct {
			name string
			scs  []*Scratch
		}{
			{"admitted", decided("remote_address", 1<<16)},
			{"refused", decided("user", 1)},
			{"refused_keys", decided("user", 1<<16)},
		} {
			name := "off/" + bm.name
			if on {
				name = "on/" + bm.name
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					sc := bm.scs[i%len(bm.scs)]
					sc.Dec.Statuses = sc.Dec.Statuses[:0]
					s.verdicts(sc, false)
					i++
				}
			})
		}
	}
}
