package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratelimitd/ratelimitd/server"
)

// TestConnFlags: the connection bounds default to their constants and
// are set by flag or RATELIMITD_* variable, the flag winning.
func TestConnFlags(t *testing.T) {
	defaults := func() (httpConnFlags, grpcConnFlags) {
		return httpConnFlags{
				readTimeout:    server.DefaultHTTPReadTimeout,
				writeTimeout:   server.DefaultHTTPWriteTimeout,
				idleTimeout:    server.DefaultHTTPIdleTimeout,
				maxHeaderBytes: server.DefaultHTTPMaxHeaderBytes,
			}, grpcConnFlags{
				maxConcurrentStreams:         server.DefaultGRPCMaxConcurrentStreams,
				keepaliveMinTime:             server.DefaultGRPCKeepaliveMinTime,
				keepalivePermitWithoutStream: server.DefaultGRPCKeepalivePermitWithoutStream,
				maxConnectionIdle:            server.DefaultGRPCMaxConnectionIdle,
				maxConnectionAge:             server.DefaultGRPCMaxConnectionAge,
				ageGrace:                     server.DefaultGRPCMaxConnectionAgeGrace,
				keepaliveTime:                server.DefaultGRPCKeepaliveTime,
				keepaliveTimeout:             server.DefaultGRPCKeepaliveTimeout,
			}
	}
	allEnv := map[string]string{
		"RATELIMITD_HTTP_READ_TIMEOUT":                    "1s",
		"RATELIMITD_HTTP_WRITE_TIMEOUT":                   "2s",
		"RATELIMITD_HTTP_IDLE_TIMEOUT":                    "3s",
		"RATELIMITD_HTTP_MAX_HEADER_BYTES":                "4096",
		"RATELIMITD_GRPC_MAX_CONCURRENT_STREAMS":          "7",
		"RATELIMITD_GRPC_KEEPALIVE_MIN_TIME":              "8s",
		"RATELIMITD_GRPC_KEEPALIVE_PERMIT_WITHOUT_STREAM": "false",
		"RATELIMITD_GRPC_MAX_CONNECTION_IDLE":             "9s",
		"RATELIMITD_GRPC_MAX_CONNECTION_AGE":              "10s",
		"RATELIMITD_GRPC_MAX_CONNECTION_AGE_GRACE":        "11s",
		"RATELIMITD_GRPC_KEEPALIVE_TIME":                  "12s",
		"RATELIMITD_GRPC_KEEPALIVE_TIMEOUT":               "13s",
	}
	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		wantHTTP httpConnFlags
		wantGRPC grpcConnFlags
	}{
		{name: "default"},
		{name: "environment", env: allEnv,
			wantHTTP: httpConnFlags{time.Second, 2 * time.Second, 3 * time.Second, 4096},
			wantGRPC: grpcConnFlags{7, 8 * time.Second, false, 9 * time.Second, 10 * time.Second, 11 * time.Second, 12 * time.Second, 13 * time.Second},
		},
		{name: "flags over environment", env: allEnv, args: []string{
			"--http-read-timeout", "0", "--http-write-timeout=0", "--http-idle-timeout=0", "--http-max-header-bytes=0",
			"--grpc-max-concurrent-streams=0", "--grpc-keepalive-min-time=1ms", "--grpc-keepalive-permit-without-stream",
			"--grpc-max-connection-idle=0", "--grpc-max-connection-age=0", "--grpc-max-connection-age-grace=0",
			"--grpc-keepalive-time=0", "--grpc-keepalive-timeout=1ms",
		},
			wantGRPC: grpcConnFlags{keepaliveMinTime: time.Millisecond, keepalivePermitWithoutStream: true, keepaliveTimeout: time.Millisecond},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "default" {
				tt.wantHTTP, tt.wantGRPC = defaults()
			}
			var stderr bytes.Buffer
			f, err := parseFlags(append([]string{"--config", "x"}, tt.args...), env(tt.env), &stderr)
			if err != nil {
				t.Fatalf("parseFlags() error: %v (%s)", err, stderr.String())
			}
			opt := cmp.AllowUnexported(httpConnFlags{}, grpcConnFlags{})
			if diff := cmp.Diff(tt.wantHTTP, f.httpConn, opt); diff != "" {
				t.Errorf("HTTP bounds (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantGRPC, f.grpcConn, opt); diff != "" {
				t.Errorf("gRPC bounds (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBadConnFlags(t *testing.T) {
	tests := []struct {
		args []string
		env  map[string]string
		want string // in stderr
	}{
		{[]string{"--http-read-timeout", "-1s"}, nil, "--http-read-timeout"},
		{[]string{"--http-max-header-bytes", "-1"}, nil, "--http-max-header-bytes"},
		{[]string{"--grpc-max-concurrent-streams", "4294967296"}, nil, "want at most 4294967295"},
		{[]string{"--grpc-keepalive-min-time", "0"}, nil, "must be positive"},
		{[]string{"--grpc-keepalive-timeout", "0"}, nil, "must be positive"},
		{[]string{"--grpc-max-connection-age", "-1m"}, nil, "--grpc-max-connection-age"},
		{nil, map[string]string{"RATELIMITD_GRPC_MAX_CONNECTION_IDLE": "forever"}, "RATELIMITD_GRPC_MAX_CONNECTION_IDLE"},
	}
	for _, tt := range tests {
		var stderr bytes.Buffer
		err := run(t.Context(), append([]string{"--config", "x"}, tt.args...), env(tt.env), io.Discard, &stderr)
		if e, ok := errors.AsType[exitError](err); !ok || e.code != 2 {
			t.Errorf("run(%q, %v) = %v, want exit status 2", tt.args, tt.env, err)
		}
		if !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("run(%q, %v): stderr = %q, want it to mention %q", tt.args, tt.env, stderr.String(), tt.want)
		}
	}
}

// closedWithin10s reports whether the server closed conn, reading what it
// sends, within 10 s: false if conn is still open then.
func closedWithin10s(t *testing.T, conn net.Conn, r io.Reader) bool {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err := io.Copy(io.Discard, r) // nil at EOF
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return false
	}
	return true
}

// TestHTTPIdleConnectionClosed: a keep-alive connection waiting for its
// next request is closed after --http-idle-timeout, on the HTTP and the
// debug listener.
func TestHTTPIdleConnectionClosed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, goodRules)
	d := startDaemon(t, "--config", path, "--http-idle-timeout", "200ms", "--debug-addr", "127.0.0.1:0")
	for _, tt := range []struct{ listener, addr, path string }{
		{"HTTP", d.httpAddr, "/healthz"},
		{"debug", d.debugAddr, "/debug/pprof/"},
	} {
		t.Run(tt.listener, func(t *testing.T) {
			conn, err := net.Dial("tcp", tt.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: ratelimitd\r\n\r\n", tt.path)
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("GET %s: %v", tt.path, err)
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatalf("GET %s: %v", tt.path, err)
			}
			if resp.StatusCode != http.StatusOK || resp.Close {
				t.Fatalf("GET %s = %d (close: %v), want 200 on a kept-alive connection", tt.path, resp.StatusCode, resp.Close)
			}
			if !closedWithin10s(t, conn, br) {
				t.Errorf("an idle keep-alive connection is still open after 10s with --http-idle-timeout 200ms")
			}
		})
	}
}

// TestHTTPTrickledBodyCut: a POST /json whose body comes a byte at a
// time, slower than --http-read-timeout allows, is cut.
func TestHTTPTrickledBodyCut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, goodRules)
	d := startDaemon(t, "--config", path, "--http-read-timeout", "300ms")

	// A valid request, padded so that it takes 50 s to trickle in.
	body := `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}` + strings.Repeat(" ", 1000)
	conn, err := net.Dial("tcp", d.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /json HTTP/1.1\r\nHost: ratelimitd\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := range len(body) {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := conn.Write([]byte{body[i]}); err != nil {
				return // the server closed the connection
			}
		}
	})
	defer wg.Wait()
	defer close(stop)

	br := bufio.NewReader(conn)
	if err := conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.ReadResponse(br, nil); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatalf("POST /json with a trickled body = 200, want it cut")
		}
	}
	if !closedWithin10s(t, conn, br) {
		t.Errorf("a trickled body is still being read after 10s with --http-read-timeout 300ms")
	}
}

// TestGRPCConnectionClosed: a gRPC connection is closed with GOAWAY once
// it has been idle for --grpc-max-connection-idle, or has lived for
// --grpc-max-connection-age; the client then reconnects for its next call.
func TestGRPCConnectionClosed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, goodRules)
	for _, flag := range []string{"--grpc-max-connection-idle", "--grpc-max-connection-age"} {
		t.Run(flag, func(t *testing.T) {
			d := startDaemon(t, "--config", path, flag, "300ms")
			conn, err := grpc.NewClient(d.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			health := healthpb.NewHealthClient(conn)
			if _, err := health.Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
				t.Fatalf("Check() error: %v", err)
			}
			// The connection is READY, with no RPC in flight, until the
			// server's GOAWAY makes the client drop it: IDLE.
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			for s := conn.GetState(); s == connectivity.Ready; s = conn.GetState() {
				if !conn.WaitForStateChange(ctx, s) {
					t.Fatalf("the connection is still READY after 10s with %s 300ms", flag)
				}
			}
			if _, err := health.Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
				t.Errorf("Check() after the server closed the connection: %v", err)
			}
		})
	}
}

// TestGRPCMaxConcurrentStreams: past --grpc-max-concurrent-streams, a
// connection's next RPC waits for one in flight to end.
func TestGRPCMaxConcurrentStreams(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, goodRules)
	d := startDaemon(t, "--config", path, "--grpc-max-concurrent-streams", "1")
	health := healthpb.NewHealthClient(d.conn)
	firstCtx, endFirst := context.WithTimeout(t.Context(), 10*time.Second)
	defer endFirst()
	first, err := health.Watch(firstCtx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Recv(); err != nil {
		t.Fatalf("first Watch: %v", err)
	}
	// The first Watch holds the connection's one stream: the second
	// waits for it to end.
	secondCtx, endSecond := context.WithTimeout(t.Context(), 10*time.Second)
	defer endSecond()
	answered := make(chan error, 1)
	go func() {
		s, err := health.Watch(secondCtx, &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = s.Recv()
		}
		answered <- err
	}()
	select {
	case err := <-answered:
		t.Fatalf("a second Watch answered (err: %v) while the first held the connection's one stream", err)
	case <-time.After(300 * time.Millisecond):
	}
	endFirst()
	if err := <-answered; err != nil {
		t.Errorf("the second Watch, once the first ended: %v", err)
	}
}
