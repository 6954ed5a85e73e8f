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

// TestSketchHalves: every period sightings, of keys held or not, the
// counts halve: those in the table at once, those of held keys (aged) by
// the epoch they were read at.
func TestSketchHalves(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	s := newSketch(100) // period 1,000
	hot := randomKey(r)
	for i := range 12 {
		if got := s.add(hot); got != uint8(i+1) {
			t.Fatalf("add #%d = %d, want %d", i+1, got, i+1)
		}
	}
	held, at := uint8(12), s.epoch // a held key's count, read now
	for range s.period - 12 - 1 {
		s.see()
	}
	if got := s.estimate(hot); got != 12 {
		t.Fatalf("estimate = %d before the halving, want 12", got)
	}
	if got := s.aged(held, at); got != 12 {
		t.Fatalf("aged = %d before the halving, want 12", got)
	}
	s.see() // the period's last sighting
	if got := s.estimate(hot); got != 6 {
		t.Errorf("estimate = %d after the halving, want 6", got)
	}
	if got := s.aged(held, at); got != 6 {
		t.Errorf("aged = %d after the halving, want 6", got)
	}
	if s.seen != 0 || s.epoch != at+1 {
		t.Errorf("seen = %d, epoch = %d after the halving, want 0 and %d", s.seen, s.epoch, at+1)
	}
	for range 3 * s.period {
		s.see()
	}
	if got := s.aged(held, at); got != 0 {
		t.Errorf("aged = %d after 4 halvings, want 0", got)
	}
	s.epoch = at - 1 // an epoch that wrapped around
	if got := s.aged(held, at); got != 0 {
		t.Errorf("aged = %d read 65,535 halvings ago, want 0", got)
	}
}

// TestSketchRaise: an evicted key's count, written back, is its estimate
// when it comes back, and no counter is lowered.
func TestSketchRaise(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	s := newSketch(1000)
	k, other := randomKey(r), randomKey(r)
	for range 9 {
		s.add(other)
	}
	s.raise(k, 7)
	if got := s.estimate(k); got < 7 {
		t.Errorf("estimate = %d after raise to 7, want at least 7", got)
	}
	s.raise(k, 3)
	if got := s.estimate(k); got < 7 {
		t.Errorf("estimate = %d after raise to 3, want still at least 7", got)
	}
	if got := s.estimate(other); got < 9 {
		t.Errorf("another key's estimate = %d, want at least its 9", got)
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

// TestWins: a window's key takes the place of a main region's counter if
// it was asked for more often; on a tie, if it is refusing and the other
// is not, or at the counts' maximum unless the other is refusing.
func TestWins(t *testing.T) {
	for _, c := range []struct {
		fa     uint8
		ra     bool
		fb     uint8
		rb     bool
		want   bool
		reason string
	}{
		{2, false, 1, true, true, "asked for more often"},
		{1, true, 2, false, false, "asked for less often"},
		{3, false, 3, false, false, "a tie"},
		{3, true, 3, false, true, "a tie, refusing over open"},
		{3, false, 3, true, false, "a tie, open under refusing"},
		{3, true, 3, true, false, "a tie, both refusing"},
		{maxFreq, false, maxFreq, false, true, "a tie at the maximum"},
		{maxFreq, true, maxFreq, true, false, "a tie at the maximum, both refusing"},
		{maxFreq, false, maxFreq, true, false, "a tie at the maximum, open under refusing"},
	} {
		if got := wins(c.fa, c.ra, c.fb, c.rb); got != c.want {
			t.Errorf("wins(%d, %v, %d, %v) = %v, want %v (%s)", c.fa, c.ra, c.fb, c.rb, got, c.want, c.reason)
		}
	}
}

// TestShardSize: shards start on separate cache lines.
func TestShardSize(t *testing.T) {
	if n := unsafe.Sizeof(shard{}); n%64 != 0 {
		t.Errorf("shard is %d bytes, want a multiple of 64", n)
	}
}
