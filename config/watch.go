package config

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"
)

// WatchOptions configures a Watcher. The zero value means the defaults,
// but OnLoad should be set.
type WatchOptions struct {
	// OnLoad receives every new, valid rule set.
	OnLoad func(*Rules)
	// OnError receives every failed load; the caller keeps its rules.
	OnError func(error)
	// OnWatchError receives the errors of the file watch itself (an
	// overflow of events, say), which say nothing of the rules: the
	// watcher goes on, and polls. Nil discards them.
	OnWatchError func(error)
	// Debounce is how long the watcher waits for a burst of file events to
	// settle before it loads. Zero means 100ms.
	Debounce time.Duration
	// Poll is how often the watcher also checks the files without an
	// event, in case the file system reports none (network file systems, a
	// watched directory replaced). Zero means 5s.
	Poll time.Duration
	// Limits bound the work of each load, as WithLimits does for Load;
	// the zero value means DefaultLimits.
	Limits Limits
	// Options are given to each load after Limits, such as
	// WithDefaultAlgorithm.
	Options []Option
}

// A Watcher reloads rules from a path whenever its files change: edits,
// atomic renames (editors, config management) and Kubernetes ConfigMap
// updates, which swap a "..data" symlink in the mounted directory. It
// watches the directory (for a file, the file's directory), waits for the
// events of the rule files (and of "..data") to settle, and loads only when
// the content of the rule files changed and reads the same twice in a row,
// Debounce (or Poll, if shorter) apart. Events of other files in the
// directory are ignored. An invalid change is reported and the previous
// rules stay.
type Watcher struct {
	path  string
	opts  WatchOptions
	kick  chan struct{}
	ready chan struct{} // if not nil, closed once Run watches (for tests)
}

// NewWatcher returns a Watcher of path (a file or a directory, as Load
// takes). Call Run to start it.
func NewWatcher(path string, opts WatchOptions) *Watcher {
	if opts.Debounce <= 0 {
		opts.Debounce = 100 * time.Millisecond
	}
	if opts.Poll <= 0 {
		opts.Poll = 5 * time.Second
	}
	if opts.OnLoad == nil {
		opts.OnLoad = func(*Rules) {}
	}
	if opts.OnWatchError == nil {
		opts.OnWatchError = func(error) {}
	}
	if opts.OnError == nil {
		opts.OnError = func(error) {}
	}
	opts.Limits = opts.Limits.orDefaults()
	return &Watcher{path: path, opts: opts, kick: make(chan struct{}, 1)}
}

// Reload asks a running watcher to load the rules now, even if no file
// changed (as on SIGHUP). It does not wait.
func (w *Watcher) Reload() {
	select {
	case w.kick <- struct{}{}:
	default: // a reload is already pending
	}
}

// Run watches until ctx is done. current is the rule set in force, as
// Load returned it: Run loads again as soon as the files differ from what
// current was compiled from, even if they changed before Run started. With
// a nil current, Run loads at once.
// It returns an error only if it cannot watch at all.
func (w *Watcher) Run(ctx context.Context, current *Rules) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("config: watch %s: %w", w.path, err)
	}
	defer fw.Close()
	dir, isDir := w.path, true
	if fi, err := os.Stat(w.path); err == nil && !fi.IsDir() {
		dir, isDir = filepath.Dir(w.path), false
	}
	if err := fw.Add(dir); err != nil {
		return fmt.Errorf("config: watch %s: %w", dir, err)
	}
	if w.ready != nil {
		close(w.ready)
	}

	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()

	st := settler{settle: min(w.opts.Debounce, w.opts.Poll)}
	if current != nil {
		st.last = current.digest
	}
	load := func(force bool) {
		d, err := w.digest()
		if err != nil {
			d = "error: " + err.Error() // which must settle too, as a change
		}
		if !force {
			switch st.read(d, time.Now()) {
			case settling:
				debounce.Reset(w.opts.Debounce)
				return
			case unchanged, waiting:
				return
			}
		}
		rules, err := Load(w.path, append([]Option{WithLimits(w.opts.Limits)}, w.opts.Options...)...)
		if err != nil {
			if st.failed(d) || force {
				w.opts.OnError(err)
			}
			return
		}
		if rules.digest != d && !force {
			debounce.Reset(w.opts.Debounce) // changed again while loading
			return
		}
		st.loaded(rules.digest)
		w.opts.OnLoad(rules)
	}
	if current == nil {
		load(true)
	}

	poll := time.NewTicker(w.opts.Poll)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return errors.New("config: watcher closed")
			}
			if w.matters(ev.Name, dir, isDir) {
				st.event()
				debounce.Reset(w.opts.Debounce)
			}
		case err, ok := <-fw.Errors:
			if !ok {
				return errors.New("config: watcher closed")
			}
			w.opts.OnWatchError(fmt.Errorf("config: watch %s: %w", dir, err))
		case <-debounce.C:
			load(false)
		case <-poll.C:
			if !slices.Contains(fw.WatchList(), dir) {
				// The directory was removed, maybe replaced: watch it again.
				// If it is gone for good, load reports that below.
				_ = fw.Add(dir)
			}
			load(false)
		case <-w.kick:
			load(true)
		}
	}
}

// matters reports whether a file event on name, in the watched directory
// dir, may change the rules: an event on the watched path itself, on a
// Kubernetes ConfigMap's "..data" link, or, when the path is a directory
// (isDir), on one of its rule files. Other files of the directory may
// change all the time without delaying a load.
func (w *Watcher) matters(name, dir string, isDir bool) bool {
	name = filepath.Clean(name)
	switch {
	case name == filepath.Clean(w.path):
		return true
	case filepath.Dir(name) != filepath.Clean(dir):
		return false // not reached: only dir is watched
	case filepath.Base(name) == "..data":
		return true
	}
	return isDir && isRuleFile(filepath.Base(name))
}

// A settler decides when a change of the rule files may be loaded: once
// the files read the same twice, settle apart, with no file event between.
// A file written in place is empty or cut short for a moment, and a poll,
// or an event of an earlier change, may read it then. The watcher gives it
// every event and every reading of the files' digest, with the time of the
// reading, and does what it answers.
type settler struct {
	settle  time.Duration
	last    string    // the digest of the files behind the rules in force
	pending string    // a changed digest, not loaded yet
	since   time.Time // when pending was first read
}

// A verdict is what a settler answers to a reading of the files.
type verdict int

const (
	unchanged verdict = iota // the files are those of the rules in force
	settling                 // a new change: read again after the debounce
	waiting                  // not settled yet: the debounce timer, already set, reads again
	ready                    // load now
)

// event records a file event: the files are changing, and what was read
// may be gone.
func (s *settler) event() { s.pending = "" }

// read records that the files read as digest d at now.
func (s *settler) read(d string, now time.Time) verdict {
	switch {
	case d == s.last:
		s.pending = ""
		return unchanged
	case d != s.pending:
		s.pending, s.since = d, now
		return settling
	case now.Sub(s.since) < s.settle:
		return waiting
	}
	s.pending = ""
	return ready
}

// failed records that the files, read as d, did not load. It reports
// whether that is news: the first failure of that content.
func (s *settler) failed(d string) bool {
	news := d != s.last
	s.last, s.pending = d, "" // report a bad change once, not at every poll
	return news
}

// loaded records that the files, read as d, loaded.
func (s *settler) loaded(d string) { s.last, s.pending = d, "" }

// digest returns the fingerprint of the rule files at the watcher's path
// as they are now.
func (w *Watcher) digest() (string, error) {
	files, err := ruleFiles(w.path, w.opts.Limits.MaxFiles)
	if err != nil {
		return "", err
	}
	sum := newDigest()
	for _, f := range files {
		data, err := readFile(f, w.opts.Limits.MaxBytes)
		if err != nil {
			return "", err
		}
		sum.add(f, data)
	}
	return sum.String(), nil
}
