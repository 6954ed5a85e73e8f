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
}

// A Watcher reloads rules from a path whenever its files change: edits,
// atomic renames (editors, config management) and Kubernetes ConfigMap
// updates, which swap a "..data" symlink in the mounted directory. It
// watches the directory (for a file, the file's directory), waits for
// events to settle, and loads only when the content of the rule files
// changed and reads the same twice in a row, Debounce (or Poll, if
// shorter) apart. An invalid
// change is reported and the previous rules stay.
type Watcher struct {
	path string
	opts WatchOptions
	kick chan struct{}
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
	dir := w.path
	if fi, err := os.Stat(w.path); err == nil && !fi.IsDir() {
		dir = filepath.Dir(w.path)
	}
	if err := fw.Add(dir); err != nil {
		return fmt.Errorf("config: watch %s: %w", dir, err)
	}

	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()

	last := "" // the digest of the files behind the rules in force
	if current != nil {
		last = current.digest
	}
	// A change is loaded once the files read the same twice, settle apart
	// and with no file event between: a file written in place is empty or
	// cut short for a moment, and a poll, or an event of an earlier change,
	// may read it then.
	settle := min(w.opts.Debounce, w.opts.Poll)
	var (
		pending      string    // a changed digest, not loaded yet
		pendingSince time.Time // when it was first read
	)
	load := func(force bool) {
		d, err := w.digest()
		if err != nil {
			d = "error: " + err.Error() // which must settle too, as a change
		}
		if err == nil && d == last && !force {
			pending = ""
			return
		}
		if !force && d != pending {
			pending, pendingSince = d, time.Now()
			debounce.Reset(w.opts.Debounce)
			return
		}
		if !force && time.Since(pendingSince) < settle {
			return // the debounce timer looks again
		}
		pending = ""
		rules, err := Load(w.path, WithLimits(w.opts.Limits))
		if err != nil {
			if d != last || force {
				w.opts.OnError(err)
			}
			last = d // report a bad change once, not at every poll
			return
		}
		if rules.digest != d && !force {
			debounce.Reset(w.opts.Debounce) // changed again while loading
			return
		}
		last = rules.digest
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
		case _, ok := <-fw.Events:
			if !ok {
				return errors.New("config: watcher closed")
			}
			pending = "" // the files are changing: what was read may be gone
			debounce.Reset(w.opts.Debounce)
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

// digest returns the fingerprint of the rule files at the watcher's path
// as they are now.
func (w *Watcher) digest() (string, error) {
	files, err := ruleFiles(w.path, w.opts.Limits.MaxFiles)
	if err != nil {
		return "", err
	}
	sum := newDigest()
	for _, f := range files {
		data, err := readFile(f, w.opts.Limits.MaxFileBytes)
		if err != nil {
			return "", err
		}
		sum.add(f, data)
	}
	return sum.String(), nil
}
