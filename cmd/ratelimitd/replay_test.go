package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimitd/ratelimitd/internal/metricstest"
	"github.com/ratelimitd/ratelimitd/server/requestlog/replay"
)

// runExit runs ratelimitd with args and returns its exit status, stdout
// and stderr.
func runExit(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), args, noEnv, &stdout, &stderr)
	code := 0
	if e, ok := errors.AsType[exitError](err); ok {
		code = e.code
	} else if err != nil {
		t.Fatalf("ratelimitd %v: %v", args, err)
	}
	return code, stdout.String(), stderr.String()
}

// TestRequestLogThenReplay: the daemon logs the requests of its gRPC and
// HTTP faces with --request-log, and `ratelimitd replay` finds in that log
// the two requests that lowering the limit from 3 to 1 refuses.
func TestRequestLogThenReplay(t *testing.T) {
	dir := t.TempDir()
	oldPath, newPath, logPath := filepath.Join(dir, "old.yaml"), filepath.Join(dir, "new.yaml"), filepath.Join(dir, "requests.log")
	writeFile(t, oldPath, goodRules)
	writeFile(t, newPath, strings.Replace(goodRules, "requests_per_unit: 3", "requests_per_unit: 1", 1))
	d := startDaemon(t, "--config", oldPath, "--request-log", logPath)
	for range 5 {
		d.limit(t)
	}
	resp, err := http.Post("http://"+d.httpAddr+"/json", "application/json",
		strings.NewReader(`{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	waitLines(t, logPath, 6) // the writer flushes once it has nothing waiting

	code, out, errOut := runExit(t, "replay", "--old", oldPath, "--new", newPath, logPath)
	if code != 0 {
		t.Fatalf("replay: exit status %d: %s", code, errOut)
	}
	for _, want := range []string{"Replayed 6 requests", "2 decided differently: 2 newly refused, 0 newly admitted", "2  k  (" + newPath + ":3)"} {
		if !strings.Contains(out, want) {
			t.Errorf("replay printed:\n%s\nwant it to contain %q", out, want)
		}
	}
	code, out, errOut = runExit(t, "replay", "--json", "--old", oldPath, "--new", newPath, logPath)
	var rep replay.Report
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil {
		t.Fatalf("replay --json: exit status %d, %v: %s%s", code, err, out, errOut)
	}
	if rep.Requests != 6 || rep.NewlyRefused != 2 || len(rep.Rules) != 1 || rep.Rules[0].Rule != "k" || rep.Rules[0].Line != 3 {
		t.Errorf("replay --json = %+v, want 6 requests, 2 newly refused by k at line 3", rep)
	}
}

// TestReplayBadInput: bad rules are named by file and line, a bad log
// line under --strict by the log's name and line number, and bad usage
// exits 2.
func TestReplayBadInput(t *testing.T) {
	dir := t.TempDir()
	good, bad, logPath := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml"), filepath.Join(dir, "requests.log")
	writeFile(t, good, goodRules)
	writeFile(t, bad, badRules)
	line := `{"time":"2026-01-02T03:04:05Z","request":{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}}` + "\n"
	writeFile(t, logPath, line+"{\"time\": 3}\n"+line)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--old", bad, "--new", good, logPath}, 1, "--old: " + bad + ":4:"},
		{[]string{"--old", good, "--new", bad, logPath}, 1, "--new: " + bad + ":4:"},
		{[]string{"--strict", "--old", good, "--new", good, logPath}, 1, logPath + ":2: "},
		{[]string{"--old", good, "--new", good, filepath.Join(dir, "missing.log")}, 1, "missing.log"},
		{[]string{"--old", good, logPath}, 2, "usage: ratelimitd replay"},
		{[]string{"--old", good, "--new", good}, 2, "usage: ratelimitd replay"},
	} {
		code, _, errOut := runExit(t, append([]string{"replay"}, tc.args...)...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("replay %v: exit status %d, %q; want %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
}

// waitLines waits until the file at path holds n lines.
func waitLines(t *testing.T, path string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if bytes.Count(b, []byte("\n")) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %q, want %d lines", path, b, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRequestLogRotation: after the log is renamed away, SIGHUP has the
// daemon write new requests to a new file at --request-log.
func TestRequestLogRotation(t *testing.T) {
	dir := t.TempDir()
	rules, logPath := filepath.Join(dir, "rules.yaml"), filepath.Join(dir, "requests.log")
	writeFile(t, rules, goodRules)
	d := startDaemon(t, "--config", rules, "--request-log", logPath)
	d.limit(t)
	waitLines(t, logPath, 1)
	if err := os.Rename(logPath, logPath+".1"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for { // reopened once the file exists again
		if _, err := os.Stat(logPath); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after SIGHUP; logs:\n%s", logPath, d.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A request logged in the instant between the new file's creation and
	// the switch to it still goes to the old file: send until one reaches
	// the new file; every request is in one of the two.
	lines := func(p string) int { b, _ := os.ReadFile(p); return bytes.Count(b, []byte("\n")) }
	sent := 1
	for lines(logPath) == 0 {
		if time.Now().After(deadline) || sent > 100 {
			t.Fatalf("nothing reached the new %s after %d requests", logPath, sent)
		}
		d.limit(t)
		sent++
		time.Sleep(20 * time.Millisecond)
	}
	for lines(logPath)+lines(logPath+".1") != sent {
		if time.Now().After(deadline) {
			t.Fatalf("%d and %d lines in %s and .1, want %d in all", lines(logPath), lines(logPath+".1"), logPath, sent)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReplaySkipsBadLines: without --strict, a line that cannot be decoded
// and a last line without a newline are skipped, and the report says
// which, in text and JSON.
func TestReplaySkipsBadLines(t *testing.T) {
	dir := t.TempDir()
	rules, logPath := filepath.Join(dir, "rules.yaml"), filepath.Join(dir, "requests.log")
	writeFile(t, rules, goodRules)
	line := `{"time":"2026-01-02T03:04:05Z","request":{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}}` + "\n"
	writeFile(t, logPath, line+line[:20]+line+line+line[:len(line)-1])
	code, out, errOut := runExit(t, "replay", "--old", rules, "--new", rules, logPath)
	for _, want := range []string{"Replayed 2 requests", "Skipped 1 lines that could not be decoded (lines 2); the first: " + logPath + ":2: ",
		"Skipped line 4, the last, which has no newline"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("replay: exit status %d, printed:\n%s%s\nwant 0 and %q", code, out, errOut, want)
		}
	}
	code, out, errOut = runExit(t, "replay", "--json", "--old", rules, "--new", rules, logPath)
	var rep struct {
		Requests      int   `json:"requests"`
		BadLines      int   `json:"bad_lines"`
		FirstBadLines []int `json:"first_bad_lines"`
		PartialLine   int   `json:"partial_line"`
	}
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil {
		t.Fatalf("replay --json: exit status %d, %v: %s%s", code, err, out, errOut)
	}
	if rep.Requests != 2 || rep.BadLines != 1 || len(rep.FirstBadLines) != 1 || rep.FirstBadLines[0] != 2 || rep.PartialLine != 4 {
		t.Errorf("replay --json = %+v, want 2 requests, bad line 2, partial line 4", rep)
	}
}

// hostileRequest is the request that grew the log six bytes for one: 64
// descriptors of 15 entries, each value 1 KiB of control bytes.
func hostileRequest(descs, entries, size int) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: "d"}
	for range descs {
		d := &commonv3.RateLimitDescriptor{}
		for range entries {
			d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: "k", Value: strings.Repeat("\x01", size)})
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

// TestRequestLogBounded: a client sending the largest requests fills no
// more than --request-log-max-size times 1 + --request-log-max-backups:
// records over --request-log-max-record are markers, the others rotate
// the file, each counted; replay reads what is left, markers counted.
func TestRequestLogBounded(t *testing.T) {
	dir := t.TempDir()
	rules, logPath := filepath.Join(dir, "rules.yaml"), filepath.Join(dir, "requests.log")
	writeFile(t, rules, goodRules)
	d := startDaemon(t, "--config", rules, "--request-log", logPath, "--request-log-max-size", "1", "--request-log-max-backups", "1")
	client := rlsv3.NewRateLimitServiceClient(d.conn)
	const hostile, large = 3, 20
	for range hostile { // 1 MB: a marker each
		if _, err := client.ShouldRateLimit(t.Context(), hostileRequest(64, 15, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	for range large { // 64 x 2 KiB: lines of about 190 KB, under the 256 KiB bound
		if _, err := client.ShouldRateLimit(t.Context(), hostileRequest(64, 1, 2<<10)); err != nil {
			t.Fatal(err)
		}
	}
	var mfs metricstest.Families
	eventually(t, fmt.Sprintf("the log writing %d records", hostile+large), func() bool {
		mfs = scrapeDaemon(t, d)
		n, _ := mfs.Value("ratelimitd_request_log_written_total", "")
		return n == hostile+large
	})
	if n, _ := mfs.Value("ratelimitd_request_log_omitted_total", ""); n != hostile {
		t.Errorf("omitted_total = %v, want %d", n, hostile)
	}
	if n, _ := mfs.Value("ratelimitd_request_log_rotations_total", ""); n < 3 {
		t.Errorf("rotations_total = %v, want at least 3 (3.8 MB in files of 1 MiB)", n)
	}
	var files []string
	eventually(t, "one rotated file (--request-log-max-backups): the others are removed in the background", func() bool {
		files, _ = filepath.Glob(filepath.Join(dir, "requests-*-size.log"))
		return len(files) == 1
	})
	var all []byte
	for _, f := range append(files, logPath) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) >= 1<<20 {
			t.Errorf("%s holds %d bytes, want less than 1 MiB", f, len(b))
		}
		all = append(all, b...)
	}
	joined := filepath.Join(dir, "joined.log")
	writeFile(t, joined, string(all))
	code, out, errOut := runExit(t, "replay", "--json", "--strict", "--old", rules, "--new", rules, joined)
	var rep replay.Report
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil {
		t.Fatalf("replay --json: exit status %d, %v: %s%s", code, err, out, errOut)
	}
	if rep.Requests+rep.Omitted != bytes.Count(all, []byte("\n")) || rep.Requests < 5 || rep.OutOfOrder != 0 || rep.BadLines != 0 {
		t.Errorf("replay = %d requests, %d omitted, %d out of order, %d bad lines; want every line of the %d kept read, in order",
			rep.Requests, rep.Omitted, rep.OutOfOrder, rep.BadLines, bytes.Count(all, []byte("\n")))
	}
}

// TestReplayFlags: --warmup, --by descriptor --top N, and logs
// concatenated out of order (counted, or refused under --strict), as the
// text report says them.
func TestReplayFlags(t *testing.T) {
	dir := t.TempDir()
	oldPath, newPath, logPath := filepath.Join(dir, "old.yaml"), filepath.Join(dir, "new.yaml"), filepath.Join(dir, "requests.log")
	writeFile(t, oldPath, goodRules)
	writeFile(t, newPath, strings.Replace(goodRules, "requests_per_unit: 3", "requests_per_unit: 1", 1))
	line := func(sec int, v string) string {
		return fmt.Sprintf(`{"time":"2026-01-02T03:04:%02dZ","request":{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"%s"}]}]}}`+"\n", sec, v)
	}
	var a, b string
	for s := range 5 {
		a += line(10+s, "acme") + line(10+s, "acme") + line(10+s, "beta")
		b += line(s, "gamma")
	}
	a += line(15, "delta") + line(15, "delta")
	writeFile(t, logPath, a+b) // b concatenated after a, 10 s earlier
	// 3 requests a minute under --old, 1 under --new: acme, beta and
	// gamma lose 2 requests each, delta 1.
	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{nil, 0, []string{"Replayed 22 requests from 2026-01-02T03:04:10.000Z to 2026-01-02T03:04:15.000Z (5s)", "7 newly refused",
			"Out of order: 5 lines (the first, line 18), up to 15s before a line above them"}},
		{[]string{"--strict"}, 1, []string{logPath + ":18: out of order: 15s before line 16's time"}},
		{[]string{"--by", "descriptor", "--top", "3"}, 0, []string{"Descriptors whose decision changed most",
			"         2  d: k=acme  (2, 0)\n         2  d: k=beta  (2, 0)\n         2  d: k=gamma  (2, 0)\n"}},
		{[]string{"--warmup", "2s"}, 0, []string{"Replayed 16 requests from 2026-01-02T03:04:12.000Z", "after 6 of the warmup, not compared", "4 newly refused"}},
		{[]string{"--by", "tenant"}, 2, []string{"--by \"tenant\": want rule or descriptor"}},
	} {
		code, out, errOut := runExit(t, append(append([]string{"replay"}, tc.args...), "--old", oldPath, "--new", newPath, logPath)...)
		for _, want := range tc.want {
			if code != tc.code || !strings.Contains(out+errOut, want) {
				t.Errorf("replay %v: exit status %d, printed:\n%s%s\nwant %d and %q", tc.args, code, out, errOut, tc.code, want)
			}
		}
	}
}
