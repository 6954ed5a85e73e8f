package main

import (
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// explainBody is a /json body of goodRules, for POST /explain and /json.
const explainBody = `{"domain": "d", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}`

// TestAdminAddr: with --admin-addr, the operators' endpoints, /hotkeys and
// POST /explain among them, are served there and not on --http-addr,
// which keeps the callers' and the probes'; without it, --http-addr
// serves everything and no admin listener opens.
func TestAdminAddr(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, goodRules)
	operator := []string{"/config", "/metrics", "/rlqs", "/ui/", "/ui/api/rules", "/ui/api/status", "/hotkeys"}
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
	if code, body := send(t, "POST", "http://"+d.adminAddr+"/explain", "", explainBody); code != http.StatusOK || !strings.Contains(body, `"overall"`) {
		t.Errorf("POST /explain on --admin-addr = %d %.100q, want 200 and an explanation", code, body)
	}
	if code, _ := send(t, "POST", "http://"+d.httpAddr+"/explain", "", explainBody); code != http.StatusNotFound {
		t.Errorf("POST /explain on --http-addr = %d, want 404", code)
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
	if code, body := send(t, "POST", "http://"+plain.httpAddr+"/explain", "", explainBody); code != http.StatusOK {
		t.Errorf("without --admin-addr: POST /explain on --http-addr = %d %.100q, want 200", code, body)
	}
}

// TestAdminHosts: the operators' endpoints answer 421 to a Host that is
// neither an IP address, localhost nor one of --admin-hosts, on the admin
// listener and, without --admin-addr, on the HTTP one; the callers'
// endpoints answer any Host.
func TestAdminHosts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, goodRules)
	hosts := []string{"--admin-hosts", "ops.example, metrics.example:9090"}
	split := startDaemon(t, slices.Concat([]string{"--config", path, "--admin-addr", "127.0.0.1:0"}, hosts)...)
	plain := startDaemon(t, slices.Concat([]string{"--config", path}, hosts)...)

	for _, c := range []struct{ name, operators, callers string }{
		{"--admin-addr", split.adminAddr, split.httpAddr},
		{"--http-addr without --admin-addr", plain.httpAddr, plain.httpAddr},
	} {
		for _, host := range []string{"", "localhost", "LOCALHOST:1", "127.0.0.1:9090", "[::1]", "ops.example", "Metrics.Example.:443"} {
			if code, body := send(t, "GET", "http://"+c.operators+"/metrics", host, ""); code != http.StatusOK {
				t.Errorf("%s: GET /metrics with Host %q = %d %.100q, want 200", c.name, host, code, body)
			}
		}
		for _, host := range []string{"evil.example", "evil.example:9090", "localhost.evil.example", "ops.example.evil.example"} {
			for _, p := range []string{"/metrics", "/ui/", "/ui/api/status", "/config", "/hotkeys"} {
				if code, _ := send(t, "GET", "http://"+c.operators+p, host, ""); code != http.StatusMisdirectedRequest {
					t.Errorf("%s: GET %s with Host %q = %d, want 421", c.name, p, host, code)
				}
			}
			if code, _ := send(t, "POST", "http://"+c.operators+"/explain", host, explainBody); code != http.StatusMisdirectedRequest {
				t.Errorf("%s: POST /explain with Host %q = %d, want 421", c.name, host, code)
			}
			if code, body := send(t, "GET", "http://"+c.callers+"/readyz", host, ""); code != http.StatusOK {
				t.Errorf("%s: GET /readyz with Host %q = %d %.100q, want 200", c.name, host, code, body)
			}
			if code, body := send(t, "POST", "http://"+c.callers+"/json", host, explainBody); code != http.StatusOK && code != http.StatusTooManyRequests {
				t.Errorf("%s: POST /json with Host %q = %d %.100q, want a decision", c.name, host, code, body)
			}
		}
	}
}

// TestParseHostNames: --admin-hosts takes names separated by commas and
// spaces, and refuses a URL.
func TestParseHostNames(t *testing.T) {
	got, err := parseHostNames(" a.example ,b.example:9090,,")
	if err != nil || !slices.Equal(got, []string{"a.example", "b.example:9090"}) {
		t.Errorf("parseHostNames = %q, %v; want a.example and b.example:9090", got, err)
	}
	for _, bad := range []string{"http://a.example", "a.example/ui/", "a b", "user@a.example"} {
		if got, err := parseHostNames(bad); err == nil {
			t.Errorf("parseHostNames(%q) = %q, want an error", bad, got)
		}
	}
}

// send sends one HTTP request with the Host header host (the URL's when
// empty) and returns the status code and body.
func send(t *testing.T, method, url, host, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	return resp.StatusCode, string(b)
}
