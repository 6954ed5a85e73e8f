package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/server/admin"
	"github.com/ratelimitd/ratelimitd/server/internal/engine"
	"github.com/ratelimitd/ratelimitd/server/overrides"
)

const (
	aliceToken = "alice-0123456789abcdef"
	bobToken   = "bob-0123456789abcdef"
)

const overrideRules = `
domain: edge
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 2}
`

// apiFixture serves the overrides API over a memory store, with tokens
// read from a file (none when tokenFile is "").
type apiFixture struct {
	mux    *http.ServeMux
	eng    *engine.Engine
	reg    *prometheus.Registry
	tokens *admin.Tokens
}

func newAPIFixture(t *testing.T, tokenFile string, max int) *apiFixture {
	t.Helper()
	store := memory.New(memory.Options{})
	t.Cleanup(func() { store.Close() })
	f := &apiFixture{mux: http.NewServeMux(), reg: prometheus.NewRegistry()}
	f.eng = engine.New(store, compile(t, overrideRules), engine.Options{})
	tokens, err := admin.LoadTokens(tokenFile, f.reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.tokens = tokens
	m := overrides.New(store, f.eng, overrides.Options{Max: max, Registry: f.reg})
	admin.New(f.eng, admin.Options{Overrides: m, Tokens: tokens}).Routes(f.mux)
	return f
}

func writeTokens(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func (f *apiFixture) do(t *testing.T, method, path, token, body string) (int, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	f.mux.ServeHTTP(w, req)
	var out map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
		t.Fatalf("%s %s: body %q is not JSON: %v", method, path, w.Body, err)
	}
	return w.Code, out
}

const setBody = `{"domain": "edge", "entries": [{"key": "api_key", "value": "k-123"}],
	"limits": [{"requests_per_unit": 1000, "unit": "minute"}], "expires_at": "2099-12-01T00:00:00Z", "reason": "incident 42"}`

const descBody = `{"domain": "edge", "entries": [{"key": "api_key", "value": "k-123"}]}`

func TestOverridesAPI(t *testing.T) {
	f := newAPIFixture(t, writeTokens(t, "# operators\nalice:"+aliceToken+"\n\n"+bobToken+"\n"), 0)
	code, got := f.do(t, "PUT", "/v1/overrides", aliceToken, setBody)
	if code != http.StatusOK {
		t.Fatalf("PUT = %d %v, want 200", code, got)
	}
	if got["version"] != 1.0 || got["set_by"] != "alice" || got["reason"] != "incident 42" || got["expires_at"] != "2099-12-01T00:00:00Z" {
		t.Errorf("PUT answered %v, want the override with version 1, set by alice", got)
	}
	if f.eng.Overrides().Len() != 1 {
		t.Errorf("after PUT, %d overrides in force, want 1", f.eng.Overrides().Len())
	}
	code, got = f.do(t, "GET", "/v1/overrides?domain=edge", bobToken, "")
	list, _ := got["overrides"].([]any)
	if code != http.StatusOK || len(list) != 1 {
		t.Fatalf("GET = %d %v, want 200 and one override", code, got)
	}
	if o := list[0].(map[string]any); o["set_by"] != "alice" || o["unmatched"] != nil {
		t.Errorf("GET listed %v, want alice's override, matched", o)
	}
	if code, got = f.do(t, "GET", "/v1/overrides?domain=other", bobToken, ""); code != 200 || len(got["overrides"].([]any)) != 0 {
		t.Errorf("GET ?domain=other = %d %v, want 200 and none", code, got)
	}
	if code, got = f.do(t, "POST", "/v1/reset", bobToken, descBody); code != http.StatusOK || got["counters"] != 2.0 {
		t.Errorf("POST /v1/reset = %d %v, want 200 and 2 counters (the rule's limit and the override's)", code, got)
	}
	if code, got = f.do(t, "DELETE", "/v1/overrides", bobToken, descBody); code != http.StatusOK || got["deleted"] != true {
		t.Errorf("DELETE = %d %v, want 200", code, got)
	}
	if code, got = f.do(t, "DELETE", "/v1/overrides", bobToken, descBody); code != http.StatusNotFound {
		t.Errorf("DELETE again = %d %v, want 404", code, got)
	}
}

func TestOverridesAPIRefusals(t *testing.T) {
	f := newAPIFixture(t, writeTokens(t, "alice:"+aliceToken+"\n"), 1)
	for _, tc := range []struct {
		name, method, path, token, body string
		code                            int
		want                            string
	}{
		{"no token", "PUT", "/v1/overrides", "", setBody, 401, "Bearer token is required"},
		{"wrong token", "PUT", "/v1/overrides", "mallory-0123456789abcdef", setBody, 401, "Bearer token is required"},
		{"no token to read", "GET", "/v1/overrides", "", "", 401, "Bearer token is required"},
		{"no token to reset", "POST", "/v1/reset", "", descBody, 401, "Bearer token is required"},
		{"no reason", "PUT", "/v1/overrides", aliceToken, strings.Replace(setBody, `"incident 42"`, `""`, 1), 400, "reason is required"},
		{"unknown unit", "PUT", "/v1/overrides", aliceToken, strings.Replace(setBody, `"minute"`, `"minutes"`, 1), 400, `unknown unit \"minutes\"`},
		{"too many entries", "PUT", "/v1/overrides", aliceToken, strings.Replace(setBody, `"entries": [`, `"entries": [`+strings.Repeat(`{"key":"k","value":"v"},`, 32), 1), 400, "over the maximum 32"},
		{"not UTF-8", "PUT", "/v1/overrides", aliceToken, strings.Replace(setBody, "k-123", "k-\xff", 1), 400, "not UTF-8"},
		{"unknown field", "PUT", "/v1/overrides", aliceToken, `{"domain":"edge","color":"red"}`, 400, `unknown field \"color\"`},
		{"not JSON", "DELETE", "/v1/overrides", aliceToken, `{`, 400, "body"},
		{"ok", "PUT", "/v1/overrides", aliceToken, setBody, 200, "incident 42"},
		{"full", "PUT", "/v1/overrides", aliceToken, strings.Replace(setBody, "k-123", "k-456", 1), 409, "--max-overrides"},
		{"replace at the bound", "PUT", "/v1/overrides", aliceToken, setBody, 200, `"version": 2`},
	} {
		req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		w := httptest.NewRecorder()
		f.mux.ServeHTTP(w, req)
		if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.want) {
			t.Errorf("%s: %s %s = %d %s, want %d with %q", tc.name, tc.method, tc.path, w.Code, w.Body, tc.code, tc.want)
		}
		if tc.code == 401 && w.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", tc.name)
		}
	}
	assertCounter(t, f.reg, "ratelimitd_admin_auth_failures_total", "reason", "missing", 3)
	assertCounter(t, f.reg, "ratelimitd_admin_auth_failures_total", "reason", "wrong", 1)
	assertCounter(t, f.reg, "ratelimitd_override_refusals_total", "reason", "full", 1)
}

func assertCounter(t *testing.T, reg *prometheus.Registry, name, label, value string, want float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					if got := m.GetCounter().GetValue(); got != want {
						t.Errorf("%s{%s=%q} = %v, want %v", name, label, value, got, want)
					}
					return
				}
			}
		}
	}
	t.Errorf("no %s{%s=%q}", name, label, value)
}

func TestOverridesAPIWithoutTokenFile(t *testing.T) {
	f := newAPIFixture(t, "", 0)
	for _, tc := range []struct{ method, path, body string }{
		{"PUT", "/v1/overrides", setBody}, {"DELETE", "/v1/overrides", descBody}, {"POST", "/v1/reset", descBody},
	} {
		code, got := f.do(t, tc.method, tc.path, aliceToken, tc.body)
		if msg, _ := got["error"].(string); code != http.StatusForbidden || !strings.Contains(msg, "--admin-token-file") {
			t.Errorf("%s %s without a token file = %d %v, want 403 naming --admin-token-file", tc.method, tc.path, code, got)
		}
	}
	if code, got := f.do(t, "GET", "/v1/overrides", "", ""); code != http.StatusOK {
		t.Errorf("GET without a token file = %d %v, want 200 (reads are open)", code, got)
	}
	assertCounter(t, f.reg, "ratelimitd_admin_auth_failures_total", "reason", "no_tokens", 3)
}

func TestTokenFile(t *testing.T) {
	for _, tc := range []struct{ content, want string }{
		{"", "holds no token"},
		{"# nothing\n\n", "holds no token"},
		{"short\n", "under the minimum 16"},
		{":" + aliceToken + "\n", "name before ':' is empty"},
		{strings.Repeat("x", admin.MaxTokenFileBytes+1), "over the maximum"},
	} {
		if _, err := admin.LoadTokens(writeTokens(t, tc.content), nil, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("LoadTokens(%.20q) = %v, want an error with %q", tc.content, err, tc.want)
		}
	}
	if _, err := admin.LoadTokens(filepath.Join(t.TempDir(), "absent"), nil, nil); err == nil {
		t.Error("LoadTokens(absent file) = nil error")
	}
	tokens, err := admin.LoadTokens(writeTokens(t, "alice:"+aliceToken+"\n"+bobToken+"\ncarol : carol-0123456789abcdef \n"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		header, name string
		err          error
	}{
		{"Bearer " + aliceToken, "alice", nil},
		{"bearer " + bobToken, "line 2", nil},
		{"Bearer carol-0123456789abcdef", "carol", nil},
		{"Bearer " + aliceToken + "x", "", admin.ErrUnauthorized},
		{"Basic " + aliceToken, "", admin.ErrUnauthorized},
		{"Bearer ", "", admin.ErrUnauthorized},
		{"", "", admin.ErrUnauthorized},
	} {
		name, err := tokens.Authorize(tc.header, true)
		if name != tc.name || !errors.Is(err, tc.err) {
			t.Errorf("Authorize(%q) = %q, %v; want %q, %v", tc.header, name, err, tc.name, tc.err)
		}
	}
}

// TestTokenFileReload replaces the token file as a Kubernetes Secret or
// an editor does (a new file renamed over the old) and waits for the
// watch to put the new tokens in force.
func TestTokenFileReload(t *testing.T) {
	path := writeTokens(t, "alice:"+aliceToken+"\n")
	tokens, err := admin.LoadTokens(path, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- tokens.Watch(ctx, time.Hour) }() // no poll: the file event must do it
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch = %v", err)
		}
	})
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte("bob:"+bobToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The watch may start after the rename: rewrite until it is seen.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := os.Rename(tmp, path); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if name, err := tokens.Authorize("Bearer "+bobToken, true); err == nil && name == "bob" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the new token file was not loaded within 10s")
		}
		if err := os.WriteFile(tmp, []byte("bob:"+bobToken+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := tokens.Authorize("Bearer "+aliceToken, true); err == nil {
		t.Error("the old token still works after the reload")
	}
	// A broken file keeps the tokens in force.
	if err := os.WriteFile(path, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := tokens.Authorize("Bearer "+bobToken, true); err != nil {
		t.Errorf("after a broken file, bob's token = %v, want it kept", err)
	}
}

// TestTokenFileChangedBeforeTheWatch: a change made between the load
// and the start of the watch is taken up too (the watch once compared
// with the file as it first read it, and missed it for good).
func TestTokenFileChangedBeforeTheWatch(t *testing.T) {
	path := writeTokens(t, "alice:"+aliceToken+"\n")
	tokens, err := admin.LoadTokens(path, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("bob:"+bobToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- tokens.Watch(ctx, 10*time.Millisecond) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch = %v", err)
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if name, err := tokens.Authorize("Bearer "+bobToken, true); err == nil && name == "bob" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the token file changed before the watch was not loaded within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
