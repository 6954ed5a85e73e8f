package main

import (
	"bytes"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/server"
)

// TestCompatPrecedence: with --compat envoyproxy, a setting comes from the
// command line, else RATELIMITD_*, else the reference's variables, else
// the reference's defaults; and a rules source set either way keeps the
// reference's out.
func TestCompatPrecedence(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want func(*flags) bool
	}{
		{"reference defaults", nil, map[string]string{"RATELIMITD_COMPAT": "envoyproxy"}, func(f *flags) bool {
			return f.defaultAlgorithm == backend.FixedWindow && f.headers == server.HeadersOff &&
				f.grpcAddr == "0.0.0.0:8081" && f.httpAddr == "0.0.0.0:8080" && f.debugAddr == "0.0.0.0:6070" &&
				f.config == "/srv/runtime_data/current/config" && f.xds.server == "" && f.backend == "redis://127.0.0.1:6379"
		}},
		{"reference variables", nil, map[string]string{
			"RATELIMITD_COMPAT": "envoyproxy", "GRPC_PORT": "9000", "RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "rl",
		}, func(f *flags) bool { return f.grpcAddr == "0.0.0.0:9000" && f.config == "/data/rl/config" }},
		{"RATELIMITD_* over the reference", nil, map[string]string{
			"RATELIMITD_COMPAT": "envoyproxy", "GRPC_PORT": "9000", "RATELIMITD_GRPC_ADDR": "127.0.0.1:7000",
			"RATELIMITD_DEFAULT_ALGORITHM": "gcra",
		}, func(f *flags) bool { return f.grpcAddr == "127.0.0.1:7000" && f.defaultAlgorithm == backend.GCRA }},
		{"flags over both", []string{"--compat", "envoyproxy", "--grpc-addr", "127.0.0.1:6000", "--default-algorithm", "sliding_log"}, map[string]string{
			"GRPC_PORT": "9000", "RATELIMITD_DEFAULT_ALGORITHM": "gcra",
		}, func(f *flags) bool { return f.grpcAddr == "127.0.0.1:6000" && f.defaultAlgorithm == backend.SlidingLog }},
		{"own rules source", []string{"--compat", "envoyproxy", "--xds-server", "xds:1", "--xds-node-id", "n"}, map[string]string{"RUNTIME_ROOT": "/data"}, func(f *flags) bool {
			return f.config == "" && f.xds.server == "xds:1"
		}},
		{"reference xDS", nil, map[string]string{
			"RATELIMITD_COMPAT": "envoyproxy", "CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "envoy-gateway:18001",
			"CONFIG_GRPC_XDS_NODE_ID": "rl",
		}, func(f *flags) bool {
			return f.config == "" && f.xds.server == "envoy-gateway:18001" && f.xds.nodeID == "rl"
		}},
		{"no compat", []string{"--config", "x"}, map[string]string{"GRPC_PORT": "9000"}, func(f *flags) bool {
			return f.grpcAddr == defaultGRPCAddr && f.backend == "memory" && f.defaultAlgorithm == backend.SlidingWindow && f.compatResult == nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The reference's default is a Redis on a unix socket, which
			// compat refuses.
			vars := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:6379"}
			maps.Copy(vars, tt.env)
			var stderr bytes.Buffer
			f, err := parseFlags(tt.args, env(vars), &stderr)
			if err != nil {
				t.Fatalf("parseFlags() error: %v (%s)", err, stderr.String())
			}
			if !tt.want(f) {
				t.Errorf("parseFlags(%q, %v) = %+v", tt.args, tt.env, *f)
			}
		})
	}
}

// TestCompatRefuses: a reference variable that would change decisions
// stops the start, naming it.
func TestCompatRefuses(t *testing.T) {
	var stderr bytes.Buffer
	err := run(t.Context(), nil, env(map[string]string{
		"RATELIMITD_COMPAT": "envoyproxy", "BACKEND_TYPE": "memcache", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:6379",
	}), io.Discard, &stderr)
	if e, ok := errors.AsType[exitError](err); !ok || e.code != 2 {
		t.Errorf("run() = %v, want exit status 2", err)
	}
	if !strings.Contains(stderr.String(), "BACKEND_TYPE") {
		t.Errorf("stderr = %q, want it to name BACKEND_TYPE", stderr.String())
	}
}

// TestCompatMootAndFiles: a refusal that a flag of ratelimitd's replaces
// is moot once that flag is set; an empty reference variable is not an
// unset one; rules in files of the reference's directory that ratelimitd
// would not read stop the start.
func TestCompatMootAndFiles(t *testing.T) {
	// The reference's default Redis, on a unix socket, is refused...
	var stderr bytes.Buffer
	if _, err := parseFlags(nil, env(map[string]string{"RATELIMITD_COMPAT": "envoyproxy"}), &stderr); !errors.Is(err, exitError{2}) ||
		!strings.Contains(stderr.String(), "REDIS_SOCKET_TYPE") {
		t.Errorf("the reference's default Redis: %v, %q; want exit status 2 naming REDIS_SOCKET_TYPE", err, stderr.String())
	}
	// ... unless ratelimitd's own --backend replaces it.
	stderr.Reset()
	f, err := parseFlags(nil, env(map[string]string{"RATELIMITD_COMPAT": "envoyproxy", "RATELIMITD_BACKEND": "memory"}), &stderr)
	if err != nil || f.backend != "memory" {
		t.Errorf("RATELIMITD_BACKEND=memory: %v (%s), backend %q; want the memory store", err, stderr.String(), f.backend)
	}

	// An empty boolean is malformed for the reference, which would not start.
	stderr.Reset()
	base := map[string]string{"RATELIMITD_COMPAT": "envoyproxy", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:6379"}
	empty := maps.Clone(base)
	empty["SHADOW_MODE"] = ""
	if _, err := parseFlags(nil, env(empty), &stderr); !errors.Is(err, exitError{2}) || !strings.Contains(stderr.String(), "SHADOW_MODE") {
		t.Errorf("SHADOW_MODE set but empty: %v, %q; want exit status 2 naming it", err, stderr.String())
	}

	// A rule file ratelimitd would skip (a subdirectory's) stops the start,
	// unless --config names the rules.
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "config", "more"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "config", "a.yaml"), "domain: a\n")
	writeFile(t, filepath.Join(root, "config", "more", "b.yaml"), "domain: b\n")
	files := maps.Clone(base)
	files["RUNTIME_ROOT"] = root
	stderr.Reset()
	if _, err := parseFlags(nil, env(files), &stderr); !errors.Is(err, exitError{2}) || !strings.Contains(stderr.String(), "b.yaml") {
		t.Errorf("a rule file in a subdirectory: %v, %q; want exit status 2 naming it", err, stderr.String())
	}
	stderr.Reset()
	if f, err := parseFlags([]string{"--config", filepath.Join(root, "config")}, env(files), &stderr); err != nil || f.config != filepath.Join(root, "config") {
		t.Errorf("--config over RUNTIME_ROOT: %v (%s)", err, stderr.String())
	}
}
