package config

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// entry is an Entry with value methods; pentry has pointer methods, as
// generated protobuf messages do.
type entry struct{ k, v string }

func (e entry) GetKey() string   { return e.k }
func (e entry) GetValue() string { return e.v }

type pentry struct{ Key, Value string }

func (e *pentry) GetKey() string   { return e.Key }
func (e *pentry) GetValue() string { return e.Value }

const matchRules = `
domain: match
descriptors:
  - key: k
    value: "*act"
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: ex*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: k
    value: exact
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: k
    rate_limit: {unit: second, requests_per_unit: 4}

  - key: path
    value: /a/*/c
  - key: path
    value: /a/*
  - key: path
    value: "*"

  - key: parent
    value: p
    descriptors:
      - key: child
        value: c
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: parent
    descriptors:
      - key: other
        rate_limit: {unit: second, requests_per_unit: 6}

  - key: nolimit
    descriptors:
      - key: x
        rate_limit: {unit: second, requests_per_unit: 7}
`

func matchDomain(t testing.TB) *DomainRules {
	t.Helper()
	domains, err := Parse("match.yaml", []byte(matchRules))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := Compile(domains)
	if err != nil {
		t.Fatal(err)
	}
	return rules.Domain("match")
}

func TestMatch(t *testing.T) {
	d := matchDomain(t)
	for _, tc := range []struct {
		name    string
		entries []entry
		want    string // Path of the rule; "" for none
	}{
		{"exact over wildcards", []entry{{"k", "exact"}}, "k=exact"},
		{"wildcards in file order", []entry{{"k", "exxact"}}, "k=*act"},
		{"second wildcard", []entry{{"k", "extra"}}, "k=ex*"},
		{"star at the start", []entry{{"k", "act"}}, "k=*act"},
		{"star at the end matches empty", []entry{{"k", "ex"}}, "k=ex*"},
		{"key-only last", []entry{{"k", "other"}}, "k"},
		{"key-only for empty value", []entry{{"k", ""}}, "k"},
		{"star in the middle", []entry{{"path", "/a/b/c"}}, "path=/a/*/c"},
		{"star in the middle, empty", []entry{{"path", "/a//c"}}, "path=/a/*/c"},
		{"star in the middle, longer", []entry{{"path", "/a/b/c/d/c"}}, "path=/a/*/c"},
		{"star in the middle, no match", []entry{{"path", "/a/b/cd"}}, "path=/a/*"},
		{"star alone", []entry{{"path", "/b"}}, "path=*"},
		{"star alone, empty", []entry{{"path", ""}}, "path=*"},
		{"unknown key", []entry{{"nope", "x"}}, ""},
		{"nested exact", []entry{{"parent", "p"}, {"child", "c"}}, "parent=p.child=c"},
		{"nested key-only", []entry{{"parent", "q"}, {"other", "z"}}, "parent.other"},
		{"no backtracking", []entry{{"parent", "p"}, {"other", "z"}}, ""},
		{"parent without its child", []entry{{"parent", "p"}}, "parent=p"},
		{"rule without limits", []entry{{"nolimit", "v"}}, "nolimit"},
		{"under a rule without limits", []entry{{"nolimit", "v"}, {"x", "1"}}, "nolimit.x"},
		{"too deep", []entry{{"nolimit", "v"}, {"x", "1"}, {"y", "2"}}, ""},
		{"too deep for a leaf", []entry{{"k", "exact"}, {"k", "exact"}}, ""},
		{"no entries", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if r := Match(d, tc.entries); r != nil {
				got = r.Path
			}
			if got != tc.want {
				t.Errorf("Match(%v) = %q, want %q", tc.entries, got, tc.want)
			}
		})
	}
}

func TestMatchRule(t *testing.T) {
	d := matchDomain(t)
	r := Match(d, []*pentry{{"parent", "p"}, {"child", "c"}})
	if r == nil {
		t.Fatal("Match(parent=p, child=c) = nil")
	}
	if r.Key != "child" || r.Value != "c" || r.Wildcard || r.File != "match.yaml" || r.Line != 26 {
		t.Errorf("rule = %+v, want child=c at match.yaml:26", r)
	}
	if len(r.Limits) != 1 || r.Limits[0].Requests != 5 {
		t.Errorf("Limits = %+v, want 5 per second", r.Limits)
	}
	if r := Match(d, []*pentry{{"nolimit", "v"}}); r == nil || len(r.Limits) != 0 || r.Unlimited {
		t.Errorf("Match(nolimit=v) = %+v, want a rule without limits", r)
	}
	if w := Match(d, []entry{{"k", "exxact"}}); w == nil || !w.Wildcard || w.Value != "*act" {
		t.Errorf("Match(k=exxact) = %+v, want the wildcard rule *act", w)
	}
	if r := Match(nil, []entry{{"k", "exact"}}); r != nil {
		t.Errorf("Match(nil, ...) = %+v, want nil", r)
	}
	var rules *Rules
	if rules.Domain("match") != nil {
		t.Error("(*Rules)(nil).Domain != nil")
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	d := matchDomain(t)
	values := []entry{{"parent", "q"}, {"other", "z"}}
	pointers := []*pentry{{"path", "/a/bbbbbbbbbbbb/c"}}
	if n := testing.AllocsPerRun(100, func() { Match(d, values) }); n != 0 {
		t.Errorf("Match with values: %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { Match(d, pointers) }); n != 0 {
		t.Errorf("Match with pointers: %v allocations, want 0", n)
	}
}

func TestGlob(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true},
		{"*", "anything", true},
		{"**", "", true},
		{"a*", "a", true},
		{"a*", "ba", false},
		{"*a", "ba", true},
		{"*a", "ab", false},
		{"a*a", "a", false}, // prefix and suffix must not overlap
		{"a*a", "aa", true},
		{"a*b*c", "abc", true},
		{"a*b*c", "aXbYc", true},
		{"a*b*c", "acb", false},
		{"a*b*c", "abcbc", true},
		{"*ab*ab*", "abab", true},
		{"*ab*ab*", "aba", false},
		{"x*y", "x*y", true}, // '*' in the value is an ordinary byte
		{"?*", "ab", false},  // no other metacharacters
		{"?*", "?b", true},
		{"[a]*", "a", false},
		{"[a]*", "[a]", true},
		{"é*", "éa", true},
		{strings.Repeat("a*", 20) + "b", strings.Repeat("a", 1000), false},
	} {
		g := compileGlob(tc.pattern)
		if got := g.match(tc.s); got != tc.want {
			t.Errorf("glob %q match %q = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
		if got := globRegexp(tc.pattern).MatchString(tc.s); got != tc.want {
			t.Errorf("test bug: regexp for %q match %q = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

// globRegexp returns a regexp equivalent to a glob pattern, as a reference.
func globRegexp(pattern string) *regexp.Regexp {
	parts := strings.Split(pattern, "*")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile(`(?s)\A` + strings.Join(parts, ".*") + `\z`)
}

func FuzzGlob(f *testing.F) {
	f.Add("a*b*c", "aXbYc")
	f.Add("*ab*ab*", "abab")
	f.Add("a*a", "a")
	f.Fuzz(func(t *testing.T, pattern, s string) {
		// The reference regexp needs UTF-8; glob itself works on bytes.
		if !strings.Contains(pattern, "*") || !utf8.ValidString(pattern) || !utf8.ValidString(s) {
			t.Skip()
		}
		g := compileGlob(pattern)
		if got, want := g.match(s), globRegexp(pattern).MatchString(s); got != want {
			t.Errorf("glob %q match %q = %v, want %v", pattern, s, got, want)
		}
	})
}

func BenchmarkMatch(b *testing.B) {
	d := matchDomain(b)
	for _, bc := range []struct {
		name    string
		entries []*pentry
	}{
		{"exact", []*pentry{{"k", "exact"}}},
		{"wildcard", []*pentry{{"path", "/a/some/longer/path/c"}}},
		{"key-only", []*pentry{{"k", "other"}}},
		{"nested", []*pentry{{"parent", "p"}, {"child", "c"}}},
		{"miss", []*pentry{{"nope", "x"}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if Match(d, bc.entries) == nil && bc.name != "miss" {
						b.Fatal("no match")
					}
				}
			})
		})
	}
}

// TestDomainRulesAll: All yields every rule once, parents first, in the
// documented order, and stops when asked.
func TestDomainRulesAll(t *testing.T) {
	d := matchDomain(t)
	var paths []string
	for r := range d.All() {
		paths = append(paths, r.Path)
	}
	want := []string{
		"k=exact", "k=*act", "k=ex*", "k",
		"nolimit", "nolimit.x",
		"parent=p", "parent=p.child=c", "parent", "parent.other",
		"path=/a/*/c", "path=/a/*", "path=*",
	}
	if strings.Join(paths, " ") != strings.Join(want, " ") {
		t.Errorf("All() paths:\n got %q\nwant %q", paths, want)
	}
	n := 0
	for range d.All() {
		n++
		if n == 2 {
			break
		}
	}
	if n != 2 {
		t.Errorf("All() went on after break: %d rules", n)
	}
	for range (*DomainRules)(nil).All() {
		t.Error("a nil DomainRules yielded a rule")
	}
}
