package main

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/certtest"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
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

// limitOf returns the requests_per_unit p reports for k=v in domain d.
func (p *process) limitOf(t *testing.T) uint32 {
	t.Helper()
	resp, err := p.client.ShouldRateLimit(t.Context(), rlRequest("d", "k", "v"))
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
}

// waitLimit waits, at most within, for p to report want as k=v's limit,
// and returns how long that took.
func (p *process) waitLimit(t *testing.T, want uint32, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		got := p.limitOf(t)
		if got == want {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("%s reports k=v's limit %d after %v, want %d within %v", p.http, got, time.Since(start), want, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop ends p as an operator would (SIGTERM) and waits for it.
func (p *process) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not stop", p.http)
	}
}

// TestOverridesAcrossReplicasOnRedis: two daemons on one Redis. An
// override set through one is enforced by the other within a second;
// the daemons restarted, both still enforce it (it lives in Redis);
// deleted through the other, the first goes back to the rule's limit
// within a second. While Redis is away, /readyz says that the overrides
// are stale, and ratelimitd_overrides_stale is 1.
func TestOverridesAcrossReplicasOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	rules, tokens := writeRules(t, goodRules), overridesTokenFile(t)
	args := []string{"--config", rules, "--backend", "redis://" + srv.Addr, "--admin-token-file", tokens, "--redis-timeout", "200ms"}
	a, b := startProcess(t, args...), startProcess(t, args...)
	if got := b.limitOf(t); got != 3 {
		t.Fatalf("before the override, b reports %d, want the rule's 3", got)
	}
	if code, body := adminCall(t, a.http, "PUT", "/v1/overrides", raiseK); code != http.StatusOK {
		t.Fatalf("PUT /v1/overrides through a = %d %s", code, body)
	}
	took := b.waitLimit(t, 10, time.Second)
	t.Logf("b enforced the override %v after a stored it", took)

	a.stop(t)
	b.stop(t)
	a, b = startProcess(t, args...), startProcess(t, args...)
	for _, p := range []*process{a, b} {
		if got := p.limitOf(t); got != 10 {
			t.Errorf("restarted, %s reports %d at its first decision, want the override's 10", p.http, got)
		}
	}
	code, body := adminCall(t, b.http, "GET", "/v1/overrides?domain=d", "")
	if code != http.StatusOK || !strings.Contains(body, `"reason": "incident 42"`) || !strings.Contains(body, `"set_by": "ops"`) {
		t.Errorf("GET /v1/overrides after the restarts = %d %s, want the override", code, body)
	}

	if code, body := adminCall(t, b.http, "DELETE", "/v1/overrides", `{"domain": "d", "entries": [{"key": "k", "value": "v"}]}`); code != http.StatusOK {
		t.Fatalf("DELETE /v1/overrides through b = %d %s", code, body)
	}
	a.waitLimit(t, 3, time.Second)

	if code, body := adminCall(t, a.http, "PUT", "/v1/overrides", raiseK); code != http.StatusOK {
		t.Fatalf("PUT /v1/overrides = %d %s", code, body)
	}
	b.waitLimit(t, 10, time.Second)
	srv.Kill()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, ready := adminCall(t, b.http, "GET", "/readyz", "")
		_, metrics := adminCall(t, b.http, "GET", "/metrics", "")
		if strings.Contains(ready, "overrides: stale since") && strings.Contains(ready, "keeping 1 overrides") &&
			strings.Contains(metrics, "\nratelimitd_overrides_stale 1\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("with Redis away, /readyz says %q, want stale overrides, kept", ready)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBadTokenFileRefusesToStart: a daemon whose --admin-token-file is
// missing or holds no valid token does not start (exit status 1), and
// says why.
func TestBadTokenFileRefusesToStart(t *testing.T) {
	rules := writeRules(t, goodRules)
	short := filepath.Join(t.TempDir(), "tokens")
	writeFile(t, short, "ops:short\n")
	for _, tc := range []struct{ file, want string }{
		{filepath.Join(t.TempDir(), "absent"), "no such file"},
		{short, "under the minimum 16"},
	} {
		code, _, errOut := runExit(t, "--config", rules, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--admin-token-file", tc.file)
		if code != 1 || !strings.Contains(errOut, "--admin-token-file") || !strings.Contains(errOut, tc.want) {
			t.Errorf("--admin-token-file %s: exit %d, %s; want 1 with %q", tc.file, code, errOut, tc.want)
		}
	}
}

// TestAdminMutualTLS: with --admin-tls-client-ca the admin listener (the
// overrides API among its endpoints) answers only clients whose
// certificate its CAs signed, while the HTTP listener, with the same
// certificate, asks none.
func TestAdminMutualTLS(t *testing.T) {
	dir := t.TempDir()
	rules := writeRules(t, goodRules)
	ca := certtest.NewCA(t, "ratelimitd test CA")
	srvCert := ca.Server(t, dir, "server", "localhost", "127.0.0.1")
	operator := ca.Client(t, dir, "operator", "operator@example.com")
	stranger := certtest.NewCA(t, "another CA").Client(t, dir, "stranger", "operator@example.com")
	d := startDaemon(t, "--config", rules, "--admin-addr", "127.0.0.1:0", "--admin-token-file", overridesTokenFile(t),
		"--http-tls-cert", srvCert.CertFile, "--http-tls-key", srvCert.KeyFile, "--admin-tls-client-ca", ca.WriteCert(t, dir, "ca"))
	for _, tc := range []struct {
		name   string
		client *certtest.KeyPair
		ok     bool
	}{
		{"the operators' CA", operator, true},
		{"no client certificate", nil, false},
		{"another CA", stranger, false},
	} {
		https := &http.Client{Transport: &http.Transport{TLSClientConfig: ca.ClientTLS(tc.client)}}
		req, err := http.NewRequestWithContext(t.Context(), "PUT", "https://"+d.adminAddr+"/v1/overrides", strings.NewReader(raiseK))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+overridesToken)
		resp, err := https.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		if got := err == nil && resp.StatusCode == http.StatusOK; got != tc.ok {
			t.Errorf("%s: PUT /v1/overrides = %v, %v; want success %v", tc.name, resp, err, tc.ok)
		}
		https.CloseIdleConnections()
	}
	https := &http.Client{Transport: &http.Transport{TLSClientConfig: ca.ClientTLS(nil)}}
	defer https.CloseIdleConnections()
	if code, _ := get(t, https, "https://"+d.httpAddr+"/healthz"); code != http.StatusOK {
		t.Errorf("GET https://…/healthz on the HTTP listener without a client certificate = %d, want 200", code)
	}
}
