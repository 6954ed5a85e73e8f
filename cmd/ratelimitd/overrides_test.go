package main

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

const overridesToken = "ops-0123456789abcdef"

// adminCall sends method path with body to the daemon's operators'
// endpoints at addr, with the bearer token, and returns the status and
// the body.
func adminCall(t *testing.T, addr, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+overridesToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func overridesTokenFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	writeFile(t, path, "ops:"+overridesToken+"\n")
	return path
}

const raiseK = `{"domain": "d", "entries": [{"key": "k", "value": "v"}], "limits": [{"requests_per_unit": 10, "unit": "minute"}], "reason": "incident 42"}`

// TestReplayWithOverrides: the overrides of a daemon, saved from GET
// /v1/overrides, make a replay decide as the daemon did. Without them,
// lowering the limit of k from 3 to 1 refuses two more of the logged
// requests; with them, the override replaces both rule sets' limit for
// k=v, and nothing changes.
func TestReplayWithOverrides(t *testing.T) {
	dir := t.TempDir()
	oldPath, newPath, logPath, ovPath := filepath.Join(dir, "old.yaml"), filepath.Join(dir, "new.yaml"), filepath.Join(dir, "requests.log"), filepath.Join(dir, "overrides.json")
	writeFile(t, oldPath, goodRules)
	writeFile(t, newPath, strings.Replace(goodRules, "requests_per_unit: 3", "requests_per_unit: 1", 1))
	d := startDaemon(t, "--config", oldPath, "--request-log", logPath, "--admin-token-file", overridesTokenFile(t))
	if code, body := adminCall(t, d.httpAddr, "PUT", "/v1/overrides", raiseK); code != http.StatusOK {
		t.Fatalf("PUT /v1/overrides = %d %s", code, body)
	}
	for range 5 {
		if got := d.limit(t); got != 10 {
			t.Fatalf("the daemon's limit of k=v = %d, want the override's 10", got)
		}
	}
	waitLines(t, logPath, 5)
	code, body := adminCall(t, d.httpAddr, "GET", "/v1/overrides", "")
	if code != http.StatusOK {
		t.Fatalf("GET /v1/overrides = %d %s", code, body)
	}
	writeFile(t, ovPath, body)

	code, out, errOut := runExit(t, "replay", "--old", oldPath, "--new", newPath, logPath)
	if code != 0 || !strings.Contains(out, "decided differently: 2 newly refused") {
		t.Errorf("replay without --overrides: exit %d, %s%s; want 2 newly refused", code, out, errOut)
	}
	code, out, errOut = runExit(t, "replay", "--overrides", ovPath, "--old", oldPath, "--new", newPath, logPath)
	if code != 0 || !strings.Contains(out, "0 decided differently") {
		t.Errorf("replay --overrides: exit %d, %s%s; want 0 decided differently", code, out, errOut)
	}
	writeFile(t, ovPath, strings.Replace(body, `"minute"`, `"minutes"`, 1))
	code, _, errOut = runExit(t, "replay", "--overrides", ovPath, "--old", oldPath, "--new", newPath, logPath)
	if code != 1 || !strings.Contains(errOut, `unknown unit "minutes"`) {
		t.Errorf("replay --overrides with a bad file: exit %d, %s; want 1 naming the unit", code, errOut)
	}
}

func TestCheckConfigOverrides(t *testing.T) {
	dir := t.TempDir()
	rules, ovPath := filepath.Join(dir, "rules.yaml"), filepath.Join(dir, "overrides.json")
	writeFile(t, rules, goodRules)
	writeFile(t, ovPath, `{"overrides": [`+raiseK+`,
		{"domain": "d", "entries": [{"key": "gone", "value": "x"}], "limits": [{"requests_per_unit": 1, "window": "90s"}], "reason": "later", "version": 3, "set_by": "ops", "set_at": "2026-11-27T12:00:00Z", "unmatched": true}]}`)
	code, out, errOut := runExit(t, "check-config", "--overrides", ovPath, rules)
	if code != 0 || !strings.Contains(out, "overrides.json: ok (2 overrides, 1 unmatched)") || !strings.Contains(out, `unmatched: domain "d", "gone"="x"`) {
		t.Errorf("check-config --overrides: exit %d, %s%s; want ok with the unmatched one named", code, out, errOut)
	}
	for _, tc := range []struct{ max, file, want string }{
		{"10", `{"overrides": [` + strings.Replace(raiseK, `"incident 42"`, `""`, 1) + `]}`, "override 0: reason is required"},
		{"10", `{"overrides": [` + raiseK + `, ` + raiseK + `]}`, "override 1 has the descriptor of override 0"},
		{"10", `{"overrides": [], "more": 1}`, `unknown field "more"`},
		{"1", `{"overrides": [` + raiseK + `, ` + strings.Replace(raiseK, `"v"`, `"w"`, 1) + `]}`, "2 overrides, over the maximum 1"},
	} {
		writeFile(t, ovPath, tc.file)
		code, _, errOut := runExit(t, "check-config", "--max-overrides", tc.max, "--overrides", ovPath, rules)
		if code != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("check-config --overrides %s: exit %d, %s; want 1 with %q", tc.file, code, errOut, tc.want)
		}
	}
}
