package memory

import "math/bits"

// sketch estimates how often each key of one shard was asked for lately:
// a count-min sketch of 4-bit counters, halved every period increments so
// that old popularity fades, as TinyLFU (Einziger, Friedman and Manes,
// "TinyLFU: A Highly Efficient Cache Admission Policy") keeps it. Its
// owner's lock guards it.
//
// It is written here, not taken from a cache library, because the caches
// that keep one (otter, ristretto) keep it inside their own eviction
// policy, which does not fit counters (see Store): otter applies its
// policy asynchronously, after the write, to entries it allocates one by
// one on the heap, and cannot be told that a refusing counter must stay;
// ristretto may drop a Set outright. Neither exposes its sketch.
//
// Each key's four counters lie in one block of 8 words (64 bytes, one
// cache line): the key's first hash picks the block, its second picks,
// for each of the four rows, one word of the row's pair and one of that
// word's 16 counters. The hashes are the store's keyed ones, so callers
// cannot aim keys at one counter.
type sketch struct {
	table  []uint64
	blocks uint64 // len(table)/8, a power of two
	adds   int    // increments since the last halving
	period int    // increments between halvings
}

// maxFreq is the largest count a sketch holds.
const maxFreq = 15

// minSketchWords is the smallest sketch, 4 KiB: below some hundreds of
// keys, one word per key would leave so few blocks that keys seen once
// often shared all four counters with others.
const minSketchWords = 512

// newSketch returns a sketch for a shard of keys counters: 16 counters
// (one word) per key, rounded up to a power of two, as Caffeine sizes its
// own, so that a key seen once is rarely estimated higher even when twice
// keys other keys were seen since the last halving; it halves every
// 10 × keys increments, the sample TinyLFU suggests.
func newSketch(keys int) sketch {
	words := max(minSketchWords, 1<<bits.Len(uint(max(keys, 1)-1)))
	return sketch{
		table:  make([]uint64, words),
		blocks: uint64(words / 8),
		period: 10 * max(keys, 1),
	}
}

// counter returns the word and bit offset of k's counter in row r.
func (s *sketch) counter(k hkey, r uint) (word int, shift uint) {
	// k[0]'s low bits pick the shard, so its high bits pick the block.
	block := (k[0] >> 8) & (s.blocks - 1)
	h := k[1] >> (8 * r)
	return int(block*8 + uint64(2*r) + h&1), uint(h>>1&15) * 4
}

// estimate returns how often k was seen, at most maxFreq: never less
// than the truth since the last halving, more only when all four of its
// counters are shared with keys seen more often.
func (s *sketch) estimate(k hkey) uint8 {
	f := uint64(maxFreq)
	for r := range uint(4) {
		w, sh := s.counter(k, r)
		f = min(f, s.table[w]>>sh&15)
	}
	return uint8(f)
}

// add counts one sight of k. It raises only those of k's counters that
// hold its estimate (a conservative update), so that a flood of keys
// seen once inflates the estimates of other keys as little as it can.
func (s *sketch) add(k hkey) {
	f := s.estimate(k)
	if f == maxFreq {
		return
	}
	for r := range uint(4) {
		w, sh := s.counter(k, r)
		if uint8(s.table[w]>>sh&15) == f {
			s.table[w] += 1 << sh
		}
	}
	if s.adds++; s.adds >= s.period {
		s.halve()
	}
}

// halve divides every counter by two, so that what was seen long ago
// counts less than what is seen now.
func (s *sketch) halve() {
	for i, w := range s.table {
		s.table[i] = w >> 1 & 0x7777_7777_7777_7777
	}
	s.adds /= 2
}
