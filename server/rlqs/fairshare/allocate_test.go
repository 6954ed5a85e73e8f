package fairshare

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// refAllocate is the water-filling definition, written independently of
// Allocate: repeatedly give every client still unsatisfied whose want fits
// in an equal split of what is left its want, until none fits; the rest
// split what is left equally. If all are satisfied, the spare is split
// equally among all.
func refAllocate(limit float64, demands []float64) []float64 {
	out := make([]float64, len(demands))
	wants := make([]float64, len(demands))
	done := make([]bool, len(demands))
	floor := limit * MinHeadroom / float64(len(demands))
	for i, d := range demands {
		if !(d > 0) {
			d = 0
		}
		wants[i] = math.Min(d+math.Max(d*Headroom, floor), limit)
	}
	remaining, left := limit, len(demands)
	for changed := true; changed && left > 0; {
		changed = false
		level := remaining / float64(left)
		for i := range wants {
			if !done[i] && wants[i] <= level {
				out[i], done[i] = wants[i], true
				remaining -= wants[i]
				left--
				changed = true
			}
		}
	}
	if left > 0 {
		for i := range out {
			if !done[i] {
				out[i] = remaining / float64(left)
			}
		}
		return out
	}
	for i := range out {
		out[i] += remaining / float64(len(out))
	}
	return out
}

// randomDemands returns n demands of uneven sizes from r: mostly spread
// over several orders of magnitude, with some zeros and some equal values.
func randomDemands(r *rand.Rand, n int) []float64 {
	d := make([]float64, n)
	for i := range d {
		switch r.IntN(10) {
		case 0:
			d[i] = 0
		case 1:
			d[i] = 10
		default:
			d[i] = math.Exp(r.Float64()*12 - 4)
		}
	}
	return d
}

// near reports whether a and b agree to within a relative 1e-9 of scale.
func near(a, b, scale float64) bool {
	return math.Abs(a-b) <= 1e-9*scale
}

// checkAllocation fails t unless out is a valid allocation of limit for
// demands: no NaN, each in [0, limit], the sum at most limit.
func checkAllocation(t *testing.T, limit float64, demands, out []float64) {
	t.Helper()
	var sum float64
	for i, o := range out {
		if math.IsNaN(o) || o < 0 || o > limit {
			t.Fatalf("limit %v demands %v: out[%d] = %v, want within [0, limit]", limit, demands, i, o)
		}
		sum += o
	}
	if math.IsInf(limit, 1) {
		return
	}
	// The bound holds whatever order the shares are added in.
	sorted := slices.Clone(out)
	slices.Sort(sorted)
	var up, down float64
	for i := range sorted {
		up += sorted[i]
		down += sorted[len(sorted)-1-i]
	}
	for _, s := range []float64{sum, up, down} {
		if s > limit {
			t.Fatalf("limit %v demands %v: out %v sums to %v, over the limit", limit, demands, out, s)
		}
	}
}

func TestAllocateProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for iter := range 20000 {
		n := 1 + r.IntN(80)
		limit := math.Exp(r.Float64()*14 - 2)
		demands := randomDemands(r, n)
		out := make([]float64, n)
		Allocate(limit, demands, out)
		checkAllocation(t, limit, demands, out)

		ref := refAllocate(limit, demands)
		var sum float64
		for i := range out {
			if !near(out[i], ref[i], limit) {
				t.Fatalf("iter %d limit %v demands %v: out[%d] = %v, water-filling gives %v", iter, limit, demands, i, out[i], ref[i])
			}
			sum += out[i]
		}
		// Nothing is wasted: the whole limit is handed out.
		if !near(sum, limit, limit) {
			t.Fatalf("iter %d: sum %v, want the limit %v", iter, sum, limit)
		}
		checkMaxMin(t, limit, demands, out)
	}
}

// checkMaxMin fails t unless out is max-min fair for demands under limit: a
// client given less than it wants got at least as much as every other
// client, so it could gain only by taking from one with less or as much;
// a client given at least its want got its demand plus headroom; and the
// clients given less than they want all got the same.
func checkMaxMin(t *testing.T, limit float64, demands, out []float64) {
	t.Helper()
	maxOut, constrained := 0.0, -1.0
	for _, o := range out {
		maxOut = math.Max(maxOut, o)
	}
	floor := MinHeadroom * limit / float64(len(demands))
	for i, d := range demands {
		w := want(limit, floor, d)
		if out[i] >= w-1e-9*limit {
			if d > 0 && out[i] < math.Min(d*(1+Headroom), limit)-1e-9*limit {
				t.Fatalf("limit %v demands %v: client %d got %v, less than its demand plus headroom", limit, demands, i, out[i])
			}
			continue
		}
		if !near(out[i], maxOut, limit) {
			t.Fatalf("limit %v demands %v: client %d wants %v and got %v while another got %v", limit, demands, i, w, out[i], maxOut)
		}
		if constrained >= 0 && !near(out[i], constrained, limit) {
			t.Fatalf("limit %v demands %v: clients above the fair share got %v and %v", limit, demands, constrained, out[i])
		}
		constrained = out[i]
	}
}

func TestAllocateExamples(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name    string
		limit   float64
		demands []float64
		want    []float64
	}{
		{"one client gets the limit", 100, []float64{10}, []float64{100}},
		{"one greedy client gets the limit", 100, []float64{1000}, []float64{100}},
		{"equal big demands split equally", 90, []float64{100, 200, 300}, []float64{30, 30, 30}},
		// 10 wants 12.5; the other two split 87.5.
		{"a small client gets demand plus headroom", 100, []float64{10, 100, 100}, []float64{12.5, 43.75, 43.75}},
		// 45 wants 56.25, more than the level 50: capped at it.
		{"headroom is capped at the fair level", 100, []float64{45, 100}, []float64{50, 50}},
		// Wants 12.5 and 25 leave 62.5, split 31.25 each.
		{"spare is split equally", 100, []float64{10, 20}, []float64{43.75, 56.25}},
		// The least headroom, a twentieth of 25, for each idle client.
		{"zero, negative and NaN demands get the least headroom", 100, []float64{0, -5, math.NaN(), 200}, []float64{1.25, 1.25, 1.25, 96.25}},
		// 1 + 25% is less than a twentieth of 50.
		{"a tiny demand gets the least headroom", 100, []float64{1, 200}, []float64{3.5, 96.5}},
		{"all zero demands split the limit", 100, []float64{0, 0}, []float64{50, 50}},
		{"unknown demand (+Inf) is a large client", 100, []float64{inf, 10}, []float64{87.5, 12.5}},
		{"zero limit", 0, []float64{1, 2}, []float64{0, 0}},
		{"negative limit", -1, []float64{1, 2}, []float64{0, 0}},
		{"NaN limit", math.NaN(), []float64{1, 2}, []float64{0, 0}},
		{"infinite limit", inf, []float64{1, 2}, []float64{inf, inf}},
		{"no clients", 100, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := make([]float64, len(tt.demands))
			for i := range out {
				out[i] = -7 // Allocate must overwrite every entry
			}
			Allocate(tt.limit, tt.demands, out)
			for i := range out {
				if out[i] != tt.want[i] && !near(out[i], tt.want[i], 100) {
					t.Errorf("Allocate(%v, %v) = %v, want %v", tt.limit, tt.demands, out, tt.want)
					break
				}
			}
		})
	}
}

func TestAllocateManyClients(t *testing.T) {
	// More clients than fit on Allocate's stack buffer.
	r := rand.New(rand.NewPCG(3, 4))
	demands := randomDemands(r, 1000)
	out := make([]float64, len(demands))
	Allocate(5000, demands, out)
	checkAllocation(t, 5000, demands, out)
	ref := refAllocate(5000, demands)
	for i := range out {
		if !near(out[i], ref[i], 5000) {
			t.Fatalf("out[%d] = %v, water-filling gives %v", i, out[i], ref[i])
		}
	}
}

func TestAllocateMismatchedLengths(t *testing.T) {
	out := make([]float64, 2)
	Allocate(100, []float64{1000, 1000, 1000}, out)
	if out[0] != 50 || out[1] != 50 {
		t.Errorf("with two outputs for three demands: %v, want the two first clients splitting the limit", out)
	}
	out = []float64{-1, -1, -1}
	Allocate(100, []float64{1000}, out)
	if out[0] != 100 || out[1] != -1 {
		t.Errorf("with three outputs for one demand: %v, want [100 -1 -1]", out)
	}
}

func FuzzAllocate(f *testing.F) {
	f.Add(100.0, 10.0, 20.0, 1000.0, uint8(3))
	f.Add(math.NaN(), math.Inf(1), -1.0, 0.0, uint8(70))
	f.Add(1e308, 1e308, 1e308, 1e-308, uint8(5))
	f.Fuzz(func(t *testing.T, limit, a, b, c float64, n uint8) {
		base := []float64{a, b, c}
		demands := make([]float64, int(n)%100)
		for i := range demands {
			demands[i] = base[i%3] * float64(i/3+1)
		}
		out := make([]float64, len(demands))
		Allocate(limit, demands, out)
		if !(limit > 0) {
			for i, o := range out {
				if o != 0 {
					t.Fatalf("limit %v: out[%d] = %v, want 0", limit, i, o)
				}
			}
			return
		}
		checkAllocation(t, limit, demands, out)
	})
}

func BenchmarkAllocate(b *testing.B) {
	for _, n := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
			demands := randomDemands(rand.New(rand.NewPCG(5, 6)), n)
			out := make([]float64, n)
			b.ReportAllocs()
			for b.Loop() {
				Allocate(1000, demands, out)
			}
		})
	}
}
