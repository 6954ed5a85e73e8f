package replay_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/server/requestlog"
	"github.com/ratelimitd/ratelimitd/server/requestlog/replay"
)

// oldRules and newRules differ in two limits: user's goes down from 5 to
// 3 a second (newly refused), tenant's up from 2 to 4 (newly admitted);
// path's stays at 1.
const oldRules = `domain: shop
descriptors:
  - key: user
    rate_limit: {algorithm: fixed_window, unit: second, requests_per_unit: 5}
  - key: tenant
    rate_limit: {algorithm: fixed_window, unit: second, requests_per_unit: 2}
  - key: path
    rate_limit: {algorithm: fixed_window, unit: second, requests_per_unit: 1}
`

var newRules = strings.NewReplacer("requests_per_unit: 5", "requests_per_unit: 3", "requests_per_unit: 2", "requests_per_unit: 4").Replace(oldRules)

// loadRules writes text to name in a temporary directory and loads it.
func loadRules(t testing.TB, name, text string) *config.Rules {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// start is the first second of the generated logs.
var start = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// generate returns a log of the given seconds in which, each second,
// user value i sends i requests for i in 0..9, tenant value i the same,
// and path "/a" 3: one descriptor per request, the values' bytes
// including one that is not UTF-8. It returns the log and its length.
func generate(seconds int) ([]byte, int) {
	var b []byte
	n := 0
	for s := range seconds {
		at := start.Add(time.Duration(s) * time.Second)
		k := 0
		add := func(key, value string) {
			rec := requestlog.Record{Time: at.Add(time.Duration(k) * time.Millisecond), Domain: "shop",
				Descriptors: []requestlog.Descriptor{{Entries: []requestlog.Entry{{Key: key, Value: value}}, Hits: 1}}}
			b = requestlog.AppendLine(b, &rec)
			k++
			n++
		}
		for i := range 10 {
			for range i {
				add("user", userValue(i))
				add("tenant", fmt.Sprint("t", i))
			}
		}
		for range 3 {
			add("path", "/a")
		}
	}
	return b, n
}

// userValue is user i's value; user 7's is not UTF-8.
func userValue(i int) string {
	if i == 7 {
		return "u\xff7"
	}
	return fmt.Sprint("u", i)
}

// TestRunFindsTheRuleChange replays a generated log and expects exactly
// the differences the two limits make, each second:
// sum over i of min(i,5)-min(i,3) newly refused by user (0+0+0+0+1+2+2+2+2+2 = 11),
// sum over i of min(i,4)-min(i,2) newly admitted by tenant (0+0+0+1+2+2+2+2+2+2 = 13).
func TestRunFindsTheRuleChange(t *testing.T) {
	const seconds = 20
	log, n := generate(seconds)
	rep, err := replay.Run(t.Context(), bytes.NewReader(log), replay.Options{
		Old: loadRules(t, "old.yaml", oldRules), New: loadRules(t, "new.yaml", newRules), Name: "gen.log",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := &replay.Report{
		Requests: n, First: start, Last: start.Add((seconds-1)*time.Second + time.Duration(n/seconds-1)*time.Millisecond),
		Differ: 24 * seconds, NewlyRefused: 11 * seconds, NewlyAdmitted: 13 * seconds,
		Rules: []replay.RuleDiff{
			{Direction: replay.NewlyRefused, Rule: "user", File: rep.Rules[0].File, Line: 3, Requests: 11 * seconds},
			{Direction: replay.NewlyAdmitted, Rule: "tenant", File: rep.Rules[1].File, Line: 5, Requests: 13 * seconds},
		},
	}
	if diff := cmp.Diff(want, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	if !strings.HasSuffix(rep.Rules[0].File, "new.yaml") || !strings.HasSuffix(rep.Rules[1].File, "old.yaml") {
		t.Errorf("files: newly refused by %s, newly admitted by %s; want new.yaml, old.yaml", rep.Rules[0].File, rep.Rules[1].File)
	}
}

// TestRunSameRules finds no difference between a rule set and itself,
// though the log is refused in part.
func TestRunSameRules(t *testing.T) {
	log, n := generate(3)
	rules := loadRules(t, "rules.yaml", oldRules)
	rep, err := replay.Run(t.Context(), bytes.NewReader(log), replay.Options{Old: rules, New: rules})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests != n || rep.Differ != 0 || len(rep.Rules) != 0 {
		t.Errorf("report = %+v; want %d requests and no difference", rep, n)
	}
}

// TestRunBadLine: with Strict, the line that cannot be read stops the
// replay, named.
func TestRunBadLine(t *testing.T) {
	log, _ := generate(1)
	lines := bytes.SplitAfter(log, []byte("\n"))
	rules := loadRules(t, "rules.yaml", oldRules)
	for _, tc := range []struct{ name, line, want string }{
		{"not JSON", "{oops\n", "gen.log:3: invalid character"},
		{"no time", `{"request":{"domain":"shop"}}` + "\n", `gen.log:3: no "time"`},
		{"bad time", `{"time":"yesterday","request":{"domain":"shop"}}` + "\n", "gen.log:3: time: "},
		{"bad request", `{"time":"2026-01-02T03:04:05Z","request":{"domian":"shop"}}` + "\n", "gen.log:3: request: "},
		{"bad bytes", `{"time":"2026-01-02T03:04:05Z","request":{"domain":"shop","descriptors":[{"entries":[{"key":"a","value":"b"}]}]},"bytes":[{"descriptor":0,"entry":1,"value":"eA=="}]}` + "\n",
			"gen.log:3: bytes: descriptor 0 entry 1: no such entry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := bytes.Join([][]byte{lines[0], lines[1], []byte(tc.line), lines[2]}, nil)
			_, err := replay.Run(t.Context(), bytes.NewReader(in), replay.Options{Old: rules, New: rules, Name: "gen.log", Strict: true})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run = %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestRunSkipsBadLines: without Strict, lines that cannot be decoded are
// skipped and counted, the first few named, and a last line without a
// newline (a log being written) is skipped; the other lines are replayed
// as if the bad ones were not there.
func TestRunSkipsBadLines(t *testing.T) {
	log, n := generate(2)
	rules := loadRules(t, "rules.yaml", oldRules)
	want, err := replay.Run(t.Context(), bytes.NewReader(log), replay.Options{Old: rules, New: rules})
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(log, []byte("\n"))
	var in []byte
	var bad []int
	for i, l := range lines[:n] {
		in = append(in, l...)
		if i%20 == 0 { // a torn line, and one glued to it
			in = append(in, l[:len(l)/2]...)
			in = append(in, l...)
			bad = append(bad, len(bad)+i+2)
		}
	}
	in = append(in, lines[0][:len(lines[0])-1]...) // no newline
	got, err := replay.Run(t.Context(), bytes.NewReader(in), replay.Options{Old: rules, New: rules, Name: "gen.log"})
	if err != nil {
		t.Fatalf("Run = %v, want bad lines skipped", err)
	}
	wantLines := len(bad) + n + 1
	if got.Requests != want.Requests || got.BadLines != len(bad) || !slices.Equal(got.FirstBadLines, bad[:10]) ||
		got.PartialLine != wantLines || !strings.HasPrefix(got.FirstBadError, fmt.Sprintf("gen.log:%d: ", bad[0])) {
		t.Errorf("Run = %d requests, %d bad lines %v (%q), partial line %d; want %d, %d %v, %d",
			got.Requests, got.BadLines, got.FirstBadLines, got.FirstBadError, got.PartialLine, want.Requests, len(bad), bad[:10], wantLines)
	}
}

// BenchmarkRun replays a generated log, parsing included, and reports
// requests per second of wall time, and per second of the process's CPU
// time (user and system, every goroutine): on a machine shared with other
// work, the first depends on what the others leave, the second much less.
func BenchmarkRun(b *testing.B) {
	log, n := generate(100)
	old, neu := loadRules(b, "old.yaml", oldRules), loadRules(b, "new.yaml", newRules)
	b.SetBytes(int64(len(log)))
	b.ReportAllocs()
	var total int
	cpu0 := cpuTime(b)
	for b.Loop() {
		rep, err := replay.Run(b.Context(), bytes.NewReader(log), replay.Options{Old: old, New: neu})
		if err != nil {
			b.Fatal(err)
		}
		total += rep.Requests
	}
	if total != n*b.N {
		b.Fatalf("replayed %d requests, want %d", total, n*b.N)
	}
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "requests/s")
	b.ReportMetric(float64(total)/(cpuTime(b)-cpu0).Seconds(), "requests/cpu-s")
}

// cpuTime returns the CPU time the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestRunLongLines: a line longer than requestlog.MaxLine (an older
// daemon's record of a hostile request, six times its size) is skipped
// and counted, the lines after it replayed; under Strict it stops the
// replay, named. A line of MaxLine bytes is read.
func TestRunLongLines(t *testing.T) {
	log, n := generate(1)
	lines := bytes.SplitAfter(log, []byte("\n"))
	rules := loadRules(t, "rules.yaml", oldRules)
	// The record of 64 x 15 entries of 1 KiB of control bytes, as the
	// daemon wrote it before: \u0001 for each.
	var hostile strings.Builder
	hostile.WriteString(`{"time":"2026-01-02T03:04:05.5Z","request":{"domain":"shop","descriptors":[`)
	for d := range 64 {
		if d > 0 {
			hostile.WriteString(",")
		}
		hostile.WriteString(`{"entries":[`)
		for e := range 15 {
			if e > 0 {
				hostile.WriteString(",")
			}
			hostile.WriteString(`{"key":"k","value":"` + strings.Repeat(`\u0001`, 1024) + `"}`)
		}
		hostile.WriteString("]}")
	}
	hostile.WriteString("]}}\n")
	if hostile.Len() < 5<<20 {
		t.Fatalf("the hostile line has %d bytes, want about 6 MB", hostile.Len())
	}
	// A record whose line is exactly MaxLine bytes.
	rec := requestlog.Record{Time: start.Add(900 * time.Millisecond), Domain: "shop", Descriptors: []requestlog.Descriptor{{Entries: []requestlog.Entry{{Key: "path", Value: ""}}, Hits: 1}}}
	rec.Descriptors[0].Entries[0].Value = strings.Repeat("a", requestlog.MaxLine-len(requestlog.AppendLine(nil, &rec)))
	atBound := requestlog.AppendLine(nil, &rec)
	if len(atBound) != requestlog.MaxLine {
		t.Fatalf("the line at the bound has %d bytes, want %d", len(atBound), requestlog.MaxLine)
	}
	in := bytes.Join([][]byte{lines[0], []byte(hostile.String()), atBound}, nil)
	in = append(in, bytes.Join(lines[1:], nil)...)

	got, err := replay.Run(t.Context(), bytes.NewReader(in), replay.Options{Old: rules, New: rules, Name: "gen.log"})
	if err != nil {
		t.Fatalf("Run = %v, want the long line skipped", err)
	}
	if got.Requests != n+1 || got.BadLines != 1 || !slices.Equal(got.FirstBadLines, []int{2}) || !strings.Contains(got.FirstBadError, "gen.log:2: longer than") {
		t.Errorf("Run = %d requests, bad lines %v (%q); want %d, [2], longer than", got.Requests, got.FirstBadLines, got.FirstBadError, n+1)
	}
	_, err = replay.Run(t.Context(), bytes.NewReader(in), replay.Options{Old: rules, New: rules, Name: "gen.log", Strict: true})
	if err == nil || !strings.Contains(err.Error(), "gen.log:2: longer than") {
		t.Errorf("Run (strict) = %v, want gen.log:2: longer than ...", err)
	}
}

// TestRunOmitted: the marker of a record over the daemon's bound is
// counted, not replayed, and not a bad line, under Strict too.
func TestRunOmitted(t *testing.T) {
	log, n := generate(1)
	lines := bytes.SplitAfter(log, []byte("\n"))
	marker := `{"time":"2026-01-02T03:04:05.001000000Z","omitted":{"bytes":1411402,"descriptors":64}}` + "\n"
	in := append(append(append([]byte(nil), lines[0]...), marker...), bytes.Join(lines[1:], nil)...)
	rules := loadRules(t, "rules.yaml", oldRules)
	for _, strict := range []bool{false, true} {
		got, err := replay.Run(t.Context(), bytes.NewReader(in), replay.Options{Old: rules, New: rules, Strict: strict})
		if err != nil || got.Requests != n || got.Omitted != 1 || got.BadLines != 0 {
			t.Errorf("Run (strict %v) = %+v, %v; want %d requests, 1 omitted, no bad line", strict, got, err, n)
		}
	}
}

// TestRunOutOfOrder: two logs concatenated rather than merged: every line
// of the second that is more than the tolerance before the first's last
// time is counted, the first named, and decided at that last time; under
// Strict the first stops the replay. Lines less far behind are in order.
func TestRunOutOfOrder(t *testing.T) {
	a, na := generate(3)
	b, nb := generate(3) // the same three seconds
	rules := loadRules(t, "rules.yaml", oldRules)
	in := append(append([]byte(nil), a...), b...)
	got, err := replay.Run(t.Context(), bytes.NewReader(in), replay.Options{Old: rules, New: rules, Name: "cat.log"})
	if err != nil {
		t.Fatal(err)
	}
	// b's lines of its first two seconds are more than 1s before a's last
	// time (second 2 and 92 ms), but for the last of second 1 (1s and 92
	// ms, exactly the tolerance behind); those of its last second are not.
	wantOut := 2*nb/3 - 1
	last := start.Add(2*time.Second + time.Duration(na/3-1)*time.Millisecond)
	if got.OutOfOrder != wantOut || got.FirstOutOfOrderLine != na+1 || got.MaxBehind != last.Sub(start) || got.Requests != na+nb {
		t.Errorf("Run = %d out of order (first line %d, up to %s behind), %d requests; want %d (line %d, %s), %d",
			got.OutOfOrder, got.FirstOutOfOrderLine, got.MaxBehind, got.Requests, wantOut, na+1, last.Sub(start), na+nb)
	}
	_, err = replay.Run(t.Context(), bytes.NewReader(in), replay.Options{Old: rules, New: rules, Name: "cat.log", Strict: true})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("cat.log:%d: out of order", na+1)) {
		t.Errorf("Run (strict) = %v, want cat.log:%d: out of order", err, na+1)
	}
	// With a tolerance past the gap, nothing is out of order.
	got, err = replay.Run(t.Context(), bytes.NewReader(in), replay.Options{Old: rules, New: rules, Strict: true, OrderTolerance: 3 * time.Second})
	if err != nil || got.OutOfOrder != 0 {
		t.Errorf("Run (tolerance 3s) = %v, %d out of order; want none", err, got.OutOfOrder)
	}
}

// TestRunWarmup: the warmup's requests fill the counters, and are not
// compared. One user sends a request a second for 10 seconds against 5
// (old) and 8 (new) a minute: with 5 seconds of warmup, the 5 compared
// requests find the counters at 5, so that the old rules refuse them all
// and the new admit 3.
func TestRunWarmup(t *testing.T) {
	const rules = `domain: shop
descriptors:
  - key: user
    rate_limit: {algorithm: fixed_window, unit: minute, requests_per_unit: 5}
`
	old, neu := loadRules(t, "old.yaml", rules), loadRules(t, "new.yaml", strings.Replace(rules, "5}", "8}", 1))
	var log []byte
	for s := range 10 {
		rec := requestlog.Record{Time: start.Add(time.Duration(s) * time.Second), Domain: "shop",
			Descriptors: []requestlog.Descriptor{{Entries: []requestlog.Entry{{Key: "user", Value: "u"}}, Hits: 1}}}
		log = requestlog.AppendLine(log, &rec)
	}
	for _, tc := range []struct {
		warmup                      time.Duration
		requests, warm, newlyAdmits int
	}{{0, 10, 0, 3}, {5 * time.Second, 5, 5, 3}, {8 * time.Second, 2, 8, 0}, {time.Hour, 0, 10, 0}} {
		got, err := replay.Run(t.Context(), bytes.NewReader(log), replay.Options{Old: old, New: neu, Warmup: tc.warmup})
		if err != nil {
			t.Fatal(err)
		}
		if got.Requests != tc.requests || got.WarmupRequests != tc.warm || got.NewlyAdmitted != tc.newlyAdmits {
			t.Errorf("warmup %s: %d requests compared, %d warm, %d newly admitted; want %d, %d, %d",
				tc.warmup, got.Requests, got.WarmupRequests, got.NewlyAdmitted, tc.requests, tc.warm, tc.newlyAdmits)
		}
		if tc.requests > 0 && !got.First.Equal(start.Add(time.Duration(10-tc.requests)*time.Second)) {
			t.Errorf("warmup %s: first compared at %s, want the first after the warmup", tc.warmup, got.First)
		}
	}
}

// TestRunByDescriptor: the differing requests broken down by descriptor,
// the most first: users 5 to 9 lose 2 requests a second and user 4 one,
// tenants 4 to 9 gain 2 a second and tenant 3 one (see
// TestRunFindsTheRuleChange); user 7's value, not UTF-8, is shown in hex.
// Past MaxDescriptors, changes are counted apart.
func TestRunByDescriptor(t *testing.T) {
	const seconds = 4
	log, _ := generate(seconds)
	old, neu := loadRules(t, "old.yaml", oldRules), loadRules(t, "new.yaml", newRules)
	got, err := replay.Run(t.Context(), bytes.NewReader(log), replay.Options{Old: old, New: neu, ByDescriptor: true, TopDescriptors: 7})
	if err != nil {
		t.Fatal(err)
	}
	d := func(key, value string, refused, admitted int) replay.DescriptorDiff {
		return replay.DescriptorDiff{Domain: "shop", Entries: []replay.Entry{{Key: key, Value: value}},
			Requests: (refused + admitted) * seconds, NewlyRefused: refused * seconds, NewlyAdmitted: admitted * seconds}
	}
	want := []replay.DescriptorDiff{
		d("tenant", "t4", 0, 2), d("tenant", "t5", 0, 2), d("tenant", "t6", 0, 2), d("tenant", "t7", 0, 2),
		d("tenant", "t8", 0, 2), d("tenant", "t9", 0, 2), d("user", "hex:75ff37", 2, 0),
	}
	if diff := cmp.Diff(want, got.Descriptors); diff != "" || got.UntrackedDescriptors != 0 {
		t.Errorf("descriptors (-want +got), %d untracked:\n%s", got.UntrackedDescriptors, diff)
	}
	all, err := replay.Run(t.Context(), bytes.NewReader(log), replay.Options{Old: old, New: neu, ByDescriptor: true})
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, d := range all.Descriptors {
		total += d.Requests
	}
	if len(all.Descriptors) != 13 || total != all.Differ {
		t.Errorf("all descriptors: %d, %d changes; want 13, %d (one descriptor a request)", len(all.Descriptors), total, all.Differ)
	}
	bounded, err := replay.Run(t.Context(), bytes.NewReader(log), replay.Options{Old: old, New: neu, ByDescriptor: true, MaxDescriptors: 2})
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, d := range bounded.Descriptors {
		held += d.Requests
	}
	if len(bounded.Descriptors) != 2 || held+bounded.UntrackedDescriptors != all.Differ {
		t.Errorf("max 2 descriptors: %d held with %d changes, %d untracked; want 2, and %d in all", len(bounded.Descriptors), held, bounded.UntrackedDescriptors, all.Differ)
	}
}

// TestWriteJSON: the JSON report reads back as the report, indented.
func TestWriteJSON(t *testing.T) {
	log, _ := generate(5)
	rep, err := replay.Run(t.Context(), bytes.NewReader(log), replay.Options{
		Old: loadRules(t, "old.yaml", oldRules), New: loadRules(t, "new.yaml", newRules), Name: "gen.log",
	})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(buf.String(), "{\n  \"") {
		t.Errorf("JSON report starts %q, want an indented object", buf.String()[:min(20, buf.Len())])
	}
	var back replay.Report
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rep, &back); diff != "" {
		t.Errorf("report read back (-wrote +read):\n%s", diff)
	}
}
