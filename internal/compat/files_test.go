package compat_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/compat"
)

// write creates the files under dir, each path relative and '/'-separated.
func write(t *testing.T, dir string, paths ...string) {
	t.Helper()
	for _, p := range paths {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte("domain: d\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCheckRuleFiles(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a.yaml", "b.yml", ".hidden.conf", "..2026_01_01/rules.yaml", ".git/config")
	if err := os.Symlink("..2026_01_01", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/rules.yaml", filepath.Join(dir, "rules.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := compat.CheckRuleFiles(dir); err != nil {
		t.Fatalf("only files ratelimitd reads: %v", err)
	}
	write(t, dir, "limits.json", "team/x.yaml", "README")
	err := compat.CheckRuleFiles(dir)
	ce, ok := errors.AsType[*compat.Error](err)
	if !ok || ce.Name != "RUNTIME_ROOT" || ce.Flag != "config" {
		t.Fatalf("error %v, want RUNTIME_ROOT's, moot with --config", err)
	}
	if !strings.Contains(err.Error(), "README, limits.json, "+filepath.Join("team", "x.yaml")+";") {
		t.Errorf("error %q does not name the three files", err)
	}
	// Many: a bounded list.
	for i := range 30 {
		write(t, dir, filepath.Join("many", strings.Repeat("f", i+1)))
	}
	if err := compat.CheckRuleFiles(dir); err == nil || !strings.Contains(err.Error(), ", ...;") {
		t.Errorf("many files: %v", err)
	}
	if err := compat.CheckRuleFiles(filepath.Join(dir, "missing")); err != nil {
		t.Errorf("missing directory: %v", err)
	}
}
