package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/server"
)

func TestMain(m *testing.M) {
	if os.Getenv(asDaemon) == "1" {
		main() // a child process of a test: see startProcess
		return
	}
	goleak.VerifyTestMain(m)
}

// noEnv is an empty environment.
func noEnv(string) (string, bool) { return "", false }

// env is the environment kv.
func env(kv map[string]string) lookupEnv {
	return func(k string) (string, bool) {
		v, ok := kv[k]
		return v, ok
	}
}

func TestFlagPrecedence(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want func(*flags) bool
	}{
		{"default", []string{"--config", "x"}, nil, func(f *flags) bool {
			return f.grpcAddr == "127.0.0.1:8081" && f.httpAddr == "127.0.0.1:8080" && f.backend == "memory" &&
				f.headers == server.HeadersIETF && !f.shadowMode && f.memoryMaxKeys == 1_000_000 && f.logLevel == slog.LevelInfo
		}},
		{"env over default", []string{"--config", "x"}, map[string]string{
			"RATELIMITD_GRPC_ADDR": "0.0.0.0:9000", "RATELIMITD_RESPONSE_HEADERS": "legacy", "RATELIMITD_SHADOW_MODE": "true",
			"RATELIMITD_MEMORY_MAX_KEYS": "500", "RATELIMITD_SHUTDOWN_TIMEOUT": "50ms", "RATELIMITD_LOG_LEVEL": "debug",
		}, func(f *flags) bool {
			return f.grpcAddr == "0.0.0.0:9000" && f.headers == server.HeadersLegacy && f.shadowMode &&
				f.memoryMaxKeys == 500 && f.shutdownTimeout == 50*time.Millisecond && f.logLevel == slog.LevelDebug
		}},
		{"flag over env", []string{"--config", "x", "--grpc-addr", ":1", "--shadow-mode=false"}, map[string]string{
			"RATELIMITD_GRPC_ADDR": ":2", "RATELIMITD_SHADOW_MODE": "true",
		}, func(f *flags) bool { return f.grpcAddr == ":1" && !f.shadowMode }},
		{"config from env", nil, map[string]string{"RATELIMITD_CONFIG": "/etc/rl"}, func(f *flags) bool { return f.config == "/etc/rl" }},
		{"default algorithm", []string{"--config", "x"}, map[string]string{"RATELIMITD_DEFAULT_ALGORITHM": "fixed_window"}, func(f *flags) bool {
			return f.defaultAlgorithm == backend.FixedWindow
		}},
		{"sliding window by default", []string{"--config", "x"}, nil, func(f *flags) bool { return f.defaultAlgorithm == backend.SlidingWindow }},
		{"xds", []string{"--xds-server", "xds:18000", "--xds-node-id", "n", "--xds-headers", "a=1, B = 2", "--xds-insecure-headers", "--xds-node-metadata", `{"zone": "z"}`}, nil, func(f *flags) bool {
			h, err := f.xds.headerMap()
			m, merr := f.xds.metadata()
			return err == nil && merr == nil && h["a"] == "1" && h["B"] == "2" && len(h) == 2 && m.GetFields()["zone"].GetStringValue() == "z"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			f, err := parseFlags(tt.args, env(tt.env), &stderr)
			if err != nil {
				t.Fatalf("parseFlags() error: %v (%s)", err, stderr.String())
			}
			if !tt.want(f) {
				t.Errorf("parseFlags(%q, %v) = %+v", tt.args, tt.env, *f)
			}
		})
	}
}

func TestBadFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string // in stderr
	}{
		{"no config", nil, nil, "no rules: set --config or --xds-server"},
		{"two rules sources", []string{"--config", "x", "--xds-server", "127.0.0.1:1", "--xds-node-id", "n"}, nil, "exclude each other"},
		{"xds without node", []string{"--xds-server", "127.0.0.1:1"}, nil, "--xds-node-id"},
		{"xds headers in plaintext", []string{"--xds-server", "127.0.0.1:1", "--xds-node-id", "n", "--xds-headers", "authorization=Bearer x"}, nil, "--xds-insecure-headers"},
		{"bad xds headers", []string{"--xds-server", "127.0.0.1:1", "--xds-node-id", "n", "--xds-headers", "token", "--xds-tls"}, nil, "not k=v"},
		{"bad xds metadata", []string{"--xds-server", "127.0.0.1:1", "--xds-node-id", "n", "--xds-node-metadata", "[1]"}, nil, "JSON object"},
		{"xds cert without key", []string{"--xds-server", "127.0.0.1:1", "--xds-node-id", "n", "--xds-tls-cert", "c.pem"}, nil, "go together"},
		{"bad default algorithm", []string{"--config", "x", "--default-algorithm", "leaky"}, nil, "default-algorithm"},
		{"concurrency as default algorithm", []string{"--config", "x", "--default-algorithm", "concurrency"}, nil, "concurrency cannot be the default"},
		{"bad compat", []string{"--config", "x", "--compat", "nginx"}, nil, "--compat"},
		{"unknown flag", []string{"--config", "x", "--nope"}, nil, "flag provided but not defined"},
		{"bad headers", []string{"--config", "x", "--response-headers", "draft3"}, nil, "unknown response headers mode"},
		{"bad env", []string{"--config", "x"}, map[string]string{"RATELIMITD_SHUTDOWN_TIMEOUT": "soon"}, "RATELIMITD_SHUTDOWN_TIMEOUT"},
		{"bad log format", []string{"--config", "x", "--log-format", "xml"}, nil, "--log-format"},
		{"stray argument", []string{"--config", "x", "extra"}, nil, "unexpected argument"},
		{"bad backend", []string{"--config", "x", "--backend", "memcached://x"}, nil, "--backend"},
		{"bad failure mode", []string{"--config", "x", "--failure-mode", "open"}, nil, "unknown failure mode"},
		{"bad redis timeout", []string{"--config", "x", "--redis-timeout", "0s"}, nil, "must be positive"},
		{"bad request log sample", []string{"--config", "x", "--request-log", "r.log", "--request-log-sample", "2"}, nil, "request log: sample 2"},
		{"request log size without backups", []string{"--config", "x", "--request-log", "r.log", "--request-log-max-backups", "0"}, nil, "request log: max size 100 MiB: want max backups"},
		{"request log record over replay's line", []string{"--config", "x", "--request-log", "r.log", "--request-log-max-record", "3000000"}, nil, "request log: max record 3000000"},
		{"bad hotkeys values", []string{"--config", "x", "--hotkeys-values", "hide"}, nil, "--hotkeys-values"},
		{"bad hotkeys k", []string{"--config", "x", "--hotkeys-k", "0"}, nil, "--hotkeys-k"},
		{"bad hotkeys window", []string{"--config", "x", "--hotkeys-window", "10ms"}, nil, "--hotkeys-window"},
		{"no unknown domains", []string{"--config", "x", "--unknown-domains-max", "0"}, nil, "--unknown-domains-max"},
		{"too many unknown domains", []string{"--config", "x", "--unknown-domains-max", "10001"}, nil, "want 1 to 10000"},
		{"no overrides", []string{"--config", "x", "--max-overrides", "0"}, nil, "--max-overrides 0: want at least 1"},
		{"admin mTLS without the admin listener", []string{"--config", "x", "--admin-tls-client-ca", "ca.pem", "--http-tls-cert", "c.pem", "--http-tls-key", "k.pem"}, nil, "--admin-tls-client-ca needs --admin-addr"},
		{"admin mTLS without a certificate", []string{"--config", "x", "--admin-addr", "127.0.0.1:0", "--admin-tls-client-ca", "ca.pem"}, nil, "--admin-tls-client-ca needs --http-tls-cert"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			err := run(t.Context(), tt.args, env(tt.env), io.Discard, &stderr)
			if e, ok := errors.AsType[exitError](err); !ok || e.code != 2 {
				t.Errorf("run(%q) = %v, want exit status 2", tt.args, err)
			}
			if !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("stderr = %q, want it to mention %q", stderr.String(), tt.want)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	var stdout bytes.Buffer
	if err := run(t.Context(), []string{"--version"}, noEnv, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(stdout.String(), "ratelimitd ") {
		t.Errorf("--version printed %q", stdout.String())
	}
}

const goodRules = `domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 3}
`

const badRules = `domain: d
descriptors:
  - key: k
    rate_limit: {unit: fortnight, requests_per_unit: 3}
`

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	writeFile(t, good, goodRules)
	writeFile(t, bad, badRules)

	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"check-config", good}, noEnv, &stdout, &stderr); err != nil {
		t.Errorf("check-config good.yaml = %v (%s)", err, stderr.String())
	}
	stderr.Reset()
	err := run(t.Context(), []string{"check-config", bad}, noEnv, &stdout, &stderr)
	if e, ok := errors.AsType[exitError](err); !ok || e.code != 1 {
		t.Errorf("check-config bad.yaml = %v, want exit status 1", err)
	}
	if want := bad + ":4:"; !strings.Contains(stderr.String(), want) || !strings.Contains(stderr.String(), "fortnight") {
		t.Errorf("check-config bad.yaml printed %q, want the place %q and the problem", stderr.String(), want)
	}
}

// TestCheckConfigDefaultAlgorithm: check-config judges a limit without an
// algorithm by --default-algorithm, as the daemon loads it: a burst is
// valid only under an algorithm that has one.
func TestCheckConfigDefaultAlgorithm(t *testing.T) {
	path := filepath.Join(t.TempDir(), "burst.yaml")
	writeFile(t, path, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 3, burst: 5}\n")
	for _, tt := range []struct {
		args []string
		env  map[string]string
		code int
	}{
		{nil, nil, 1},
		{[]string{"--default-algorithm", "token_bucket"}, nil, 0},
		{nil, map[string]string{"RATELIMITD_DEFAULT_ALGORITHM": "gcra"}, 0},
	} {
		var stderr bytes.Buffer
		err := run(t.Context(), append(append([]string{"check-config"}, tt.args...), path), env(tt.env), io.Discard, &stderr)
		code := 0
		if e, ok := errors.AsType[exitError](err); ok {
			code = e.code
		} else if err != nil {
			t.Fatalf("check-config %v: %v", tt.args, err)
		}
		if code != tt.code {
			t.Errorf("check-config %v %v = exit status %d (%s), want %d", tt.args, tt.env, code, stderr.String(), tt.code)
		}
	}
}

func TestInvalidRulesAtStartup(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, badRules)
	var stderr bytes.Buffer
	err := run(t.Context(), []string{"--config", path, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, noEnv, io.Discard, &stderr)
	if e, ok := errors.AsType[exitError](err); !ok || e.code != 1 {
		t.Errorf("run(bad rules) = %v, want exit status 1", err)
	}
	if !strings.Contains(stderr.String(), path+":4:") {
		t.Errorf("stderr = %q, want it to name %s:4", stderr.String(), path)
	}
}

// syncBuffer is a bytes.Buffer safe for the daemon's logger and the test
// to use at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// daemon is a ratelimitd started in-process on free loopback ports.
type daemon struct {
	grpcAddr, httpAddr string
	debugAddr          string // with --debug-addr
	adminAddr          string // with --admin-addr
	logs               *syncBuffer
	conn               *grpc.ClientConn
}

func startDaemon(t *testing.T, args ...string) *daemon {
	t.Helper()
	return startDaemonWith(t, nil, args...)
}

// startDaemonWith starts the daemon as startDaemon does, with its flags
// changed by set (if not nil) once parsed: what no flag sets, such as
// the watch's debounce.
func startDaemonWith(t *testing.T, set func(*flags), args ...string) *daemon {
	t.Helper()
	d := &daemon{logs: &syncBuffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	args = append([]string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--log-format", "json"}, args...)
	go func() {
		if set == nil {
			done <- run(ctx, args, noEnv, io.Discard, d.logs)
			return
		}
		f, err := parseFlags(args, noEnv, d.logs)
		if err == nil {
			set(f)
			err = serve(ctx, f, d.logs)
		}
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run() = %v after shutdown, want nil; logs:\n%s", err, d.logs)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("the daemon did not stop; logs:\n%s", d.logs)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for d.grpcAddr == "" {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not start; logs:\n%s", d.logs)
		}
		select {
		case err := <-done:
			t.Fatalf("run() = %v before starting; logs:\n%s", err, d.logs)
		case <-time.After(10 * time.Millisecond):
		}
		for line := range strings.Lines(d.logs.String()) {
			var rec struct{ Msg, GRPC, HTTP, Debug, Admin string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "ratelimitd started" {
				d.grpcAddr, d.httpAddr, d.debugAddr, d.adminAddr = rec.GRPC, rec.HTTP, rec.Debug, rec.Admin
			}
		}
	}
	conn, err := grpc.NewClient(d.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	d.conn = conn
	return d
}

// limit returns the requests_per_unit ratelimitd reports for k=v.
func (d *daemon) limit(t *testing.T) uint32 {
	t.Helper()
	resp, err := rlsv3.NewRateLimitServiceClient(d.conn).ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{
		Domain: "d",
		Descriptors: []*commonv3.RateLimitDescriptor{{
			Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}},
		}},
	})
	if err != nil {
		t.Fatalf("ShouldRateLimit() error: %v", err)
	}
	return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
}

func TestDaemonServesAndReloads(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	writeFile(t, path, goodRules)
	d := startDaemon(t, "--config", dir)

	if got := d.limit(t); got != 3 {
		t.Fatalf("limit = %d, want 3", got)
	}
	for _, url := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + d.httpAddr + url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s = %d, want 200", url, resp.StatusCode)
		}
	}

	// A valid change takes effect within 2 seconds.
	writeFile(t, path, strings.Replace(goodRules, "requests_per_unit: 3", "requests_per_unit: 7", 1))
	start := time.Now()
	for d.limit(t) != 7 {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("the new rules did not take effect; logs:\n%s", d.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("reload took effect after %v", time.Since(start).Round(time.Millisecond))

	// An invalid change is logged with file and line; the rules stay.
	writeFile(t, path, badRules)
	start = time.Now()
	for !strings.Contains(d.logs.String(), path+":4:") {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("no log line names %s:4; logs:\n%s", path, d.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := d.limit(t); got != 7 {
		t.Errorf("after an invalid change, limit = %d, want the previous 7", got)
	}
}

func TestSIGHUPReloads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, goodRules)
	d := startDaemon(t, "--config", path)
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// The files did not change: SIGHUP must load them anyway.
	start := time.Now()
	for !strings.Contains(d.logs.String(), `"msg":"rules reloaded"`) {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("no reload after SIGHUP; logs:\n%s", d.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := d.limit(t); got != 3 {
		t.Errorf("limit after SIGHUP = %d, want 3", got)
	}
}

// TestCheckConfigBounds: check-config refuses a rule file past the bounds
// on rule files (here, a small file whose YAML aliases expand a 100 KB
// key into 200 nested levels: before the bounds, checking it took
// seconds and gigabytes, and it was accepted), and the --config-max-*
// flags and variables move the bounds for check-config as for the daemon.
func TestCheckConfigBounds(t *testing.T) {
	dir := t.TempDir()
	bomb, good := filepath.Join(dir, "bomb.yaml"), filepath.Join(dir, "good.yaml")
	var b strings.Builder
	b.WriteString("domain: bomb\ndescriptors:\n  - key: root\n    metadata:\n      k: &k \"" + strings.Repeat("k", 100_000) + "\"\n")
	for i := range 200 {
		indent := strings.Repeat("    ", i+1)
		fmt.Fprintf(&b, "%sdescriptors:\n%s  - key: *k\n", indent, indent)
	}
	writeFile(t, bomb, b.String())
	writeFile(t, good, goodRules+"  - key: k2\n    rate_limit: {unit: minute, requests_per_unit: 3}\n") // 2 rules

	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
		want int // exit status
	}{
		{"bomb", []string{bomb}, nil, 1},
		{"good", []string{good}, nil, 0},
		{"good under a lower bound", []string{"--config-max-rules", "1", good}, nil, 1},
		{"good under a lower bound from the environment", []string{good}, map[string]string{"RATELIMITD_CONFIG_MAX_BYTES": "10"}, 1},
		{"bad flag", []string{"--config-max-rules", "x", good}, nil, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), append([]string{"check-config"}, tt.args...), env(tt.env), &stdout, &stderr)
			code := 0
			if e, ok := errors.AsType[exitError](err); ok {
				code = e.code
			} else if err != nil {
				t.Fatalf("check-config: %v", err)
			}
			if code != tt.want {
				t.Errorf("check-config %v = exit status %d (%s), want %d", tt.args, code, stderr.String(), tt.want)
			}
			if tt.name == "bomb" && !strings.Contains(stderr.String(), "bomb.yaml:") {
				t.Errorf("check-config bomb.yaml printed %q, want the file and line", stderr.String())
			}
		})
	}
}
