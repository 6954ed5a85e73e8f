package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// rulesWithLimit returns goodRules with a limit of n per minute on k.
func rulesWithLimit(n uint32) string {
	return strings.Replace(goodRules, "requests_per_unit: 3", fmt.Sprintf("requests_per_unit: %d", n), 1)
}

// A configDir changes rules.yaml in a watched rule directory in the ways
// people and tools do. It starts as a regular file; configMap turns it
// into Kubernetes's layout, rename turns it back.
type configDir struct {
	t       *testing.T
	dir     string
	version int    // numbers the ConfigMap's ..<timestamp> directories
	current string // the ..<timestamp> directory ..data points to, if any
}

func (c *configDir) file() string { return filepath.Join(c.dir, "rules.yaml") }

// inPlace truncates and rewrites rules.yaml, as `cat > rules.yaml` does.
func (c *configDir) inPlace(data string) {
	if fi, err := os.Lstat(c.file()); err != nil || !fi.Mode().IsRegular() {
		c.t.Fatalf("in place: rules.yaml is not a regular file (%v)", err)
	}
	writeFile(c.t, c.file(), data)
}

// rename writes a temporary file and renames it over rules.yaml, as
// editors and configuration management do.
func (c *configDir) rename(data string) {
	tmp := filepath.Join(c.dir, ".rules.yaml.tmp")
	writeFile(c.t, tmp, data)
	if err := os.Rename(tmp, c.file()); err != nil {
		c.t.Fatal(err)
	}
}

// configMap updates the directory as the kubelet updates a mounted
// ConfigMap: it writes ..<timestamp>/rules.yaml, points a new symbolic
// link at it and renames that over ..data, then removes the previous
// version. rules.yaml is a link to ..data/rules.yaml; if it is still a
// regular file (the first time, or after rename), a link is renamed over
// it last, which is then the change the daemon sees.
func (c *configDir) configMap(data string) {
	c.version++
	old := c.current
	c.current = fmt.Sprintf("..2026_01_01_00_00_00.%09d", c.version)
	if err := os.Mkdir(filepath.Join(c.dir, c.current), 0o755); err != nil {
		c.t.Fatal(err)
	}
	writeFile(c.t, filepath.Join(c.dir, c.current, "rules.yaml"), data)
	c.symlinkOver(c.current, filepath.Join(c.dir, "..data"))
	if fi, err := os.Lstat(c.file()); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		c.symlinkOver(filepath.Join("..data", "rules.yaml"), c.file())
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(c.dir, old)); err != nil {
			c.t.Fatal(err)
		}
	}
}

// behindTheWatch rewrites the file ..data points to, in place. The
// watcher watches the rule directory, not its subdirectories, so it gets
// no event: only SIGHUP (or the watcher's slow poll) loads the change.
func (c *configDir) behindTheWatch(data string) {
	if fi, err := os.Lstat(c.file()); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		c.t.Fatalf("behind the watch: rules.yaml is not a link to ..data (%v)", err)
	}
	writeFile(c.t, filepath.Join(c.dir, c.current, "rules.yaml"), data)
}

// symlinkOver atomically replaces link with a symbolic link to target.
func (c *configDir) symlinkOver(target, link string) {
	tmp := filepath.Join(filepath.Dir(link), "..tmp_link")
	if err := os.Symlink(target, tmp); err != nil {
		c.t.Fatal(err)
	}
	if err := os.Rename(tmp, link); err != nil {
		c.t.Fatal(err)
	}
}

// countLogs returns how many of the daemon's log records have message msg.
func (d *daemon) countLogs(msg string) int {
	return strings.Count(d.logs.String(), `"msg":"`+msg+`"`)
}

// TestReloadUnderLoad: 8 callers call ratelimitd without pause while its
// rules alternate 100 times between two sets, changed in 5 ways in turn.
// Each change takes effect, no call fails, every answer comes from one of
// the two sets, and no call that starts after a change took effect (and
// ends before the next one starts) sees the previous set.
//
// The test is not parallel, on purpose: SIGHUP goes to the whole test
// process, and Go runs no other test beside a test that is not parallel,
// so the daemon started here is the only one that hears it (the log
// confirms it did, once per signal).
func TestReloadUnderLoad(t *testing.T) {
	sets := [2]uint32{1000, 2000} // rule sets A and B, told apart by k's limit
	cfg := &configDir{t: t, dir: t.TempDir()}
	writeFile(t, cfg.file(), rulesWithLimit(sets[0]))
	// The watch settles each change for 25ms rather than 100ms: a change
	// it sees takes effect in some 70ms rather than 250ms, and the test in
	// some 10 s rather than 28 (2 cores, loaded). What is checked is the
	// same.
	d := startDaemonWith(t, func(f *flags) { f.watchDebounce = 25 * time.Millisecond }, "--config", cfg.dir)
	if got := d.limit(t); got != sets[0] {
		t.Fatalf("limit = %d at start, want %d", got, sets[0])
	}

	sighups := 0
	ways := []struct {
		name   string
		change func(data string)
	}{
		{"..data, first link", cfg.configMap}, // rules.yaml was a regular file
		{"SIGHUP", func(data string) {
			cfg.behindTheWatch(data)
			if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			sighups++
		}},
		{"..data swap", cfg.configMap},
		{"rename", cfg.rename}, // rules.yaml is a regular file again
		{"in place", cfg.inPlace},
	}

	// epoch is odd while change (epoch-1)/2 is known to be in force, with
	// limit inForce, and even while the next change is being made.
	var epoch atomic.Int64
	var inForce atomic.Uint32
	inForce.Store(sets[0])
	epoch.Store(1)

	var calls, checked atomic.Int64
	var mu sync.Mutex
	var problems []string
	problem := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(problems) < 10 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	ctx, stopLoad := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	client := rlsv3.NewRateLimitServiceClient(d.conn)
	for c := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				e0 := epoch.Load()
				want := inForce.Load()
				rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				resp, err := client.ShouldRateLimit(rctx, rlRequest("d", "k", fmt.Sprintf("c%d-%d", c, i%50)))
				cancel()
				e1 := epoch.Load()
				if ctx.Err() != nil {
					return
				}
				calls.Add(1)
				if err != nil {
					problem("call failed in epoch %d..%d: %v", e0, e1, err)
					continue
				}
				if len(resp.GetStatuses()) != 1 || !slices.Contains(sets[:], resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit()) {
					problem("answer in epoch %d..%d is from neither rule set: %v", e0, e1, resp)
					continue
				}
				got := resp.Statuses[0].CurrentLimit.RequestsPerUnit
				if e0 == e1 && e0%2 == 1 {
					checked.Add(1)
					if got != want {
						problem("answer in epoch %d, after change %d took effect: limit %d, want %d", e0, (e0-1)/2, got, want)
					}
				}
			}
		})
	}

	const changes = 100
	took := map[string][]time.Duration{}
	var all []time.Duration
	start := time.Now()
	for i := range changes {
		way := ways[i%len(ways)]
		next := sets[(i+1)%2]
		epoch.Add(1) // even: changing
		way.change(rulesWithLimit(next))
		changed := time.Now()
		for d.limit(t) != next {
			if time.Since(changed) > 10*time.Second {
				t.Fatalf("change %d (%s) to limit %d did not take effect; logs:\n%s", i, way.name, next, d.logs)
			}
			time.Sleep(2 * time.Millisecond)
		}
		lag := time.Since(changed)
		took[way.name] = append(took[way.name], lag)
		all = append(all, lag)
		inForce.Store(next)
		before := checked.Load()
		epoch.Add(1) // odd: in force
		// Let calls start and end under the new rules before the next
		// change, so the check of stale answers has something to check.
		for checked.Load() < before+8 {
			if time.Since(changed) > 10*time.Second {
				t.Fatalf("no calls completed after change %d", i)
			}
			time.Sleep(time.Millisecond)
		}
		if way.name == "SIGHUP" {
			for d.countLogs("SIGHUP: reloading rules") < sighups {
				if time.Since(changed) > 10*time.Second {
					t.Fatalf("the daemon logged %d SIGHUPs, want %d; logs:\n%s", d.countLogs("SIGHUP: reloading rules"), sighups, d.logs)
				}
				time.Sleep(2 * time.Millisecond)
			}
		}
	}
	elapsed := time.Since(start)
	stopLoad()
	wg.Wait()

	for _, p := range problems {
		t.Error(p)
	}
	if got := d.countLogs("SIGHUP: reloading rules"); got != sighups {
		t.Errorf("the daemon logged %d SIGHUPs, want the %d this test sent", got, sighups)
	}
	if calls.Load() == 0 {
		t.Error("no call completed during the changes")
	}
	t.Logf("%d changes in %v under %d calls (%d of them between a change's effect and the next change); %d reloads, %d rejected loads logged",
		changes, elapsed.Round(time.Millisecond), calls.Load(), checked.Load(), d.countLogs("rules reloaded"), d.countLogs("invalid rules; keeping the previous ones"))
	t.Logf("time to take effect: median %v, max %v", median(all), slices.Max(all).Round(100*time.Microsecond))
	for _, w := range ways {
		t.Logf("  %-18s median %v, max %v", w.name, median(took[w.name]), slices.Max(took[w.name]).Round(100*time.Microsecond))
	}
}

// median returns the median of ds, rounded to a tenth of a millisecond.
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2].Round(100 * time.Microsecond)
}
