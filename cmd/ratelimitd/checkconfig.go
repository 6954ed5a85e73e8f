package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/config"
)

// checkConfig validates the rules at PATH, the last of args, under the
// bounds of the --config-max-* flags among them and with their
// --default-algorithm (or their environment variables), and exits non-zero
// on error.
func checkConfig(args []string, lookup lookupEnv, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ratelimitd check-config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		limits    config.Limits
		algorithm backend.Algorithm
	)
	configLimitFlags(fs, &limits)
	defaultAlgorithmFlag(fs, &algorithm)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ratelimitd check-config [--config-max-* flags] [--default-algorithm A] PATH")
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
	return nil
}

// count returns "1 thing" or "n things".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
