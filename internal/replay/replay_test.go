package replay_test

import (
	"bytes"
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
	"github.com/ratelimitd/ratelimitd/internal/replay"
	"github.com/ratelimitd/ratelimitd/server/requestlog"
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
