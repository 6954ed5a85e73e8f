package config

import (
	"crypto/sha256"
	"fmt"
	"hash"
	"os"
	"path/filepath"
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
// they are.
func Load(path string) (*Rules, error) {
	files, err := ruleFiles(path)
	if err != nil {
		return nil, err
	}
	var (
		domains []*Domain
		errs    errorList
		sum     = newDigest()
	)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		sum.add(f, data)
		ds, es := parse(f, data)
		domains = append(domains, ds...)
		errs = append(errs, es...)
	}
	checkDomainNames(domains, &errs)
	if err := errs.err(); err != nil {
		return nil, err
	}
	r, err := compile(domains, files)
	if err != nil {
		return nil, err
	}
	r.digest = sum.String()
	return r, nil
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

// ruleFiles returns the files that Load reads for path.
func ruleFiles(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if !fi.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path) // sorted by name
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var files []string
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || (filepath.Ext(name) != ".yaml" && filepath.Ext(name) != ".yml") {
			continue
		}
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
