package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// directionTitles head the text report's sections.
var directionTitles = map[string]string{
	NewlyRefused:  "Newly refused (admitted by --old, refused by --new), by the new rule that refuses:",
	NewlyAdmitted: "Newly admitted (refused by --old, admitted by --new), by the old rule that refused:",
	ErrorChanged:  "Decided by one rule set, refused as invalid by the other:",
}

// timeFormat is how the text report shows times.
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

// WriteJSON writes rep as indented JSON, for programs.
func (rep *Report) WriteJSON(out io.Writer) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteText writes rep as text, for people.
func (rep *Report) WriteText(out io.Writer) error {
	w := &errWriter{w: out}
	fmt.Fprintf(w, "Replayed %d requests", rep.Requests)
	if rep.Requests > 0 {
		fmt.Fprintf(w, " from %s to %s (%s)", rep.First.Format(timeFormat), rep.Last.Format(timeFormat), rep.Last.Sub(rep.First))
	}
	if rep.WarmupRequests > 0 {
		fmt.Fprintf(w, ", after %d of the warmup, not compared", rep.WarmupRequests)
	}
	fmt.Fprintf(w, ".\n%d decided differently: %d newly refused, %d newly admitted, %d error changed.\n",
		rep.Differ, rep.NewlyRefused, rep.NewlyAdmitted, rep.ErrorChanged)
	if rep.OldErrors > 0 || rep.NewErrors > 0 {
		fmt.Fprintf(w, "Invalid requests: %d under --old, %d under --new.\n", rep.OldErrors, rep.NewErrors)
	}
	rep.writeSkipped(w)
	last := ""
	for _, r := range rep.Rules {
		if r.Direction != last {
			fmt.Fprintf(w, "\n%s\n", directionTitles[r.Direction])
			last = r.Direction
		}
		rule := r.Rule
		switch {
		case r.Direction == ErrorChanged:
			rule = "(invalid request)"
		case rule == "":
			rule = "(no rule: the request's own limit)"
		case r.File != "":
			rule = fmt.Sprintf("%s  (%s:%d)", rule, r.File, r.Line)
		}
		fmt.Fprintf(w, "%10d  %s\n", r.Requests, rule)
	}
	if len(rep.Descriptors) > 0 {
		fmt.Fprintf(w, "\nDescriptors whose decision changed most (newly refused, newly admitted):\n")
		for _, d := range rep.Descriptors {
			entries := make([]string, len(d.Entries))
			for i, e := range d.Entries {
				entries[i] = e.Key + "=" + e.Value
			}
			fmt.Fprintf(w, "%10d  %s: %s  (%d, %d)\n", d.Requests, d.Domain, strings.Join(entries, ", "), d.NewlyRefused, d.NewlyAdmitted)
		}
	}
	if rep.UntrackedDescriptors > 0 {
		fmt.Fprintf(w, "%d descriptor changes not broken down: more distinct descriptors changed than --by-max-descriptors.\n", rep.UntrackedDescriptors)
	}
	return w.err
}

// An errWriter writes to w until a write fails, and keeps that error.
type errWriter struct {
	w   io.Writer
	err error
}

// Write writes p unless a write failed before.
func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

// writeSkipped writes what of the log rep did not replay as it was, if
// anything.
func (rep *Report) writeSkipped(w io.Writer) {
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
	if rep.Omitted > 0 {
		fmt.Fprintf(w, "Not replayed: %d requests the log holds only as a marker, their record over the daemon's --request-log-max-record;\n"+
			"  the counters they used hold less than the daemon's did.\n", rep.Omitted)
	}
	if rep.OutOfOrder > 0 {
		fmt.Fprintf(w, "Out of order: %d lines (the first, line %d), up to %s before a line above them; each was decided at the latest time above it.\n"+
			"  Merge logs by time (sort -m), do not concatenate them; --strict refuses such a log.\n", rep.OutOfOrder, rep.FirstOutOfOrderLine, rep.MaxBehind)
	}
}
