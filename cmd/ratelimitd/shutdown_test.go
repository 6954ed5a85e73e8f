package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// sentKey is the context key of the *atomic.Bool that sentHandler sets.
type sentKey struct{}

// sentHandler is a client stats.Handler that records whether an RPC's
// last attempt handed its request to a connection: it clears the flag in
// the RPC's context at each attempt's Begin (grpc-go transparently
// retries a stream the server refused unprocessed, as a draining server
// does) and sets it at OutPayload. A request handed over on a connection
// before the server's GOAWAY is one the server accepts: if it then fails,
// the server failed an RPC in flight.
type sentHandler struct{}

func (sentHandler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (sentHandler) HandleRPC(ctx context.Context, s stats.RPCStats) {
	sent, ok := ctx.Value(sentKey{}).(*atomic.Bool)
	if !ok {
		return
	}
	switch s.(type) {
	case *stats.Begin:
		sent.Store(false)
	case *stats.OutPayload:
		sent.Store(true)
	}
}

func (sentHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (sentHandler) HandleConn(context.Context, stats.ConnStats) {}

// dialSent returns a client of addr whose RPCs report, through
// callSent, whether their request was sent.
func dialSent(t *testing.T, addr string) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStatsHandler(sentHandler{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// callSent calls ShouldRateLimit on a client from dialSent, and reports
// whether the request was sent.
func callSent(ctx context.Context, c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, bool, error) {
	sent := new(atomic.Bool)
	resp, err := c.ShouldRateLimit(context.WithValue(ctx, sentKey{}, sent), req)
	return resp, sent.Load(), err
}

// watchHealth watches p's gRPC health for Envoy's RateLimitService and
// returns the stream once it has reported SERVING.
func watchHealth(t *testing.T, p *process) healthpb.Health_WatchClient {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	w, err := healthpb.NewHealthClient(p.conn).Watch(ctx, &healthpb.HealthCheckRequest{Service: rlsv3.RateLimitService_ServiceDesc.ServiceName})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := recvWithin(w, 10*time.Second); err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health Watch = %v, %v; want SERVING", resp, err)
	}
	return w
}

// recvWithin receives from w, giving up after d (the test's bound on a
// hang, not a measure of speed).
func recvWithin(w healthpb.Health_WatchClient, d time.Duration) (*healthpb.HealthCheckResponse, error) {
	type result struct {
		resp *healthpb.HealthCheckResponse
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		resp, err := w.Recv()
		ch <- result{resp, err}
	}()
	select {
	case r := <-ch:
		return r.resp, r.err
	case <-time.After(d):
		return nil, fmt.Errorf("no health message within %v", d)
	}
}

// checkShutdownHealth checks that w reports NOT_SERVING, then ends: the
// server must not hold its drain (and --shutdown-timeout) for a watcher.
func checkShutdownHealth(t *testing.T, w healthpb.Health_WatchClient) {
	t.Helper()
	if resp, err := recvWithin(w, 10*time.Second); err != nil || resp.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health Watch after the signal = %v, %v; want NOT_SERVING", resp, err)
		return
	}
	_, err := recvWithin(w, 20*time.Second)
	if st := status.Convert(err); st.Code() != codes.Unavailable || st.Message() != "shutting down" {
		t.Errorf("health Watch after NOT_SERVING ended with %v, want the server's Unavailable \"shutting down\"", err)
	}
}

// waitExit waits for p to exit (within d, far less than its
// --shutdown-timeout) and checks that it exited 0.
func waitExit(t *testing.T, p *process, d time.Duration) {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(d):
		t.Fatalf("ratelimitd did not exit within %v of the signal", d)
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("ratelimitd exited with status %d, want 0", code)
	}
}

// TestShutdownUnderLoad: 8 callers call a ratelimitd process without
// pause when it gets SIGTERM or SIGINT. Health turns NOT_SERVING; every
// call whose request reached the server before it stopped accepting is
// answered; every other call fails Unavailable without having been sent;
// the process exits 0, long before its --shutdown-timeout.
func TestShutdownUnderLoad(t *testing.T) {
	for _, tt := range []struct {
		name string
		sig  syscall.Signal
	}{{"SIGTERM", syscall.SIGTERM}, {"SIGINT", syscall.SIGINT}} {
		t.Run(tt.name, func(t *testing.T) {
			p := startProcess(t, "--config", writeRules(t, rulesWithLimit(1_000_000)), "--shutdown-timeout", "1m")
			client := dialSent(t, p.grpc)
			health := watchHealth(t, p)

			var signaled atomic.Bool
			var ok, refused, acrossSignal atomic.Int64
			var mu sync.Mutex
			var failures []string
			var wg sync.WaitGroup
			for c := range 8 {
				wg.Go(func() {
					for i := 0; ; i++ {
						before := signaled.Load()
						ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
						resp, sent, err := callSent(ctx, client, rlRequest("d", "k", fmt.Sprintf("c%d-%d", c, i%50)))
						cancel()
						switch {
						case err == nil && len(resp.GetStatuses()) == 1 && resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit() == 1_000_000:
							ok.Add(1)
							if !before && signaled.Load() {
								acrossSignal.Add(1)
							}
						case err != nil && !sent && status.Code(err) == codes.Unavailable:
							refused.Add(1)
							return // the server stopped accepting
						default:
							mu.Lock()
							failures = append(failures, fmt.Sprintf("sent=%t: %v, %v", sent, resp, err))
							mu.Unlock()
							return
						}
					}
				})
			}
			for deadline := time.Now().Add(20 * time.Second); ok.Load() < 200; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("only %d calls answered in 20s", ok.Load())
				}
			}
			signaled.Store(true)
			if err := p.cmd.Process.Signal(tt.sig); err != nil {
				t.Fatal(err)
			}
			checkShutdownHealth(t, health)
			waitExit(t, p, 20*time.Second)
			wg.Wait()

			for _, f := range failures {
				t.Errorf("call failed: %s", f)
			}
			t.Logf("%s under load: %d calls answered (%d of them started before the signal and answered after), %d refused unsent",
				tt.name, ok.Load(), acrossSignal.Load(), refused.Load())
		})
	}
}

// heldCall is the outcome of a call held in flight by a paused Redis.
type heldCall struct {
	resp *rlsv3.RateLimitResponse
	sent bool
	err  error
}

// startHeld starts ratelimitd on a Redis that then pauses every script
// call (CLIENT PAUSE WRITE holds EVAL and EVALSHA until CLIENT UNPAUSE),
// makes n calls and returns once all of them are sent, and none answered.
// The calls' outcomes arrive on the channel; unpause lets Redis answer.
// args are added to ratelimitd's, and win.
func startHeld(t *testing.T, n int, args ...string) (p *process, health healthpb.Health_WatchClient, calls <-chan heldCall, unpause func()) {
	t.Helper()
	srv := redistest.Start(t)
	long := "30s" // Redis may take its time: the test decides when it answers
	p = startProcess(t, append([]string{"--config", writeRules(t, rulesWithLimit(1_000_000)), "--backend", "redis://" + srv.Addr,
		"--failure-mode", "error", "--local-cache=false", "--redis-timeout", long, "--redis-read-timeout", long,
		"--redis-write-timeout", long, "--shutdown-timeout", "1m"}, args...)...)
	client := dialSent(t, p.grpc)
	if _, _, err := callSent(t.Context(), client, rlRequest("d", "k", "warm-up")); err != nil {
		t.Fatalf("ShouldRateLimit before the pause: %v", err)
	}
	health = watchHealth(t, p)

	rdb := srv.Client(t)
	if err := rdb.Do(t.Context(), "CLIENT", "PAUSE", "30000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	unpause = func() {
		once.Do(func() {
			if err := rdb.Do(context.Background(), "CLIENT", "UNPAUSE").Err(); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(unpause)

	ch := make(chan heldCall, n)
	sent := make([]atomic.Bool, n)
	for c := range n {
		go func() {
			ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), sentKey{}, &sent[c]), time.Minute)
			defer cancel()
			resp, err := client.ShouldRateLimit(ctx, rlRequest("d", "k", fmt.Sprintf("held-%d", c)))
			ch <- heldCall{resp, sent[c].Load(), err}
		}()
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		all := true
		for i := range sent {
			all = all && sent[i].Load()
		}
		if all {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the held calls were not all sent within 20s")
		}
	}
	checkHeld(t, ch)
	return p, health, ch, unpause
}

// jsonResult is the outcome of a POST /json.
type jsonResult struct {
	code int
	err  error
}

// heldJSON sends a POST /json to p, whose Redis is paused, and returns
// once it has had a second to reach the server; its outcome arrives on
// the channel.
func heldJSON(p *process) <-chan jsonResult {
	ch := make(chan jsonResult, 1)
	go func() {
		body := `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"held-json"}]}]}`
		resp, err := http.Post("http://"+p.http+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			ch <- jsonResult{err: err}
			return
		}
		resp.Body.Close()
		ch <- jsonResult{code: resp.StatusCode}
	}()
	time.Sleep(time.Second)
	return ch
}

// checkHeld fails t if a held call has ended.
func checkHeld(t *testing.T, calls <-chan heldCall) {
	t.Helper()
	if len(calls) > 0 {
		c := <-calls
		t.Fatalf("a call ended while Redis was paused: %v, %v", c.resp, c.err)
	}
}

// TestShutdownDrainsHeldRPCs: 16 calls held in flight by a paused Redis
// when ratelimitd gets SIGTERM. While they wait, health is NOT_SERVING,
// new connections are refused and the process keeps running; once Redis
// answers, every one of them is answered OK and the process exits 0.
func TestShutdownDrainsHeldRPCs(t *testing.T) {
	const n = 16
	p, health, calls, unpause := startHeld(t, n)
	posted := heldJSON(p)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	checkShutdownHealth(t, health)
	// The listener closes: a new connection is refused, and a call on one
	// fails Unavailable without being sent.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		c, err := net.Dial("tcp", p.grpc)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("ratelimitd still accepts connections 20s after SIGTERM")
		}
	}
	if resp, sent, err := callSent(t.Context(), dialSent(t, p.grpc), rlRequest("d", "k", "late")); sent || status.Code(err) != codes.Unavailable {
		t.Errorf("a call on a new connection during the drain = %v, %v (sent=%t); want Unavailable, unsent", resp, err, sent)
	}
	select {
	case <-p.exited:
		t.Fatal("ratelimitd exited with calls in flight")
	default:
	}
	checkHeld(t, calls)

	unpause()
	for range n {
		c := <-calls
		if c.err != nil || len(c.resp.GetStatuses()) != 1 || c.resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit() != 1_000_000 {
			t.Errorf("a call in flight at SIGTERM = %v, %v (sent=%t); want OK with the limit", c.resp, c.err, c.sent)
		}
	}
	if r := <-posted; r.err != nil || r.code != http.StatusOK {
		t.Errorf("POST /json in flight at SIGTERM = %d, %v; want 200", r.code, r.err)
	}
	waitExit(t, p, 20*time.Second)
	t.Logf("%d calls and a POST /json in flight at SIGTERM, all answered after it", n)
}

// TestShutdownTimeout: calls held by a paused Redis past
// --shutdown-timeout are cut off (Unavailable), and the process exits 0
// while Redis is still paused. (It exits up to --redis-timeout after the
// cut: closing the Redis store waits for the script call on the wire.)
func TestShutdownTimeout(t *testing.T) {
	const n = 4
	p, health, calls, _ := startHeld(t, n, "--shutdown-timeout", "300ms", "--redis-timeout", "2s")
	posted := heldJSON(p) // cut off too, and no reason to exit 1
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	checkShutdownHealth(t, health)
	waitExit(t, p, 20*time.Second) // Redis stays paused for 30s
	if r := <-posted; r.err == nil && r.code == http.StatusOK {
		t.Error("POST /json held past --shutdown-timeout was answered 200, want it cut off")
	}
	for range n {
		c := <-calls
		if status.Code(c.err) != codes.Unavailable {
			t.Errorf("a call held past --shutdown-timeout = %v, %v; want Unavailable", c.resp, c.err)
		}
	}
}

// TestShutdownDelay: with --shutdown-delay, after SIGTERM the process
// reports NOT_SERVING but keeps answering, on new connections too, until
// the delay is over; then it drains and exits 0.
func TestShutdownDelay(t *testing.T) {
	path := writeRules(t, "domain: f\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1000000}\n")
	p := startProcess(t, "--config", path, "--shutdown-delay", "3s")
	w := watchHealth(t, p)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if resp, err := recvWithin(w, 10*time.Second); err != nil || resp.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health Watch after SIGTERM = %v, %v; want NOT_SERVING", resp, err)
	}
	// Within the delay (3 s, far more than these calls take): still served.
	c := dialSent(t, p.grpc)
	if _, _, err := callSent(t.Context(), c, rlRequest("f", "k", "late")); err != nil {
		t.Errorf("a call on a new connection during --shutdown-delay: %v, want an answer", err)
	}
	select {
	case <-p.exited:
		t.Fatal("ratelimitd exited before its --shutdown-delay was over")
	default:
	}
	waitExit(t, p, 20*time.Second)
}
