package main

import (
	"bytes"
	"encoding/json"
	"errors"
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
	DigestKey       string  `json:"digest_key"`
	DigestKeyID     string  `json:"digest_key_id"`
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

// TestDaemonHotKeysDigestKey: two daemons given the same
// --hotkeys-digest-key-file show the same digest for a value, and say so
// by the same key ID; a third, without it, shows another. A key file too
// short stops the daemon at start, naming the file.
func TestDaemonHotKeysDigestKey(t *testing.T) {
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	writeFile(t, rules, goodRules)
	key := filepath.Join(dir, "digest.key")
	writeFile(t, key, "c2VjcmV0IHNoYXJlZCBieSB0aGUgcmVwbGljYXM=\n")
	digestOf := func(d *daemon) (digest, keyID, keyFrom string) {
		t.Helper()
		for range 5 { // the limit is 3 a minute: 2 refused
			d.limit(t)
		}
		code, v := hotKeysOf(t, d)
		if code != http.StatusOK || len(v.Domains) != 1 || len(v.Domains[0].Refused) != 1 {
			t.Fatalf("GET /hotkeys = %d, %+v; want k=v refused", code, v)
		}
		return v.Domains[0].Refused[0].Descriptor[0].Value, v.DigestKeyID, v.DigestKey
	}
	a, aID, aFrom := digestOf(startDaemon(t, "--config", rules, "--hotkeys-digest-key-file", key))
	b, bID, _ := digestOf(startDaemon(t, "--config", rules, "--hotkeys-digest-key-file", key))
	c, cID, cFrom := digestOf(startDaemon(t, "--config", rules))
	if a != b || aID != bID || aFrom != "file" {
		t.Errorf("one key file: digests %s, %s, key IDs %s, %s, key from %q; want the same, from file", a, b, aID, bID, aFrom)
	}
	if !strings.HasPrefix(a, "hmac:") || c == a || cID == aID || cFrom != "random" {
		t.Errorf("digest %s with the key file, %s (key %s, from %q) without; want hmac: digests that differ, random", a, c, cID, cFrom)
	}

	short := filepath.Join(dir, "short.key")
	writeFile(t, short, "too short\n")
	var stderr bytes.Buffer
	err := run(t.Context(), []string{"--config", rules, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--hotkeys-digest-key-file", short}, noEnv, io.Discard, &stderr)
	if e, ok := errors.AsType[exitError](err); !ok || e.code != 1 || !strings.Contains(stderr.String(), short) || !strings.Contains(stderr.String(), "want at least 16") {
		t.Errorf("run(short key) = %v, stderr %q; want exit status 1 naming %s", err, stderr.String(), short)
	}
}
