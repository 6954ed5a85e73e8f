package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimitd/ratelimitd/client"
	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

// A cold connection's handshake takes this long: more than the call
// budget of these tests (coldBudget, long enough for an answer on a
// loaded machine), less than the default connect budget
// (client.DefaultConnectTimeout).
const (
	coldDelay  = 400 * time.Millisecond
	coldBudget = 100 * time.Millisecond
)

// serveOn serves f on lis (a real listener) until the test ends, and
// returns a function that stops it early (idempotent).
func serveOn(t *testing.T, f *fakeRLS, lis net.Listener) func() {
	t.Helper()
	f.makeMaps()
	g := grpc.NewServer()
	ratelimitv1.RegisterRateLimitServiceServer(g, f)
	stop := serveListener(t, g, lis)
	f.stop = stop
	return stop
}

// dial returns a connection to addr over TCP, closed when the test ends.
// Like every *grpc.ClientConn made by grpc.NewClient, it is idle until
// something makes it connect.
func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// waitState waits until conn is in one of states, failing the test after
// 10 s.
func waitState(t *testing.T, conn *grpc.ClientConn, states ...connectivity.State) connectivity.State {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		s := conn.GetState()
		for _, want := range states {
			if s == want {
				return s
			}
		}
		if !conn.WaitForStateChange(ctx, s) {
			t.Fatalf("connection %v after 10 s, want one of %v", s, states)
		}
	}
}

// TestColdConnection: the first call over a connection that has yet to
// connect gets ratelimitd's decision although the handshake takes four
// times the call's budget: the handshake is paid from the connect
// budget, not from the call's.
func TestColdConnection(t *testing.T) {
	lis := client.ListenGated(t, "127.0.0.1:0", coldDelay)
	f := &fakeRLS{limit: 3}
	serveOn(t, f, lis)
	c := client.New(dial(t, lis.Addr().String()), client.WithTimeout(coldBudget))
	d := ask(t, c, "api", client.D("k", "v"))
	if !d.Allowed || len(d.Statuses) != 1 || d.Statuses[0].Remaining != 2 {
		t.Errorf("first call = %+v, want allowed with 2 remaining", d)
	}
	if got := c.FailOpens(); got != 0 {
		t.Errorf("FailOpens() = %d, want 0", got)
	}
}

// TestConnectsAtNew: New starts connecting an idle connection, so that
// the handshake is under way (or done) before the first call.
func TestConnectsAtNew(t *testing.T) {
	lis := client.ListenGated(t, "127.0.0.1:0", 0)
	serveOn(t, &fakeRLS{}, lis)
	conn := dial(t, lis.Addr().String())
	if s := conn.GetState(); s != connectivity.Idle {
		t.Fatalf("a new connection is %v, want Idle", s)
	}
	client.New(conn)
	waitState(t, conn, connectivity.Ready)
}

// TestRestartSlowHandshake: after ratelimitd restarts (a deploy), the
// connection, which was ready, is idle; the next call reconnects, and
// gets the new server's decision although its handshake takes longer than
// the call's budget.
func TestRestartSlowHandshake(t *testing.T) {
	lis := client.ListenGated(t, "127.0.0.1:0", 0)
	addr := lis.Addr().String()
	before := &fakeRLS{limit: 3}
	stop := serveOn(t, before, lis)
	conn := dial(t, addr)
	conn.Connect()
	waitState(t, conn, connectivity.Ready) // this test is not about the first connection
	c := client.New(conn, client.WithTimeout(coldBudget), client.WithRefusalCache(0))
	ask(t, c, "api", client.D("k", "v"))

	stop()
	// gRPC leaves the connection idle once it has seen it close: it
	// reconnects when asked to.
	waitState(t, conn, connectivity.Idle)
	after := &fakeRLS{limit: 3}
	serveOn(t, after, client.ListenGated(t, addr, coldDelay))
	d := ask(t, c, "api", client.D("k", "v"))
	if !d.Allowed || len(d.Statuses) != 1 || d.Statuses[0].Remaining != 2 {
		t.Errorf("first call after the restart = %+v, want the new server's: allowed with 2 remaining", d)
	}
	if got := after.rpcs(); got != 1 {
		t.Errorf("the new server received %d calls, want 1", got)
	}
}

// closedAddr returns a loopback address nothing listens on: connecting
// to it is refused at once.
func closedAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// timed calls c.ShouldRateLimit and returns how long it took, and its
// results.
func timed(ctx context.Context, c *client.Client) (time.Duration, client.Decision, error) {
	start := time.Now()
	d, err := c.ShouldRateLimit(ctx, "api", client.D("k", "v"))
	return time.Since(start), d, err
}

// failedOpen checks that d is the failure policy's fail-open decision on
// an error of code.
func failedOpen(t *testing.T, call string, d client.Decision, err error, code codes.Code) {
	t.Helper()
	if err != nil || !d.Allowed || d.Statuses != nil {
		t.Errorf("%s = %+v, %v; want allowed by the failure policy", call, d, err)
	}
	wantCode(t, call+": Decision.Err", d.Err, code)
}

// TestConnectRefused: with ratelimitd down (connections refused), calls
// fail open at once, without waiting for the connect budget, first calls
// and later ones alike.
func TestConnectRefused(t *testing.T) {
	c := client.New(dial(t, closedAddr(t)), client.WithConnectTimeout(time.Minute))
	for i := range 3 {
		took, d, err := timed(t.Context(), c)
		failedOpen(t, fmt.Sprintf("call %d", i), d, err, codes.Unavailable)
		if took > 10*time.Second {
			t.Errorf("call %d took %v, want no wait for the connect budget (a minute)", i, took)
		}
	}
}

// TestConnectBudgetBounds: a server that accepts connections but never
// answers (a hung host) keeps the connection connecting (for 20 s, gRPC's
// least connect timeout). Calls wait for it until the connect budget is
// spent, counted from New, not per call; then they go ahead with their
// own budget and fail open. A caller's context ending during the wait
// ends the call with its error.
func TestConnectBudgetBounds(t *testing.T) {
	const connect = time.Second // ten calls' budgets: a loaded machine delays no call that long
	lis := client.ListenGated(t, "127.0.0.1:0", -1)
	conn := dial(t, lis.Addr().String())
	c := client.New(conn, client.WithTimeout(coldBudget), client.WithConnectTimeout(connect))

	took, d, err := timed(t.Context(), c)
	failedOpen(t, "first call", d, err, codes.DeadlineExceeded)
	if took < connect || took > 10*time.Second {
		t.Errorf("first call took %v, want the connect budget (%v) and the call's (%v)", took, connect, coldBudget)
	}
	if s := conn.GetState(); s != connectivity.Connecting {
		t.Fatalf("connection %v, want Connecting: the test needs a hung handshake", s)
	}
	for i := range 2 {
		took, d, err := timed(t.Context(), c)
		failedOpen(t, fmt.Sprintf("call %d", i+2), d, err, codes.DeadlineExceeded)
		if took >= connect {
			t.Errorf("call %d took %v, want no second wait for the connect budget (%v)", i+2, took, connect)
		}
	}

	// The caller's context ends first: no decision.
	c = client.New(dial(t, lis.Addr().String()), client.WithConnectTimeout(time.Minute))
	ctx, cancel := context.WithTimeout(t.Context(), coldBudget)
	defer cancel()
	took, d, err = timed(ctx, c)
	if !errors.Is(err, context.DeadlineExceeded) || d.Allowed || d.Err != nil {
		t.Errorf("call with a context ending while connecting = %+v, %v; want an error wrapping context.DeadlineExceeded", d, err)
	}
	if took > 10*time.Second {
		t.Errorf("call with a context ending while connecting took %v, want the context's %v", took, coldBudget)
	}
	if got := c.FailOpens(); got != 0 {
		t.Errorf("FailOpens() = %d, want 0", got)
	}
}

// TestDownAfterReady: ratelimitd goes away after the connection was
// ready. Calls fail open at once while it is down (gRPC retries the
// connection with backoff, in TRANSIENT_FAILURE), without waiting for the
// connect budget, and get its decisions again once it is back.
func TestDownAfterReady(t *testing.T) {
	lis := client.ListenGated(t, "127.0.0.1:0", 0)
	addr := lis.Addr().String()
	stop := serveOn(t, &fakeRLS{}, lis)
	conn := dial(t, addr)
	c := client.New(conn, client.WithTimeout(coldBudget), client.WithConnectTimeout(time.Minute))
	ask(t, c, "api", client.D("k", "v"))

	stop()
	waitState(t, conn, connectivity.Idle)
	for i := range 3 {
		took, d, err := timed(t.Context(), c)
		failedOpen(t, fmt.Sprintf("call %d while down", i), d, err, codes.Unavailable)
		if took > 10*time.Second {
			t.Errorf("call %d while down took %v, want no wait for the connect budget (a minute)", i, took)
		}
	}

	serveOn(t, &fakeRLS{limit: 3}, client.ListenGated(t, addr, 0))
	for deadline := time.Now().Add(30 * time.Second); ; {
		took, d, err := timed(t.Context(), c)
		if took > 10*time.Second {
			t.Errorf("call while reconnecting took %v, want no wait for the connect budget (a minute)", took)
		}
		if err == nil && d.Err == nil {
			if !d.Allowed || len(d.Statuses) != 1 {
				t.Errorf("call once back = %+v, want allowed, with a status", d)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no decision from ratelimitd 30 s after it came back: %+v, %v", d, err)
		}
		waitState(t, conn, connectivity.Ready) // gRPC's backoff: about a second
	}
}

// TestConnWithoutState: a connection that is not a *grpc.ClientConn and
// hides the methods that tell its state cannot be waited for: the first
// call over it pays the handshake from its own budget, and fails open
// within it rather than waiting.
func TestConnWithoutState(t *testing.T) {
	lis := client.ListenGated(t, "127.0.0.1:0", coldDelay)
	serveOn(t, &fakeRLS{}, lis)
	conn := dial(t, lis.Addr().String())
	c := client.New(struct{ grpc.ClientConnInterface }{conn}, client.WithTimeout(coldBudget))
	took, d, err := timed(t.Context(), c)
	failedOpen(t, "first call", d, err, codes.DeadlineExceeded)
	if took >= coldDelay {
		t.Errorf("first call took %v, want its budget (%v), no wait for the connection", took, coldBudget)
	}
}
