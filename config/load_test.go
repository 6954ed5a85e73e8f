package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ratelimitd/ratelimitd/backend"
)

// writeFiles writes files (name → content) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func domainNames(r *Rules) []string {
	var names []string
	for _, d := range r.Domains() {
		names = append(names, d.Domain)
	}
	return names
}

func TestLoadDirectory(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"b.yml":  "domain: b1\n---\ndomain: b2\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
		"a.yaml": "domain: a\n",
		// Not loaded:
		".hidden.yaml":     "domain: hidden\n",
		"notes.txt":        "not yaml",
		"sub.yaml/c.yaml":  "domain: nested\n",
		"sub/d.yaml":       "domain: nested2\n",
		"README.md":        "# rules\n",
		"backup.yaml.orig": "domain: orig\n",
	})
	rules, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rules.Files(), []string{filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yml")}); diff != "" {
		t.Errorf("Files() mismatch (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(domainNames(rules), []string{"a", "b1", "b2"}); diff != "" {
		t.Errorf("Domains() mismatch (-got +want):\n%s", diff)
	}
	r := Match(rules.Domain("b2"), []entry{{"k", "v"}})
	if r == nil || r.File != filepath.Join(dir, "b.yml") || r.Line != 5 {
		t.Errorf("Match(b2, k=v) = %+v, want the rule at b.yml:5", r)
	}
	if rules.Domain("hidden") != nil || rules.Domain("nested") != nil {
		t.Error("Load read a hidden file or a subdirectory")
	}
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.conf") // any extension
	writeFiles(t, dir, map[string]string{"rules.conf": "domain: only\n"})
	rules, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rules.Files(), []string{path}); diff != "" {
		t.Errorf("Files() mismatch (-got +want):\n%s", diff)
	}
	if rules.Domain("only") == nil || rules.Domain("only").Name() != "only" {
		t.Error(`Domain("only") is missing`)
	}
}

func TestLoadBadFile(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"good.yaml": "domain: good\n",
		"bad.yaml":  "domain: bad\ndescriptors:\n  - key: k\n    rate_limit: {unit: lustrum, requests_per_unit: 1}\n",
		"worse.yml": "domain: worse\ndescriptors: [{value: v}]\n",
	})
	rules, err := Load(dir)
	if rules != nil {
		t.Errorf("Load returned rules with an error")
	}
	want := filepath.Join(dir, "bad.yaml") + `:4:24: unknown unit "lustrum"`
	errs := loadErrors(t, err)
	if len(errs) != 2 || !strings.Contains(errs[0].Error(), want) {
		t.Fatalf("Load = %v, want 2 errors, the first containing %q", err, want)
	}
	if got, want := errs[1].Error(), filepath.Join(dir, "worse.yml")+":2:15: descriptor has no key"; got != want {
		t.Errorf("second error = %q, want %q", got, want)
	}
}

func TestLoadDuplicateDomain(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"a.yaml": "domain: x\n",
		"b.yaml": "domain: y\n---\ndomain: x\n",
	})
	_, err := Load(dir)
	want := filepath.Join(dir, "b.yaml") + `:3:9: duplicate domain "x" (first at ` + filepath.Join(dir, "a.yaml") + ":1)"
	if got := errorString(err); got != want {
		t.Errorf("Load = %q, want %q", got, want)
	}
}

func TestLoadEmptyDirectory(t *testing.T) {
	rules, err := Load(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(rules.Domains()) != 0 || len(rules.Files()) != 0 || rules.Domain("x") != nil {
		t.Errorf("Load(empty) = %v domains, %v files; want none", rules.Domains(), rules.Files())
	}
}

func TestLoadMissing(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want fs.ErrNotExist", err)
	}
	dir := t.TempDir()
	if err := os.Symlink("gone.yaml", filepath.Join(dir, "dangling.yaml")); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(dangling symlink) = %v, want fs.ErrNotExist", err)
	}
}

// TestLoadConfigMap loads the layout of a Kubernetes ConfigMap volume:
// dir/..data -> ..2026_11_22_10_00_00.123, dir/rules.yaml -> ..data/rules.yaml.
func TestLoadConfigMap(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"..2026_11_22_10_00_00.123/rules.yaml": "domain: cm\n",
		"..2026_11_22_10_00_00.123/more.yml":   "domain: cm2\n",
	})
	for _, l := range []struct{ target, name string }{
		{"..2026_11_22_10_00_00.123", "..data"},
		{"..data/rules.yaml", "rules.yaml"},
		{"..data/more.yml", "more.yml"},
	} {
		if err := os.Symlink(l.target, filepath.Join(dir, l.name)); err != nil {
			t.Fatal(err)
		}
	}
	rules, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rules.Files(), []string{filepath.Join(dir, "more.yml"), filepath.Join(dir, "rules.yaml")}); diff != "" {
		t.Errorf("Files() mismatch (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(domainNames(rules), []string{"cm2", "cm"}); diff != "" {
		t.Errorf("Domains() mismatch (-got +want):\n%s", diff)
	}
}

// TestLoadDefaultAlgorithm checks that WithDefaultAlgorithm sets the
// algorithm of the limits that name none, and only theirs.
func TestLoadDefaultAlgorithm(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"r.yaml": `domain: d
descriptors:
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: named
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: sliding_log}
`})
	algorithms := func(r *Rules) [2]backend.Algorithm {
		t.Helper()
		var got [2]backend.Algorithm
		for i, key := range []string{"plain", "named"} {
			rule := Match(r.Domain("d"), []entry{{key, "x"}})
			if rule == nil || len(rule.Limits) != 1 {
				t.Fatalf("Match(d, %s=x) = %+v, want a rule with one limit", key, rule)
			}
			got[i] = rule.Limits[0].Limit.Algorithm
		}
		return got
	}
	rules, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := algorithms(rules), [2]backend.Algorithm{backend.SlidingWindow, backend.SlidingLog}; got != want {
		t.Errorf("without the option: algorithms %v, want %v", got, want)
	}
	rules, err = Load(dir, WithDefaultAlgorithm(backend.FixedWindow))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := algorithms(rules), [2]backend.Algorithm{backend.FixedWindow, backend.SlidingLog}; got != want {
		t.Errorf("WithDefaultAlgorithm(fixed_window): algorithms %v, want %v", got, want)
	}
}
