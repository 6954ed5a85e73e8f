package config

import "strings"

// An Entry is one key and value of a request descriptor. Envoy's
// *RateLimitDescriptor_Entry and ratelimitd's own generated entries satisfy
// it.
type Entry interface {
	GetKey() string
	GetValue() string
}

// Match returns the rule of d that applies to a request descriptor made of
// entries, or nil if none does (nor if d is nil or entries empty).
//
// It walks the entries down the tree. At each level, for the entry (k, v),
// it picks the rule for key k and value v; else the first rule for key k,
// in file order, whose wildcard pattern matches v; else the rule for key k
// alone; else nothing matches. It does not backtrack: once a level picked a
// rule, deeper levels only look at that rule's children. The rule returned
// is the one picked for the last entry; it may have no Limits, and then no
// limit applies. A descriptor with more entries than the tree has levels
// matches nothing.
//
// Match does not allocate, and is safe to call concurrently.
func Match[E Entry](d *DomainRules, entries []E) *Rule {
	if d == nil || len(entries) == 0 {
		return nil
	}
	lv := d.root
	var r *Rule
	for i := range entries {
		kr := lv[entries[i].GetKey()]
		if kr == nil {
			return nil
		}
		if r = kr.match(entries[i].GetValue()); r == nil {
			return nil
		}
		lv = r.children
	}
	return r
}

// match returns the rule for value v, or nil.
func (kr *keyRules) match(v string) *Rule {
	if r := kr.exact[v]; r != nil {
		return r
	}
	for _, r := range kr.wildcards {
		if r.glob.match(v) {
			return r
		}
	}
	return kr.keyOnly
}

// A glob is a compiled wildcard pattern: each '*' matches any run of
// bytes, and every other byte itself. Compiled, "a*b*c" is prefix "a",
// middle ["b"] and suffix "c".
type glob struct {
	prefix, suffix string
	middle         []string // in order, none empty
	min            int      // bytes in prefix, middle and suffix
}

// compileGlob compiles pattern, which contains at least one '*'.
func compileGlob(pattern string) glob {
	parts := strings.Split(pattern, "*")
	g := glob{prefix: parts[0], suffix: parts[len(parts)-1]}
	for _, p := range parts[1 : len(parts)-1] {
		if p != "" {
			g.middle = append(g.middle, p)
		}
	}
	g.min = len(pattern) - strings.Count(pattern, "*")
	return g
}

// match reports whether g matches all of s. Taking the leftmost match of
// each middle part is enough for '*'-only patterns, so it runs in time
// linear in len(s) per part, and allocates nothing.
func (g *glob) match(s string) bool {
	if len(s) < g.min || !strings.HasPrefix(s, g.prefix) || !strings.HasSuffix(s, g.suffix) {
		return false
	}
	s = s[len(g.prefix) : len(s)-len(g.suffix)]
	for _, m := range g.middle {
		i := strings.Index(s, m)
		if i < 0 {
			return false
		}
		s = s[i+len(m):]
	}
	return true
}
