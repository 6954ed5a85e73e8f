package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// asDaemon, set to 1 in a test binary's environment, makes it run as
// ratelimitd (see TestMain): real separate processes, no extra build.
const asDaemon = "RATELIMITD_TEST_AS_DAEMON"

// A process is ratelimitd running as a child process.
type process struct {
	cmd        *exec.Cmd
	grpc, http string
	conn       *grpc.ClientConn
	client     rlsv3.RateLimitServiceClient
	exited     chan struct{}
}

// startProcess starts ratelimitd with args as a child process, waits for
// it to listen, and stops it at the end of the test.
func startProcess(t *testing.T, args ...string) *process {
	t.Helper()
	args = append([]string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--log-format", "json"}, args...)
	return startProcessEnv(t, os.Environ(), args...)
}

// startProcessEnv starts ratelimitd as startProcess does, with the
// environment env and only args: it must log as JSON at level info, so
// that its "started" line tells the addresses.
func startProcessEnv(t *testing.T, env []string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(slices.Clone(env), asDaemon+"=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	addrs := make(chan [2]string, 1)
	var logMu sync.Mutex
	var log []string
	var exit error // cmd.Wait's, read once p.exited is closed
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logMu.Lock()
			log = append(log, sc.Text())
			logMu.Unlock()
			var rec struct{ Msg, GRPC, HTTP string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "ratelimitd started" {
				addrs <- [2]string{rec.GRPC, rec.HTTP}
			}
		}
		exit = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM) // fails only if it has exited already
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill() // likewise
			<-p.exited
		}
		if t.Failed() {
			logMu.Lock()
			t.Logf("ratelimitd %v (exit: %v) log:\n%s", args, exit, strings.Join(log, "\n"))
			logMu.Unlock()
		}
	})
	select {
	case a := <-addrs:
		p.grpc, p.http = a[0], a[1]
	case <-p.exited:
		t.Fatalf("ratelimitd %v exited at start (%v):\n%s", args, exit, strings.Join(log, "\n"))
	case <-time.After(20 * time.Second):
		t.Fatalf("ratelimitd %v did not start", args)
	}
	p.conn, err = grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.conn.Close() })
	p.client = rlsv3.NewRateLimitServiceClient(p.conn)
	return p
}

func rlRequest(domain string, kv ...string) *rlsv3.RateLimitRequest {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*commonv3.RateLimitDescriptor{d}}
}

func writeRules(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRedisExact: three ratelimitd processes sharing one Redis, 64
// concurrent callers spread over them, a limit of N per hour: exactly N
// admitted, for every strict algorithm (sliding_window on a fresh key).
func TestRedisExact(t *testing.T) {
	srv := redistest.Start(t)
	const n = 200
	var rules strings.Builder
	rules.WriteString("domain: exact\ndescriptors:\n")
	algs := []string{"fixed_window", "sliding_log", "token_bucket", "gcra", "sliding_window"}
	for _, a := range algs {
		fmt.Fprintf(&rules, "  - key: %s\n    rate_limit: {algorithm: %s, unit: hour, requests_per_unit: %d}\n", a, a, n)
	}
	path := writeRules(t, rules.String())
	var procs []*process
	for range 3 {
		procs = append(procs, startProcess(t, "--config", path, "--backend", "redis://"+srv.Addr, "--redis-timeout", "2s",
			"--redis-read-timeout", "2s", "--redis-write-timeout", "2s", "--failure-mode", "error"))
	}
	for _, a := range algs {
		t.Run(a, func(t *testing.T) {
			var admitted, calls atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			for c := range 64 {
				wg.Go(func() {
					p := procs[c%len(procs)]
					for calls.Add(1) <= 3*n {
						resp, err := p.client.ShouldRateLimit(t.Context(), rlRequest("exact", a, "k"))
						if err != nil {
							errs <- err
							return
						}
						if resp.OverallCode == rlsv3.RateLimitResponse_OK {
							admitted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("ShouldRateLimit: %v", err)
			}
			if got := admitted.Load(); got != n {
				t.Errorf("%d calls from 64 callers over 3 processes on a limit of %d/hour: admitted %d, want exactly %d", 3*n, n, got, n)
			}
		})
	}
}

// TestRedisFaults: Redis killed under load: every RPC answers as its
// failure mode says, and bans still refuse; Redis restarted: decisions
// resume, without restarting ratelimitd.
func TestRedisFaults(t *testing.T) {
	srv := redistest.Start(t)
	path := writeRules(t, "domain: f\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1000000}\n"+
		"  - key: banned\n    rate_limit: {unit: hour, requests_per_unit: 0}\n")
	const timeout = 100 * time.Millisecond
	modes := []string{"allow", "deny", "error"}
	procs := map[string]*process{}
	for _, m := range modes {
		procs[m] = startProcess(t, "--config", path, "--backend", "redis://"+srv.Addr, "--failure-mode", m,
			"--redis-timeout", timeout.String())
	}
	type outcome struct {
		code  string
		slow  time.Duration
		count int
	}
	var mu sync.Mutex
	seen := map[string]map[string]*outcome{} // mode -> answer -> outcome
	record := func(mode, answer string, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if seen[mode] == nil {
			seen[mode] = map[string]*outcome{}
		}
		o := seen[mode][answer]
		if o == nil {
			o = &outcome{code: answer}
			seen[mode][answer] = o
		}
		o.count++
		o.slow = max(o.slow, d)
	}
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for _, m := range modes {
		for c := range 8 {
			wg.Go(func() {
				for i := 0; ctx.Err() == nil; i++ {
					start := time.Now()
					rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					resp, err := procs[m].client.ShouldRateLimit(rctx, rlRequest("f", "k", fmt.Sprintf("c%d-%d", c, i%100)))
					cancel()
					if ctx.Err() != nil {
						return
					}
					answer := resp.GetOverallCode().String()
					if err != nil {
						answer = status.Code(err).String()
					}
					record(m, answer, time.Since(start))
				}
			})
		}
	}
	time.Sleep(300 * time.Millisecond) // under load, Redis up
	srv.Kill()
	time.Sleep(time.Second) // under load, Redis down
	// The metrics show the outage: the breaker open, store errors, and
	// the failure mode's answers.
	for _, m := range modes {
		mfs := scrapeDaemon(t, &daemon{httpAddr: procs[m].http})
		// Open, or half-open if a probe is due.
		if v, ok := mfs.Value("ratelimitd_backend_breaker_state", "node=redis,state=closed"); !ok || v != 0 {
			t.Errorf("%s with Redis down: ratelimitd_backend_breaker_state{state=closed} = %v (%v), want 0", m, v, ok)
		}
		if v, _ := mfs.Value("ratelimitd_failure_mode_answers_total", "mode="+m); v == 0 {
			t.Errorf("%s with Redis down: ratelimitd_failure_mode_answers_total{mode=%s} = 0", m, m)
		}
		if v, _ := mfs.Value("ratelimitd_backend_errors_total", "kind=breaker_open"); v == 0 {
			t.Errorf("%s with Redis down: ratelimitd_backend_errors_total{kind=breaker_open} = 0", m)
		}
	}
	// A ban needs no counter: it refuses with Redis down, alone (never
	// reaching the store) or beside a limited descriptor, whatever the
	// failure mode.
	for _, m := range modes {
		for _, req := range []*rlsv3.RateLimitRequest{
			rlRequest("f", "banned", "scrapy"),
			{Domain: "f", Descriptors: append(rlRequest("f", "k", "x").Descriptors, rlRequest("f", "banned", "scrapy").Descriptors...)},
		} {
			resp, err := procs[m].client.ShouldRateLimit(t.Context(), req)
			if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Errorf("%s with Redis down: %d descriptors with a ban: %v %v, want OVER_LIMIT", m, len(req.Descriptors), resp.GetOverallCode(), err)
			}
		}
	}
	mu.Lock()
	during := seen
	seen = map[string]map[string]*outcome{}
	mu.Unlock()
	srv.Restart(t)
	restarted := time.Now()
	// Every mode decides again: an admitted call counts. (How soon is
	// logged, not asserted, since the machine may be loaded: go test -v
	// -run TestRedisFaults shows it.)
	var resume sync.WaitGroup
	for _, m := range modes {
		resume.Go(func() {
			for {
				resp, err := procs[m].client.ShouldRateLimit(t.Context(), rlRequest("f", "k", "probe-"+m))
				if err == nil && resp.OverallCode == rlsv3.RateLimitResponse_OK && len(resp.Statuses) == 1 && resp.Statuses[0].CurrentLimit != nil {
					break
				}
				if time.Since(restarted) > 10*time.Second {
					t.Errorf("%s: no decision within 10s of Redis's restart: %v %v", m, resp, err)
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
			t.Logf("%s: deciding %v after Redis's restart", m, time.Since(restarted).Round(time.Millisecond))
		})
	}
	resume.Wait()
	stop()
	wg.Wait()

	want := map[string][]string{ // the answers allowed while Redis is down
		"allow": {"OK"},
		"deny":  {"OK", "OVER_LIMIT"}, // OK: decided before the kill
		"error": {"OK", "Unavailable"},
	}
	for _, m := range modes {
		for answer, o := range during[m] {
			t.Logf("%s, Redis down: %d × %s, slowest %v", m, o.count, answer, o.slow.Round(time.Microsecond))
			if !slices.Contains(want[m], answer) {
				t.Errorf("%s with Redis down answered %s %d times", m, answer, o.count)
			}
		}
		if _, ok := during[m][map[string]string{"allow": "OK", "deny": "OVER_LIMIT", "error": "Unavailable"}[m]]; !ok {
			t.Errorf("%s with Redis down never answered by its failure mode: %v", m, during[m])
		}
	}
}

// TestReadyWhenRedisFirstAnswers: a daemon under --failure-mode deny
// whose Redis has never answered is not ready, from its start, whether
// or not any caller has opened a breaker; its own probe finds Redis when
// it comes up, and the daemon turns ready without a request. Under
// allow, the same daemon is ready at once, and says the store is
// unreached.
func TestReadyWhenRedisFirstAnswers(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill() // its address is dead until Restart
	path := writeRules(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10}\n")
	backend := "redis://" + srv.Addr
	deny := startDaemon(t, "--config", path, "--backend", backend, "--failure-mode", "deny", "--redis-breaker-open", "20ms")
	allow := startDaemon(t, "--config", path, "--backend", backend, "--failure-mode", "allow", "--redis-breaker-open", "20ms")
	readyz := func(d *daemon) (int, string) {
		t.Helper()
		return get(t, nil, "http://"+d.httpAddr+"/readyz")
	}
	if code, body := readyz(deny); code != http.StatusServiceUnavailable || !strings.Contains(body, "backend: unreached") {
		t.Errorf("deny, Redis down from the start: GET /readyz = %d %q, want 503 with backend: unreached", code, body)
	}
	if code, body := readyz(allow); code != http.StatusOK || !strings.Contains(body, "backend: unreached") {
		t.Errorf("allow, Redis down from the start: GET /readyz = %d %q, want 200 with backend: unreached", code, body)
	}
	// The daemon's own probe has failed, and it is still not ready: no
	// caller has opened a breaker.
	eventually(t, "the probe's warning", func() bool { return strings.Contains(deny.logs.String(), "counter store does not answer yet") })
	if code, body := readyz(deny); code != http.StatusServiceUnavailable {
		t.Errorf("deny, after some probes: GET /readyz = %d %q, want 503", code, body)
	}

	srv.Restart(t)
	for _, d := range []*daemon{deny, allow} {
		eventually(t, "ready once Redis answers", func() bool {
			code, body := readyz(d)
			return code == http.StatusOK && strings.Contains(body, "backend: ok")
		})
	}
	if got := deny.limit(t); got != 10 {
		t.Errorf("a decision once Redis is up reports limit %d, want 10", got)
	}
	if !strings.Contains(deny.logs.String(), "counter store answered") {
		t.Errorf("no log line saying the store answered: %s", deny.logs)
	}
}
