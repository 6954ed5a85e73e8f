package hotkeys

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/config"
)

// A Domain is one domain's lists, as View returns them.
type Domain struct {
	Name    string
	Refused []Entry // most refused first
	Nearest []Entry // highest share used first
}

// An Entry is one counter of a list.
type Entry struct {
	// Key is the descriptor's part of the counter key, its first
	// KeyBytes bytes when Truncated (see DecodeKey).
	Key       []byte
	Truncated bool
	Rule      *config.Rule // nil for a request's own limit outside any rule
	Path      string
	// Hits are the hits asked of the counter while the list held it;
	// Refused those its limit refused (in Refused, an estimate above
	// the true count by at most RefusedError).
	Hits, Refused, RefusedError uint64
	// Used is the highest share of its limit the counter had used after
	// an admitted decision, at UsedAt (in Nearest only).
	Used   float64
	UsedAt time.Time
	// Limit, Remaining, Reset and Shadow are what the latest decision
	// said, at Seen; Reset is counted from Seen.
	Limit     backend.Limit
	Remaining uint64
	Reset     time.Duration
	Shadow    bool
	Seen      time.Time
}

// View returns a copy of the lists of every tracked domain that is
// live, sorted by name.
func (t *Tracker) View() []Domain {
	doms := *t.domains.Load()
	out := make([]Domain, 0, len(doms))
	for _, d := range doms {
		if t.live(d.name) {
			out = append(out, t.viewDomain(d))
		}
	}
	slices.SortFunc(out, func(a, b Domain) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// viewDomain returns d's lists.
func (t *Tracker) viewDomain(d *domain) Domain {
	v := Domain{Name: d.name}
	now := t.elapsed()
	for i := range d.shards {
		sh := &d.shards[i]
		sh.mu.Lock()
		sh.advance(t, now)
		sh.publish()
		v.Refused = append(v.Refused, t.mergeRefused(sh.refused, sh.previous)...)
		for j := range sh.nearest.slots {
			s := &sh.nearest.slots[j]
			if now-s.at > t.window { // its peak left the window since the last purge
				continue
			}
			e := t.entry(s, &s.last)
			e.Used, e.UsedAt = math.Float64frombits(s.score), t.base.Add(time.Duration(s.at))
			v.Nearest = append(v.Nearest, e)
		}
		sh.mu.Unlock()
	}
	slices.SortFunc(v.Refused, func(a, b Entry) int {
		return cmp.Or(cmp.Compare(b.Refused, a.Refused), cmp.Compare(b.Hits, a.Hits))
	})
	slices.SortFunc(v.Nearest, func(a, b Entry) int {
		return cmp.Or(cmp.Compare(b.Used, a.Used), b.UsedAt.Compare(a.UsedAt))
	})
	v.Refused = v.Refused[:min(len(v.Refused), t.k)]
	v.Nearest = v.Nearest[:min(len(v.Nearest), t.k)]
	return v
}

// mergeRefused returns the counters of the current sketch cur and the
// previous one prev, a counter held by both once with both counts. A
// counter missing from a full sketch may have been refused up to its
// least count there, which its error bound then includes.
func (t *Tracker) mergeRefused(cur, prev *table) []Entry {
	var out []Entry
	for i := range cur.slots {
		s := &cur.slots[i]
		e := t.entry(s, &s.last)
		e.Refused, e.RefusedError = s.score, s.err
		if p := prev.findSlot(s); p >= 0 {
			ps := &prev.slots[p]
			e.Hits += ps.hits
			e.Refused += ps.score
			e.RefusedError += ps.err
		} else if prev.full() {
			e.RefusedError += prev.min()
		}
		if e.Refused > 0 {
			out = append(out, e)
		}
	}
	for i := range prev.slots {
		s := &prev.slots[i]
		if cur.findSlot(s) >= 0 {
			continue
		}
		e := t.entry(s, &s.last)
		e.Refused, e.RefusedError = s.score, s.err
		if cur.full() {
			e.RefusedError += cur.min()
		}
		if e.Refused > 0 {
			out = append(out, e)
		}
	}
	return out
}

// entry returns the Entry of s, whose latest decision is l.
func (t *Tracker) entry(s *slot, l *last) Entry {
	n := min(s.keyLen, KeyBytes)
	return Entry{
		Key: slices.Clone(s.key[:n]), Truncated: s.keyLen > KeyBytes,
		Rule: l.rule, Path: l.path, Hits: s.hits,
		Limit: l.limit, Remaining: l.remaining, Reset: l.reset, Shadow: l.shadow,
		Seen: t.base.Add(time.Duration(l.seen)),
	}
}

// A Part is one entry of a descriptor decoded from a counter key: its key
// and value, or when Digest its value's digest (a value too long to count
// as itself, or sent as a digest).
type Part struct {
	Key, Value string
	Digest     bool
}

// DecodeKey decodes the descriptor's part of a counter key (see
// backend.AppendKeyPart): its domain, then each entry. complete is false
// when key ends inside an entry, as a truncated key does; the entries
// returned are those decoded whole.
func DecodeKey(key []byte) (dom string, parts []Part, complete bool) {
	dom, _, key, ok := nextPart(key)
	if !ok {
		return "", nil, false
	}
	for len(key) > 0 {
		k, _, rest, ok := nextPart(key)
		if !ok {
			return dom, parts, false
		}
		v, digest, rest, ok := nextPart(rest)
		if !ok {
			return dom, parts, false
		}
		parts = append(parts, Part{Key: k, Value: v, Digest: digest})
		key = rest
	}
	return dom, parts, true
}

// nextPart decodes the length-prefixed part at the start of b: "N:" and N
// bytes, or "N#" and N bytes of a digest.
func nextPart(b []byte) (part string, digest bool, rest []byte, ok bool) {
	i := 0
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	if i == 0 || i >= len(b) || (b[i] != ':' && b[i] != '#') {
		return "", false, nil, false
	}
	n, err := strconv.Atoi(string(b[:i]))
	if err != nil || n > len(b)-i-1 {
		return "", false, nil, false
	}
	start := i + 1
	return string(b[start : start+n]), b[i] == '#', b[start+n:], true
}
