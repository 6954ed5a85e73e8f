package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// referenceRules is a rule file in envoyproxy/ratelimit's format, as its
// users write them: no algorithm, a unit.
const referenceRules = `domain: edge
descriptors:
  - key: api_key
    rate_limit:
      unit: hour
      requests_per_unit: 3
  - key: path
    value: /health
    rate_limit:
      unlimited: true
`

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return strconv.Itoa(lis.Addr().(*net.TCPAddr).Port)
}

// binaryAsReference returns ratelimitd as a separate program named as the
// reference's image names its binary: a link, "ratelimit", to this test
// binary, which runs as ratelimitd with asDaemon in its environment (see
// TestMain). No second build: the daemon is the code under test.
func binaryAsReference(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "ratelimit")
	if err := os.Symlink(self, bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestCompatEnvoyproxyBinary starts the binary as a deployment of
// envoyproxy/ratelimit would: only the reference's variables, plus
// RATELIMITD_COMPAT=envoyproxy (and asDaemon, which makes the test binary
// the daemon), rules in a RUNTIME_ROOT tree, Redis from
// REDIS_URL. It must answer as the reference does: fixed windows, the
// legacy headers since LIMIT_RESPONSE_HEADERS_ENABLED is true, counters in
// Redis, /healthcheck, /rlconfig, the gRPC health name "ratelimit"; and it
// names the variable it does not support in its log.
func TestCompatEnvoyproxyBinary(t *testing.T) {
	rds := redistest.Start(t)
	bin := binaryAsReference(t)

	// The image holds no rules: with neither source, the binary says so.
	none := exec.Command(bin)
	none.Env = []string{asDaemon + "=1"}
	out, err := none.CombinedOutput()
	if code := none.ProcessState.ExitCode(); code != 2 || !strings.Contains(string(out), "no rules: set --config or --xds-server") {
		t.Errorf("without rules: exit status %d (%v), output %q; want 2 and the message", code, err, out)
	}
	root := filepath.Join(t.TempDir(), "runtime", "current")
	rulesDir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(rulesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(rulesDir, "edge.yaml"), referenceRules)
	grpcPort, httpPort, debugPort := freePort(t), freePort(t), freePort(t)

	cmd := exec.Command(bin)
	cmd.Env = []string{
		asDaemon + "=1",
		"RATELIMITD_COMPAT=envoyproxy",
		"HOST=127.0.0.1", "PORT=" + httpPort,
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + grpcPort,
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + debugPort,
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + rds.Addr,
		"LIMIT_RESPONSE_HEADERS_ENABLED=true",
		"USE_STATSD=false", "RESPONSE_DYNAMIC_METADATA=true",
		"LOG_LEVEL=info",
	}
	var logs syncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("ratelimitd exited with %v after SIGINT; logs:\n%s", err, logs.String())
			}
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			t.Errorf("ratelimitd did not stop; logs:\n%s", logs.String())
		}
	})

	httpBase := "http://127.0.0.1:" + httpPort
	eventually(t, "/healthcheck 200", func() bool {
		select {
		case err := <-exited:
			t.Fatalf("ratelimitd exited: %v; logs:\n%s", err, logs.String())
		default:
		}
		resp, err := http.Get(httpBase + "/healthcheck")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if code, body := get(t, nil, httpBase+"/healthcheck"); code != http.StatusOK || body != "OK" {
		t.Errorf("GET /healthcheck = %d %q, want 200 OK", code, body)
	}

	conn, err := grpc.NewClient("127.0.0.1:"+grpcPort, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if resp, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{Service: "ratelimit"}); err != nil ||
		resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health Check(ratelimit) = %v, %v; want SERVING", resp, err)
	}

	// Fixed window: the 4th hit of 3 per hour in the same hour is over the
	// limit. Should the hour turn between two hits, the count starts again.
	client := rlsv3.NewRateLimitServiceClient(conn)
	hit := func(key, value string) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := client.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{
			Domain:      "edge",
			Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}}},
		})
		if err != nil {
			t.Fatalf("ShouldRateLimit(%s=%s): %v", key, value, err)
		}
		return resp
	}
	var codes []rlsv3.RateLimitResponse_Code
	for attempt := 0; ; attempt++ {
		hour := time.Now().Truncate(time.Hour)
		codes = codes[:0]
		var last *rlsv3.RateLimitResponse
		for range 4 {
			last = hit("api_key", "k"+strconv.Itoa(attempt))
			codes = append(codes, last.GetOverallCode())
		}
		if !time.Now().Truncate(time.Hour).Equal(hour) && attempt == 0 {
			continue
		}
		headers := map[string]string{}
		for _, h := range last.GetResponseHeadersToAdd() {
			headers[strings.ToLower(h.GetKey())] = h.GetValue()
		}
		if headers["ratelimit-limit"] != "3" || headers["ratelimit-remaining"] != "0" || headers["ratelimit-reset"] == "" {
			t.Errorf("headers of the 4th hit = %v, want RateLimit-Limit 3, RateLimit-Remaining 0 and RateLimit-Reset", headers)
		}
		break
	}
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	if want := []rlsv3.RateLimitResponse_Code{ok, ok, ok, over}; !slices.Equal(codes, want) {
		t.Errorf("4 hits of 3 per hour: %v, want %v", codes, want)
	}
	if resp := hit("path", "/health"); resp.GetOverallCode() != ok || len(resp.GetResponseHeadersToAdd()) != 0 {
		t.Errorf("an unlimited rule: %v, want OK without headers", resp)
	}

	// The counters are in Redis, under ratelimitd's prefix, by fixed window.
	rc := goredis.NewClient(&goredis.Options{Addr: rds.Addr})
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keys, err := rc.Keys(ctx, "ratelimitd:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(keys, " "), "api_key") || !strings.Contains(strings.Join(keys, " "), "fixed_window") {
		t.Errorf("Redis keys = %q, want a fixed_window counter of api_key under ratelimitd:", keys)
	}

	// /rlconfig, on the HTTP port and on the debug port, where the
	// reference serves it.
	for _, base := range []string{httpBase, "http://127.0.0.1:" + debugPort} {
		code, body := get(t, nil, base+"/rlconfig")
		if code != http.StatusOK || !strings.Contains(body, "edge.api_key: 3 per hour fixed_window") || !strings.Contains(body, "edge.path=/health: unlimited") {
			t.Errorf("GET %s/rlconfig = %d\n%s\nwant the rules, by fixed window", base, code, body)
		}
	}

	// The reference's variables: those honoured in one line, the one not
	// supported named in another.
	eventually(t, "the compat log lines", func() bool {
		l := logs.String()
		return strings.Contains(l, "RUNTIME_ROOT") && strings.Contains(l, "RESPONSE_DYNAMIC_METADATA")
	})
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "RESPONSE_DYNAMIC_METADATA") && !strings.Contains(line, "WARN") {
			t.Errorf("RESPONSE_DYNAMIC_METADATA is named in a line that is no warning: %s", line)
		}
	}

}
