package config

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Load reads the rules at path and compiles them. path is one YAML file,
// whatever its name, or a directory whose *.yaml and *.yml entries load as
// one set, sorted by name. In a directory, Load follows symbolic links,
// skips names that start with '.' (so the "..data" and "..2026_01_02..."
// entries of a Kubernetes ConfigMap volume are not read twice), skips
// subdirectories, and does not recurse. An empty directory yields Rules
// with no domains.
//
// An invalid file fails the whole load: Load then returns every error of
// every file (at most 20, then one that says how many more), each an
// *Error, joined with errors.Join. Errors reading files are returned as
// they are. Its work is bounded by DefaultLimits, or by the Limits of a
// WithLimits option: a directory with too many rule files, or a file too
// large, is an *Error too.
func Load(path string, opts ...Option) (*Rules, error) {
	o := buildOptions(opts)
	files, err := ruleFiles(path, o.limits.MaxFiles)
	if err != nil {
		return nil, err
	}
	var (
		domains  []*Domain
		compiled []*DomainRules
		sum      = newDigest()
		c        = &compiler{limits: o.limits, algorithm: o.algorithm}
		left     = newBudget(o.limits)
	)
	for _, f := range files {
		data, err := readFile(f, left.bytes)
		if err != nil {
			return nil, err
		}
		sum.add(f, data)
		ds := decode(f, data, o.limits, left, &c.errs)
		for _, d := range ds {
			compiled = append(compiled, c.domain(d))
		}
		domains = append(domains, ds...)
		if left.bytes < 0 {
			break // past a bound of Limits on all files: read no more
		}
	}
	r, err := c.finish(domains, compiled, files)
	if err != nil {
		return nil, err
	}
	r.digest = sum.String()
	return r, nil
}

// readFile reads the file name, but not more than max+1 bytes of it: a
// longer file is refused anyway, for its length (see Limits.MaxBytes).
func readFile(name string, max int64) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return data, nil
}

// A digest fingerprints a set of rule files, names and contents, so a
// Watcher can tell whether they changed since some Rules were loaded.
type digest struct{ h hash.Hash }

func newDigest() digest { return digest{sha256.New()} }

func (d digest) add(name string, data []byte) {
	fmt.Fprintf(d.h, "%d:%s%d:", len(name), name, len(data))
	d.h.Write(data)
}

func (d digest) String() string { return string(d.h.Sum(nil)) }

// ruleFiles returns the files that Load reads for path: an *Error if a
// directory has more than maxFiles of them. Its memory does not grow with
// the directory's other entries.
func ruleFiles(path string, maxFiles int) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if !fi.IsDir() {
		return []string{path}, nil
	}
	dir, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer dir.Close()
	var names []string
	for {
		entries, err := dir.ReadDir(256)
		for _, e := range entries {
			if name := e.Name(); isRuleFile(name) {
				names = append(names, name)
			}
		}
		if len(names) > maxFiles {
			errs := errorList{list: []*Error{{File: path, Msg: fmt.Sprintf("directory has more than %d rule files (*.yaml, *.yml)", maxFiles)}}}
			return nil, errs.err()
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
	}
	slices.Sort(names)
	var files []string
	for _, name := range names {
		f := filepath.Join(path, name)
		fi, err := os.Stat(f) // follows symbolic links
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		if fi.Mode().IsRegular() {
			files = append(files, f)
		}
	}
	return files, nil
}

// isRuleFile reports whether Load reads the directory entry name: a
// *.yaml or *.yml name that does not start with '.'.
func isRuleFile(name string) bool {
	ext := filepath.Ext(name)
	return !strings.HasPrefix(name, ".") && (ext == ".yaml" || ext == ".yml")
}
