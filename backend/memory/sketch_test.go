package memory

import (
	"math/rand/v2"
	"testing"
	"unsafe"
)

func randomKey(r *rand.Rand) hkey { return hkey{r.Uint64(), r.Uint64()} }

// TestSketchNeverUndercounts: an estimate is never below the number of
// sights since the last halving, up to maxFreq, whatever else was seen.
func TestSketchNeverUndercounts(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	s := newSketch(1000)
	keys := make([]hkey, 500)
	seen := make([]int, len(keys))
	for i := range keys {
		keys[i] = randomKey(r)
	}
	for range 9000 { // under the period of 10,000: no halving
		i := r.IntN(len(keys))
		s.add(keys[i])
		seen[i]++
	}
	over := 0
	for i, k := range keys {
		got, want := int(s.estimate(k)), min(seen[i], maxFreq)
		if got < want {
			t.Errorf("estimate(key %d) = %d after %d sights, want at least %d", i, got, seen[i], want)
		}
		if got > want {
			over++
		}
	}
	// Some collisions, few: 500 keys on 1,024 words.
	if over > len(keys)/20 {
		t.Errorf("%d of %d estimates above the truth, want at most 5%%", over, len(keys))
	}
}

// TestSketchOneHitFlood: after twice as many keys seen once as the sketch
// is sized for, nearly every one of them is estimated at 1.
func TestSketchOneHitFlood(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	s := newSketch(4000)
	keys := make([]hkey, 8000)
	for i := range keys {
		keys[i] = randomKey(r)
		s.add(keys[i])
	}
	high := 0
	for _, k := range keys {
		if f := s.estimate(k); f == 0 {
			t.Fatalf("estimate = 0 for a key seen once")
		} else if f > 1 {
			high++
		}
	}
	if high > len(keys)/10 {
		t.Errorf("%d of %d keys seen once estimated above 1, want at most 10%%", high, len(keys))
	}
}

// TestSketchHalves: every period increments, the counts halve.
func TestSketchHalves(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	s := newSketch(100) // period 1,000
	hot := randomKey(r)
	for range 12 {
		s.add(hot)
	}
	if got := s.estimate(hot); got != 12 {
		t.Fatalf("estimate = %d after 12 sights, want 12", got)
	}
	for range s.period - 12 - 1 {
		s.add(randomKey(r))
	}
	if got := s.estimate(hot); got < 12 {
		t.Fatalf("estimate = %d before the halving, want 12 or more", got)
	}
	s.add(randomKey(r)) // the period's last increment
	if got := s.estimate(hot); got < 6 || got > 7 {
		t.Errorf("estimate = %d after the halving, want 6 (7 with a collision)", got)
	}
	if s.adds != s.period/2 {
		t.Errorf("adds = %d after the halving, want %d", s.adds, s.period/2)
	}
}

// TestCheaper orders counters for eviction: not refusing before refusing,
// then less often asked for, then sooner to expire.
func TestCheaper(t *testing.T) {
	type c struct {
		refusing bool
		freq     uint8
		exp      int64
	}
	// Each entry is cheaper than every later one.
	order := []c{
		{false, 0, 10}, {false, 0, 20},
		{false, 3, 5}, {false, 3, 30},
		{false, 15, 1},
		{true, 0, 1}, {true, 0, 50},
		{true, 15, 1},
	}
	for i, a := range order {
		for j, b := range order {
			ba, bb := bucket{refusing: a.refusing, exp: a.exp}, bucket{refusing: b.refusing, exp: b.exp}
			if got, want := cheaper(ba, a.freq, bb, b.freq), i < j; got != want {
				t.Errorf("cheaper(%+v, %+v) = %v, want %v", a, b, got, want)
			}
		}
	}
}

// TestShardSize: shards start on separate cache lines.
func TestShardSize(t *testing.T) {
	if n := unsafe.Sizeof(shard{}); n%64 != 0 {
		t.Errorf("shard is %d bytes, want a multiple of 64", n)
	}
}
