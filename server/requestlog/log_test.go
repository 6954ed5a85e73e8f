package requestlog_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/ratelimitd/ratelimitd/server/requestlog"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// record returns a record whose domain is d.
func record(d string) *requestlog.Record {
	return &requestlog.Record{Time: time.Unix(1, 0), Domain: d, Descriptors: []requestlog.Descriptor{
		{Entries: []requestlog.Entry{{Key: "k", Value: "v"}}, Hits: 1},
	}}
}

// domains returns the domains of the lines of the log at path, however
// long, failing on any line that does not decode.
func domains(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	var dec requestlog.Decoder
	for i, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if line == "" && len(data) == 0 {
			break
		}
		var r requestlog.Record
		if err := dec.Decode([]byte(line), &r); err != nil {
			t.Fatalf("%s:%d: %v", path, i+1, err)
		}
		out = append(out, r.Domain)
	}
	return out
}

// TestLogWritesInOrder: what Log hands over before Close is in the file,
// in order, and counted.
func TestLogWritesInOrder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "requests.log")
	reg := prometheus.NewRegistry()
	l, err := requestlog.Open(path, requestlog.Options{Sample: 1, Buffer: 1000, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 500 {
		want = append(want, fmt.Sprint("d", i))
		l.Log(record(want[i]))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got := domains(t, path)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("log holds %v, want %v", got, want)
	}
	if n := gathered(t, reg, "ratelimitd_request_log_written_total"); n != 500 {
		t.Errorf("written_total = %v, want 500", n)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("log file mode %v (%v), want 0600: values may be personal data", fi.Mode().Perm(), err)
	}
	// After Close, records are dropped and counted.
	l.Log(record("late"))
	if _, dropped := l.Counts(); dropped != 1 {
		t.Errorf("dropped after Close = %d, want 1", dropped)
	}
}

// gathered returns the value of the counter name gathered from reg.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestLogDrops: with a buffer of one, a burst overflows it; every record
// is either written or counted as dropped, never both or neither.
func TestLogDrops(t *testing.T) {
	path := filepath.Join(t.TempDir(), "requests.log")
	l, err := requestlog.Open(path, requestlog.Options{Sample: 1, Buffer: 1})
	if err != nil {
		t.Fatal(err)
	}
	const n = 20000
	for i := range n {
		l.Log(record(fmt.Sprint(i)))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	written, dropped := l.Counts()
	lines := len(domains(t, path))
	if written+dropped != n || uint64(lines) != written {
		t.Errorf("written %d + dropped %d, %d lines; want %d in all, and a line per record written", written, dropped, lines, n)
	}
}

// TestReopen: after the file is moved away (rotated) and the log
// reopened, by Reopen or by a signal on Options.Reopen, new records go to
// a new file at the path.
func TestReopen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "requests.log")
	sig := make(chan os.Signal)
	l, err := requestlog.Open(path, requestlog.Options{Sample: 1, Reopen: sig})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Log(record("before"))
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := l.Reopen(); err != nil { // writes "before" (queued first) to the old file
		t.Fatal(err)
	}
	l.Log(record("after"))
	if err := os.Rename(path, path+".2"); err != nil {
		t.Fatal(err)
	}
	sig <- os.Interrupt // unbuffered: the writer has it,
	sig <- os.Interrupt // and has reopened the file once it takes another
	l.Log(record("signalled"))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{path + ".1": "[before]", path + ".2": "[after]", path: "[signalled]"} {
		if got := fmt.Sprint(domains(t, file)); got != want {
			t.Errorf("%s holds %s, want %s", file, got, want)
		}
	}
	if err := l.Reopen(); err == nil {
		t.Error("Reopen after Close: no error")
	}
}

// TestSample: 0 logs nothing, 1 everything, and a share about that share.
func TestSample(t *testing.T) {
	for _, tc := range []struct {
		sample   float64
		min, max int
	}{{0, 0, 0}, {1, 10000, 10000}, {0.25, 2000, 3000}} {
		l, err := requestlog.Open(filepath.Join(t.TempDir(), "requests.log"), requestlog.Options{Sample: tc.sample})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for range 10000 {
			if l.Sample() {
				n++
			}
		}
		l.Close()
		if n < tc.min || n > tc.max {
			t.Errorf("sample %v: %d of 10000 sampled, want %d to %d", tc.sample, n, tc.min, tc.max)
		}
	}
	if _, err := requestlog.Open(filepath.Join(t.TempDir(), "x"), requestlog.Options{Sample: 1.5}); err == nil {
		t.Error("Open with sample 1.5: no error")
	}
	var none *requestlog.Log
	if none.Sample() {
		t.Error("a nil Log samples")
	}
}

// valued returns a record whose one value is v.
func valued(v string) *requestlog.Record {
	r := record("edge")
	r.Descriptors[0].Entries[0].Value = v
	return r
}

// TestMaxRecord: a record whose line is exactly MaxRecord bytes is
// written; one a byte longer is replaced by a marker that gives its time,
// length and descriptors, and counted.
func TestMaxRecord(t *testing.T) {
	const limit = 4096
	fixed := len(requestlog.AppendLine(nil, valued("")))
	atBound, beyond := valued(strings.Repeat("a", limit-fixed)), valued(strings.Repeat("a", limit-fixed+1))
	if n := len(requestlog.AppendLine(nil, atBound)); n != limit {
		t.Fatalf("the record at the bound takes %d bytes, want %d", n, limit)
	}
	path := filepath.Join(t.TempDir(), "requests.log")
	reg := prometheus.NewRegistry()
	l, err := requestlog.Open(path, requestlog.Options{Sample: 1, MaxRecord: limit, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	l.Log(atBound)
	l.Log(beyond)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("log holds %d lines, want 2", len(lines))
	}
	var dec requestlog.Decoder
	var got requestlog.Record
	if err := dec.Decode([]byte(lines[0]), &got); err != nil || got.Descriptors[0].Entries[0].Value != atBound.Descriptors[0].Entries[0].Value {
		t.Errorf("the record at the bound: Decode = %v, want it whole", err)
	}
	err = dec.Decode([]byte(lines[1]), &got)
	omitted, ok := errors.AsType[*requestlog.OmittedError](err)
	if !ok || omitted.Bytes != limit+1 || omitted.Descriptors != 1 || !omitted.Time.Equal(beyond.Time) {
		t.Errorf("the record beyond the bound: Decode = %v, want an OmittedError of %d bytes, 1 descriptor, at %v", err, limit+1, beyond.Time)
	}
	if len(lines[1]) > 100 {
		t.Errorf("the marker takes %d bytes: %s", len(lines[1]), lines[1])
	}
	if n := gathered(t, reg, "ratelimitd_request_log_omitted_total"); n != 1 {
		t.Errorf("omitted_total = %v, want 1", n)
	}
	if n := gathered(t, reg, "ratelimitd_request_log_written_total"); n != 2 {
		t.Errorf("written_total = %v, want 2 (the marker is written)", n)
	}
}

// TestMaxRecordChecked: a bound the marker cannot fit in, or that replay
// cannot read, is refused.
func TestMaxRecordChecked(t *testing.T) {
	for _, n := range []int{-1, 100, requestlog.MaxLine + 1} {
		l, err := requestlog.Open(filepath.Join(t.TempDir(), "requests.log"), requestlog.Options{MaxRecord: n})
		if err == nil {
			l.Close()
			t.Errorf("Open with MaxRecord %d: no error", n)
		}
	}
}

// logFiles returns the domains of the lines of the log at path and of its
// rotated files, oldest first, and the files' sizes.
func logFiles(t *testing.T, path string) (doms []string, sizes []int64) {
	t.Helper()
	ext := filepath.Ext(path)
	backups, err := filepath.Glob(strings.TrimSuffix(path, ext) + "-*-size" + ext)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(backups) // by time: the names hold it, as text that sorts
	for _, f := range append(backups, path) {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", f, fi.Mode().Perm())
		}
		sizes = append(sizes, fi.Size())
		doms = append(doms, domains(t, f)...)
	}
	return doms, sizes
}

// TestRotation: with MaxSize, the file is rotated before it would reach
// MaxSize MiB, each rotation counted; the MaxBackups newest rotated files
// are kept, and they and the file hold the newest records, in order, each
// whole.
func TestRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "requests.log")
	reg := prometheus.NewRegistry()
	l, err := requestlog.Open(path, requestlog.Options{Sample: 1, MaxSize: 1, MaxBackups: 2, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	value := strings.Repeat("v", 10<<10) // lines of about 10 KiB: about 100 a file
	lineLen := len(requestlog.AppendLine(nil, valued(value))) + 2
	const n = 650
	var want []string
	for i := range n {
		r := valued(value)
		r.Domain = fmt.Sprint("d", i)
		want = append(want, r.Domain)
		l.Log(r)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if written, dropped := l.Counts(); written != n || dropped != 0 {
		t.Fatalf("written %d, dropped %d; want %d and 0", written, dropped, n)
	}
	got, sizes := logFiles(t, path)
	if len(sizes) != 3 {
		t.Errorf("%d files, want the log and 2 backups", len(sizes))
	}
	for _, s := range sizes {
		if s >= 1<<20 {
			t.Errorf("a file of %d bytes: want less than 1 MiB", s)
		}
	}
	if !slices.Equal(got, want[n-len(got):]) || len(got) < 2*(1<<20)/lineLen {
		t.Errorf("the files hold %d records, want the newest, in order, and at least two files' worth", len(got))
	}
	rotations := gathered(t, reg, "ratelimitd_request_log_rotations_total")
	if perFile := (1 << 20) / lineLen; rotations < float64(n/perFile) || rotations > float64(n/perFile+1) || uint64(rotations) != l.Rotations() {
		t.Errorf("rotations_total = %v (Rotations %d), want %d or %d", rotations, l.Rotations(), n/perFile, n/perFile+1)
	}
}

// TestRotationChecked: a size bound needs backups, and room for a record.
func TestRotationChecked(t *testing.T) {
	for _, opts := range []requestlog.Options{
		{MaxSize: -1, MaxBackups: 1},
		{MaxSize: 1, MaxBackups: 0},
		{MaxSize: 1, MaxBackups: -1},
		{MaxSize: 1, MaxBackups: 1, MaxRecord: 1 << 20},
	} {
		l, err := requestlog.Open(filepath.Join(t.TempDir(), "requests.log"), opts)
		if err == nil {
			l.Close()
			t.Errorf("Open(%+v): no error", opts)
		}
	}
}

// TestRotationAndReopen: a log rotated from outside (renamed, then
// reopened, as at SIGHUP) goes on rotating at its size in the new file;
// the file renamed from outside is not among the backups pruned.
func TestRotationAndReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "requests.log")
	l, err := requestlog.Open(path, requestlog.Options{Sample: 1, MaxSize: 1, MaxBackups: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	value := strings.Repeat("v", 10<<10)
	logN := func(from, n int) {
		for i := range n {
			r := valued(value)
			r.Domain = fmt.Sprint("d", from+i)
			l.Log(r)
		}
	}
	logN(0, 150) // one rotation
	if err := l.Reopen(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path, path+".1"); err != nil { // logrotate, then SIGHUP
		t.Fatal(err)
	}
	if err := l.Reopen(); err != nil {
		t.Fatal(err)
	}
	logN(150, 250) // two more
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := l.Rotations(); got != 3 {
		t.Errorf("Rotations = %d, want 3", got)
	}
	renamed := domains(t, path+".1")
	if len(renamed) == 0 || renamed[len(renamed)-1] != "d149" {
		t.Errorf("the file renamed from outside ends with %v, want d149 last", renamed[max(0, len(renamed)-1):])
	}
	got, sizes := logFiles(t, path)
	if len(sizes) != 2 || got[len(got)-1] != "d399" {
		t.Errorf("%d files ending with %v; want the log and 1 backup, ending with d399", len(sizes), got[max(0, len(got)-1):])
	}
}
