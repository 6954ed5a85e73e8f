package main

import (
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// TestBackendPasswordNotPrinted: whatever is wrong with --backend, what
// ratelimitd prints about it hides the URL's password.
func TestBackendPasswordNotPrinted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, goodRules)
	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		wantCode int
	}{
		{"mistyped scheme", []string{"--backend", "redsi://:hunter2@host:6379"}, nil, 2},
		{"mistyped scheme in the environment", nil, map[string]string{"RATELIMITD_BACKEND": "redsi://user:hunter2@host:6379"}, 2},
		{"no scheme", []string{"--backend", "user:hunter2@host:6379"}, nil, 2},
		{"password cut by the URL parser", []string{"--backend", "redis://:hunter2/x@host:6379"}, nil, 1},
		{"password after a '?'", []string{"--backend", "redis://:x?hunter2@host:6379"}, nil, 1},
		{"bad query parameter", []string{"--backend", "redis://:hunter2@host:6379?dial_timeout=soon"}, nil, 1},
		{"sentinel without master_name", []string{"--backend", "redis-sentinel://s1:26379?sentinel_password=hunter2"}, nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"--config", path, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, tt.args...)
			var stderr syncBuffer
			err := run(t.Context(), args, env(tt.env), io.Discard, &stderr)
			if e, ok := errors.AsType[exitError](err); !ok || e.code != tt.wantCode {
				t.Errorf("run(%q) = %v, want exit status %d; stderr:\n%s", args, err, tt.wantCode, stderr.String())
			}
			if got := stderr.String(); strings.Contains(got, "hunter2") || !strings.Contains(got, "backend") {
				t.Errorf("stderr = %q, want it to mention the backend without its password", got)
			}
		})
	}
}

// TestBackendPasswordNotLogged: the start-up line and the warning that
// Redis does not answer name the backend without its password.
func TestBackendPasswordNotLogged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, goodRules)
	d := startDaemon(t, "--config", path, "--backend", "redis://user:hunter2@127.0.0.1:1")
	eventually(t, "the warning that the store does not answer", func() bool {
		return strings.Contains(d.logs.String(), "counter store does not answer yet")
	})
	logs := d.logs.String()
	if !strings.Contains(logs, "redis://user:xxxxx@127.0.0.1:1") {
		t.Fatalf("logs name no redacted backend, or no warning that Redis does not answer:\n%s", logs)
	}
	if strings.Contains(logs, "hunter2") {
		t.Errorf("logs show a password:\n%s", logs)
	}
}
