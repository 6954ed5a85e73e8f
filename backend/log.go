package backend

// Log is a sliding log's counted hits, oldest first: a ring buffer of
// (time, hits) entries that grows by doubling up to MaxSlidingLog entries.
// Hits counted at the same microsecond share an entry (a Concurrency
// limit's leases never do: each has a stamp of its own). The zero Log is
// empty.
type Log struct {
	buf  []logEntry
	head int // index in buf of the oldest entry
	len  int // number of entries
}

type logEntry struct {
	t int64  // µs since the Unix epoch
	n uint64 // hits counted at t
}

// Len returns the number of entries in the log; a nil Log is empty.
func (l *Log) Len() int {
	if l == nil {
		return 0
	}
	return l.len
}

func (l *Log) at(i int) logEntry { return l.buf[(l.head+i)%len(l.buf)] }

// newest returns the time of the newest entry, or 0 if the log is empty.
func (l *Log) newest() int64 {
	if l.Len() == 0 {
		return 0
	}
	return l.at(l.len - 1).t
}

// push counts n hits at t, which must not precede the newest entry. A full
// log (MaxSlidingLog entries, reached only by hits recorded past the limit)
// folds them into its newest entry, moved to t: those hits then expire
// later, never earlier, than they should.
func (l *Log) push(t int64, n uint64) {
	if l.len > 0 {
		last := &l.buf[(l.head+l.len-1)%len(l.buf)]
		if last.t == t || l.len == MaxSlidingLog {
			last.t, last.n = t, addSat(last.n, n)
			return
		}
	}
	if l.len == len(l.buf) {
		l.grow()
	}
	l.buf[(l.head+l.len)%len(l.buf)] = logEntry{t: t, n: n}
	l.len++
}

// take removes up to n hits from the entry stamped t, dropping the entry
// when it empties, and returns how many it removed: none when no entry
// is stamped t. Entries' times strictly increase, so at most one is.
func (l *Log) take(t int64, n uint64) uint64 {
	for i := l.Len() - 1; i >= 0; i-- {
		e := &l.buf[(l.head+i)%len(l.buf)]
		if e.t < t {
			return 0
		}
		if e.t == t {
			back := min(n, e.n)
			if e.n -= back; e.n == 0 {
				l.remove(i)
			}
			return back
		}
	}
	return 0
}

// dropNewest removes up to n hits from the newest entries, dropping
// those it empties, and returns how many it removed.
func (l *Log) dropNewest(n uint64) uint64 {
	var back uint64
	for l.Len() > 0 && back < n {
		e := &l.buf[(l.head+l.len-1)%len(l.buf)]
		d := min(n-back, e.n)
		back += d
		if e.n -= d; e.n == 0 {
			l.remove(l.len - 1)
		}
	}
	return back
}

// remove drops entry i (0 is the oldest), moving the newer ones down.
func (l *Log) remove(i int) {
	for ; i < l.len-1; i++ {
		l.buf[(l.head+i)%len(l.buf)] = l.at(i + 1)
	}
	l.len--
	if l.len == 0 {
		l.head = 0
	}
}

// pop drops the oldest entry. It writes nothing to buf, so a copy of the
// Log header may pop without disturbing the original.
func (l *Log) pop() {
	l.head = (l.head + 1) % len(l.buf)
	l.len--
	if l.len == 0 {
		l.head = 0
	}
}

func (l *Log) grow() { l.resize(min(max(2*len(l.buf), 4), MaxSlidingLog)) }

// shrink gives memory back once a log that grew has mostly expired.
func (l *Log) shrink() {
	if len(l.buf) > 64 && l.len < len(l.buf)/4 {
		l.resize(max(2*l.len, 16))
	}
}

func (l *Log) resize(size int) {
	buf := make([]logEntry, size)
	for i := range l.len {
		buf[i] = l.at(i)
	}
	l.buf, l.head = buf, 0
}
