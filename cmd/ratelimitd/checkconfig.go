package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/server/overrides"
)

// checkConfig validates the rules at PATH, the last of args, under the
// bounds of the --config-max-* flags among them and with their
// --default-algorithm (or their environment variables), and exits non-zero
// on error.
func checkConfig(args []string, lookup lookupEnv, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ratelimitd check-config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		limits       config.Limits
		algorithm    backend.Algorithm
		ovFile       string
		maxOverrides int
	)
	configLimitFlags(fs, &limits)
	defaultAlgorithmFlag(fs, &algorithm)
	overridesFileFlags(fs, &ovFile, &maxOverrides, "runtime overrides to check, and to match against the rules")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ratelimitd check-config [--config-max-* flags] [--default-algorithm A] [--overrides FILE] PATH")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitError{0}
		}
		return exitError{2}
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return exitError{2}
	}
	if _, err := setFromEnv(fs, lookup); err != nil {
		fmt.Fprintln(stderr, "ratelimitd:", err)
		return exitError{2}
	}
	path := fs.Arg(0)
	rules, err := config.Load(path, config.WithLimits(limits), config.WithDefaultAlgorithm(algorithm))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitError{1}
	}
	fmt.Fprintf(stdout, "%s: ok (%s in %s)\n", path, count(len(rules.Domains()), "domain"), count(len(rules.Files()), "file"))
	if ovFile != "" {
		return checkOverrides(ovFile, maxOverrides, rules, algorithm, stdout, stderr)
	}
	return nil
}

// overridesFileFlags defines --overrides (what names the file's use) and
// --max-overrides on fs.
func overridesFileFlags(fs *flag.FlagSet, file *string, max *int, what string) {
	fs.StringVar(file, "overrides", "", "`file` of "+what+": GET /v1/overrides's answer")
	fs.IntVar(max, "max-overrides", overrides.DefaultMax, "most overrides the --overrides file may hold")
}

// checkOverrides checks the overrides file at path as a daemon would read
// it, and names those that no rule of rules matches (which is not an
// error: they apply once a rule matches them).
func checkOverrides(path string, max int, rules *config.Rules, algorithm backend.Algorithm, stdout, stderr io.Writer) error {
	set, err := overrides.ReadFile(path, max, config.WithDefaultAlgorithm(algorithm))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitError{1}
	}
	var unmatched []overrides.Override
	for _, o := range set.Overrides {
		if !overrides.Matches(rules, o.Domain, o.Entries) {
			unmatched = append(unmatched, o)
		}
	}
	fmt.Fprintf(stdout, "%s: ok (%s, %d unmatched)\n", path, count(len(set.Overrides), "override"), len(unmatched))
	for _, o := range unmatched {
		fmt.Fprintf(stdout, "  unmatched: domain %q, %s\n", o.Domain, entriesText(o.Entries))
	}
	return nil
}

// entriesText renders entries as key=value, comma-separated, quoted
// where needed.
func entriesText(entries []overrides.Entry) string {
	parts := make([]string, len(entries))
	for i, e := range entries {
		parts[i] = strconv.Quote(e.Key) + "=" + strconv.Quote(e.Value)
	}
	return strings.Join(parts, ", ")
}

// count returns "1 thing" or "n things".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
