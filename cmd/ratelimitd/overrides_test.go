package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/ratelimitd/ratelimitd/internal/redistest"
	"github.com/ratelimitd/ratelimitd/server/overrides"
)

// overridesCLI runs "ratelimitd overrides args..." with env, and returns
// its exit code (0 for nil), stdout and stderr.
func overridesCLI(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), append([]string{"overrides"}, args...), envOf(env), &stdout, &stderr)
	code := 0
	if err != nil {
		e, ok := errors.AsType[exitError](err)
		if !ok {
			t.Fatalf("ratelimitd overrides %q = %v, want nil or an exit status", args, err)
		}
		code = e.code
	}
	return code, stdout.String(), stderr.String()
}

func envOf(kv map[string]string) lookupEnv {
	return func(name string) (string, bool) {
		v, ok := kv[name]
		return v, ok
	}
}

// checkKV asks the daemon for one hit on d's k=v and returns its code and
// its current limit.
func checkKV(t *testing.T, d *daemon) (rlsv3.RateLimitResponse_Code, uint32) {
	t.Helper()
	resp, err := rlsv3.NewRateLimitServiceClient(d.conn).ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{
		Domain: "d",
		Descriptors: []*commonv3.RateLimitDescriptor{{
			Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}},
		}},
	})
	if err != nil {
		t.Fatalf("ShouldRateLimit() error: %v", err)
	}
	return resp.GetOverallCode(), resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
}

// TestOverridesCommand drives a real daemon's overrides API with the
// command: set raises d's k=v at once, list shows it (who set it, its
// version), reset makes its counter fresh, delete restores the rule's
// limit and answers 404 the second time; a wrong token is refused.
func TestOverridesCommand(t *testing.T) {
	dir := t.TempDir()
	rules, tokens := filepath.Join(dir, "rules.yaml"), filepath.Join(dir, "tokens")
	writeFile(t, rules, goodRules)
	writeFile(t, tokens, "# operators\n\nalice:0123456789abcdef-alice\nbob:0123456789abcdef-bob\n")
	d := startDaemon(t, "--config", rules, "--admin-addr", "127.0.0.1:0", "--admin-token-file", tokens)
	admin := "http://" + d.adminAddr
	env := map[string]string{"RATELIMITD_ADMIN": admin, "RATELIMITD_TOKEN_FILE": tokens}
	kv := []string{"--domain", "d", "--entry", "k=v"}

	if _, limit := checkKV(t, d); limit != 3 {
		t.Fatalf("the rule's limit = %d, want 3", limit)
	}
	code, out, errOut := overridesCLI(t, env, append([]string{"set", "--limit", "1000/minute", "--reason", "incident 42", "--ttl", "1h"}, kv...)...)
	if code != 0 {
		t.Fatalf("overrides set: exit %d, stderr %q", code, errOut)
	}
	var set overrides.Override
	if err := json.Unmarshal([]byte(out), &set); err != nil {
		t.Fatalf("overrides set printed %q: %v", out, err)
	}
	if !strings.Contains(out, "\n  \"domain\": \"d\"") {
		t.Errorf("overrides set printed %q, want indented JSON", out)
	}
	wantLimits := []overrides.Limit{{RequestsPerUnit: 1000, Unit: "minute"}}
	if set.SetBy != "alice" || set.Version != 1 || set.Reason != "incident 42" || !cmp.Equal(set.Limits, wantLimits) ||
		set.ExpiresAt == nil || time.Until(*set.ExpiresAt) < 59*time.Minute || time.Until(*set.ExpiresAt) > time.Hour {
		t.Errorf("overrides set answered %+v, want set by alice, version 1, 1000/minute, expiring in an hour", set)
	}
	if _, limit := checkKV(t, d); limit != 1000 {
		t.Errorf("the limit after overrides set = %d, want 1000", limit)
	}

	code, out, errOut = overridesCLI(t, env, "list")
	var list overrides.File
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list.Overrides) != 1 || list.Overrides[0].SetBy != "alice" {
		t.Errorf("overrides list: exit %d, %q, stderr %q; want the override alice set", code, out, errOut)
	}
	code, out, _ = overridesCLI(t, env, "list", "--domain", "other")
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list.Overrides) != 0 {
		t.Errorf("overrides list --domain other: exit %d, %q; want no overrides", code, out)
	}

	// A lower override, used up, then reset: the counter is fresh.
	if code, _, errOut := overridesCLI(t, env, append([]string{"set", "--requests", "2", "--unit", "minute", "--algorithm", "fixed_window", "--reason", "tighten"}, kv...)...); code != 0 {
		t.Fatalf("overrides set --requests 2: exit %d, stderr %q", code, errOut)
	}
	for range 2 {
		checkKV(t, d)
	}
	if c, _ := checkKV(t, d); c != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("the third hit on 2/minute: %v, want OVER_LIMIT", c)
	}
	code, out, errOut = overridesCLI(t, env, append([]string{"reset", "--reason", "false alarm"}, kv...)...)
	if code != 0 || !strings.Contains(out, `"counters"`) {
		t.Errorf("overrides reset: exit %d, %q, stderr %q; want 0 and the counters reset", code, out, errOut)
	}
	if c, _ := checkKV(t, d); c != rlsv3.RateLimitResponse_OK {
		t.Errorf("a hit after overrides reset: %v, want OK", c)
	}

	if code, _, errOut := overridesCLI(t, env, append([]string{"delete"}, kv...)...); code != 0 {
		t.Errorf("overrides delete: exit %d, stderr %q", code, errOut)
	}
	if _, limit := checkKV(t, d); limit != 3 {
		t.Errorf("the limit after overrides delete = %d, want the rule's 3", limit)
	}
	code, out, errOut = overridesCLI(t, env, append([]string{"delete"}, kv...)...)
	if code != 1 || out != "" || !strings.Contains(errOut, "404") {
		t.Errorf("overrides delete again: exit %d, stdout %q, stderr %q; want 1 and the 404 on stderr", code, out, errOut)
	}

	wrong := filepath.Join(dir, "wrong")
	writeFile(t, wrong, "0123456789abcdef-mallory\n")
	code, _, errOut = overridesCLI(t, map[string]string{"RATELIMITD_ADMIN": admin}, append([]string{"set", "--token-file", wrong, "--limit", "9/second", "--reason", "x"}, kv...)...)
	if code != 1 || !strings.Contains(errOut, "401") || !strings.Contains(errOut, "Bearer") {
		t.Errorf("overrides set with a wrong token: exit %d, stderr %q; want 1 and the daemon's 401 message", code, errOut)
	}
	if _, limit := checkKV(t, d); limit != 3 {
		t.Errorf("the limit after a refused set = %d, want 3", limit)
	}

	open := startDaemon(t, "--config", rules, "--admin-addr", "127.0.0.1:0")
	code, _, errOut = overridesCLI(t, map[string]string{"RATELIMITD_ADMIN": "http://" + open.adminAddr, "RATELIMITD_TOKEN_FILE": tokens},
		append([]string{"set", "--limit", "9/second", "--reason", "x"}, kv...)...)
	if code != 1 || !strings.Contains(errOut, "403") || !strings.Contains(errOut, "--admin-token-file") {
		t.Errorf("overrides set on a daemon without a token file: exit %d, stderr %q; want 1 and the daemon's 403 message", code, errOut)
	}
}

// TestOverridesCommandUsage: bad usage exits 2 with a message, sending
// nothing.
func TestOverridesCommandUsage(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	writeFile(t, tokens, "0123456789abcdef0123\n")
	empty := filepath.Join(dir, "empty")
	writeFile(t, empty, "# none\n\n")
	// Nothing listens here: a call that got as far as sending would exit 1.
	env := map[string]string{"RATELIMITD_ADMIN": "http://127.0.0.1:1", "RATELIMITD_TOKEN_FILE": tokens}
	kv := []string{"--domain", "d", "--entry", "k=v"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "usage"},
		{[]string{"frob"}, `unknown command "frob"`},
		{append([]string{"set", "--limit", "10/minute"}, kv...), "--reason is required"},
		{append([]string{"set", "--reason", "r"}, kv...), "a limit is required"},
		{append([]string{"set", "--limit", "ten/minute", "--reason", "r"}, kv...), "want a whole number"},
		{append([]string{"set", "--limit", "10", "--reason", "r"}, kv...), "want N/UNIT"},
		{append([]string{"set", "--limit", "10/minute,colour=red", "--reason", "r"}, kv...), "unknown option"},
		{append([]string{"set", "--requests", "10", "--reason", "r"}, kv...), "--requests needs --unit or --window"},
		{append([]string{"set", "--requests", "10", "--unit", "minute", "--window", "1m", "--reason", "r"}, kv...), "--requests needs --unit or --window"},
		{append([]string{"set", "--limit", "1/second", "--reason", "r", "--ttl", "1h", "--expires-at", "2030-01-01T00:00:00Z"}, kv...), "exclude each other"},
		{append([]string{"set", "--limit", "1/second", "--reason", "r", "--expires-at", "tomorrow"}, kv...), "RFC 3339"},
		{[]string{"delete", "--entry", "k=v"}, "--domain is required"},
		{[]string{"reset", "--domain", "d"}, "--entry key=value is required"},
		{[]string{"reset", "--domain", "d", "--entry", "novalue"}, "want key=value"},
		{[]string{"list", "--limit", "1/second"}, "flag provided but not defined: -limit"},
		{[]string{"list", "extra"}, "unexpected argument"},
		{append([]string{"delete", "--token-file", empty}, kv...), "holds no token"},
		{append([]string{"delete", "--token-file", filepath.Join(dir, "missing")}, kv...), "no such file"},
	} {
		code, out, errOut := overridesCLI(t, env, c.args...)
		if code != 2 || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("overrides %q: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, out, errOut, c.want)
		}
	}
	code, _, errOut := overridesCLI(t, map[string]string{}, "list")
	if code != 2 || !strings.Contains(errOut, "--admin (or RATELIMITD_ADMIN) is required") {
		t.Errorf("overrides list without --admin: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = overridesCLI(t, map[string]string{"RATELIMITD_ADMIN": "http://127.0.0.1:1"}, append([]string{"reset"}, kv...)...)
	if code != 2 || !strings.Contains(errOut, "--token-file (or RATELIMITD_TOKEN_FILE) is required") {
		t.Errorf("overrides reset without a token: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = overridesCLI(t, env, "list")
	if code != 1 || !strings.Contains(errOut, "127.0.0.1:1") {
		t.Errorf("overrides list on a closed port: exit %d, stderr %q; want 1 naming the address", code, errOut)
	}
}

func TestParseLimit(t *testing.T) {
	for _, c := range []struct {
		in   string
		want overrides.Limit
	}{
		{"1000/minute", overrides.Limit{RequestsPerUnit: 1000, Unit: "minute"}},
		{"100/30s", overrides.Limit{RequestsPerUnit: 100, Window: "30s"}},
		{"0/hour", overrides.Limit{Unit: "hour"}},
		{"50/second,algorithm=token_bucket,burst=200,name=api", overrides.Limit{RequestsPerUnit: 50, Unit: "second", Algorithm: "token_bucket", Burst: 200, Name: "api"}},
		{"4294967295/day", overrides.Limit{RequestsPerUnit: 4294967295, Unit: "day"}},
	} {
		got, err := parseLimit(c.in)
		if err != nil || got != c.want {
			t.Errorf("parseLimit(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "10", "/minute", "10/", "-1/minute", "4294967296/day", "1/minute,burst=x", "1/minute,", "1/minute,,name=a"} {
		if got, err := parseLimit(in); err == nil {
			t.Errorf("parseLimit(%q) = %+v, want an error", in, got)
		}
	}
}

// TestOverridesToken: the command sends the first token of the file, its
// name cut off, as the daemon reads the file.
func TestOverridesToken(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ file, want string }{
		{"plain-token-0123456789\nsecond:0123456789abcdef\n", "plain-token-0123456789"},
		{"# comment\n\n  alice:0123456789abcdef  \n", "0123456789abcdef"},
		{"name:tok:with:colons-0123\n", "tok:with:colons-0123"},
		{"alice: 0123456789abcdef\n", "0123456789abcdef"}, // the daemon trims around the ':'
	} {
		path := filepath.Join(dir, "tokens")
		writeFile(t, path, c.file)
		o := overridesFlags{tokenFile: path}
		if got, err := o.token("set"); err != nil || got != c.want {
			t.Errorf("token of %q = %q, %v; want %q", c.file, got, err, c.want)
		}
	}
	// A first token the daemon refuses is refused here too, saying why.
	for _, c := range []struct{ file, want string }{
		{":0123456789abcdef\n", "name before ':' is empty"},
		{"short\n", "under the minimum"},
	} {
		path := filepath.Join(dir, "tokens")
		writeFile(t, path, c.file)
		o := overridesFlags{tokenFile: path}
		if got, err := o.token("set"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("token of %q = %q, %v; want an error with %q", c.file, got, err, c.want)
		}
	}
}

// TestOverridesCommandRedis: two daemons on one Redis. An override set
// through one reaches the other within a second (its sync loop polls the
// store), a reset through one frees the counter both count on, and a
// restarted daemon finds the override in Redis.
func TestOverridesCommandRedis(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	dir := t.TempDir()
	rules, tokens := filepath.Join(dir, "rules.yaml"), filepath.Join(dir, "tokens")
	writeFile(t, rules, goodRules)
	writeFile(t, tokens, "ops:0123456789abcdef-ops\n")
	args := []string{"--config", rules, "--backend", "redis://" + srv.Addr, "--redis-timeout", "2s", "--admin-addr", "127.0.0.1:0", "--admin-token-file", tokens}
	a, b := startDaemon(t, args...), startDaemon(t, args...)
	env := map[string]string{"RATELIMITD_ADMIN": "http://" + a.adminAddr, "RATELIMITD_TOKEN_FILE": tokens}
	kv := []string{"--domain", "d", "--entry", "k=v"}

	if code, _, errOut := overridesCLI(t, env, append([]string{"set", "--limit", "2/minute,algorithm=sliding_window", "--reason", "r"}, kv...)...); code != 0 {
		t.Fatalf("overrides set: exit %d, stderr %q", code, errOut)
	}
	deadline := time.Now().Add(time.Second)
	for {
		if _, limit := checkKV(t, b); limit == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the other daemon did not apply the override within a second")
		}
		time.Sleep(20 * time.Millisecond)
	}
	checkKV(t, a)
	if c, _ := checkKV(t, b); c != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("the third hit, on the other daemon: %v, want OVER_LIMIT", c)
	}
	if code, _, errOut := overridesCLI(t, env, append([]string{"reset"}, kv...)...); code != 0 {
		t.Fatalf("overrides reset: exit %d, stderr %q", code, errOut)
	}
	// The other daemon refused from its local cache: it forgets that
	// refusal at its next poll of the overrides.
	deadline = time.Now().Add(time.Second)
	for {
		if c, _ := checkKV(t, b); c == rlsv3.RateLimitResponse_OK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the other daemon still refuses a second after the reset")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if c, _ := checkKV(t, a); c != rlsv3.RateLimitResponse_OK {
		t.Errorf("the second hit after the reset: %v, want OK", c)
	}
	c := startDaemon(t, args...)
	env["RATELIMITD_ADMIN"] = "http://" + c.adminAddr
	code, out, errOut := overridesCLI(t, env, "list", "--domain", "d")
	var list overrides.File
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list.Overrides) != 1 || list.Overrides[0].SetBy != "ops" {
		t.Errorf("overrides list on a new daemon: exit %d, %q, stderr %q; want the override ops set", code, out, errOut)
	}
}
