package requestlog

import (
	"bytes"
	"strconv"
	"time"
	"unicode/utf8"
)

// decodeFast reads a line in exactly the form AppendLine writes, without
// "bytes", "limits" or escaped characters, into r: the lines of a log
// nearly all are. It reports false for any other line, which Decode then
// reads the general way; for a line it accepts, r is what the general way
// makes of it.
func decodeFast(b []byte, r *Record, in *interner) bool {
	p := parser{b: b, in: in}
	if !p.lit(`{"time":`) {
		return false
	}
	ts, ok := p.str()
	if !ok {
		return false
	}
	t, err := time.Parse(time.RFC3339Nano, string(ts))
	if err != nil || !p.lit(`,"request":{"domain":`) {
		return false
	}
	domain, ok := p.str()
	if !ok || !p.lit(`,"descriptors":[`) {
		return false
	}
	entries := make([]Entry, 0, 4)
	r.Descriptors = r.Descriptors[:0]
	for {
		d, ok := p.descriptor(&entries)
		if !ok {
			return false
		}
		r.Descriptors = append(r.Descriptors, d)
		if p.lit(`]}}`) && p.i == len(p.b) {
			break
		}
		if !p.lit(`,`) {
			return false
		}
	}
	// The entries moved when they grew: point the descriptors at their
	// final place.
	from := 0
	for i := range r.Descriptors {
		n := len(r.Descriptors[i].Entries)
		r.Descriptors[i].Entries = entries[from : from+n : from+n]
		from += n
	}
	r.Time, r.Domain = t, in.get(domain)
	return true
}

// parser reads b from i.
type parser struct {
	b  []byte
	i  int
	in *interner
}

// An interner returns one string for equal bytes: a log repeats its
// domains, keys and many values on every line.
type interner struct{ m map[string]string }

// maxInterned bounds an interner's strings, and the length of those it
// keeps, so that its memory stays small whatever the log.
const (
	maxInterned    = 1 << 14
	maxInternedLen = 128
)

// get returns b as a string.
func (in *interner) get(b []byte) string {
	if len(b) > maxInternedLen {
		return string(b)
	}
	if s, ok := in.m[string(b)]; ok {
		return s
	}
	if in.m == nil || len(in.m) == maxInterned {
		in.m = make(map[string]string)
	}
	s := string(b)
	in.m[s] = s
	return s
}

// lit consumes s if b continues with it.
func (p *parser) lit(s string) bool {
	if len(p.b)-p.i < len(s) || string(p.b[p.i:p.i+len(s)]) != s {
		return false
	}
	p.i += len(s)
	return true
}

// str consumes a JSON string without escapes, of valid UTF-8, and returns
// its contents.
func (p *parser) str() ([]byte, bool) {
	if !p.lit(`"`) {
		return nil, false
	}
	end := bytes.IndexByte(p.b[p.i:], '"')
	if end < 0 {
		return nil, false
	}
	s := p.b[p.i : p.i+end]
	for _, c := range s {
		if c < 0x20 || c == '\\' {
			return nil, false
		}
	}
	if !utf8.Valid(s) {
		return nil, false
	}
	p.i += end + 1
	return s, true
}

// uint consumes a decimal number without leading zeros, at most max.
func (p *parser) uint(max uint64) (uint64, bool) {
	j := p.i
	for j < len(p.b) && p.b[j] >= '0' && p.b[j] <= '9' {
		j++
	}
	if j == p.i || (p.b[p.i] == '0' && j > p.i+1) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(p.b[p.i:j]), 10, 64)
	if err != nil || v > max {
		return 0, false
	}
	p.i = j
	return v, true
}

// fastUnits are the units a fast line may name, and their lengths.
var fastUnits = map[string]time.Duration{}

func init() {
	for _, u := range overrideUnits {
		fastUnits[u.EnvoyName] = u.Window
	}
}

// descriptor consumes one descriptor, appending its entries to entries;
// the descriptor's Entries holds them until decodeFast points it at their
// final place.
func (p *parser) descriptor(entries *[]Entry) (Descriptor, bool) {
	d := Descriptor{Hits: 1}
	if !p.lit(`{"entries":[`) {
		return d, false
	}
	from := len(*entries)
	for {
		if !p.lit(`{"key":`) {
			return d, false
		}
		k, ok := p.str()
		if !ok || !p.lit(`,"value":`) {
			return d, false
		}
		v, ok := p.str()
		if !ok || !p.lit(`}`) {
			return d, false
		}
		*entries = append(*entries, Entry{Key: p.in.get(k), Value: p.in.get(v)})
		if p.lit(`]`) {
			break
		}
		if !p.lit(`,`) {
			return d, false
		}
	}
	d.Entries = (*entries)[from:]
	if p.lit(`,"limit":{"requestsPerUnit":`) {
		rpu, ok := p.uint(1<<32 - 1)
		if !ok || !p.lit(`,"unit":`) {
			return d, false
		}
		u, ok := p.str()
		w, known := fastUnits[string(u)]
		if !ok || !known {
			return d, false
		}
		if p.lit(`,"unitMultiplier":`) {
			m, ok := p.uint(1<<32 - 1)
			if !ok || m == 0 {
				return d, false
			}
			w *= time.Duration(m)
		}
		if !p.lit(`}`) {
			return d, false
		}
		d.HasLimit, d.Limit = true, Limit{Requests: rpu, Window: w}
	}
	if p.lit(`,"hitsAddend":"`) {
		h, ok := p.uint(1<<64 - 1)
		if !ok || !p.lit(`"`) {
			return d, false
		}
		d.Hits = h
	}
	return d, p.lit(`}`)
}
