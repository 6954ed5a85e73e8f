package compat

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// mostSkipped bounds the files CheckRuleFiles names, and mostVisited the directory entries it looks at.
const (
	mostSkipped = 10
	mostVisited = 10000
)

// CheckRuleFiles reports, as an *Error of RUNTIME_ROOT, the files under dir (Result.Flags["config"], when no
// --config or --xds-server of the operator's replaces it) that the reference loads as rules but ratelimitd does not: the reference reads every
// file of the directory and of its subdirectories, whatever its name, while ratelimitd reads only the *.yaml and
// *.yml files directly in it. Rules in such files would silently not apply. Names that start with '.' are left out,
// with what is under them: ratelimitd never reads them, and a Kubernetes ConfigMap volume's "..data" entries hold
// the same files as its visible ones. A dir that does not exist is not CheckRuleFiles' error (loading reports it).
// A dir that is a symbolic link, as a Kubernetes volume's or the reference's RUNTIME_ROOT swapped by a link often
// is, is checked where it leads.
func CheckRuleFiles(dir string) error {
	// WalkDir does not follow a root that is a link: it would visit the link alone.
	root, err := filepath.EvalSymlinks(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return &Error{Name: "RUNTIME_ROOT", Flag: "config", Err: fmt.Errorf("reading %s: %w", dir, err)}
	}
	skipped, err := unreadRuleFiles(root)
	if err != nil {
		return &Error{Name: "RUNTIME_ROOT", Flag: "config", Err: fmt.Errorf("reading %s: %w", dir, err)}
	}
	if len(skipped) == 0 {
		return nil
	}
	slices.Sort(skipped)
	list := strings.Join(skipped[:min(len(skipped), mostSkipped)], ", ")
	if len(skipped) > mostSkipped {
		list += ", ..."
	}
	return &Error{Name: "RUNTIME_ROOT", Flag: "config", Err: fmt.Errorf("the reference loads rules from files "+
		"under %s that ratelimitd does not read (it reads only *.yaml and *.yml files directly in the directory): %s; "+
		"rename them or move them up", dir, list)}
}

// unreadRuleFiles returns the paths, relative to dir, of the files under dir that the reference reads and
// ratelimitd does not, at most a few more than mostSkipped; see CheckRuleFiles. dir must not be a link.
func unreadRuleFiles(dir string) ([]string, error) {
	var skipped []string
	visited := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		visited++
		if visited > mostVisited || len(skipped) > mostSkipped {
			return fs.SkipAll
		}
		if path == dir {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		ext := filepath.Ext(rel)
		if filepath.Dir(rel) != "." || ext != ".yaml" && ext != ".yml" {
			if isFile(path) {
				skipped = append(skipped, rel)
			}
		}
		return nil
	})
	return skipped, err
}

// isFile reports whether path is, or links to, a regular file: what the reference reads.
func isFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}
