package compat_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/cmd/ratelimitd/internal/compat"
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

// TestCheckRuleFilesLinkedDir: a rules directory reached through a link, as the reference's RUNTIME_ROOT swapped by
// a link or a Kubernetes volume is, is checked where the link leads, and named as given.
func TestCheckRuleFilesLinkedDir(t *testing.T) {
	root := t.TempDir()
	write(t, root, "v1/config/a.yaml", "v1/config/limits.json")
	current := filepath.Join(root, "current")
	if err := os.Symlink("v1", current); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(current, "config")
	err := compat.CheckRuleFiles(dir)
	if err == nil || !strings.Contains(err.Error(), "limits.json") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("CheckRuleFiles(%s) = %v, want an error naming %s and limits.json", dir, err, dir)
	}
	// The directory itself a link.
	link := filepath.Join(root, "config")
	if err := os.Symlink(filepath.Join("v1", "config"), link); err != nil {
		t.Fatal(err)
	}
	if err := compat.CheckRuleFiles(link); err == nil || !strings.Contains(err.Error(), "limits.json") {
		t.Errorf("CheckRuleFiles(%s) = %v, want an error naming limits.json", link, err)
	}
	if err := compat.CheckRuleFiles(filepath.Join(root, "gone")); err != nil {
		t.Errorf("missing directory: %v", err)
	}
}
