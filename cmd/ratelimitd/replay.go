package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/replay"
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
	)
	configLimitFlags(fs, &limits)
	defaultAlgorithmFlag(fs, &algorithm)
	fs.StringVar(&oldPath, "old", "", "the rules in force: a YAML `file` or a directory, as --config")
	fs.StringVar(&newPath, "new", "", "the rules to compare with them: a YAML `file` or a directory")
	fs.BoolVar(&asJSON, "json", false, "write the report as JSON")
	fs.BoolVar(&strict, "strict", false, "stop at the first line that cannot be decoded (by default such lines are skipped and counted, as is a last line without a newline)")
	fs.IntVar(&maxKeys, "memory-max-keys", memory.DefaultMaxKeys, "most counters each rule set's memory store keeps")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ratelimitd replay --old RULES --new RULES [--json] [--strict] [--default-algorithm A] [--config-max-* flags] LOG")
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
	rep, err := replay.Run(ctx, in, replay.Options{Old: old, New: neu, MaxKeys: maxKeys, Name: name, Strict: strict})
	if err != nil {
		fmt.Fprintln(stderr, "ratelimitd replay:", err)
		return exitError{1}
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return writeReport(stdout, rep)
}

// directionTitles head the text report's sections.
var directionTitles = map[string]string{
	replay.NewlyRefused:  "Newly refused (admitted by --old, refused by --new), by the new rule that refuses:",
	replay.NewlyAdmitted: "Newly admitted (refused by --old, admitted by --new), by the old rule that refused:",
	replay.ErrorChanged:  "Decided by one rule set, refused as invalid by the other:",
}

// writeReport writes rep as text.
func writeReport(w io.Writer, rep *replay.Report) error {
	fmt.Fprintf(w, "Replayed %d requests", rep.Requests)
	if rep.Requests > 0 {
		fmt.Fprintf(w, " from %s to %s (%s)", rep.First.Format("2006-01-02T15:04:05.000Z07:00"), rep.Last.Format("2006-01-02T15:04:05.000Z07:00"), rep.Last.Sub(rep.First))
	}
	fmt.Fprintf(w, ".\n%d decided differently: %d newly refused, %d newly admitted, %d error changed.\n",
		rep.Differ, rep.NewlyRefused, rep.NewlyAdmitted, rep.ErrorChanged)
	if rep.OldErrors > 0 || rep.NewErrors > 0 {
		fmt.Fprintf(w, "Invalid requests: %d under --old, %d under --new.\n", rep.OldErrors, rep.NewErrors)
	}
	writeSkipped(w, rep)
	last := ""
	for _, r := range rep.Rules {
		if r.Direction != last {
			fmt.Fprintf(w, "\n%s\n", directionTitles[r.Direction])
			last = r.Direction
		}
		rule := r.Rule
		switch {
		case r.Direction == replay.ErrorChanged:
			rule = "(invalid request)"
		case rule == "":
			rule = "(no rule: the request's own limit)"
		case r.File != "":
			rule = fmt.Sprintf("%s  (%s:%d)", rule, r.File, r.Line)
		}
		if _, err := fmt.Fprintf(w, "%10d  %s\n", r.Requests, rule); err != nil {
			return err
		}
	}
	return nil
}

// writeSkipped writes the lines of the log rep skipped, if any.
func writeSkipped(w io.Writer, rep *replay.Report) {
	if rep.BadLines > 0 {
		lines := make([]string, len(rep.FirstBadLines))
		for i, n := range rep.FirstBadLines {
			lines[i] = strconv.Itoa(n)
		}
		more := ""
		if rep.BadLines > len(rep.FirstBadLines) {
			more = ", ..."
		}
		fmt.Fprintf(w, "Skipped %d lines that could not be decoded (lines %s%s); the first: %s\n",
			rep.BadLines, strings.Join(lines, ", "), more, rep.FirstBadError)
	}
	if rep.PartialLine > 0 {
		fmt.Fprintf(w, "Skipped line %d, the last, which has no newline (the log was being written).\n", rep.PartialLine)
	}
}
