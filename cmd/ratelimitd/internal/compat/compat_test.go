package compat_test

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ratelimitd/ratelimitd/cmd/ratelimitd/internal/compat"
)

// env returns a Lookup over vars.
func env(vars map[string]string) compat.Lookup {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

// with returns base plus extra, extra winning.
func with(base map[string]string, extra map[string]string) map[string]string {
	m := maps.Clone(base)
	maps.Copy(m, extra)
	return m
}

// tcpRedis is the least environment that makes a Redis URL.
var tcpRedis = map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379"}

// translate runs Envoyproxy on vars and fails the test on an error.
func translate(t *testing.T, vars map[string]string) compat.Result {
	t.Helper()
	r, err := compat.Envoyproxy(env(vars))
	if err != nil {
		t.Fatalf("Envoyproxy(%v): %v", vars, err)
	}
	checkFlags(t, r)
	return r
}

// flagNames are the ratelimitd flags Result.Flags may name.
var flagNames = []string{
	"backend", "config", "debug-addr", "default-algorithm", "failure-mode", "grpc-addr",
	"grpc-max-connection-age", "grpc-max-connection-age-grace", "grpc-tls-allowed-sans", "grpc-tls-cert",
	"grpc-tls-client-ca", "grpc-tls-key", "http-addr", "local-cache", "local-cache-size", "log-format", "log-level",
	"near-limit-ratio", "otlp-endpoint", "otlp-insecure", "ready-without-store", "redis-dial-timeout", "redis-key-prefix",
	"redis-pool-size", "redis-read-timeout", "redis-timeout", "redis-tls-ca", "redis-tls-cert", "redis-tls-key",
	"redis-write-timeout", "response-header-names", "response-headers", "shadow-mode", "trace-sample-ratio",
	"xds-headers", "xds-node-id", "xds-node-metadata", "xds-retry-interval", "xds-server", "xds-tls", "xds-wait-for-rules",
	"xds-tls-ca", "xds-tls-cert", "xds-tls-key", "xds-tls-server-name",
	"backend-per-second", "redis-per-second-pool-size", "redis-per-second-timeout", "envoyproxy-answers",
	"statsd-addr", "statsd-network", "statsd-flush-interval", "statsd-tags",
}

// checkFlags fails the test if r names a flag outside flagNames, or a variable outside compat.Variables, or is not
// sorted.
func checkFlags(t *testing.T, r compat.Result) {
	t.Helper()
	for k := range r.Flags {
		if !slices.Contains(flagNames, k) {
			t.Errorf("Flags has %q, not a flag this package may set", k)
		}
	}
	vars := compat.Variables()
	for _, name := range r.Set {
		if !slices.Contains(vars, name) {
			t.Errorf("Set names %s, not in Variables", name)
		}
	}
	if !slices.IsSorted(r.Set) {
		t.Errorf("Set not sorted: %v", r.Set)
	}
	for i, ig := range r.Ignored {
		if !slices.Contains(vars, ig.Name) || ig.Reason == "" {
			t.Errorf("Ignored %+v: unknown variable or no reason", ig)
		}
		if i > 0 && r.Ignored[i-1].Name >= ig.Name {
			t.Errorf("Ignored not sorted, or a name twice: %v", r.Ignored)
		}
		if slices.Contains(r.Set, ig.Name) {
			t.Errorf("%s both Set and Ignored", ig.Name)
		}
	}
}

func TestDefaults(t *testing.T) {
	r := translate(t, tcpRedis)
	want := map[string]string{
		"default-algorithm": "fixed_window",
		"failure-mode":      "error",
		"response-headers":  "off",
		"http-addr":         "0.0.0.0:8080",
		"grpc-addr":         "0.0.0.0:8081",
		"debug-addr":        "0.0.0.0:6070",
		"log-level":         "warn",
		"log-format":        "text",
		"config":            "/srv/runtime_data/current/config",
		"local-cache":       "false",
		"backend":           "redis://redis:6379",
		// The reference stays healthy while Redis is down.
		"ready-without-store": "true",
		// Its answers, and its statsd, on by default, to localhost:8125 over TCP every 10s.
		"envoyproxy-answers":    "true",
		"statsd-addr":           "localhost:8125",
		"statsd-network":        "tcp",
		"statsd-flush-interval": "10s",
	}
	if diff := cmp.Diff(want, r.Flags); diff != "" {
		t.Errorf("Flags mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"REDIS_SOCKET_TYPE", "REDIS_URL"}, r.Set); diff != "" {
		t.Errorf("Set mismatch (-want +got):\n%s", diff)
	}
	if len(r.Ignored) > 0 {
		t.Errorf("Ignored %v, want none", r.Ignored)
	}
}

// TestNoRedis: with nothing set, the reference dials its unix socket, which ratelimitd cannot: an error that an
// explicit --backend makes moot.
func TestNoRedis(t *testing.T) {
	r, err := compat.Envoyproxy(env(nil))
	ce, ok := errors.AsType[*compat.Error](err)
	if !ok || ce.Name != "REDIS_SOCKET_TYPE" || ce.Flag != "backend" || !strings.Contains(err.Error(), "unix") {
		t.Fatalf("error %v, want REDIS_SOCKET_TYPE's (unix), moot with --backend", err)
	}
	if _, ok := r.Flags["backend"]; ok {
		t.Errorf("backend = %q, want none", r.Flags["backend"])
	}
	if r.Flags["grpc-addr"] != "0.0.0.0:8081" {
		t.Errorf("the rest not translated: %v", r.Flags)
	}
	if got := compat.Moot(err, func(f string) bool { return f == "backend" }); got != nil {
		t.Errorf("Moot with --backend set: %v", got)
	}
	if got := compat.Moot(err, func(string) bool { return false }); got == nil {
		t.Error("Moot without --backend: nil")
	}
}
