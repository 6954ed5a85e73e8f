package hotkeys

import (
	"fmt"
	"testing"
)

// BenchmarkObserve measures one Observe: admitted decisions on many
// counters, using no more of their limits than those held (the common
// case: nothing changes), admitted decisions on counters held, refused
// ones on a hot counter, and refused ones on ever new counters (each
// replacing the least refused), alone and in parallel.
func BenchmarkObserve(b *testing.B) {
	keys := make([][]byte, 1<<16)
	for i := range keys {
		keys[i] = counterKey("edge", "remote_address", fmt.Sprintf("10.0.%d.%d", i>>8, i&255))
	}
	for _, bm := range []struct {
		name    string
		refused bool
		spread  int
	}{
		{"admitted", false, len(keys)},
		{"admitted_held", false, 16},
		{"refused_hot", true, 1},
		{"refused_distinct", true, len(keys)},
	} {
		run := func(b *testing.B, parallel bool) {
			tr := New(Options{})
			o := Observation{Hits: 1, Refused: bm.refused, Limit: minuteLimit, Remaining: 50}
			b.ReportAllocs()
			if !parallel {
				i := 0
				for b.Loop() {
					tr.Observe("edge", keys[i%bm.spread], &o)
					i++
				}
				return
			}
			b.RunParallel(func(pb *testing.PB) {
				o := o
				i := 0
				for pb.Next() {
					tr.Observe("edge", keys[i%bm.spread], &o)
					i++
				}
			})
		}
		b.Run(bm.name, func(b *testing.B) { run(b, false) })
		b.Run(bm.name+"_parallel", func(b *testing.B) { run(b, true) })
	}
}
