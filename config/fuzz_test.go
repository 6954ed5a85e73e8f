package config

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fuzzLimits keep each run of FuzzParse small: the bounds are what keep
// its memory and time in check, as they keep a server's.
var fuzzLimits = Limits{MaxExpandedBytes: 1 << 20, MaxRules: 10_000, MaxPathBytes: 4 << 20}

// FuzzParse checks that Parse never panics, that what it accepts compiles,
// and that Marshal renders it so that Parse reads it back the same. It
// skips inputs over 64 KiB: the bounds, not the input's size, must keep
// each run small.
func FuzzParse(f *testing.F) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		f.Fatalf("no testdata/*.yaml: %v", err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add(keyBomb())
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64<<10 {
			t.Skip()
		}
		domains, err := Parse("fuzz.yaml", data, WithLimits(fuzzLimits))
		if err != nil {
			loadErrors(t, err) // each an *Error
			return
		}
		if _, err := Compile(domains, WithLimits(fuzzLimits)); err != nil {
			t.Fatalf("Compile(Parse(data)) = %v", err)
		}
		out, err := Marshal(domains)
		if err != nil {
			t.Fatalf("Marshal = %v", err)
		}
		// Marshal expands aliases and indents: the file may be longer.
		again, err := Parse("fuzz.yaml", out, WithLimits(Limits{
			MaxBytes: 1 << 30, MaxExpandedBytes: 1 << 30, MaxRules: fuzzLimits.MaxRules, MaxPathBytes: fuzzLimits.MaxPathBytes,
		}))
		if err != nil {
			t.Fatalf("Parse(Marshal(Parse(data))) = %v\n%s", err, out)
		}
		// cmp takes time exponential in the depth of nested slices:
		// compare without it.
		if !reflect.DeepEqual(withoutSrc(again), withoutSrc(domains)) {
			t.Fatalf("Parse(Marshal(d)) differs from d\ninput:\n%s\nmarshaled:\n%s", data, out)
		}
	})
}

// withoutSrc returns a copy of domains without the places they were
// parsed from, for reflect.DeepEqual.
func withoutSrc(domains []*Domain) []*Domain {
	var descriptors func([]*Descriptor) []*Descriptor
	rateLimit := func(rl *RateLimit) *RateLimit {
		if rl == nil {
			return nil
		}
		c := *rl
		c.src = src{}
		if c.Replaces != nil {
			c.Replaces = slices.Clone(c.Replaces)
			for i := range c.Replaces {
				c.Replaces[i].src = src{}
			}
		}
		return &c
	}
	descriptors = func(list []*Descriptor) []*Descriptor {
		if list == nil {
			return nil
		}
		out := make([]*Descriptor, len(list))
		for i, d := range list {
			c := *d
			c.src = src{}
			c.RateLimit = rateLimit(d.RateLimit)
			if d.RateLimits != nil {
				c.RateLimits = make([]*RateLimit, len(d.RateLimits))
				for j, rl := range d.RateLimits {
					c.RateLimits[j] = rateLimit(rl)
				}
			}
			c.Descriptors = descriptors(d.Descriptors)
			out[i] = &c
		}
		return out
	}
	out := make([]*Domain, len(domains))
	for i, d := range domains {
		out[i] = &Domain{Domain: d.Domain, Descriptors: descriptors(d.Descriptors)}
	}
	return out
}

// TestWithoutSrc checks that withoutSrc tells trees apart as cmp.Diff
// with ignoreSrc does.
func TestWithoutSrc(t *testing.T) {
	parse := func(s string) []*Domain {
		d, err := Parse("f.yaml", []byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	a := parse("domain: d\ndescriptors:\n  - key: k\n    descriptors: [{key: j, rate_limit: {unit: second, replaces: [{name: x}]}}]\n")
	b := parse("# moved\ndomain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - {key: j, rate_limit: {unit: second, replaces: [{name: x}]}}\n")
	c := parse("domain: d\ndescriptors:\n  - key: k\n    descriptors: [{key: j, rate_limit: {unit: second, replaces: [{name: y}]}}]\n")
	if !reflect.DeepEqual(withoutSrc(a), withoutSrc(b)) || cmp.Diff(a, b, ignoreSrc) != "" {
		t.Error("trees that differ in places only are not equal")
	}
	if reflect.DeepEqual(withoutSrc(a), withoutSrc(c)) || cmp.Diff(a, c, ignoreSrc) == "" {
		t.Error("trees that differ in a name deep down are equal")
	}
}

// TestMarshalRoundTrip checks Marshal on strings and metadata values that
// YAML would read as something else if written plainly.
func TestMarshalRoundTrip(t *testing.T) {
	var descriptors []*Descriptor
	for i, v := range []string{
		"*", "~", "null", "true", "no", "1", "1.5", "0x10", "2026-11-22", " spaced ", "a: b", "#x", "- x",
		"&a", "!tag", "%", "@", "`", "line\nbreak", "tab\there", "\xff\xfe", "é*ü", "'", `"`, "{}", "[]",
	} {
		descriptors = append(descriptors, &Descriptor{Key: fmt.Sprintf("k%d", i), Value: v})
	}
	descriptors = append(descriptors, &Descriptor{
		Key: "meta",
		Metadata: map[string]any{
			"big": uint64(math.MaxUint64), "neg": -5, "tiny": 1.5e-7, "huge": 1e300, "half": 0.5,
			"s1": "1e3", "s2": "yes", "s3": "", "nil": nil, "list": []any{}, "map": map[string]any{},
			"nested": map[string]any{"l": []any{1, "2", 3.25, false, nil, map[string]any{"x": "y"}}},
			"1":      "numeric key", "": "empty key",
		},
	})
	domains := []*Domain{{Domain: "round trip", Descriptors: descriptors}, {Domain: "~"}}
	out, err := Marshal(domains)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse("out.yaml", out)
	if err != nil {
		t.Fatalf("Parse(Marshal(domains)) = %v\n%s", err, out)
	}
	if diff := cmp.Diff(got, domains, ignoreSrc); diff != "" {
		t.Errorf("Parse(Marshal(domains)) mismatch (-got +want):\n%s\n%s", diff, out)
	}
}
