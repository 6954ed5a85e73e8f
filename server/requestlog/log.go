package requestlog

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// DefaultBuffer is Options.Buffer when zero.
const DefaultBuffer = 8192

// DefaultMaxBytes is Options.MaxBytes when zero.
const DefaultMaxBytes = 64 << 20

// flushSize is how many bytes of whole lines the writer gathers before it
// writes them, when records keep coming. No write is longer than it or
// than one line.
const flushSize = 64 << 10

// MaxLine is the longest line of a request log, its newline included: the
// most Options.MaxRecord may be, and the longest line replay reads. The
// record of the largest request the daemon takes (1 MiB, whose line may
// take 1.43 bytes per byte of it) fits in it: package server's
// TestLargestRequestFitsLine checks it.
const MaxLine = 2 << 20

// DefaultMaxSize and DefaultMaxBackups are the daemon's
// --request-log-max-size (MiB) and --request-log-max-backups: at most
// 1000 MiB on disk, the file and its backups.
const (
	DefaultMaxSize    = 100
	DefaultMaxBackups = 9
)

// DefaultMaxRecord is Options.MaxRecord when zero: far more than a
// request of Envoy's (a few hundred bytes), far less than the largest a
// client may send.
const DefaultMaxRecord = 256 << 10

// minMaxRecord is the least Options.MaxRecord may be: room for the
// marker that replaces a longer record, and for ordinary records.
const minMaxRecord = 1 << 10

// Options configures a Log. The zero value means the defaults.
type Options struct {
	// Sample is the share of requests logged, from 0 to 1.
	Sample float64
	// Buffer is how many records may wait for the writer; past it, the
	// records are dropped and counted. Zero means DefaultBuffer.
	Buffer int
	// MaxBytes bounds the bytes of the records waiting for the writer (see
	// Record.Size): a record that would pass it is dropped and counted.
	// Zero means DefaultMaxBytes.
	MaxBytes int
	// MaxRecord bounds the bytes of a record's line: a longer one is
	// replaced by a marker that gives its time, length and number of
	// descriptors (see OmittedError), and counted. Zero means
	// DefaultMaxRecord; at most MaxLine.
	MaxRecord int
	// MaxSize, when positive, bounds the file, in MiB: before a write
	// that would take it to MaxSize, the file is renamed aside (its name
	// with the time and "-size" before its extension, such as
	// requests-2026-11-24T05-52-51.123-size.log) and a new one opened at
	// the path; the rotations are counted. Zero leaves the file unbounded,
	// for rotation from outside (Reopen). It must be more than MaxRecord.
	MaxSize int
	// MaxBackups is how many renamed files MaxSize keeps, the newest; at
	// least 1 when MaxSize is set. Older ones are removed as each new one
	// is made, and at Open.
	MaxBackups int
	// Reopen, when set, makes the writer close and reopen the file at
	// each value received, so that a log rotated from outside is let go
	// (SIGHUP).
	Reopen <-chan os.Signal
	// Registry, when set, receives the log's metrics.
	Registry prometheus.Registerer
	// Logger receives write errors; nil discards them.
	Logger *slog.Logger
}

// Log writes records to a file, off the decision path: Log hands a
// record to a bounded channel, and one goroutine encodes and writes
// them, until Close.
//
// Log is safe for concurrent use by multiple goroutines.
type Log struct {
	path    string
	sample  float64
	records chan *Record
	reopen  <-chan os.Signal
	reopens chan chan error
	quit    chan struct{} // closed by Close
	done    chan struct{} // closed when the writer has returned
	closed  atomic.Bool
	once    sync.Once
	log     *slog.Logger
	warn    rate.Sometimes // throttles the logging of write errors

	maxBytes  int64
	queued    atomic.Int64 // bytes of the records in the channel
	maxRecord int
	maxSize   int // MiB, 0: no bound
	backups   int

	file    io.WriteCloser // the writer's: an *os.File, or a *rotator with MaxSize
	out     io.Writer      // where lines are written: file, or a test's wrapper of it
	wrap    func(io.Writer) io.Writer
	pending []byte // whole lines waiting to be written
	lines   int    // how many records pending holds
	err     error  // the last flush's error, for Close

	written, dropped, errors, omitted, rotations atomic.Uint64
}

// Check returns what is wrong with o, nil if nothing.
func (o Options) Check() error {
	maxRecord := cmp.Or(o.MaxRecord, DefaultMaxRecord)
	var err error
	switch {
	case !(o.Sample >= 0 && o.Sample <= 1):
		err = fmt.Errorf("sample %v: want 0 to 1", o.Sample)
	case o.Buffer < 0 || o.MaxBytes < 0:
		err = fmt.Errorf("buffer %d, max bytes %d: want 0 (the default) or more", o.Buffer, o.MaxBytes)
	case o.MaxRecord != 0 && (o.MaxRecord < minMaxRecord || o.MaxRecord > MaxLine):
		err = fmt.Errorf("max record %d bytes: want %d to %d", o.MaxRecord, minMaxRecord, MaxLine)
	case o.MaxSize < 0 || o.MaxBackups < 0:
		err = fmt.Errorf("max size %d MiB, max backups %d: want 0 or more", o.MaxSize, o.MaxBackups)
	case o.MaxSize > 0 && o.MaxBackups == 0:
		err = fmt.Errorf("max size %d MiB: want max backups of 1 or more", o.MaxSize)
	case o.MaxSize > 0 && int64(max(maxRecord, flushSize)) >= int64(o.MaxSize)*mib:
		err = fmt.Errorf("max size %d MiB: want more than the max record, %d bytes", o.MaxSize, maxRecord)
	}
	if err != nil {
		return fmt.Errorf("request log: %w", err)
	}
	return nil
}

// Open opens the file at path for appending (creating it, readable by
// its owner only: values may be personal data) and starts the writer.
//
// A file that does not end in a newline (the daemon stopped in the middle
// of a line) gets one before the first record, so that the torn line
// stays alone on its line.
func Open(path string, opts Options) (*Log, error) {
	return open(path, opts, nil)
}

// open is Open, writing through wrap(file) when wrap is set (tests).
func open(path string, opts Options, wrap func(io.Writer) io.Writer) (*Log, error) {
	if err := opts.Check(); err != nil {
		return nil, err
	}
	maxRecord := cmp.Or(opts.MaxRecord, DefaultMaxRecord)
	l := &Log{
		path:      path,
		sample:    opts.Sample,
		records:   make(chan *Record, cmp.Or(opts.Buffer, DefaultBuffer)),
		reopen:    opts.Reopen,
		reopens:   make(chan chan error),
		quit:      make(chan struct{}),
		done:      make(chan struct{}),
		log:       cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)),
		warn:      rate.Sometimes{First: 1, Interval: 10 * time.Second},
		maxBytes:  int64(cmp.Or(opts.MaxBytes, DefaultMaxBytes)),
		maxRecord: maxRecord,
		maxSize:   opts.MaxSize,
		backups:   opts.MaxBackups,
		wrap:      wrap,
	}
	f, torn, err := l.openPath()
	if err != nil {
		return nil, err
	}
	l.use(f, torn)
	if opts.Registry != nil {
		opts.Registry.MustRegister(
			counterFunc("ratelimitd_request_log_written_total", "Requests written to the request log (--request-log).", &l.written),
			counterFunc("ratelimitd_request_log_dropped_total", "Sampled requests left out of the request log because its writer was behind (queue full in records or bytes).", &l.dropped),
			counterFunc("ratelimitd_request_log_errors_total", "Failed writes and reopenings of the request log.", &l.errors),
			counterFunc("ratelimitd_request_log_rotations_total", "Rotations of the request log at --request-log-max-size.", &l.rotations),
			counterFunc("ratelimitd_request_log_omitted_total", "Requests whose record was over --request-log-max-record bytes, written as a marker with its size instead.", &l.omitted),
		)
	}
	go l.run()
	return l, nil
}

// openPath opens the file at the log's path for appending: the file
// itself, or with a size bound its rotator. It reports whether the file
// ends in a torn line.
func (l *Log) openPath() (io.WriteCloser, bool, error) {
	f, size, torn, err := openFile(l.path)
	if err != nil {
		return nil, false, err
	}
	if l.maxSize == 0 {
		return f, torn, nil
	}
	// The rotator opens the file itself, on its first write.
	if err := f.Close(); err != nil {
		return nil, false, fmt.Errorf("request log: %w", err)
	}
	return newRotator(l.path, size, l.maxSize, l.backups, &l.rotations), torn, nil
}

// openFile opens path for appending, creating it, and returns its size
// and whether it ends in a torn line: it is not empty, and its last byte
// is no newline.
func openFile(path string) (*os.File, int64, bool, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	readable := true
	if errors.Is(err, fs.ErrPermission) { // writable, not readable: appended to unchecked
		f, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		readable = false
	}
	if err != nil {
		return nil, 0, false, fmt.Errorf("request log: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		return f, 0, false, nil // its size unknown: appended to unchecked
	}
	if !readable || fi.Size() == 0 {
		return f, fi.Size(), false, nil
	}
	last := make([]byte, 1)
	if _, err := f.ReadAt(last, fi.Size()-1); err != nil {
		f.Close() //nolint:errcheck // nothing written
		return nil, 0, false, fmt.Errorf("request log %s: reading its last byte: %w", path, err)
	}
	return f, fi.Size(), last[0] != '\n', nil
}

// use makes f the file written, ending its torn line first when torn.
func (l *Log) use(f io.WriteCloser, torn bool) {
	l.file, l.out = f, f
	if l.wrap != nil {
		l.out = l.wrap(f)
	}
	l.pending, l.lines = l.pending[:0], 0
	if torn {
		l.pending = append(l.pending, '\n')
	}
}

// Sample reports whether to log the next request: true for the share of
// calls Options.Sample says. A nil Log samples nothing.
func (l *Log) Sample() bool {
	if l == nil {
		return false
	}
	switch l.sample {
	case 1:
		return true
	case 0:
		return false
	}
	return rand.Float64() < l.sample
}

// Log hands r to the writer, which owns it from then on, or drops it when
// the writer is behind (the queue holds Options.Buffer records, or
// Options.MaxBytes bytes with r) or closed. It never waits.
func (l *Log) Log(r *Record) {
	if l.closed.Load() {
		l.dropped.Add(1)
		return
	}
	n := int64(r.Size())
	if l.queued.Add(n) > l.maxBytes {
		l.queued.Add(-n)
		l.dropped.Add(1)
		return
	}
	select {
	case l.records <- r:
	default:
		l.queued.Add(-n)
		l.dropped.Add(1)
	}
}

// Reopen closes and reopens the file, after writing to it the records
// handed to Log before.
func (l *Log) Reopen() error {
	answer := make(chan error, 1)
	select {
	case l.reopens <- answer:
		return <-answer
	case <-l.done:
		return fmt.Errorf("request log %s: closed", l.path)
	}
}

// Close writes the records handed to Log before it, stops the writer and
// closes the file. Records logged during Close may be dropped.
func (l *Log) Close() error {
	var err error
	l.once.Do(func() {
		l.closed.Store(true)
		close(l.quit)
		<-l.done
		err = l.err
		if cerr := l.file.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			err = fmt.Errorf("request log %s: %w", l.path, err)
		}
	})
	return err
}

// run is the writer: it writes records until Close, flushing whenever
// none is waiting.
func (l *Log) run() {
	defer close(l.done)
	for {
		select {
		case r := <-l.records:
			l.write(r)
			if len(l.records) == 0 {
				l.flush()
			}
		case answer := <-l.reopens:
			answer <- l.doReopen()
		case <-l.reopen:
			if err := l.doReopen(); err != nil {
				l.log.Error("reopening the request log", "err", err)
			}
		case <-l.quit:
			l.drain()
			l.flush()
			return // Close closes the file
		}
	}
}

// write encodes r into the pending lines (a marker in its place when its
// line is over the bound), and writes them once they are many.
func (l *Log) write(r *Record) {
	l.queued.Add(-int64(r.Size()))
	start := len(l.pending)
	l.pending = AppendLine(l.pending, r)
	if n := len(l.pending) - start; n > l.maxRecord {
		l.pending = appendOmitted(l.pending[:start], r, n)
		l.omitted.Add(1)
	}
	if start > 0 && len(l.pending) > flushSize {
		l.flushFirst(start) // the lines before r's: no write is longer than flushSize or than one line
	}
	l.lines++
	if len(l.pending) >= flushSize {
		l.flush()
	}
}

// flush writes the pending lines to the file.
func (l *Log) flush() { l.flushFirst(len(l.pending)) }

// flushFirst writes the first n bytes of the pending lines, which hold
// l.lines whole lines, in one Write so that a failure leaves at most one
// torn line; the next line after it starts on a line of its own. The
// bytes after n stay pending, as a line not yet counted.
func (l *Log) flushFirst(n int) {
	l.err = nil
	if n == 0 {
		return
	}
	w, err := l.out.Write(l.pending[:n])
	l.err = err
	if err == nil {
		l.written.Add(uint64(l.lines))
	} else {
		l.written.Add(uint64(bytes.Count(l.pending[:w], []byte{'\n'})))
		l.fail(err)
	}
	k := 0
	if w > 0 && w < n && l.pending[w-1] != '\n' { // torn: end it
		l.pending[0], k = '\n', 1
	}
	l.pending = l.pending[:k+copy(l.pending[k:], l.pending[n:])]
	if cap(l.pending) > 4*flushSize && len(l.pending) < flushSize {
		l.pending = append([]byte(nil), l.pending...) // after a huge record, not kept
	}
	l.lines = 0
}

// fail counts a write error, and logs it unless one was logged in the
// last few seconds (a full disk fails every flush).
func (l *Log) fail(err error) {
	total := l.errors.Add(1)
	l.warn.Do(func() {
		l.log.Error("writing the request log", "path", l.path, "err", err, "errors_total", total)
	})
}

// doReopen writes the records waiting to the file, opens the file at the
// log's path anew and, once it is open, closes the old one. When the path
// cannot be opened, the log goes on writing to the old file.
func (l *Log) doReopen() error {
	l.drain()
	l.flush()
	l.flush() // the newline after a line torn by the first, if any
	f, torn, err := l.openPath()
	if err != nil {
		l.errors.Add(1)
		return err
	}
	if err := l.file.Close(); err != nil {
		l.fail(err) // written and flushed: nothing left to lose
	}
	l.use(f, torn)
	return nil
}

// drain writes the records waiting, without flushing.
func (l *Log) drain() {
	for {
		select {
		case r := <-l.records:
			l.write(r)
		default:
			return
		}
	}
}

// appendOmitted appends the marker that stands for r, whose line would
// take n bytes.
func appendOmitted(b []byte, r *Record, n int) []byte {
	b = append(b, `{"time":"`...)
	b = r.Time.UTC().AppendFormat(b, timeFormat)
	b = append(b, `","omitted":{"bytes":`...)
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, `,"descriptors":`...)
	b = strconv.AppendInt(b, int64(len(r.Descriptors)), 10)
	return append(b, "}}\n"...)
}

// Rotations returns how many times the file was rotated at Options.MaxSize.
func (l *Log) Rotations() uint64 { return l.rotations.Load() }

// Counts returns how many records were written and dropped.
func (l *Log) Counts() (written, dropped uint64) {
	return l.written.Load(), l.dropped.Load()
}

// counterFunc returns a counter of the metric name reading v.
func counterFunc(name, help string, v *atomic.Uint64) prometheus.CounterFunc {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v.Load()) })
}
