package main

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// hotKeysOf returns the daemon's GET /hotkeys, decoded.
func hotKeysOf(t *testing.T, d *daemon) (status int, view struct {
	Replica, Values string
	K               int
	WindowSeconds   float64 `json:"window_seconds"`
	Domains         []struct {
		Domain  string
		Refused []struct {
			Descriptor []struct{ Key, Value string }
			Refused    uint64
		}
	}
}) {
	t.Helper()
	resp, err := http.Get("http://" + d.httpAddr + "/hotkeys")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, &view); err != nil {
			t.Fatalf("GET /hotkeys: %v in %s", err, body)
		}
	}
	return resp.StatusCode, view
}

// TestDaemonHotKeys: the daemon serves /hotkeys by default, labelled with
// the replica's name (as RLQS's: its host name, gRPC address and a random
// part), its
// values shown with --hotkeys-values show; --hotkeys=false turns it off.
func TestDaemonHotKeys(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "rules.yaml"), goodRules)
	d := startDaemon(t, "--config", dir, "--hotkeys-values", "show", "--hotkeys-k", "7", "--hotkeys-window", "30s")
	for range 5 { // the limit is 3 a minute: 2 refused
		d.limit(t)
	}
	code, v := hotKeysOf(t, d)
	if code != http.StatusOK || !strings.Contains(v.Replica, "/"+d.grpcAddr+"/") || v.Values != "shown" || v.K != 7 || v.WindowSeconds != 30 {
		t.Fatalf("GET /hotkeys = %d, %+v; want the replica named after %s, values shown, K 7, window 30", code, v, d.grpcAddr)
	}
	if len(v.Domains) != 1 || len(v.Domains[0].Refused) != 1 || v.Domains[0].Refused[0].Refused != 2 ||
		v.Domains[0].Refused[0].Descriptor[0].Value != "v" {
		t.Errorf("domains = %+v, want d with k=v refused twice", v.Domains)
	}

	off := startDaemon(t, "--config", dir, "--hotkeys=false")
	if code, _ := hotKeysOf(t, off); code != http.StatusNotFound {
		t.Errorf("with --hotkeys=false, GET /hotkeys = %d, want 404", code)
	}
}
