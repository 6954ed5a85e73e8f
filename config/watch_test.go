package config_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/config"
)

// Reloads must take effect within 2 seconds; the tests allow far more so
// that a loaded machine does not fail them, and fail only on a lost event.
const reloadWithin = 10 * time.Second

func rulesYAML(requests int) string {
	return "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: " + strconv.Itoa(requests) + "}\n"
}

// requestsOf returns the limit of rule k in rules.
func requestsOf(t *testing.T, r *config.Rules) uint64 {
	t.Helper()
	rule := config.Match(r.Domain("d"), []entry{{"k", "v"}})
	if rule == nil || len(rule.Limits) != 1 {
		t.Fatalf("rules have no limit for k: %+v", rule)
	}
	return rule.Limits[0].Requests
}

type entry struct{ k, v string }

func (e entry) GetKey() string   { return e.k }
func (e entry) GetValue() string { return e.v }

// watch runs a Watcher of path until the test ends and returns its loads
// and errors.
func watch(t *testing.T, path string) (loads chan *config.Rules, errs chan error, w *config.Watcher) {
	t.Helper()
	current, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	loads, errs = make(chan *config.Rules, 10), make(chan error, 10)
	w = config.NewWatcher(path, config.WatchOptions{
		OnLoad:  func(r *config.Rules) { loads <- r },
		OnError: func(err error) { errs <- err },
		Poll:    time.Hour, // events alone must do
	})
	ready := config.WatchReady(w)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, current) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v after cancel, want nil", err)
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run() = %v before watching", err)
	}
	return loads, errs, w
}

func waitLoad(t *testing.T, loads chan *config.Rules, errs chan error) *config.Rules {
	t.Helper()
	select {
	case r := <-loads:
		return r
	case err := <-errs:
		t.Fatalf("reload failed: %v", err)
	case <-time.After(reloadWithin):
		t.Fatalf("no reload within %v", reloadWithin)
	}
	return nil
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestWatchFileEdit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	write(t, path, rulesYAML(1))
	loads, errs, _ := watch(t, path)
	write(t, path, rulesYAML(2))
	if got := requestsOf(t, waitLoad(t, loads, errs)); got != 2 {
		t.Errorf("after the edit, requests = %d, want 2", got)
	}
}

func TestWatchInvalidEditKeepsOldRules(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	write(t, path, rulesYAML(1))
	loads, errs, _ := watch(t, dir)
	write(t, path, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 3}\n")
	select {
	case err := <-errs:
		if !strings.Contains(err.Error(), "rules.yaml:4:") || !strings.Contains(err.Error(), "fortnight") {
			t.Errorf("error %q does not name the file, the line and the problem", err)
		}
	case r := <-loads:
		t.Fatalf("an invalid change was loaded: %+v", r)
	case <-time.After(reloadWithin):
		t.Fatal("no error reported for an invalid change")
	}
	write(t, path, rulesYAML(3))
	if got := requestsOf(t, waitLoad(t, loads, errs)); got != 3 {
		t.Errorf("after the fix, requests = %d, want 3", got)
	}
}

func TestWatchAtomicRename(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	write(t, path, rulesYAML(1))
	loads, errs, _ := watch(t, path)
	tmp := filepath.Join(dir, ".rules.yaml.swp")
	write(t, tmp, rulesYAML(4))
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	if got := requestsOf(t, waitLoad(t, loads, errs)); got != 4 {
		t.Errorf("after an atomic rename, requests = %d, want 4", got)
	}
}

// TestWatchConfigMapSwap follows what the kubelet does to a mounted
// ConfigMap: the files are symlinks through "..data", a symlink to a
// timestamped directory, which an update replaces by a rename.
func TestWatchConfigMapSwap(t *testing.T) {
	for _, target := range []string{"dir", "file"} {
		t.Run(target, func(t *testing.T) {
			dir := t.TempDir()
			v1, v2 := filepath.Join(dir, "..2026_11_22_v1"), filepath.Join(dir, "..2026_11_22_v2")
			for i, v := range []string{v1, v2} {
				if err := os.Mkdir(v, 0o755); err != nil {
					t.Fatal(err)
				}
				write(t, filepath.Join(v, "rules.yaml"), rulesYAML(10+i))
			}
			if err := os.Symlink(filepath.Base(v1), filepath.Join(dir, "..data")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("..data/rules.yaml", filepath.Join(dir, "rules.yaml")); err != nil {
				t.Fatal(err)
			}
			path := dir
			if target == "file" {
				path = filepath.Join(dir, "rules.yaml")
			}
			loads, errs, _ := watch(t, path)
			if err := os.Symlink(filepath.Base(v2), filepath.Join(dir, "..data_tmp")); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
				t.Fatal(err)
			}
			if got := requestsOf(t, waitLoad(t, loads, errs)); got != 11 {
				t.Errorf("after the ..data swap, requests = %d, want 11", got)
			}
		})
	}
}

// TestWatchBusyDirectory: other files of the watched directory, written
// every few milliseconds, do not hold back the load of a change to the
// rule files.
func TestWatchBusyDirectory(t *testing.T) {
	for _, tc := range []struct {
		name   string
		watch  string   // "file" or "dir"
		others []string // written all the time
	}{
		{"file beside another rule file", "file", []string{"other.yaml"}},
		{"directory with other files", "dir", []string{"notes.txt", ".rules.yaml.swp", "..2026_11_22_v1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "rules.yaml")
			write(t, path, rulesYAML(1))
			for _, o := range tc.others {
				write(t, filepath.Join(dir, o), "domain: other\n")
			}
			watched := path
			if tc.watch == "dir" {
				watched = dir
			}
			loads, errs, _ := watch(t, watched)
			stop, stopped := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(stopped)
				tick := time.NewTicker(3 * time.Millisecond)
				defer tick.Stop()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					case <-tick.C:
						o := filepath.Join(dir, tc.others[i%len(tc.others)])
						if err := os.WriteFile(o, []byte("domain: other"+strconv.Itoa(i)+"\n"), 0o644); err != nil {
							t.Error(err)
							return
						}
					}
				}
			}()
			t.Cleanup(func() { close(stop); <-stopped })
			write(t, path, rulesYAML(2))
			if got := requestsOf(t, waitLoad(t, loads, errs)); got != 2 {
				t.Errorf("after the edit, requests = %d, want 2", got)
			}
		})
	}
}

func TestWatchSameContentDoesNotReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	write(t, path, rulesYAML(1))
	loads, errs, w := watch(t, path)
	write(t, path, rulesYAML(1)) // an event, no change
	select {
	case r := <-loads:
		t.Fatalf("an unchanged file was reloaded: %+v", r)
	case err := <-errs:
		t.Fatal(err)
	case <-time.After(time.Second):
	}
	w.Reload() // as on SIGHUP: load even without a change
	if got := requestsOf(t, waitLoad(t, loads, errs)); got != 1 {
		t.Errorf("after Reload, requests = %d, want 1", got)
	}
}

func TestWatchPollsWithoutEvents(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	write(t, path, rulesYAML(1))
	current, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	loads := make(chan *config.Rules, 1)
	w := config.NewWatcher(path, config.WatchOptions{
		OnLoad:   func(r *config.Rules) { loads <- r },
		Debounce: time.Hour, // events never settle: only the poll can load
		Poll:     100 * time.Millisecond,
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, current) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v after cancel, want nil", err)
		}
	}()
	write(t, path, rulesYAML(5))
	select {
	case r := <-loads:
		if got := requestsOf(t, r); got != 5 {
			t.Errorf("requests = %d, want 5", got)
		}
	case <-time.After(reloadWithin):
		t.Fatal("the poll did not pick up the change")
	}
}

func TestWatchMissingPath(t *testing.T) {
	w := config.NewWatcher(filepath.Join(t.TempDir(), "nope", "rules.yaml"), config.WatchOptions{})
	if err := w.Run(t.Context(), nil); err == nil {
		t.Error("Run(missing directory) = nil, want an error")
	}
}
