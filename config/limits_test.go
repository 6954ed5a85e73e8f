package config

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// keyBomb returns a rule file of about 264 KB that anchors a 100 KB
// string and aliases it as the key of 200 nested levels. Before
// Limits, checking it took seconds and gigabytes: every compiled rule
// copied its ancestors' keys into its Path.
func keyBomb() []byte {
	var b bytes.Buffer
	b.WriteString("domain: bomb\ndescriptors:\n  - key: root\n    metadata:\n      k: &k \"")
	b.WriteString(strings.Repeat("k", 100_000))
	b.WriteString("\"\n")
	indent := "    "
	for range 200 {
		fmt.Fprintf(&b, "%sdescriptors:\n%s  - key: *k\n", indent, indent)
		indent += "    "
	}
	return b.Bytes()
}

func TestKeyBombRefused(t *testing.T) {
	data := keyBomb()
	_, err := Parse("bomb.yaml", data)
	errs := loadErrors(t, err)
	// At the alias of the 83rd level, the key has come 84 times: over 8 MiB.
	want := "bomb.yaml:171:342: aliases expanded, the rule files are over the maximum 8388608 bytes"
	if len(errs) != 1 || errs[0].Error() != want {
		t.Fatalf("Parse(bomb) = %v, want %q", err, want)
	}

	path := filepath.Join(t.TempDir(), "bomb.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), path+":171:342: aliases expanded, the rule files are over the maximum") {
		t.Errorf("Load(bomb) = %v, want the expansion refused", err)
	}

	// Without the bound on expansion, the key's length refuses it, and
	// nothing below the first long key is compiled.
	_, err = Parse("bomb.yaml", data, WithLimits(Limits{MaxExpandedBytes: 1 << 40}))
	errs = loadErrors(t, err)
	want = "bomb.yaml:5:10: descriptor key is 100000 bytes, over the maximum 1024: no request can match it"
	if len(errs) != 1 || errs[0].Error() != want {
		t.Errorf("Parse(bomb, no expansion bound) = %v, want %q", err, want)
	}
}

// BenchmarkCheckKeyBomb is what checking the file of TestKeyBombRefused
// costs: time and bytes allocated per check.
func BenchmarkCheckKeyBomb(b *testing.B) {
	data := keyBomb()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("bomb.yaml", data); err == nil {
			b.Fatal("Parse(bomb) = nil error")
		}
	}
}

// nested returns a domain whose tree is depth levels deep, with key k at
// the last level.
func nested(depth int, k string) string {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	indent := "  "
	for i := range depth {
		key := fmt.Sprintf("k%d", i)
		if i == depth-1 {
			key = k
		}
		fmt.Fprintf(&b, "%s- key: %s\n%s  descriptors:\n", indent, key, indent)
		indent += "    "
	}
	return b.String()
}

func TestRequestBounds(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       string // "" for no error
	}{
		{"32 levels", nested(MaxDepth, "last"), ""},
		{"33 levels", nested(MaxDepth+1, "last"), "f.yaml:67:133: descriptors nested more than 32 levels deep"},
		{"key of 1024 bytes", nested(2, strings.Repeat("x", MaxKeyBytes)), ""},
		{"key over 1024 bytes", nested(2, strings.Repeat("x", MaxKeyBytes+1)), "f.yaml:5:14: descriptor key is 1025 bytes, over the maximum 1024"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(tc.data))
			errs := loadErrors(t, err)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Parse = %v, want nil", err)
			case tc.want != "" && (len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), tc.want)):
				t.Errorf("Parse = %v, want one error starting %q", err, tc.want)
			}
		})
	}
}

// TestLimits checks each bound of Limits, on Parse, Compile and Load.
func TestLimits(t *testing.T) {
	three := "domain: d\ndescriptors:\n  - key: a\n  - key: b\n    descriptors:\n      - key: c\n"
	wildcards := "domain: d\ndescriptors:\n  - {key: p, value: a*}\n  - {key: p, value: b}\n  - {key: p, value: c*}\n  - {key: q, value: d*}\n"
	aliased := "domain: d\ndescriptors:\n  - key: a\n    metadata: {x: &x 0123456789, y: [*x, *x, *x, *x]}\n"
	for _, tc := range []struct {
		name   string
		limits Limits
		data   string
		want   string // the whole error, or "" for none
	}{
		{"rules within", Limits{MaxRules: 3}, three, ""},
		{"rules over", Limits{MaxRules: 2}, three, "f.yaml:6:9: domain has more than 2 descriptors"},
		{"file within", Limits{MaxBytes: int64(len(three))}, three, ""},
		{"file over", Limits{MaxBytes: int64(len(three)) - 1}, three, fmt.Sprintf("f.yaml: file is over the maximum %d bytes", len(three)-1)},
		// Each node its text plus one: the document's mapping 1, domain 7,
		// d 2, descriptors 12, sequence 1, mapping 1, key 4, a 2,
		// metadata 9, mapping 1, x 2, 0123456789 11, y 2, sequence 1,
		// and 4 × 11 for the aliases of 0123456789: 100.
		{"expanded within", Limits{MaxExpandedBytes: 100}, aliased, ""},
		{"expanded over", Limits{MaxExpandedBytes: 99}, aliased, "f.yaml:4:50: aliases expanded, the rule files are over the maximum 99 bytes"},
		// Paths "a", "b", "b.c": 5 bytes.
		{"paths within", Limits{MaxPathBytes: 5}, three, ""},
		{"wildcards within", Limits{MaxWildcards: 2}, wildcards, ""},
		{"wildcards over", Limits{MaxWildcards: 1}, wildcards, `f.yaml:5:5: key "p" has more than 1 wildcard values at this level`},
		{"paths over", Limits{MaxPathBytes: 4}, three, "f.yaml:6:9: the paths of the domain's rules are over the maximum 4 bytes in all (a rule's path repeats the keys and values of the rules above it)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(tc.data), WithLimits(tc.limits))
			if got := errorString(err); (tc.want == "" && err != nil) || (tc.want != "" && got != tc.want) {
				t.Errorf("Parse = %s, want %q", got, tc.want)
			}
			loadErrors(t, err)
		})
	}
}

func TestLimitsSecondDocument(t *testing.T) {
	// The expansion bound is on the whole file: the second document
	// passes it.
	doc := "domain: d%d\ndescriptors:\n  - key: a\n    metadata: {x: &x 0123456789, y: [*x, *x, *x, *x]}\n"
	data := fmt.Sprintf(doc, 1) + "---\n" + fmt.Sprintf(doc, 2)
	_, err := Parse("f.yaml", []byte(data), WithLimits(Limits{MaxExpandedBytes: 199}))
	if got, want := errorString(err), "f.yaml:9:50: aliases expanded, the rule files are over the maximum 199 bytes"; got != want {
		t.Errorf("Parse = %s, want %q", got, want)
	}
}

func TestCompileLimits(t *testing.T) {
	domains := []*Domain{{Domain: "d", Descriptors: []*Descriptor{{Key: "a"}, {Key: "b", Descriptors: []*Descriptor{{Key: "c"}}}}}}
	if _, err := Compile(domains, WithLimits(Limits{MaxRules: 3})); err != nil {
		t.Errorf("Compile(3 rules, MaxRules 3) = %v", err)
	}
	if got, want := errorString(func() error { _, err := Compile(domains, WithLimits(Limits{MaxRules: 2})); return err }()),
		"domain has more than 2 descriptors"; got != want {
		t.Errorf("Compile(3 rules, MaxRules 2) = %s, want %q", got, want)
	}
	deep := &Descriptor{Key: "k"}
	for range MaxDepth {
		deep = &Descriptor{Key: "k", Descriptors: []*Descriptor{deep}}
	}
	_, err := Compile([]*Domain{{Domain: "d", Descriptors: []*Descriptor{deep}}})
	if got, want := errorString(err), "descriptors nested more than 32 levels deep"; !strings.HasPrefix(got, want) {
		t.Errorf("Compile(33 levels) = %s, want %q...", got, want)
	}
	_, err = Compile([]*Domain{{Domain: "d", Descriptors: []*Descriptor{{Key: strings.Repeat("k", MaxKeyBytes+1)}}}})
	if got, want := errorString(err), "descriptor key is 1025 bytes, over the maximum 1024"; !strings.HasPrefix(got, want) {
		t.Errorf("Compile(long key) = %s, want %q...", got, want)
	}
	_, err = Compile([]*Domain{{Domain: "d", Descriptors: []*Descriptor{nil, {Key: "k", RateLimits: []*RateLimit{nil}}}}})
	if got, want := errorString(err), "nil descriptor\nrate_limits[0] is nil"; got != want {
		t.Errorf("Compile(nil parts) = %q, want %q", got, want)
	}
}

func TestLoadMaxFiles(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"a.yaml": "domain: a\n", "b.yml": "domain: b\n", "c.yaml": "domain: c\n",
		"notes.txt": "", ".hidden.yaml": "", // not counted
	})
	if _, err := Load(dir, WithLimits(Limits{MaxFiles: 3})); err != nil {
		t.Errorf("Load(3 files, MaxFiles 3) = %v", err)
	}
	_, err := Load(dir, WithLimits(Limits{MaxFiles: 2}))
	errs := loadErrors(t, err)
	if want := dir + ": directory has more than 2 rule files (*.yaml, *.yml)"; len(errs) != 1 || errs[0].Error() != want {
		t.Errorf("Load(3 files, MaxFiles 2) = %v, want %q", err, want)
	}
}

// TestLoadMaxBytes: the bounds on bytes are on all the files of a
// directory together.
func TestLoadMaxBytes(t *testing.T) {
	dir := t.TempDir()
	doc := "domain: %s\ndescriptors:\n  - key: a\n    metadata: {x: &x 0123456789, y: [*x, *x, *x, *x]}\n"
	a, b := fmt.Sprintf(doc, "a"), fmt.Sprintf(doc, "b") // each 100 bytes expanded
	writeFiles(t, dir, map[string]string{"a.yaml": a, "b.yaml": b})
	for _, tc := range []struct {
		limits Limits
		want   string
	}{
		{Limits{MaxBytes: int64(len(a) + len(b))}, ""},
		{Limits{MaxBytes: 5}, filepath.Join(dir, "a.yaml") + ": file is over the maximum 5 bytes"},
		{Limits{MaxBytes: int64(len(a) + len(b) - 1)}, filepath.Join(dir, "b.yaml") + fmt.Sprintf(": rule files are over the maximum %d bytes together", len(a)+len(b)-1)},
		{Limits{MaxExpandedBytes: 200}, ""},
		{Limits{MaxExpandedBytes: 199}, filepath.Join(dir, "b.yaml") + ":4:50: aliases expanded, the rule files are over the maximum 199 bytes"},
	} {
		_, err := Load(dir, WithLimits(tc.limits))
		if got := errorString(err); (tc.want == "" && err != nil) || (tc.want != "" && got != tc.want) {
			t.Errorf("Load(%+v) = %s, want %q", tc.limits, got, tc.want)
		}
	}
}

func TestDefaultLimits(t *testing.T) {
	want := Limits{MaxBytes: 4 << 20, MaxExpandedBytes: 8 << 20, MaxRules: 100_000, MaxFiles: 1000, MaxPathBytes: 64 << 20, MaxWildcards: 1000}
	if got := DefaultLimits(); got != want {
		t.Errorf("DefaultLimits() = %+v, want %+v", got, want)
	}
	if got := (Limits{MaxRules: 7, MaxFiles: -1}).orDefaults(); got.MaxRules != 7 || got.MaxFiles != DefaultMaxFiles || got.MaxPathBytes != DefaultMaxPathBytes {
		t.Errorf("orDefaults() = %+v, want MaxRules 7 and the other defaults", got)
	}
}

// TestErrorsKept: errors past maxKept are counted, not kept.
func TestErrorsKept(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	for range maxKept + 500 {
		b.WriteString("  - {}\n")
	}
	c := &compiler{limits: DefaultLimits()}
	for _, d := range decode("many.yaml", []byte(b.String()), c.limits, newBudget(c.limits), &c.errs) {
		c.domain(d)
	}
	if len(c.errs.list) != maxKept || c.errs.dropped != 500 {
		t.Errorf("kept %d errors and dropped %d, want %d and 500", len(c.errs.list), c.errs.dropped, maxKept)
	}
	errs := loadErrors(t, c.errs.err())
	if got, want := errs[len(errs)-1].Error(), fmt.Sprintf("too many errors: %d more not shown", maxKept+500-maxErrors); got != want {
		t.Errorf("last error = %q, want %q", got, want)
	}
}
