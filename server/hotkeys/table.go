package hotkeys

import (
	"bytes"
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/config"
)

// KeyBytes is how many bytes of a counter key a slot keeps. A longer key
// is kept truncated (its entries past the cut are not shown) and told
// apart from others by its hash and full length.
const KeyBytes = 160

// A slot is one counter held by a table, in fixed memory.
type slot struct {
	hash   uint64
	keyLen int // the whole key's length; key holds min(keyLen, KeyBytes) bytes
	key    [KeyBytes]byte
	// score orders the table: refused hits (space-saving's count), or
	// the bits of the highest share used (math.Float64bits orders
	// non-negative floats as their values).
	score uint64
	// err is space-saving's error bound: the count the key inherited
	// when it took the slot of the least counted.
	err  uint64
	hits uint64 // hits asked while the counter was held
	at   int64  // when score was set, in clock nanoseconds
	last last
}

// last is what the latest decision on a counter said.
type last struct {
	rule      *config.Rule
	path      string
	limit     backend.Limit
	remaining uint64
	reset     time.Duration
	shadow    bool
	seen      int64 // clock nanoseconds
}

// A table holds at most k counters in fixed memory: the slots, an
// open-addressing index from key hash to slot (linear probing, with
// backward-shift deletion) and a min-heap of the slots by score, whose
// root is the counter a newcomer replaces when the table is full.
type table struct {
	slots []slot     // len ≤ cap = k
	heap  []heapItem // a min-heap of the slots by score
	pos   []int32    // pos[s] is slot s's place in heap
	index []int32    // slot numbers, -1 when empty; its length is a power of two ≥ 4k
}

// A heapItem is a slot in the heap, with a copy of its score: the heap's
// comparisons then read one small array, not slots far apart.
type heapItem struct {
	score uint64
	slot  int32
}

// newTable returns an empty table of k slots.
func newTable(k int) *table {
	n := 4
	for n < 4*k {
		n <<= 1
	}
	t := &table{
		slots: make([]slot, 0, k),
		heap:  make([]heapItem, 0, k),
		pos:   make([]int32, k),
		index: make([]int32, n),
	}
	t.reset()
	return t
}

// reset empties t, keeping its memory.
func (t *table) reset() {
	clear(t.slots[:cap(t.slots)]) // drop rule pointers
	t.slots = t.slots[:0]
	t.heap = t.heap[:0]
	for i := range t.index {
		t.index[i] = -1
	}
}

// full reports whether every slot is taken.
func (t *table) full() bool { return len(t.slots) == cap(t.slots) }

// min returns the least score held, 0 when t is empty.
func (t *table) min() uint64 {
	if len(t.heap) == 0 {
		return 0
	}
	return t.heap[0].score
}

// find returns the slot of key, whose hash is h, or -1.
func (t *table) find(h uint64, key []byte) int32 {
	return t.lookup(h, len(key), key[:min(len(key), KeyBytes)])
}

// findSlot returns the slot of t holding the counter of s (a slot of
// another table), or -1.
func (t *table) findSlot(s *slot) int32 {
	return t.lookup(s.hash, s.keyLen, s.key[:min(s.keyLen, KeyBytes)])
}

// lookup returns the slot of the key of hash h and length n that starts
// with prefix (its first KeyBytes bytes), or -1.
func (t *table) lookup(h uint64, n int, prefix []byte) int32 {
	mask := uint64(len(t.index) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := t.index[i]
		if s < 0 {
			return -1
		}
		if sl := &t.slots[s]; sl.hash == h && sl.keyLen == n && bytes.Equal(sl.key[:len(prefix)], prefix) {
			return s
		}
	}
}

// add puts key, whose hash is h, in a slot with score and returns it: a
// free slot, or when t is full the least scored one, whose score the
// caller may inherit (see Tracker). The slot's other fields are zero; the
// caller must call fix after changing its score.
func (t *table) add(h uint64, key []byte, score uint64) int32 {
	var s int32
	if !t.full() {
		s = int32(len(t.slots))
		t.slots = t.slots[:s+1]
		t.pos[s] = int32(len(t.heap))
		t.heap = append(t.heap, heapItem{slot: s})
	} else {
		s = t.heap[0].slot
		t.unindex(s)
	}
	sl := &t.slots[s]
	sl.hash, sl.keyLen, sl.err, sl.hits, sl.at, sl.last = h, len(key), 0, 0, 0, last{} // key is overwritten, not cleared
	copy(sl.key[:], key)
	mask := uint64(len(t.index) - 1)
	i := h & mask
	for t.index[i] >= 0 {
		i = (i + 1) & mask
	}
	t.index[i] = s
	t.setScore(s, score)
	return s
}

// unindex removes slot s from the index.
func (t *table) unindex(s int32) {
	mask := uint64(len(t.index) - 1)
	i := t.slots[s].hash & mask
	for t.index[i] != s {
		i = (i + 1) & mask
	}
	// Shift back the entries after i that probing would no longer reach.
	for j := (i + 1) & mask; t.index[j] >= 0; j = (j + 1) & mask {
		home := t.slots[t.index[j]].hash & mask
		if (j-home)&mask >= (j-i)&mask { // home is not in (i, j]: the entry may move to i
			t.index[i] = t.index[j]
			i = j
		}
	}
	t.index[i] = -1
}

// setScore sets slot s's score to v, and moves it in the heap.
func (t *table) setScore(s int32, v uint64) {
	t.slots[s].score = v
	i := t.pos[s]
	t.heap[i].score = v
	t.down(i)
	t.up(t.pos[s])
}

func (t *table) less(a, b int32) bool { return t.heap[a].score < t.heap[b].score }

func (t *table) swap(a, b int32) {
	t.heap[a], t.heap[b] = t.heap[b], t.heap[a]
	t.pos[t.heap[a].slot] = a
	t.pos[t.heap[b].slot] = b
}

func (t *table) up(i int32) {
	for i > 0 {
		p := (i - 1) / 2
		if !t.less(i, p) {
			return
		}
		t.swap(i, p)
		i = p
	}
}

func (t *table) down(i int32) {
	n := int32(len(t.heap))
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if r := c + 1; r < n && t.less(r, c) {
			c = r
		}
		if !t.less(c, i) {
			return
		}
		t.swap(i, c)
		i = c
	}
}

// retain keeps the slots keep accepts and drops the others, rebuilding
// the index and heap when any is dropped.
func (t *table) retain(keep func(*slot) bool) {
	n := 0
	for i := range t.slots {
		if keep(&t.slots[i]) {
			t.slots[n] = t.slots[i]
			n++
		}
	}
	if n == len(t.slots) {
		return
	}
	clear(t.slots[n:])
	t.slots = t.slots[:n]
	t.heap = t.heap[:0]
	for i := range t.index {
		t.index[i] = -1
	}
	mask := uint64(len(t.index) - 1)
	for s := range t.slots {
		i := t.slots[s].hash & mask
		for t.index[i] >= 0 {
			i = (i + 1) & mask
		}
		t.index[i] = int32(s)
		t.pos[s] = int32(len(t.heap))
		t.heap = append(t.heap, heapItem{score: t.slots[s].score, slot: int32(s)})
		t.up(t.pos[s])
	}
}
