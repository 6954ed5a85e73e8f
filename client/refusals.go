package client

import (
	"encoding/binary"
	"sync"
	"time"
)

// refusals remembers ratelimitd's refusals for a while, so that the same
// request is refused again without an RPC.
type refusals struct {
	maxAge time.Duration
	size   int

	mu    sync.Mutex
	m     map[string]refusal // guarded by mu
	swept time.Time          // last sweep of expired entries; guarded by mu
}

// A refusal is one remembered refusal.
type refusal struct {
	at      time.Time // when ratelimitd refused
	expires time.Time // at + min(retry after, maxAge)
	d       Decision
}

func newRefusals(maxAge time.Duration, size int) *refusals {
	return &refusals{maxAge: maxAge, size: size, m: make(map[string]refusal)}
}

// get returns the refusal remembered under key at now, its durations
// counted down to now.
func (r *refusals) get(key []byte, now time.Time) (Decision, bool) {
	r.mu.Lock()
	f, ok := r.m[string(key)]
	if ok && !now.Before(f.expires) {
		delete(r.m, string(key))
		ok = false
	}
	r.mu.Unlock()
	if !ok {
		return Decision{}, false
	}
	elapsed := max(now.Sub(f.at), 0)
	d := f.d
	d.Local = true
	d.RetryAfter = max(d.RetryAfter-elapsed, 0)
	d.Statuses = make([]Status, len(f.d.Statuses))
	for i, s := range f.d.Statuses {
		s.ResetAfter = max(s.ResetAfter-elapsed, 0)
		s.RetryAfter = max(s.RetryAfter-elapsed, 0)
		d.Statuses[i] = s
	}
	d.Headers = append([]Header(nil), f.d.Headers...)
	return d, true
}

// put remembers the refusal d, made at now, under key. When full, it
// forgets the expired refusals: all of them, at most once per maxAge (so
// that a memory full of live refusals costs no repeated sweeps), else
// those among a few arbitrary ones; and if none of those expired, one
// arbitrary refusal.
func (r *refusals) put(key []byte, d Decision, now time.Time) {
	f := refusal{at: now, expires: now.Add(min(d.RetryAfter, r.maxAge)), d: d}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.m[string(key)]; !ok && len(r.m) >= r.size {
		r.evict(now)
	}
	r.m[string(key)] = f
}

// evictSample is how many refusals evict examines without a full sweep.
const evictSample = 16

// evict makes room for one refusal. It requires that r.mu is held.
func (r *refusals) evict(now time.Time) {
	if now.Sub(r.swept) >= r.maxAge {
		r.swept = now
		for k, f := range r.m {
			if !now.Before(f.expires) {
				delete(r.m, k)
			}
		}
		if len(r.m) < r.size {
			return
		}
	}
	var first string
	n, freed := 0, false
	for k, f := range r.m { // map iteration starts at a random entry
		if n == 0 {
			first = k
		}
		if !now.Before(f.expires) {
			delete(r.m, k)
			freed = true
		}
		if n++; n == evictSample {
			break
		}
	}
	if !freed {
		delete(r.m, first)
	}
}

// len returns how many refusals are remembered.
func (r *refusals) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}

// refusalKey appends to buf an unambiguous encoding of a request: every
// string is length-prefixed, and hits are encoded as sent (0 for a check
// only, otherwise at least 1).
func refusalKey(buf []byte, domain string, descriptors []Descriptor) []byte {
	buf = appendString(buf, domain)
	for _, d := range descriptors {
		buf = binary.AppendUvarint(buf, uint64(len(d.Entries)))
		for _, e := range d.Entries {
			buf = appendString(buf, e.Key)
			buf = appendString(buf, e.Value)
		}
		hits := max(d.Hits, 1)
		if d.CheckOnly {
			hits = 0
		}
		buf = binary.AppendUvarint(buf, hits)
	}
	return buf
}

func appendString(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
}
