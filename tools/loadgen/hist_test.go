package main

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBucketBounds(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 129, 255, 256, 257, 1000, 1e6, 1e9, 1 << 62, 1<<64 - 1} {
		i := bucket(v)
		if hi := highest(i); v > hi {
			t.Errorf("highest(bucket(%d)) = %d, want ≥ %d", v, hi, v)
		}
		if i > 0 {
			if lo := highest(i-1) + 1; v < lo {
				t.Errorf("bucket(%d) = %d starts at %d, above the value", v, i, lo)
			}
		}
	}
}

func TestQuantile(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h histogram
	vals := make([]time.Duration, 100_000)
	for i := range vals {
		vals[i] = time.Duration(r.ExpFloat64() * float64(time.Millisecond))
		h.record(vals[i])
	}
	slices.Sort(vals)
	for _, q := range []float64{0.5, 0.9, 0.99, 1} {
		want := vals[int(q*float64(len(vals)))-1]
		got := h.quantile(q)
		if got < want || float64(got-want) > float64(want)/subCount {
			t.Errorf("quantile(%v) = %v, want %v within 1/%d above", q, got, want, subCount)
		}
	}
	if got, want := h.quantile(1), vals[len(vals)-1]; got != want {
		t.Errorf("quantile(1) = %v, want the maximum %v", got, want)
	}
}
