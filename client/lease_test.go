package client_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/ratelimitd/ratelimitd/client"
)

var slot = client.D("job", "export")

// acquire calls AcquireLease and fails the test on an error, or a decision
// of the failure policy.
func acquire(t *testing.T, c *client.Client, ds ...client.Descriptor) (*client.Lease, client.Decision) {
	t.Helper()
	l, d, err := c.AcquireLease(t.Context(), "jobs", ds...)
	if err != nil || d.Err != nil {
		t.Fatalf("AcquireLease(%v) = %+v, %v", ds, d, err)
	}
	return l, d
}

// TestAcquireRelease: Acquire holds a slot until its release, which gives
// back that lease and runs once; a refused Acquire holds nothing.
func TestAcquireRelease(t *testing.T) {
	f := &fakeRLS{slots: 1}
	c := client.New(newFakeRLS(t, f), client.WithTimeout(0))

	release, d, err := c.Acquire(t.Context(), "jobs", slot)
	if err != nil || !d.Allowed {
		t.Fatalf("first Acquire = %+v, %v; want allowed", d, err)
	}
	if got := d.Statuses[0].Limit.Algorithm; got != client.Concurrency {
		t.Errorf("Limit.Algorithm = %q, want %q", got, client.Concurrency)
	}
	if got := f.holding(slot); got != 1 {
		t.Fatalf("%d slots held after Acquire, want 1", got)
	}
	refusedRelease, d, err := c.Acquire(t.Context(), "jobs", slot)
	if err != nil || d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("second Acquire = %+v, %v; want refused, retry in 1s", d, err)
	}
	refusedRelease() // holds nothing: sends nothing
	if got := f.released(); len(got) != 0 {
		t.Errorf("releasing a refused Acquire sent Release%q", got)
	}

	release()
	release()
	if diff := cmp.Diff([]string{"lease-1"}, f.released()); diff != "" {
		t.Errorf("Release calls mismatch (-want +got):\n%s", diff)
	}
	if got := f.holding(slot); got != 0 {
		t.Errorf("%d slots held after release, want 0", got)
	}
	if _, d := acquire(t, c, slot); !d.Allowed {
		t.Errorf("Acquire after release refused: %+v", d)
	}
	// Refusals are not remembered: nothing asked the refusal memory.
	if got := c.LocalRefusals(); got != 0 {
		t.Errorf("LocalRefusals = %d, want 0", got)
	}
}

// TestReleaseAfterCancel: the release runs even when the Acquire's
// context has ended.
func TestReleaseAfterCancel(t *testing.T) {
	f := &fakeRLS{slots: 1}
	c := client.New(newFakeRLS(t, f))
	ctx, cancel := context.WithCancel(t.Context())
	release, d, err := c.Acquire(ctx, "jobs", slot)
	if err != nil || !d.Allowed {
		t.Fatalf("Acquire = %+v, %v", d, err)
	}
	cancel()
	release()
	if got := f.holding(slot); got != 0 {
		t.Errorf("%d slots held after a release with the context canceled, want 0", got)
	}

	l, _ := acquire(t, c, slot)
	ctx, cancel = context.WithCancel(t.Context())
	cancel()
	if err := l.Release(ctx); err != nil {
		t.Errorf("Lease.Release(canceled ctx) = %v, want nil", err)
	}
	if got := f.holding(slot); got != 0 {
		t.Errorf("%d slots held after Lease.Release(canceled ctx), want 0", got)
	}
}

// TestReleaseOnce: concurrent and repeated releases of one lease send
// one Release, and all return its result.
func TestReleaseOnce(t *testing.T) {
	f := &fakeRLS{slots: 1}
	c := client.New(newFakeRLS(t, f))
	l, _ := acquire(t, c, slot)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := l.Release(t.Context()); err != nil {
				t.Errorf("Release: %v", err)
			}
		})
	}
	wg.Wait()
	if got := len(f.released()); got != 1 {
		t.Errorf("%d Release calls, want 1", got)
	}
	if !l.ExpiresAt().IsZero() {
		t.Errorf("ExpiresAt after Release = %v, want zero", l.ExpiresAt())
	}

	// A failed release is reported, by each call, and sent once.
	l, _ = acquire(t, c, slot) // lease-2: the fake holds it
	down := status.Error(codes.Unavailable, "down")
	f.fail.Store(&down)
	for i := range 2 {
		if err := l.Release(t.Context()); status.Code(err) != codes.Unavailable {
			t.Errorf("Release %d with ratelimitd down = %v, want Unavailable", i, err)
		}
	}
	if got := len(f.released()); got != 2 {
		t.Errorf("%d Release calls, want 2", got)
	}
}

// TestReleaseFailureLogged: the release func logs a release that failed.
func TestReleaseFailureLogged(t *testing.T) {
	f := &fakeRLS{slots: 1}
	var log strings.Builder
	var mu sync.Mutex
	c := client.New(newFakeRLS(t, f), client.WithLogger(slog.New(slog.NewTextHandler(lockedWriter{&mu, &log}, nil))))
	release, _, err := c.Acquire(t.Context(), "jobs", slot)
	if err != nil {
		t.Fatal(err)
	}
	down := status.Error(codes.Unavailable, "down")
	f.fail.Store(&down)
	release()
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(log.String(), "release failed") || !strings.Contains(log.String(), "down") ||
		strings.Contains(log.String(), "expires_at=0001") {
		t.Errorf("log = %q, want the release's failure and the lease's expiry", log.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// TestRenew: Renew replaces the lease (the release then gives back the
// new id), and reports ErrLeaseLost once it has lapsed or was released.
func TestRenew(t *testing.T) {
	f := &fakeRLS{slots: 1}
	c := client.New(newFakeRLS(t, f))
	l, _ := acquire(t, c, slot)
	if l.ExpiresAt().IsZero() {
		t.Fatal("ExpiresAt is zero for a held lease")
	}
	if err := l.Renew(t.Context()); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if diff := cmp.Diff([]string{"lease-2"}, f.released()); diff != "" {
		t.Errorf("Release after Renew sent the wrong id (-want +got):\n%s", diff)
	}
	if got := f.holding(slot); got != 0 {
		t.Errorf("%d slots held, want 0", got)
	}
	if err := l.Renew(t.Context()); !errors.Is(err, client.ErrLeaseLost) {
		t.Errorf("Renew after Release = %v, want ErrLeaseLost", err)
	}

	l, _ = acquire(t, c, slot) // lease-3
	f.lapse("lease-3")
	if err := l.Renew(t.Context()); !errors.Is(err, client.ErrLeaseLost) {
		t.Errorf("Renew of a lapsed lease = %v, want ErrLeaseLost", err)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Errorf("Release of a lost lease = %v", err)
	}
	if got := len(f.released()); got != 1 {
		t.Errorf("a lost lease was released: %d Release calls, want 1", got)
	}

	l, _ = acquire(t, c, slot)
	down := status.Error(codes.Unavailable, "down")
	f.fail.Store(&down)
	if err := l.Renew(t.Context()); status.Code(err) != codes.Unavailable || errors.Is(err, client.ErrLeaseLost) {
		t.Errorf("Renew with ratelimitd down = %v, want Unavailable", err)
	}
	if l.ExpiresAt().IsZero() {
		t.Error("a failed Renew dropped the lease")
	}
	f.fail.Store(nil)
	if err := l.Release(t.Context()); err != nil {
		t.Errorf("Release: %v", err)
	}
}

// TestAcquireNoLease: where no concurrency limit applies, Acquire admits
// without a lease, and the release sends nothing.
func TestAcquireNoLease(t *testing.T) {
	f := &fakeRLS{}
	c := client.New(newFakeRLS(t, f))
	l, d := acquire(t, c, slot)
	if !d.Allowed || !l.ExpiresAt().IsZero() {
		t.Errorf("AcquireLease = %+v, expires %v; want allowed, no lease", d, l.ExpiresAt())
	}
	if err := l.Renew(t.Context()); err != nil {
		t.Errorf("Renew of no lease = %v", err)
	}
	if err := l.Release(t.Context()); err != nil || len(f.released()) != 0 {
		t.Errorf("Release of no lease = %v, sent %q", err, f.released())
	}
}

// TestAcquireFailurePolicy: when ratelimitd fails, the failure policy
// decides, and nothing is held; malformed requests, give-backs among
// them, are errors.
func TestAcquireFailurePolicy(t *testing.T) {
	f := &fakeRLS{slots: 1}
	conn := newFakeRLS(t, f)
	down := status.Error(codes.Unavailable, "down")
	f.fail.Store(&down)
	for _, tc := range []struct {
		name    string
		opts    []client.Option
		allowed bool
	}{
		{"open", nil, true},
		{"closed", []client.Option{client.WithFailClosed()}, false},
	} {
		c := client.New(conn, tc.opts...)
		release, d, err := c.Acquire(t.Context(), "jobs", slot)
		if err != nil || d.Allowed != tc.allowed || status.Code(d.Err) != codes.Unavailable {
			t.Errorf("fail %s: Acquire = %+v, %v; want Allowed %v and Err Unavailable", tc.name, d, err, tc.allowed)
		}
		release()
	}
	if got := f.released(); len(got) != 0 {
		t.Errorf("releases of the failure policy's decisions sent Release%q", got)
	}

	c := client.New(conn)
	for _, ds := range [][]client.Descriptor{
		nil,
		{{Entries: slot.Entries, GiveBack: true}},
	} {
		release, _, err := c.Acquire(t.Context(), "jobs", ds...)
		wantCode(t, "Acquire(malformed)", err, codes.InvalidArgument)
		release()
	}
}

// TestGiveBack: a give-back descriptor is sent as such, CheckOnly with
// GiveBack is malformed, and a request holding a give-back is always
// sent, never refused from the memory of refusals.
func TestGiveBack(t *testing.T) {
	f := &fakeRLS{limit: 1}
	c := client.New(newFakeRLS(t, f))
	ask(t, c, "d", client.D("k", "v"))
	if d := ask(t, c, "d", client.D("k", "v")); d.Allowed {
		t.Fatalf("second request allowed, want refused")
	}
	giveBack := client.Descriptor{Entries: []client.Entry{{Key: "k", Value: "v"}}, GiveBack: true}
	// The refusal of [k=v] is remembered, under the key a give-back of
	// [k=v] has too: the give-back is sent all the same.
	ask(t, c, "d", giveBack)
	ask(t, c, "d", client.D("k", "v"), giveBack)
	reqs := f.requests()
	if got := len(reqs); got != 4 {
		t.Fatalf("%d requests sent, want 4: a request with a give-back was refused from memory", got)
	}
	if ds := reqs[3].GetDescriptors(); ds[0].GetGiveBack() || !ds[1].GetGiveBack() {
		t.Errorf("give_back sent as %v, %v; want false, true", ds[0].GetGiveBack(), ds[1].GetGiveBack())
	}
	_, err := c.ShouldRateLimit(t.Context(), "d", client.Descriptor{Entries: giveBack.Entries, GiveBack: true, CheckOnly: true})
	wantCode(t, "ShouldRateLimit(CheckOnly and GiveBack)", err, codes.InvalidArgument)
}

// TestConcurrencyInterceptors: with WithConcurrency, the server
// interceptors hold a slot while the handler runs, release it when it
// returns, and refuse a call that finds no slot with ResourceExhausted.
func TestConcurrencyInterceptors(t *testing.T) {
	f := &fakeRLS{slots: 1}
	c := client.New(newFakeRLS(t, f))
	method := client.D(client.MethodKey, checkMethod)
	var during uint64
	inside := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		during = f.holding(method)
		return h(ctx, req)
	}
	tg := newTarget(t, []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(client.UnaryServerInterceptor(c, "grpc", client.WithConcurrency()), inside),
		grpc.StreamInterceptor(client.StreamServerInterceptor(c, "grpc", client.WithConcurrency())),
	})
	for i := range 2 {
		if _, err := tg.check(t); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if during != 1 {
			t.Errorf("call %d: %d slots held in the handler, want 1", i, during)
		}
		if got := f.holding(method); got != 0 {
			t.Errorf("call %d: %d slots held after it, want 0", i, got)
		}
	}

	// A stream holds its slot until it ends: a unary call finds none.
	watch := client.D(client.MethodKey, "/grpc.health.v1.Health/Watch")
	ctx, cancel := context.WithCancel(t.Context())
	stream, err := tg.health.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	if got := f.holding(watch); got != 1 {
		t.Errorf("%d slots held by the open stream, want 1", got)
	}
	second, err := tg.health.Watch(t.Context(), &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = second.Recv()
	}
	wantRefused(t, "second stream", err, time.Second, client.MethodKey)
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for f.holding(watch) != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // the server's handler returns after the client cancels
	}
	if got := f.holding(watch); got != 0 {
		t.Errorf("%d slots held after the stream ended, want 0", got)
	}
}

// TestConcurrencyOptionMisuse: WithConcurrency panics where no slot can
// be held.
func TestConcurrencyOptionMisuse(t *testing.T) {
	c := client.New(newFakeRLS(t, &fakeRLS{}))
	for name, build := range map[string]func(){
		"UnaryClientInterceptor":  func() { client.UnaryClientInterceptor(c, "d", client.WithConcurrency()) },
		"StreamClientInterceptor": func() { client.StreamClientInterceptor(c, "d", client.WithConcurrency()) },
		"NewLimiter":              func() { client.NewLimiter(c, "d", client.WithConcurrency()) },
		"not an Acquirer":         func() { client.UnaryServerInterceptor(onlyAsk{c}, "d", client.WithConcurrency()) },
		"HTTP, not an Acquirer":   func() { client.HTTPMiddleware(onlyAsk{c}, "d", client.WithHTTPConcurrency()) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s with the option did not panic", name)
				}
			}()
			build()
		}()
	}
}

// onlyAsk is a RateLimiter that is no Acquirer.
type onlyAsk struct{ rl client.RateLimiter }

func (o onlyAsk) ShouldRateLimit(ctx context.Context, domain string, ds ...client.Descriptor) (client.Decision, error) {
	return o.rl.ShouldRateLimit(ctx, domain, ds...)
}

// TestHTTPConcurrency: with WithHTTPConcurrency, the middleware holds a
// slot while next runs, even when it panics, and answers 429 when none
// is free.
func TestHTTPConcurrency(t *testing.T) {
	f := &fakeRLS{slots: 1}
	c := client.New(newFakeRLS(t, f))
	route := client.D("path", "/export", "method", "GET")
	var during uint64
	var inner http.Handler
	mw := client.HTTPMiddleware(c, "web", client.WithRoute(nil), client.WithHTTPConcurrency())
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		during = f.holding(route)
		if inner != nil {
			inner.ServeHTTP(w, r)
		}
	}))
	if resp := serve(h, request("GET", "/export", "192.0.2.1:1")); resp.StatusCode != http.StatusOK || during != 1 {
		t.Errorf("first request: %d, %d slots held in next; want 200, 1", resp.StatusCode, during)
	}
	if got := f.holding(route); got != 0 {
		t.Errorf("%d slots held after the request, want 0", got)
	}

	// While a request holds the slot, another is refused.
	inner = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if resp := serve(h2(mw), request("GET", "/export", "192.0.2.1:1")); resp.StatusCode != http.StatusTooManyRequests {
			t.Errorf("request while the slot is held: %d, want 429", resp.StatusCode)
		}
		panic(http.ErrAbortHandler)
	})
	func() {
		defer func() {
			if r, _ := recover().(error); !errors.Is(r, http.ErrAbortHandler) {
				t.Errorf("recovered %v, want http.ErrAbortHandler", r)
			}
		}()
		serve(h, request("GET", "/export", "192.0.2.1:1"))
	}()
	if got := f.holding(route); got != 0 {
		t.Errorf("%d slots held after a handler panicked, want 0", got)
	}
}

// h2 wraps a handler that answers 200 in mw.
func h2(mw func(http.Handler) http.Handler) http.Handler {
	return mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
}

// timers replaces a Client's timers: each one started is sent on started,
// to be fired by the test.
type timers struct{ started chan timer }

type timer struct {
	d    time.Duration
	fire chan time.Time
}

func newTimers(c *client.Client) *timers {
	ts := &timers{started: make(chan timer, 16)}
	client.SetTimer(c, func(d time.Duration) (<-chan time.Time, func() bool) {
		tm := timer{d: d, fire: make(chan time.Time, 1)}
		ts.started <- tm
		return tm.fire, func() bool { return true }
	})
	return ts
}

// next returns the next timer started, failing the test after 10 s.
func (ts *timers) next(t *testing.T) timer {
	t.Helper()
	select {
	case tm := <-ts.started:
		return tm
	case <-time.After(10 * time.Second):
		t.Fatal("no timer started")
		return timer{}
	}
}

// result returns KeepAlive's result, failing the test after 10 s.
func result(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("KeepAlive did not return")
		return nil
	}
}

// TestKeepAlive: KeepAlive renews halfway to the expiry, stops when the
// lease is released (the release giving back the renewed id), when ctx
// ends, and when the lease is lost.
func TestKeepAlive(t *testing.T) {
	f := &fakeRLS{slots: 3}
	c := client.New(newFakeRLS(t, f))
	ts := newTimers(c)

	l, _ := acquire(t, c, slot)
	done := make(chan error, 1)
	go func() { done <- l.KeepAlive(t.Context()) }()
	tm := ts.next(t)
	if tm.d <= leaseTTL/2-5*time.Second || tm.d > leaseTTL/2 {
		t.Errorf("first renewal in %v, want about %v", tm.d, leaseTTL/2)
	}
	tm.fire <- time.Now()
	ts.next(t) // renewed: waiting for the next
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := result(t, done); err != nil {
		t.Errorf("KeepAlive after Release = %v, want nil", err)
	}
	if diff := cmp.Diff([]string{"lease-2"}, f.released()); diff != "" {
		t.Errorf("Release after KeepAlive renewed mismatch (-want +got):\n%s", diff)
	}

	l, _ = acquire(t, c, slot) // lease-3
	go func() { done <- l.KeepAlive(t.Context()) }()
	tm = ts.next(t)
	f.lapse("lease-3")
	tm.fire <- time.Now()
	if err := result(t, done); !errors.Is(err, client.ErrLeaseLost) {
		t.Errorf("KeepAlive of a lapsed lease = %v, want ErrLeaseLost", err)
	}

	l, _ = acquire(t, c, slot)
	ctx, cancel := context.WithCancel(t.Context())
	go func() { done <- l.KeepAlive(ctx) }()
	ts.next(t)
	cancel()
	if err := result(t, done); !errors.Is(err, context.Canceled) {
		t.Errorf("KeepAlive after its ctx ended = %v, want context.Canceled", err)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}

	// Never held: nothing to keep.
	nothing, _ := acquire(t, client.New(newFakeRLS(t, &fakeRLS{})), slot)
	if err := nothing.KeepAlive(t.Context()); err != nil {
		t.Errorf("KeepAlive of no lease = %v", err)
	}
}

// TestKeepAliveFailures: a renewal that fails is tried again; once the
// lease expired without one, KeepAlive reports it lost, with the failure.
func TestKeepAliveFailures(t *testing.T) {
	f := &fakeRLS{slots: 1}
	var now atomic.Pointer[time.Time]
	start := time.Now()
	now.Store(&start)
	c := client.New(newFakeRLS(t, f), client.WithClock(func() time.Time { return *now.Load() }))
	ts := newTimers(c)
	l, _ := acquire(t, c, slot)
	done := make(chan error, 1)
	go func() { done <- l.KeepAlive(t.Context()) }()
	first := ts.next(t)
	down := status.Error(codes.Unavailable, "down")
	f.fail.Store(&down)
	first.fire <- time.Now()
	// Tried again halfway to the same expiry: the clock has not moved.
	if retry := ts.next(t); retry.d != first.d {
		t.Errorf("retry in %v, want %v", retry.d, first.d)
	} else {
		later := l.ExpiresAt().Add(time.Second)
		now.Store(&later)
		retry.fire <- time.Now()
	}
	if err := result(t, done); !errors.Is(err, client.ErrLeaseLost) || !strings.Contains(err.Error(), "down") {
		t.Errorf("KeepAlive past the expiry without renewal = %v, want ErrLeaseLost with the failure", err)
	}
}

// TestAutoRenew: with WithAutoRenew, Acquire keeps its lease alive until
// the release, which stops the renewals (and their goroutine: goleak
// checks), even one in flight, within its own bound.
func TestAutoRenew(t *testing.T) {
	f := &fakeRLS{slots: 1}
	c := client.New(newFakeRLS(t, f), client.WithAutoRenew())
	ts := newTimers(c)
	release, d, err := c.Acquire(t.Context(), "jobs", slot)
	if err != nil || !d.Allowed {
		t.Fatalf("Acquire = %+v, %v", d, err)
	}
	ts.next(t).fire <- time.Now()
	tm := ts.next(t) // renewed once
	renewing := make(chan struct{}, 1)
	f.renewing.Store(&renewing)
	tm.fire <- time.Now()
	<-renewing // a renewal in flight, which never answers
	released := make(chan struct{})
	go func() {
		defer close(released)
		release()
	}()
	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("the release waited for the renewal in flight")
	}
	if diff := cmp.Diff([]string{"lease-2"}, f.released()); diff != "" {
		t.Errorf("Release calls mismatch (-want +got):\n%s", diff)
	}
	if got := f.holding(slot); got != 0 {
		t.Errorf("%d slots held after the release, want 0", got)
	}
}
