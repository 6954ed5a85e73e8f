package main

import (
	"net/http"
	"path/filepath"
	"testing"
)

// TestAdminAddr: with --admin-addr, the operators' endpoints are served
// there and not on --http-addr, which keeps the callers' and the probes';
// without it, --http-addr serves everything and no admin listener opens.
func TestAdminAddr(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, goodRules)
	operator := []string{"/config", "/metrics", "/rlqs", "/ui/", "/ui/api/rules", "/ui/api/status"}
	public := []string{"/healthz", "/readyz"}

	d := startDaemon(t, "--config", path, "--admin-addr", "127.0.0.1:0")
	if d.adminAddr == "" {
		t.Fatalf("no admin address in the start-up line; logs:\n%s", d.logs)
	}
	for _, p := range operator {
		if code, body := get(t, nil, "http://"+d.adminAddr+p); code != http.StatusOK {
			t.Errorf("GET %s on --admin-addr = %d %.100q, want 200", p, code, body)
		}
		if code, _ := get(t, nil, "http://"+d.httpAddr+p); code != http.StatusNotFound {
			t.Errorf("GET %s on --http-addr = %d, want 404", p, code)
		}
	}
	for _, p := range public {
		if code, _ := get(t, nil, "http://"+d.httpAddr+p); code != http.StatusOK {
			t.Errorf("GET %s on --http-addr = %d, want 200", p, code)
		}
		if code, _ := get(t, nil, "http://"+d.adminAddr+p); code != http.StatusNotFound {
			t.Errorf("GET %s on --admin-addr = %d, want 404", p, code)
		}
	}

	plain := startDaemon(t, "--config", path)
	if plain.adminAddr != "" {
		t.Errorf("without --admin-addr, an admin listener on %s", plain.adminAddr)
	}
	for _, p := range append(operator, public...) {
		if code, _ := get(t, nil, "http://"+plain.httpAddr+p); code != http.StatusOK {
			t.Errorf("without --admin-addr: GET %s on --http-addr = %d, want 200", p, code)
		}
	}
}
