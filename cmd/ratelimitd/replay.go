package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/server/overrides"
	"github.com/ratelimitd/ratelimitd/server/requestlog/replay"
)

// replayCommand replays the request log at LOG, the last of args ("-":
// standard input), against the rules of --old and --new, and reports the
// requests decided differently. It exits 0 whatever it finds, 1 when the
// rules or the log cannot be read, 2 on bad usage.
func replayCommand(ctx context.Context, args []string, lookup lookupEnv, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ratelimitd replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		limits           config.Limits
		algorithm        backend.Algorithm
		oldPath, newPath string
		asJSON, strict   bool
		maxKeys          int
		by               string
		ovFile           string
		maxOverrides     int
		ropts            replay.Options
	)
	configLimitFlags(fs, &limits)
	defaultAlgorithmFlag(fs, &algorithm)
	fs.StringVar(&oldPath, "old", "", "the rules in force: a YAML `file` or a directory, as --config")
	fs.StringVar(&newPath, "new", "", "the rules to compare with them: a YAML `file` or a directory")
	fs.BoolVar(&asJSON, "json", false, "write the report as JSON")
	fs.BoolVar(&strict, "strict", false, "stop at the first line that cannot be decoded or is out of order (by default such lines are skipped and counted, as is a last line\n"+
		"without a newline, and lines out of order counted)")
	fs.DurationVar(&ropts.OrderTolerance, "order-tolerance", replay.DefaultOrderTolerance, "how far a line's time may be before an earlier line's and count as in order (a daemon's log is a little out of order)")
	fs.DurationVar(&ropts.Warmup, "warmup", 0, "replay the log's first `DURATION` to fill the counters, without comparing its decisions")
	fs.StringVar(&by, "by", "rule", "also break the differences down by: rule (only), or descriptor (the descriptors whose decision changed most, see --top)")
	fs.IntVar(&ropts.TopDescriptors, "top", 20, "with --by descriptor, how many descriptors to report (0: all)")
	fs.IntVar(&ropts.MaxDescriptors, "by-max-descriptors", replay.DefaultMaxDescriptors, "with --by descriptor, most distinct descriptors counted; changes of others are counted apart")
	overridesFileFlags(fs, &ovFile, &maxOverrides, "the runtime overrides in force under both rule sets")
	fs.IntVar(&maxKeys, "memory-max-keys", memory.DefaultMaxKeys, "most counters each rule set's memory store keeps")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ratelimitd replay --old RULES --new RULES [--json] [--strict] [--warmup D] [--by descriptor [--top N]] [--overrides FILE] [--default-algorithm A] [--config-max-* flags] LOG")
		fmt.Fprintln(stderr, "Replays a --request-log file (\"-\": standard input) against both rule sets, and reports the requests decided differently.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitError{0}
		}
		return exitError{2}
	}
	if fs.NArg() != 1 || oldPath == "" || newPath == "" {
		fs.Usage()
		return exitError{2}
	}
	if _, err := setFromEnv(fs, lookup); err != nil {
		fmt.Fprintln(stderr, "ratelimitd:", err)
		return exitError{2}
	}
	switch {
	case by != "rule" && by != "descriptor":
		fmt.Fprintf(stderr, "ratelimitd replay: --by %q: want rule or descriptor\n", by)
		return exitError{2}
	case ropts.Warmup < 0 || ropts.OrderTolerance < 0 || ropts.TopDescriptors < 0 || ropts.MaxDescriptors < 1:
		fmt.Fprintln(stderr, "ratelimitd replay: --warmup, --order-tolerance and --top must not be negative, --by-max-descriptors must be positive")
		return exitError{2}
	}
	opts := []config.Option{config.WithLimits(limits), config.WithDefaultAlgorithm(algorithm)}
	old, err := config.Load(oldPath, opts...)
	if err != nil {
		fmt.Fprintln(stderr, "ratelimitd replay: --old:", err)
		return exitError{1}
	}
	neu, err := config.Load(newPath, opts...)
	if err != nil {
		fmt.Fprintln(stderr, "ratelimitd replay: --new:", err)
		return exitError{1}
	}
	if ovFile != "" {
		if ropts.Overrides, err = overrides.ReadFile(ovFile, maxOverrides, opts...); err != nil {
			fmt.Fprintln(stderr, "ratelimitd replay: --overrides:", err)
			return exitError{1}
		}
	}
	name, in := fs.Arg(0), stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(stderr, "ratelimitd replay:", err)
			return exitError{1}
		}
		defer f.Close()
		in = f
	}
	ropts.Old, ropts.New, ropts.MaxKeys, ropts.Name, ropts.Strict, ropts.ByDescriptor = old, neu, maxKeys, name, strict, by == "descriptor"
	rep, err := replay.Run(ctx, in, ropts)
	if err != nil {
		fmt.Fprintln(stderr, "ratelimitd replay:", err)
		return exitError{1}
	}
	if asJSON {
		return rep.WriteJSON(stdout)
	}
	return rep.WriteText(stdout)
}
