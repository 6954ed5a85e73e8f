package replay

import (
	"cmp"
	"encoding/hex"
	"slices"
	"unicode"
	"unicode/utf8"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/server/internal/engine"
	"github.com/ratelimitd/ratelimitd/server/requestlog"
)

// descriptorCounts counts differing requests by descriptor: the
// descriptors whose own decision changed in a request whose decision
// changed. It holds at most max descriptors.
type descriptorCounts struct {
	m         map[string]*DescriptorDiff // by descriptorKey
	max       int
	untracked int    // changes of descriptors not held, the table full
	key       []byte // descriptorKey's, reused
}

// newDescriptorCounts returns a table of at most max descriptors.
func newDescriptorCounts(max int) *descriptorCounts {
	return &descriptorCounts{m: map[string]*DescriptorDiff{}, max: max}
}

// add counts the descriptors of rec whose decision differs between old
// and neu (both decided rec, with a different overall decision).
func (dc *descriptorCounts) add(rec *requestlog.Record, old, neu *engine.Decision) {
	for i := range min(len(old.Descriptors), len(neu.Descriptors), len(rec.Descriptors)) {
		o, n := old.Descriptors[i].Over, neu.Descriptors[i].Over
		if o == n {
			continue
		}
		d := dc.get(rec.Domain, rec.Descriptors[i].Entries)
		if d == nil {
			dc.untracked++
			continue
		}
		d.Requests++
		if n {
			d.NewlyRefused++
		} else {
			d.NewlyAdmitted++
		}
	}
}

// get returns the counts of the descriptor of domain and entries; nil
// when it is not held and the table is full.
func (dc *descriptorCounts) get(domain string, entries []requestlog.Entry) *DescriptorDiff {
	k := backend.AppendKeyPart(dc.key[:0], domain)
	for _, e := range entries {
		k = backend.AppendKeyPart(k, e.Key)
		if e.Digest {
			k = backend.AppendKeyDigest(k, e.Value) // the counter keys' own encoding
		} else {
			k = backend.AppendKeyPart(k, e.Value)
		}
	}
	dc.key = k
	if d, ok := dc.m[string(k)]; ok {
		return d
	}
	if len(dc.m) == dc.max {
		return nil
	}
	d := &DescriptorDiff{Domain: shown(domain), Entries: make([]Entry, len(entries))}
	for i, e := range entries {
		d.Entries[i] = Entry{Key: shown(e.Key), Value: shown(e.Value)}
		if e.Digest {
			d.Entries[i].Value = "sha256:" + hex.EncodeToString([]byte(e.Value))
		}
	}
	dc.m[string(k)] = d
	return d
}

// shown returns s as a report shows it: itself when it is printable text,
// else "hex:" and its bytes in hex.
func shown(s string) string {
	if utf8.ValidString(s) {
		printable := true
		for _, r := range s {
			if !unicode.IsPrint(r) {
				printable = false
				break
			}
		}
		if printable {
			return s
		}
	}
	return "hex:" + hex.EncodeToString([]byte(s))
}

// top returns the n descriptors with the most changes (all when n is 0),
// the most first.
func (dc *descriptorCounts) top(n int) []DescriptorDiff {
	out := make([]DescriptorDiff, 0, len(dc.m))
	for _, d := range dc.m {
		out = append(out, *d)
	}
	slices.SortFunc(out, func(a, b DescriptorDiff) int {
		return cmp.Or(cmp.Compare(b.Requests, a.Requests), cmp.Compare(a.Domain, b.Domain), slices.CompareFunc(a.Entries, b.Entries, func(x, y Entry) int {
			return cmp.Or(cmp.Compare(x.Key, y.Key), cmp.Compare(x.Value, y.Value))
		}))
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out
}
