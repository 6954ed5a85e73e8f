// Package deploy_test checks what deploy/ ships against the daemon it
// deploys and observes: the Helm chart (helm/ratelimitd: lint, render with
// each values file under ci/, every object decoded strictly into its
// Kubernetes type, the Deployment's flags against ratelimitd --help), the
// alerts (prometheus/: promtool's unit tests), and the Grafana dashboard
// (grafana/: every query parses, and every metric it and the alerts name
// is served by a real daemon after traffic).
//
// It is a module of its own, so that Helm's and Kubernetes's packages never
// enter ratelimitd's go.mod. .ci/test-deploy runs it (make test).
package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// repoRoot is the repository's root, relative to this package.
const repoRoot = ".."

var tmpDir string

func TestMain(m *testing.M) {
	var err error
	tmpDir, err = os.MkdirTemp("", "ratelimitd-deploy-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(tmpDir)
	os.Exit(code)
}

// requireTool returns the path of the program name, which a test needs:
// outside CI it skips the test when name is missing, under CI=true it
// fails it (make deps installs it).
func requireTool(t *testing.T, name, install string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	msg := fmt.Sprintf("%s is not on PATH (%s)", name, install)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip("SKIPPED: " + msg)
	return ""
}

var daemon struct {
	once sync.Once
	path string
	err  error
}

// daemonBinary returns the path of ratelimitd: $RATELIMITD_BIN (make test
// sets it to bin/ratelimitd), or else one built from this checkout.
func daemonBinary(t *testing.T) string {
	t.Helper()
	daemon.once.Do(func() {
		if bin := os.Getenv("RATELIMITD_BIN"); bin != "" {
			daemon.path, daemon.err = filepath.Abs(bin)
			return
		}
		path := filepath.Join(tmpDir, "ratelimitd")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", path, "./cmd/ratelimitd")
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			daemon.err = fmt.Errorf("go build ./cmd/ratelimitd: %w\n%s", err, out)
			return
		}
		daemon.path = path
	})
	if daemon.err != nil {
		t.Fatal(daemon.err)
	}
	return daemon.path
}

var helpFlag = regexp.MustCompile(`^  -([a-z0-9-]+)`)

var flagSet struct {
	once  sync.Once
	names map[string]bool
	err   error
}

// daemonFlags returns the names of the flags ratelimitd --help lists.
func daemonFlags(t *testing.T) map[string]bool {
	t.Helper()
	bin := daemonBinary(t)
	flagSet.once.Do(func() {
		// --help prints the usage and exits 0.
		out, err := exec.Command(bin, "--help").CombinedOutput()
		if err != nil {
			flagSet.err = fmt.Errorf("ratelimitd --help: %w\n%s", err, out)
			return
		}
		flagSet.names = map[string]bool{}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			if m := helpFlag.FindStringSubmatch(sc.Text()); m != nil {
				flagSet.names[m[1]] = true
			}
		}
		if len(flagSet.names) < 50 || !flagSet.names["config"] || !flagSet.names["backend"] {
			flagSet.err = fmt.Errorf("ratelimitd --help lists %d flags, without config or backend: is it the daemon?\n%s", len(flagSet.names), out)
		}
	})
	if flagSet.err != nil {
		t.Fatal(flagSet.err)
	}
	return flagSet.names
}

// envFlag returns the flag that the variable RATELIMITD_<NAME> sets.
func envFlag(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, "RATELIMITD_")
	return strings.ReplaceAll(strings.ToLower(rest), "_", "-"), ok
}
