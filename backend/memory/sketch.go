package memory

import "math/bits"

// sketch keeps how often the keys of one shard were asked for lately, as
// TinyLFU (Einziger, Friedman and Manes, "TinyLFU: A Highly Efficient
// Cache Admission Policy") keeps it: 4-bit counts, all halved every
// period sightings so that old popularity fades. Its owner's lock guards
// it.
//
// A key the shard holds keeps its count in its bucket (bucket.freq, as of
// halving number bucket.epoch, see aged): a decision on it touches
// nothing but its bucket, where TinyLFU would also raise four counters in
// a table that does not fit in the CPU's caches. A key the shard does not
// hold is counted, once the shard is full, in a count-min table, so that
// a new key that comes back shows it, and so does a counter evicted (its
// count is written back).
//
// It is written here, not taken from a cache library, because the caches
// that keep one (otter, ristretto) keep it inside their own eviction
// policy, which does not fit counters (see Store): otter applies its
// policy asynchronously, after the write, to entries it allocates one by
// one on the heap, and cannot be told that a refusing counter must stay;
// ristretto may drop a Set outright. Neither exposes its sketch.
//
// Each key's four counters in the table lie in one block of 8 words (64
// bytes, one cache line): the key's first hash picks the block, its
// second picks, for each of the four rows, one word of the row's pair and
// one of that word's 16 counters. The hashes are the store's keyed ones,
// so callers cannot aim keys at one counter.
type sketch struct {
	table  []uint64 // allocated when first written to, once the shard is full
	blocks uint64   // len(table)/8, a power of two
	seen   int      // sightings since the last halving
	period int      // sightings between halvings
	epoch  uint16   // halvings since newSketch, wrapping
}

// maxFreq is the largest count a sketch holds.
const maxFreq = 15

// minSketchWords is the smallest table, 4 KiB: below some hundreds of
// keys, one word per key would leave so few blocks that keys seen once
// often shared all four counters with others.
const minSketchWords = 512

// newSketch returns a sketch for a shard of keys counters: a table of 16
// counters (one word) per key, rounded up to a power of two, as Caffeine
// sizes its own, so that a key seen once is rarely estimated higher even
// when twice keys other keys were seen since the last halving; it halves
// every 10 × keys sightings, the sample TinyLFU suggests.
func newSketch(keys int) sketch {
	words := max(minSketchWords, 1<<bits.Len(uint(max(keys, 1)-1)))
	return sketch{blocks: uint64(words / 8), period: 10 * max(keys, 1)}
}

// see counts a sighting of any key, held or not: every period sightings,
// the counts halve.
func (s *sketch) see() {
	if s.seen++; s.seen >= s.period {
		s.halve()
	}
}

// aged returns a held key's count f, kept as of halving number epoch, as
// of now.
func (s *sketch) aged(f uint8, epoch uint16) uint8 {
	if d := s.epoch - epoch; d < 4 {
		return f >> d
	}
	return 0
}

// counter returns the word and bit offset of k's counter in row r.
func (s *sketch) counter(k hkey, r uint) (word int, shift uint) {
	// k[0]'s low bits pick the shard, so its high bits pick the block.
	block := (k[0] >> 8) & (s.blocks - 1)
	h := k[1] >> (8 * r)
	return int(block*8 + uint64(2*r) + h&1), uint(h>>1&15) * 4
}

// estimate returns how often k, a key not held, was seen, at most
// maxFreq: never less than the truth since the last halving, more only
// when all four of its counters are shared with keys seen more often.
func (s *sketch) estimate(k hkey) uint8 {
	if s.table == nil {
		return 0
	}
	f := uint64(maxFreq)
	for r := range uint(4) {
		w, sh := s.counter(k, r)
		f = min(f, s.table[w]>>sh&15)
	}
	return uint8(f)
}

// add counts a sighting of k, a key not held, and returns its estimate.
// It raises only those of k's counters that hold its estimate (a
// conservative update), so that a flood of keys seen once inflates the
// estimates of other keys as little as it can.
func (s *sketch) add(k hkey) uint8 {
	s.see()
	f := s.estimate(k)
	if f < maxFreq {
		s.raise(k, f+1)
		f++
	}
	return f
}

// raise sets those of k's counters that are below f to f, so that k's
// estimate is at least f: the count of an evicted key.
func (s *sketch) raise(k hkey, f uint8) {
	if s.table == nil {
		s.table = make([]uint64, s.blocks*8)
	}
	for r := range uint(4) {
		w, sh := s.counter(k, r)
		if c := s.table[w] >> sh & 15; c < uint64(f) {
			s.table[w] += (uint64(f) - c) << sh
		}
	}
}

// halve divides every count by two, so that what was seen long ago
// counts less than what is seen now.
func (s *sketch) halve() {
	for i, w := range s.table {
		s.table[i] = w >> 1 & 0x7777_7777_7777_7777
	}
	s.seen = 0
	s.epoch++
}
