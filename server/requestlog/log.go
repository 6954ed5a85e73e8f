package requestlog

import (
	"bufio"
	"cmp"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultBuffer is Options.Buffer when zero.
const DefaultBuffer = 8192

// Options configures a Log. The zero value means the defaults.
type Options struct {
	// Sample is the share of requests logged, from 0 to 1.
	Sample float64
	// Buffer is how many records may wait for the writer; past it, the
	// records are dropped and counted. Zero means DefaultBuffer.
	Buffer int
	// Reopen, when set, makes the writer close and reopen the file at
	// each value received, so that a rotated log is let go (SIGHUP).
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

	file *os.File // the writer's
	w    *bufio.Writer

	written, dropped, errors atomic.Uint64
}

// Open opens the file at path for appending (creating it, readable by
// its owner only: values may be personal data) and starts the writer.
func Open(path string, opts Options) (*Log, error) {
	if !(opts.Sample >= 0 && opts.Sample <= 1) {
		return nil, fmt.Errorf("request log sample %v: want 0 to 1", opts.Sample)
	}
	f, err := openFile(path)
	if err != nil {
		return nil, err
	}
	l := &Log{
		path:    path,
		sample:  opts.Sample,
		records: make(chan *Record, cmp.Or(opts.Buffer, DefaultBuffer)),
		reopen:  opts.Reopen,
		reopens: make(chan chan error),
		quit:    make(chan struct{}),
		done:    make(chan struct{}),
		log:     cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)),
		file:    f,
		w:       bufio.NewWriterSize(f, 64<<10),
	}
	if opts.Registry != nil {
		opts.Registry.MustRegister(
			counterFunc("ratelimitd_request_log_written_total", "Requests written to the request log (--request-log).", &l.written),
			counterFunc("ratelimitd_request_log_dropped_total", "Sampled requests left out of the request log because its writer was behind.", &l.dropped),
			counterFunc("ratelimitd_request_log_errors_total", "Failed writes and reopenings of the request log.", &l.errors),
		)
	}
	go l.run()
	return l, nil
}

// openFile opens path for appending.
func openFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("request log: %w", err)
	}
	return f, nil
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
// the writer is behind (or closed). It never waits.
func (l *Log) Log(r *Record) {
	if l.closed.Load() {
		l.dropped.Add(1)
		return
	}
	select {
	case l.records <- r:
	default:
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
		err = l.w.Flush()
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
	var buf []byte
	for {
		select {
		case r := <-l.records:
			buf = l.write(buf, r)
			if len(l.records) == 0 {
				l.flush()
			}
		case answer := <-l.reopens:
			var err error
			buf, err = l.doReopen(buf)
			answer <- err
		case <-l.reopen:
			var err error
			if buf, err = l.doReopen(buf); err != nil {
				l.log.Error("reopening the request log", "err", err)
			}
		case <-l.quit:
			l.drain(buf)
			return // Close flushes
		}
	}
}

// write encodes r into buf and writes it.
func (l *Log) write(buf []byte, r *Record) []byte {
	buf = AppendLine(buf[:0], r)
	if _, err := l.w.Write(buf); err != nil {
		l.fail(err)
		return buf
	}
	l.written.Add(1)
	return buf
}

// flush writes what is buffered to the file.
func (l *Log) flush() {
	if err := l.w.Flush(); err != nil {
		l.fail(err)
	}
}

// fail counts and logs a write error; the buffer drops what it held, so
// that the next writes may succeed.
func (l *Log) fail(err error) {
	l.errors.Add(1)
	l.log.Error("writing the request log", "path", l.path, "err", err)
	l.w.Reset(l.file)
}

// doReopen opens the file at the log's path anew and, once it is open,
// writes the records waiting to the old one, and closes it. When the path
// cannot be opened, the log goes on writing to the old file.
func (l *Log) doReopen(buf []byte) ([]byte, error) {
	f, err := openFile(l.path)
	if err != nil {
		l.errors.Add(1)
		return buf, err
	}
	buf = l.drain(buf)
	l.flush()
	l.file.Close() //nolint:errcheck // written and flushed: nothing left to lose
	l.file = f
	l.w.Reset(f)
	return buf, nil
}

// drain writes the records waiting, without flushing.
func (l *Log) drain(buf []byte) []byte {
	for {
		select {
		case r := <-l.records:
			buf = l.write(buf, r)
		default:
			return buf
		}
	}
}

// Counts returns how many records were written and dropped.
func (l *Log) Counts() (written, dropped uint64) {
	return l.written.Load(), l.dropped.Load()
}

// counterFunc returns a counter of the metric name reading v.
func counterFunc(name, help string, v *atomic.Uint64) prometheus.CounterFunc {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v.Load()) })
}
