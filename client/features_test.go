package client_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimitd/ratelimitd/client"
	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

// observations collects what a decision hook sees.
type observations struct {
	mu  sync.Mutex
	obs []client.Observation
}

func (o *observations) hook(_ context.Context, ob client.Observation) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.obs = append(o.obs, ob)
}

// TestDecisionHook: the hook sees every call, with its domain,
// descriptors, decision, error and a duration: decided by ratelimitd, by
// the refusal memory, by the failure policy (a fail-open answer), and
// calls that fail.
func TestDecisionHook(t *testing.T) {
	f := &fakeRLS{limit: 1}
	var o observations
	c := client.New(newFakeRLS(t, f), client.WithTimeout(0), client.WithDecisionHook(o.hook))
	ds := []client.Descriptor{client.D("k", "v")}
	ask(t, c, "api", ds...) // allowed
	ask(t, c, "api", ds...) // refused by ratelimitd
	ask(t, c, "api", ds...) // refused locally
	unavailable := status.Error(codes.Unavailable, "down")
	f.fail.Store(&unavailable)
	if d, _ := c.ShouldRateLimit(t.Context(), "api", client.D("k", "w")); !d.Allowed || d.Err == nil {
		t.Fatalf("ratelimitd failing: %+v, want failed open", d)
	}
	_, errMalformed := c.ShouldRateLimit(t.Context(), "", ds...)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, errEnded := c.ShouldRateLimit(ctx, "api", client.D("k", "x"))

	type seen struct {
		Domain            string
		Descriptors       []client.Descriptor
		Allowed, Local    bool
		DecisionErr, Err  codes.Code
		FailedOpen, Timed bool
	}
	// Calls answered before any I/O (by the refusal memory, a malformed
	// request, an ended context) may take no time on a coarse clock.
	noIO := map[int]bool{2: true, 4: true, 5: true}
	var got []seen
	for i, ob := range o.obs {
		timed := ob.Duration > 0 || noIO[i] && ob.Duration == 0
		got = append(got, seen{ob.Domain, ob.Descriptors, ob.Decision.Allowed, ob.Decision.Local,
			status.Code(ob.Decision.Err), status.Code(ob.Err), ob.FailedOpen(), timed})
	}
	want := []seen{
		{"api", ds, true, false, codes.OK, codes.OK, false, true},
		{"api", ds, false, false, codes.OK, codes.OK, false, true},
		{"api", ds, false, true, codes.OK, codes.OK, false, true},
		{"api", []client.Descriptor{client.D("k", "w")}, true, false, codes.Unavailable, codes.OK, true, true},
		{"", ds, false, false, codes.OK, codes.InvalidArgument, false, true},
		{"api", []client.Descriptor{client.D("k", "x")}, false, false, codes.OK, status.Code(errEnded), false, true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("observations mismatch (-want +got):\n%s", diff)
	}
	if !errors.Is(o.obs[5].Err, context.Canceled) || o.obs[4].Err != errMalformed { //nolint:errorlint // the very error returned
		t.Errorf("observed errors %v, %v; want those returned, %v and one wrapping context.Canceled", o.obs[4].Err, o.obs[5].Err, errMalformed)
	}
	if got := c.FailOpens(); got != 1 {
		t.Errorf("FailOpens() = %d, want 1", got)
	}
}

// TestUnimplemented: a server without the native API (as Envoy's own rate
// limit services are) is reported once, loudly, through the Client's
// logger, while the failure policy decides every request.
func TestUnimplemented(t *testing.T) {
	for _, closed := range []bool{false, true} {
		conn, _ := serveGRPC(t, grpc.NewServer()) // no service at all
		var logs bytes.Buffer
		opts := []client.Option{client.WithTimeout(0), client.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))}
		if closed {
			opts = append(opts, client.WithFailClosed())
		}
		c := client.New(conn, opts...)
		for range 3 {
			d, err := c.ShouldRateLimit(t.Context(), "api", client.D("k", "v"))
			if err != nil || d.Allowed == closed || status.Code(d.Err) != codes.Unimplemented {
				t.Errorf("closed %v: ShouldRateLimit = %+v, %v; want the failure policy, Unimplemented", closed, d, err)
			}
		}
		out := logs.String()
		if n := strings.Count(out, "level=ERROR"); n != 1 || !strings.Contains(out, "does not implement ratelimit.v1.RateLimitService") {
			t.Errorf("closed %v: logged %d errors, want 1 about the native API:\n%s", closed, n, out)
		}
		if wantOpen := map[bool]uint64{false: 3, true: 0}[closed]; c.FailOpens() != wantOpen {
			t.Errorf("closed %v: FailOpens() = %d, want %d", closed, c.FailOpens(), wantOpen)
		}
	}
}

// TestUnimplementedDefaultLogger: without WithLogger, the warning goes to
// slog.Default().
func TestUnimplementedDefaultLogger(t *testing.T) {
	var logs bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	defer slog.SetDefault(prev)
	conn, _ := serveGRPC(t, grpc.NewServer())
	if d, _ := client.New(conn, client.WithTimeout(0)).ShouldRateLimit(t.Context(), "api", client.D("k", "v")); !d.Allowed {
		t.Errorf("ShouldRateLimit = %+v, want failed open", d)
	}
	if !strings.Contains(logs.String(), "does not implement") {
		t.Errorf("slog.Default() got %q, want the warning", logs.String())
	}
}

// TestLimitOverride: a descriptor's limit override is sent as the native
// LimitOverride, and one ratelimitd would refuse is an InvalidArgument
// error, found without an RPC.
func TestLimitOverride(t *testing.T) {
	f := &fakeRLS{}
	c := client.New(newFakeRLS(t, f), client.WithTimeout(0))
	with := func(requests uint32, window time.Duration) client.Descriptor {
		d := client.D("tenant", "acme")
		d.Limit = &client.LimitOverride{Requests: requests, Window: window}
		return d
	}
	const years100 = 100 * 365 * 24 * time.Hour
	ask(t, c, "api", with(10, time.Minute), client.D("k", "v"), with(0, time.Millisecond), with(1<<32-1, years100), with(5, 1500*time.Microsecond))
	want := []*ratelimitv1.Descriptor{
		{Entries: []*ratelimitv1.Entry{{Key: "tenant", Value: "acme"}}, Limit: &ratelimitv1.LimitOverride{Requests: 10, Window: durationpb.New(time.Minute)}},
		{Entries: []*ratelimitv1.Entry{{Key: "k", Value: "v"}}},
		{Entries: []*ratelimitv1.Entry{{Key: "tenant", Value: "acme"}}, Limit: &ratelimitv1.LimitOverride{Requests: 0, Window: durationpb.New(time.Millisecond)}},
		{Entries: []*ratelimitv1.Entry{{Key: "tenant", Value: "acme"}}, Limit: &ratelimitv1.LimitOverride{Requests: 1<<32 - 1, Window: durationpb.New(years100)}},
		{Entries: []*ratelimitv1.Entry{{Key: "tenant", Value: "acme"}}, Limit: &ratelimitv1.LimitOverride{Requests: 5, Window: durationpb.New(1500 * time.Microsecond)}},
	}
	if diff := cmp.Diff(want, f.requests()[0].GetDescriptors(), protocmp.Transform()); diff != "" {
		t.Errorf("descriptors sent mismatch (-want +got):\n%s", diff)
	}
	for _, bad := range []client.Descriptor{
		with(1, 0),
		with(1, -time.Second),
		with(1, time.Millisecond-time.Microsecond),
		with(1, years100+time.Microsecond),
		with(1, time.Second+time.Nanosecond),
	} {
		_, err := c.ShouldRateLimit(t.Context(), "api", client.D("k", "v"), bad)
		wantCode(t, "override window "+bad.Limit.Window.String(), err, codes.InvalidArgument)
	}
	if got := f.rpcs(); got != 1 {
		t.Errorf("%d RPCs, want 1: bad overrides are found without one", got)
	}
}
