package main

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// TestBackendPerSecond: with --backend-per-second, the counters of
// per-second rules land in that Redis, the others in --backend's, a call
// over both is refused whole, and /metrics and /readyz cover both.
func TestBackendPerSecond(t *testing.T) {
	mainSrv, secondSrv := redistest.Start(t), redistest.Start(t)
	path := writeRules(t, `domain: d
descriptors:
  - key: sec
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: min
    rate_limit: {unit: minute, requests_per_unit: 5}
`)
	d := startDaemon(t, "--config", path, "--backend", "redis://"+mainSrv.Addr, "--backend-per-second", "redis://"+secondSrv.Addr,
		"--redis-key-prefix", "ps:", "--redis-timeout", "2s", "--redis-per-second-timeout", "2s",
		"--redis-read-timeout", "2s", "--redis-write-timeout", "2s", "--failure-mode", "error")
	client := rlsv3.NewRateLimitServiceClient(d.conn)
	req := rlRequest("d", "sec", "x")
	req.Descriptors = append(req.Descriptors, rlRequest("d", "min", "y").Descriptors...)
	codes := make([]rlsv3.RateLimitResponse_Code, 0, 2)
	for range 2 {
		resp, err := client.ShouldRateLimit(t.Context(), req)
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		codes = append(codes, resp.GetOverallCode())
	}
	// Unless a second passed between the two calls, the second is over
	// on its per-second descriptor; either way the per-minute counter
	// counts only the admitted calls.
	admitted := 0
	for _, c := range codes {
		if c == rlsv3.RateLimitResponse_OK {
			admitted++
		}
	}
	keys := func(srv *redistest.Server) []string {
		ks, err := srv.Client(t).Keys(t.Context(), "ps:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(ks)
		return ks
	}
	mainKeys, secondKeys := keys(mainSrv), keys(secondSrv)
	if len(mainKeys) != 1 || !strings.Contains(mainKeys[0], "min") {
		t.Errorf("main Redis keys = %q, want the per-minute counter only", mainKeys)
	}
	if len(secondKeys) == 0 || slices.ContainsFunc(secondKeys, func(k string) bool { return !strings.Contains(k, "sec") }) {
		t.Errorf("per-second Redis keys = %q, want the per-second counters only", secondKeys)
	}
	if len(mainKeys) == 1 {
		n, err := mainSrv.Client(t).Get(t.Context(), mainKeys[0]).Int()
		if err != nil || n != admitted {
			t.Errorf("per-minute counter = %d (%v), want %d: only the admitted calls count", n, err, admitted)
		}
	}

	mfs := scrapeDaemon(t, d)
	for _, node := range []string{"redis", "per-second/redis"} {
		if v, ok := mfs.Value("ratelimitd_backend_breaker_state", "node="+node+",state=closed"); !ok || v != 1 {
			t.Errorf("ratelimitd_backend_breaker_state{node=%q,state=closed} = %v (%v), want 1", node, v, ok)
		}
	}
	if _, ok := mfs.Value("ratelimitd_local_cache_misses_total", ""); !ok {
		t.Error("ratelimitd_local_cache_misses_total: no such series")
	}

	secondSrv.Kill()
	eventually(t, "not ready with the per-second Redis down", func() bool {
		_, _ = client.ShouldRateLimit(t.Context(), req) // fails: opens the per-second store's breaker
		code, body := get(t, nil, "http://"+d.httpAddr+"/readyz")
		return code == http.StatusServiceUnavailable && !strings.Contains(body, "backend: ok")
	})
}

// TestBackendPerSecondFlags: --backend-per-second needs a Redis --backend
// and a Redis URL, and its errors never print its password.
func TestBackendPerSecondFlags(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"memory backend", []string{"--backend-per-second", "redis://127.0.0.1:1"}, "--backend-per-second needs a Redis --backend"},
		{"not a URL", []string{"--backend", "redis://127.0.0.1:1", "--backend-per-second", "user:secret@h:6379"}, "--backend-per-second \"(hidden"},
		{"unknown scheme", []string{"--backend", "redis://127.0.0.1:1", "--backend-per-second", "memcached://u:secret@h:1"}, "--backend-per-second"},
		{"negative pool", []string{"--backend", "redis://127.0.0.1:1", "--backend-per-second", "redis://h:1", "--redis-per-second-pool-size", "-1"}, "must not be negative"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			err := run(t.Context(), append([]string{"--config", "x"}, tt.args...), noEnv, io.Discard, &stderr)
			if e, ok := errors.AsType[exitError](err); !ok || e.code != 2 {
				t.Errorf("run(%q) = %v, want exit status 2", tt.args, err)
			}
			if !strings.Contains(stderr.String(), tt.want) || strings.Contains(stderr.String(), "secret") {
				t.Errorf("stderr = %q, want it to mention %q, without the password", stderr.String(), tt.want)
			}
		})
	}
}
