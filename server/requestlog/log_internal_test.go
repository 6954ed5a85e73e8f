package requestlog

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// testRecord returns a record whose domain is d.
func testRecord(d string) *Record {
	return &Record{Time: time.Unix(1, 0), Domain: d, Descriptors: []Descriptor{
		{Entries: []Entry{{Key: "k", Value: "v"}}, Hits: 1},
	}}
}

// checkLines decodes the lines of the file at path, and returns the
// domains of those that decode and how many do not.
func checkLines(t *testing.T, path string) (domains []string, bad int) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var dec Decoder
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, MaxLine)
	for sc.Scan() {
		var r Record
		if err := dec.Decode(sc.Bytes(), &r); err != nil {
			bad++
			continue
		}
		domains = append(domains, r.Domain)
	}
	return domains, bad
}

// TestOpenEndsTornLine: a log whose last line was cut short gets a
// newline before the next record, which stays whole; with a size bound
// too, where the rotator opens the file.
func TestOpenEndsTornLine(t *testing.T) {
	for _, opts := range []Options{{Sample: 1}, {Sample: 1, MaxSize: 1, MaxBackups: 1}} {
		path := filepath.Join(t.TempDir(), "requests.log")
		whole := string(AppendLine(nil, testRecord("before")))
		if err := os.WriteFile(path, []byte(whole+whole[:len(whole)/2]), 0o600); err != nil {
			t.Fatal(err)
		}
		l, err := Open(path, opts)
		if err != nil {
			t.Fatal(err)
		}
		l.Log(testRecord("after"))
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		got, bad := checkLines(t, path)
		if strings.Join(got, ",") != "before,after" || bad != 1 {
			t.Errorf("max size %d: log holds %v and %d bad lines, want [before after] and the torn line", opts.MaxSize, got, bad)
		}
	}
}

// failingWriter writes the first half of its first Write and fails it (a
// full disk), then writes everything.
type failingWriter struct {
	w      io.Writer
	failed atomic.Bool
}

// Write fails once, half written.
func (f *failingWriter) Write(p []byte) (int, error) {
	if !f.failed.Swap(true) {
		n, _ := f.w.Write(p[:len(p)/2])
		return n, errors.New("no space left on device")
	}
	return f.w.Write(p)
}

// TestFailedFlushLeavesNextLineWhole: a write cut short leaves one torn
// line, and the records after it are whole, each on its own line.
func TestFailedFlushLeavesNextLineWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "requests.log")
	fw := &failingWriter{}
	l, err := open(path, Options{Sample: 1}, func(w io.Writer) io.Writer { fw.w = w; return fw })
	if err != nil {
		t.Fatal(err)
	}
	l.Log(testRecord("lost"))
	if err := l.Reopen(); err != nil { // flushes to the failing writer, then reopens the same path
		t.Fatal(err)
	}
	l.Log(testRecord("kept"))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got, bad := checkLines(t, path)
	if strings.Join(got, ",") != "kept" || bad != 1 {
		data, _ := os.ReadFile(path)
		t.Errorf("log holds %v and %d bad lines, want [kept] and one torn line:\n%s", got, bad, data)
	}
	if l.errors.Load() != 1 {
		t.Errorf("errors = %d, want 1", l.errors.Load())
	}
}

// TestFailedFlushNextRecordOwnLine: after a write cut short, the next
// record on the same file starts on a line of its own.
func TestFailedFlushNextRecordOwnLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "requests.log")
	fw := &failingWriter{}
	l, err := open(path, Options{Sample: 1}, func(w io.Writer) io.Writer { fw.w = w; return fw })
	if err != nil {
		t.Fatal(err)
	}
	l.Log(testRecord("lost"))
	deadline := time.Now().Add(30 * time.Second) // a bound against hanging, not a timing assertion
	for !fw.failed.Load() {                      // the writer flushes once the queue is empty
		if time.Now().After(deadline) {
			t.Fatal("the writer never flushed into the failing file")
		}
		time.Sleep(time.Millisecond)
	}
	l.Log(testRecord("kept"))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got, bad := checkLines(t, path)
	if strings.Join(got, ",") != "kept" || bad != 1 {
		t.Errorf("log holds %v and %d bad lines, want [kept] and one torn line", got, bad)
	}
}

// countHandler counts the records logged.
type countHandler struct {
	slog.Handler
	n *atomic.Int64
}

// Enabled is true at every level.
func (countHandler) Enabled(context.Context, slog.Level) bool { return true }

// Handle counts r.
func (h countHandler) Handle(_ context.Context, _ slog.Record) error {
	h.n.Add(1)
	return nil
}

// TestFailLogsSometimes: a failing disk fails every flush; each failure is
// counted, and only the first of a burst logged.
func TestFailLogsSometimes(t *testing.T) {
	var logged atomic.Int64
	l, err := Open(filepath.Join(t.TempDir(), "requests.log"), Options{
		Logger: slog.New(countHandler{Handler: slog.DiscardHandler, n: &logged}),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for range 100 {
		l.fail(errors.New("no space left on device"))
	}
	if l.errors.Load() != 100 || logged.Load() != 1 {
		t.Errorf("100 failures: counted %d, logged %d; want 100 and 1", l.errors.Load(), logged.Load())
	}
}

// TestLogBoundsBytes: a record that would take the queue past MaxBytes is
// dropped and counted; one within it is written.
func TestLogBoundsBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "requests.log")
	l, err := Open(path, Options{Sample: 1, MaxBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	big := testRecord("big")
	big.Descriptors[0].Entries[0].Value = strings.Repeat("v", 1000)
	l.Log(big)
	l.Log(testRecord("small"))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got, _ := checkLines(t, path); strings.Join(got, ",") != "small" {
		t.Errorf("log holds %v, want [small]: the big record passes MaxBytes", got)
	}
	if written, dropped := l.Counts(); written != 1 || dropped != 1 {
		t.Errorf("written %d, dropped %d; want 1 and 1", written, dropped)
	}
	if q := l.queued.Load(); q != 0 {
		t.Errorf("queued bytes after Close = %d, want 0", q)
	}
}

// sizesWriter records the length of each Write.
type sizesWriter struct {
	w     io.Writer
	sizes []int // written by the writer goroutine, read after Close
}

// Write records len(p).
func (s *sizesWriter) Write(p []byte) (int, error) {
	s.sizes = append(s.sizes, len(p))
	return s.w.Write(p)
}

// TestWritesBounded: no write is longer than flushSize, or than one line
// when the line is longer, so that each fits in a file of the rotation's
// size; the lines are all there, whole.
func TestWritesBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "requests.log")
	sw := &sizesWriter{}
	l, err := open(path, Options{Sample: 1, MaxRecord: MaxLine}, func(w io.Writer) io.Writer { sw.w = w; return sw })
	if err != nil {
		t.Fatal(err)
	}
	big := testRecord("big")
	big.Descriptors[0].Entries[0].Value = strings.Repeat("v", 3*flushSize)
	bigLine := len(AppendLine(nil, &Record{Time: big.Time, Domain: "d199", Descriptors: big.Descriptors})) // the longest
	var want []string
	for i := range 200 {
		d := fmt.Sprint("d", i)
		if i%50 == 49 {
			l.Log(&Record{Time: big.Time, Domain: d, Descriptors: big.Descriptors})
		} else {
			l.Log(testRecord(d))
		}
		want = append(want, d)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, n := range sw.sizes {
		if n > flushSize && n > bigLine {
			t.Errorf("a write of %d bytes: more than %d, and than one line (%d)", n, flushSize, bigLine)
		}
	}
	if got, bad := checkLines(t, path); strings.Join(got, ",") != strings.Join(want, ",") || bad != 0 {
		t.Errorf("log holds %v and %d bad lines, want %v", got, bad, want)
	}
}
