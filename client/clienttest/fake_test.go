package clienttest_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratelimitd/ratelimitd/client"
	"github.com/ratelimitd/ratelimitd/client/clienttest"
)

// TestFake: queued answers in order, then the default; every call
// recorded, with a copy of its descriptors; malformed requests and ended
// contexts answered as a Client does.
func TestFake(t *testing.T) {
	var f clienttest.Fake
	ctx := t.Context()
	ds := []client.Descriptor{client.D("api_key", "k1"), client.D("tenant", "acme", "path", "/x")}
	errBoom := errors.New("boom")
	f.Push(clienttest.Refuse(1500*time.Millisecond), clienttest.FailOpen(nil), clienttest.FailClosed(errBoom), clienttest.Fail(errBoom))
	refused, _ := f.ShouldRateLimit(ctx, "api", ds...)
	wantRefused := client.Decision{
		RetryAfter: 1500 * time.Millisecond,
		Statuses: []client.Status{
			{OverLimit: true, Limit: client.Limit{Name: "api_key"}, ResetAfter: 1500 * time.Millisecond, RetryAfter: 1500 * time.Millisecond},
			{OverLimit: true, Limit: client.Limit{Name: "tenant.path"}, ResetAfter: 1500 * time.Millisecond, RetryAfter: 1500 * time.Millisecond},
		},
		Headers: []client.Header{{Name: "Retry-After", Value: "2"}},
	}
	if diff := cmp.Diff(wantRefused, refused); diff != "" {
		t.Errorf("Refuse: mismatch (-want +got):\n%s", diff)
	}
	if d, err := f.ShouldRateLimit(ctx, "api", ds...); err != nil || !d.Allowed || status.Code(d.Err) != codes.Unavailable {
		t.Errorf("FailOpen(nil) = %+v, %v; want allowed, Unavailable", d, err)
	}
	if d, err := f.ShouldRateLimit(ctx, "api", ds...); err != nil || d.Allowed || !errors.Is(d.Err, errBoom) {
		t.Errorf("FailClosed(boom) = %+v, %v; want refused, boom", d, err)
	}
	if d, err := f.ShouldRateLimit(ctx, "api", ds...); !errors.Is(err, errBoom) || d.Allowed {
		t.Errorf("Fail(boom) = %+v, %v; want boom", d, err)
	}
	if d, err := f.ShouldRateLimit(ctx, "api", ds...); err != nil || !d.Allowed || len(d.Statuses) != 2 {
		t.Errorf("queue empty = %+v, %v; want allowed, two statuses", d, err)
	}
	f.SetDefault(clienttest.Decide(client.Decision{Allowed: false, RetryAfter: time.Second}))
	if d, _ := f.ShouldRateLimit(ctx, "api", ds...); d.Allowed || d.RetryAfter != time.Second {
		t.Errorf("default Decide = %+v, want refused for 1s", d)
	}
	if _, err := f.ShouldRateLimit(ctx, "", ds...); status.Code(err) != codes.InvalidArgument {
		t.Errorf("malformed: %v, want InvalidArgument", err)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := f.ShouldRateLimit(ended, "api", ds...); !errors.Is(err, context.Canceled) {
		t.Errorf("ended ctx: %v, want context.Canceled", err)
	}

	calls := f.Calls()
	if len(calls) != 8 {
		t.Fatalf("%d calls recorded, want 8", len(calls))
	}
	ds[0].Entries[0].Value = "changed"
	if got := f.Calls()[0].Descriptors[0].Entries[0].Value; got != "k1" {
		t.Errorf("recorded descriptor changed with the caller's: %q", got)
	}
	if diff := cmp.Diff(wantRefused, calls[0].Decision); diff != "" || calls[0].Domain != "api" {
		t.Errorf("call 0 recorded %q, decision mismatch (-want +got):\n%s", calls[0].Domain, diff)
	}
	if !errors.Is(calls[3].Err, errBoom) || status.Code(calls[6].Err) != codes.InvalidArgument {
		t.Errorf("recorded errors %v, %v; want boom, InvalidArgument", calls[3].Err, calls[6].Err)
	}
	f.Reset()
	if d, _ := f.ShouldRateLimit(ctx, "api", ds...); !d.Allowed || len(f.Calls()) != 1 {
		t.Errorf("after Reset: %+v, %d calls; want allowed, 1 call", d, len(f.Calls()))
	}
}

// TestFakeAnswerUnlocked: an Answer runs without the Fake's lock: while
// one blocks, other calls are answered, and an Answer may read the calls.
func TestFakeAnswerUnlocked(t *testing.T) {
	var f clienttest.Fake
	entered, release := make(chan struct{}), make(chan struct{})
	var seen int
	f.Push(func(string, []client.Descriptor) (client.Decision, error) {
		seen = len(f.Calls())
		close(entered)
		<-release
		return client.Decision{Allowed: true}, nil
	})
	done := make(chan error, 1)
	go func() {
		_, err := f.ShouldRateLimit(t.Context(), "api", client.D("k", "blocked"))
		done <- err
	}()
	<-entered
	if d, err := f.ShouldRateLimit(t.Context(), "api", client.D("k", "free")); err != nil || !d.Allowed {
		t.Errorf("call beside a blocked Answer: %+v, %v; want allowed", d, err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Errorf("blocked call: %v", err)
	}
	calls := f.Calls()
	if seen != 0 || len(calls) != 2 || calls[0].Descriptors[0].Entries[0].Value != "free" {
		t.Errorf("Answer saw %d calls, then %+v; want 0, then the free call first", seen, calls)
	}
}

// TestFakeHTTPMiddleware: the middleware refuses what the Fake refuses,
// with its default 429, and sends it the request's descriptors.
func TestFakeHTTPMiddleware(t *testing.T) {
	var f clienttest.Fake
	f.Push(clienttest.Allow(), clienttest.Refuse(time.Minute))
	h := client.HTTPMiddleware(&f, "web", client.WithAPIKeyHeader("X-API-Key"))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	var statuses []int
	for range 2 {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-API-Key", "k1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		statuses = append(statuses, w.Code)
	}
	if diff := cmp.Diff([]int{200, 429}, statuses); diff != "" {
		t.Errorf("statuses mismatch (-want +got):\n%s", diff)
	}
	if got := f.Calls()[1].Descriptors; len(got) != 1 || got[0].Entries[0] != (client.Entry{Key: "api_key", Value: "k1"}) {
		t.Errorf("descriptors %v, want [api_key=k1]", got)
	}
}

// TestFakeInterceptor: the gRPC interceptors refuse what the Fake refuses,
// with ResourceExhausted, and send it the call's descriptors.
func TestFakeInterceptor(t *testing.T) {
	var f clienttest.Fake
	f.Push(clienttest.Refuse(time.Minute), clienttest.FailClosed(nil))
	in := client.UnaryServerInterceptor(&f, "grpc")
	info := &grpc.UnaryServerInfo{FullMethod: "/pkg.Service/Method"}
	handled := 0
	handler := func(context.Context, any) (any, error) { handled++; return "ok", nil }
	for i, want := range []codes.Code{codes.ResourceExhausted, codes.Unavailable, codes.OK} {
		if _, err := in(t.Context(), nil, info, handler); status.Code(err) != want {
			t.Errorf("call %d: %v, want %v", i, err, want)
		}
	}
	if handled != 1 {
		t.Errorf("handler called %d times, want 1", handled)
	}
	if got := f.Calls()[0].Descriptors; len(got) != 1 || got[0].Entries[0] != (client.Entry{Key: "method", Value: "/pkg.Service/Method"}) {
		t.Errorf("descriptors %v, want [method=/pkg.Service/Method]", got)
	}
}

// TestFakeAcquire: Acquire answers from the same script, records the call
// as an Acquire, holds a slot while allowed until its release (once), and
// refuses a give-back as a Client does; the server interceptor with
// WithConcurrency takes a Fake.
func TestFakeAcquire(t *testing.T) {
	var f clienttest.Fake
	ctx := t.Context()
	f.Push(clienttest.Allow(), clienttest.Refuse(time.Second), clienttest.FailOpen(nil))
	release, d, err := f.Acquire(ctx, "jobs", client.D("job", "export"))
	if err != nil || !d.Allowed || f.Held() != 1 {
		t.Fatalf("Acquire = %+v, %v, %d held; want allowed, 1 held", d, err, f.Held())
	}
	for range 2 {
		if _, d, err := f.Acquire(ctx, "jobs", client.D("job", "export")); err != nil || f.Held() != 1 {
			t.Errorf("Acquire (%+v, %v) changed what is held: %d", d, err, f.Held())
		}
	}
	release()
	release()
	if got := f.Held(); got != 0 {
		t.Errorf("%d held after a double release, want 0", got)
	}
	_, _, err = f.Acquire(ctx, "jobs", client.Descriptor{Entries: []client.Entry{{Key: "job", Value: "x"}}, GiveBack: true})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("Acquire with GiveBack: %v, want InvalidArgument", err)
	}
	calls := f.Calls()
	if len(calls) != 4 || !calls[0].Acquire {
		t.Errorf("calls = %+v, want 4 Acquires", calls)
	}

	var held int
	in := client.UnaryServerInterceptor(&f, "grpc", client.WithConcurrency())
	_, err = in(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/s/M"}, func(context.Context, any) (any, error) {
		held = f.Held()
		return nil, nil
	})
	if err != nil || held != 1 || f.Held() != 0 {
		t.Errorf("interceptor: %v, %d held in the handler, %d after; want nil, 1, 0", err, held, f.Held())
	}
}
