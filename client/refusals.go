package client

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// refusals remembers ratelimitd's refusals for a while, so that the same
// request is refused again without an RPC.
//
// It follows the design of the daemon's local over-limit cache
// (backend/redis/cache.go, in the main module, which this one cannot
// import): a map under one lock, bounded (WithRefusalCacheSize, as
// --local-cache-size there); each entry holds until the refusal's
// retry-after, capped (WithRefusalCache, maxHold there), and counts its
// durations down from when it was made; when full, expired entries are
// swept, at most once per interval. It differs where its job does:
//
//   - An entry is a whole request (domain, descriptors, hits, overrides:
//     see refusalKey), not a counter: the client knows neither
//     ratelimitd's rules nor its counters, only what it asked and what
//     ratelimitd answered, headers included (see localHeaders).
//   - Full of live refusals, it forgets an arbitrary one to remember the
//     newest (TestRefusalMemoryBounded holds it), where the daemon's cache
//     leaves the new call to Redis: the daemon must store all of a call's
//     counters or none, while here the request just refused, one entry,
//     is the one a flood repeats.
//   - Reaching the bound is counted by no metric: the client has no
//     metrics of its own, and a counter would add to its public API; the
//     daemon's cache reports its entries (LocalCacheEntries).
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
// counted down to now, in its statuses and in its headers (see
// localHeaders).
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
	d.Headers = localHeaders(f.d.Headers, elapsed, d.RetryAfter)
	return d, true
}

// localHeaders returns a copy of hs, the headers of a refusal made elapsed
// ago, with the values that count down counted down:
//
//   - Retry-After, in delta-seconds, becomes retryAfter (the refusal's,
//     counted down) in seconds, rounded up, at least 1, as ratelimitd
//     computes it (an HTTP-date, which does not go stale, is kept);
//   - each t parameter of the IETF RateLimit field (an Integer parameter
//     of a top-level member, such as "name";r=0;t=45), and the legacy
//     RateLimit-Reset, lose elapsed in whole seconds (rounded down), not
//     below 0. ratelimitd rounded them up from its reset times, so the
//     results are those times, counted down and rounded up, or at most a
//     second more: never less.
//
// The other headers and parameters, and values that do not change, are
// kept as they are, without allocating.
func localHeaders(hs []Header, elapsed, retryAfter time.Duration) []Header {
	if len(hs) == 0 {
		return nil
	}
	out := make([]Header, len(hs))
	secs := int64(max(elapsed, 0) / time.Second)
	for i, h := range hs {
		switch {
		case strings.EqualFold(h.Name, "Retry-After"):
			if n, ok := deltaSeconds(h.Value); ok {
				if want := max(seconds(retryAfter), 1); want != n {
					h.Value = strconv.FormatInt(want, 10)
				}
			}
		case strings.EqualFold(h.Name, "RateLimit"):
			h.Value = countDownT(h.Value, secs)
		case strings.EqualFold(h.Name, "RateLimit-Reset"):
			if n, ok := deltaSeconds(h.Value); ok && secs > 0 && n > 0 {
				h.Value = strconv.FormatInt(max(n-secs, 0), 10)
			}
		}
		out[i] = h
	}
	return out
}

// seconds returns d in whole seconds, rounded up; 0 for a negative d. It
// does not overflow on saturated durations (such as a Duration decoded
// from a far larger one, which saturates at the largest Duration): it
// divides before rounding, rather than adding a second first.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// maxDigits is the most digits of a Structured Fields Integer (RFC 9651
// §3.3.1), which also keeps deltaSeconds from overflowing.
const maxDigits = 15

// deltaSeconds parses s as a non-negative number of seconds: 1 to
// maxDigits decimal digits, nothing else. Retry-After is no Structured
// Field, for httpsfv to read: it is an HTTP-date or delta-seconds (RFC 9110
// §10.2.3); the legacy RateLimit-Reset, as ratelimitd writes it, is the
// same digits.
func deltaSeconds(s string) (int64, bool) {
	if s == "" || len(s) > maxDigits {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// countDownT returns v, a Structured Fields List (the IETF RateLimit
// field), with the value of each non-negative Integer parameter named t
// of its top-level members lowered by secs, not below 0. It returns v itself
// when nothing changes (secs <= 0, no t, or all at 0). Anything it does
// not recognise (Strings, whose quotes and escapes it skips, inner lists,
// other parameters, negative or non-Integer t) is copied unchanged.
//
// It scans v rather than going through httpsfv, the Structured Fields
// parser this module already requires, because it runs on every request
// refused from memory, a flood's path: httpsfv parses a field into values
// and serializes them anew, 35 allocations and 1.7 KB for a field of three
// members, some 40 times countDownT's time (BenchmarkCountDownT), where
// countDownT allocates nothing when nothing changes and the new value only
// otherwise (TestCountDownTAllocs); and httpsfv writes the canonical
// form, where countDownT keeps every byte it does not lower (`"a"; t=50`
// keeps its space, TestCountDownT). httpsfv is its reference instead:
// FuzzCountDownT checks that on every field httpsfv reads as a List, the
// two lower the same parameters alike.
func countDownT(v string, secs int64) string {
	if secs <= 0 {
		return v
	}
	var b strings.Builder // empty until the first change
	last := 0             // v[last:] is not yet in b
	depth := 0            // of inner lists
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '"': // a String (or a Display String's quotes): skip it
			for i++; i < len(v) && v[i] != '"'; i++ {
				if v[i] == '\\' {
					i++
				}
			}
		case '(':
			depth++
		case ')':
			depth = max(depth-1, 0)
		case ';':
			if depth > 0 {
				continue
			}
			j := i + 1
			for j < len(v) && v[j] == ' ' {
				j++
			}
			if j+1 >= len(v) || v[j] != 't' || v[j+1] != '=' {
				continue
			}
			start := j + 2
			end := start
			for end < len(v) && end-start <= maxDigits && '0' <= v[end] && v[end] <= '9' {
				end++
			}
			if end == start || end-start > maxDigits || (end < len(v) && !strings.ContainsRune(";, \t)", rune(v[end]))) {
				continue // not an Integer: a Decimal, a negative one, or garbage
			}
			t, _ := deltaSeconds(v[start:end])
			if nt := max(t-secs, 0); nt != t {
				if last == 0 {
					b.Grow(len(v)) // nt has no more digits than t
				}
				var digits [maxDigits]byte
				b.WriteString(v[last:start])
				b.Write(strconv.AppendInt(digits[:0], nt, 10))
				last = end
			}
			i = end - 1
		}
	}
	if last == 0 {
		return v
	}
	b.WriteString(v[last:])
	return b.String()
}

// put remembers the refusal d, made at now, under key. When full, it
// forgets the expired refusals: all of them, at most once per maxAge (so
// that a memory full of live refusals costs no repeated sweeps), else
// those among a few arbitrary ones; and if none of those expired, one
// arbitrary refusal.
func (r *refusals) put(key []byte, d Decision, now time.Time) {
	// Keep copies: the caller owns the Decision it was returned.
	d.Statuses, d.Headers = slices.Clone(d.Statuses), slices.Clone(d.Headers)
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
// string is length-prefixed, hits are encoded as sent (0 for a check
// only, otherwise at least 1), and then the limit override, if any. A
// value over maxValue bytes is encoded as ratelimitd counts it, by its
// SHA-256 digest, after the prefix maxValue+1, which no other value has:
// a remembered refusal then holds at most a few KiB per descriptor,
// however long the headers a flood of refused requests carries.
func refusalKey(buf []byte, domain string, descriptors []Descriptor) []byte {
	buf = appendString(buf, domain)
	for _, d := range descriptors {
		buf = binary.AppendUvarint(buf, uint64(len(d.Entries)))
		for _, e := range d.Entries {
			buf = appendString(buf, e.Key)
			if len(e.Value) > maxValue {
				sum := sha256.Sum256([]byte(e.Value))
				buf = binary.AppendUvarint(buf, maxValue+1)
				buf = append(buf, sum[:]...)
				continue
			}
			buf = appendString(buf, e.Value)
		}
		hits := max(d.Hits, 1)
		if d.CheckOnly {
			hits = 0
		}
		buf = binary.AppendUvarint(buf, hits)
		if d.Limit == nil {
			buf = append(buf, 0)
			continue
		}
		buf = append(buf, 1)
		buf = binary.AppendUvarint(buf, uint64(d.Limit.Requests))
		buf = binary.AppendVarint(buf, int64(d.Limit.Window))
	}
	return buf
}

func appendString(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
}
