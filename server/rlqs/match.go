package rlqs

import (
	"slices"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/config"
)

// entry is one key and value of a bucket id, as config.Match reads it.
type entry struct{ key, value string }

// GetKey implements config.Entry.
func (e entry) GetKey() string { return e.key }

// GetValue implements config.Entry.
func (e entry) GetValue() string { return e.value }

// match returns the rule of d that applies to the bucket id, or nil if
// none does (see the package documentation for the walk).
func match(d *config.DomainRules, id map[string]string) *config.Rule {
	if d == nil || len(id) == 0 {
		return nil
	}
	var kbuf [smallID]string
	keys := sortedKeys(id, kbuf[:0])
	var ubuf [smallID]bool
	used := ubuf[:]
	if len(keys) > len(ubuf) {
		used = make([]bool, len(keys))
	}
	var pbuf [smallID + 1]entry
	path := pbuf[:0]
	var rule *config.Rule
	for len(path) < len(keys) {
		best, bi := (*config.Rule)(nil), -1
		for i, k := range keys {
			if used[i] {
				continue
			}
			r := config.Match(d, append(path, entry{k, id[k]}))
			if r != nil && (best == nil || r.Line < best.Line) {
				best, bi = r, i
			}
		}
		if best == nil {
			break
		}
		used[bi] = true
		path = append(path, entry{keys[bi], id[keys[bi]]})
		rule = best
	}
	return rule
}

// bucketKey returns a name for the bucket id in domain that no other
// domain and id share: the domain, then each key and its value, keys in
// byte order, as backend.AppendKeyPart writes the parts of a counter key,
// so that an RLQS bucket and the RLS descriptor of the same entries are
// named alike (the fair-share core and the store name the bucket by it).
func bucketKey(domain string, id map[string]string) string {
	n := len(domain) + 8
	for k, v := range id {
		n += len(k) + len(v) + 16
	}
	b := make([]byte, 0, n)
	b = backend.AppendKeyPart(b, domain)
	var kbuf [smallID]string
	for _, k := range sortedKeys(id, kbuf[:0]) {
		b = backend.AppendKeyPart(b, k)
		b = backend.AppendKeyPart(b, id[k])
	}
	return string(b)
}

// smallID is how many keys a bucket id may have for its walks to take
// their scratch space on the stack: a flood of bucket ids costs the
// service as little as it can.
const smallID = 8

// sortedKeys appends id's keys to buf, sorted in byte order, and returns
// the slice.
func sortedKeys(id map[string]string, buf []string) []string {
	for k := range id {
		buf = append(buf, k)
	}
	slices.Sort(buf)
	return buf
}
