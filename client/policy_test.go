package client_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimitd/ratelimitd/client"
	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

// TestDecision: ratelimitd's answer is converted faithfully: the code,
// each status with its limit and algorithm, the request's retry-after
// (the longest of its refused descriptors'), and the headers.
func TestDecision(t *testing.T) {
	f := &fakeRLS{answer: func(*ratelimitv1.ShouldRateLimitRequest) (*ratelimitv1.ShouldRateLimitResponse, error) {
		return &ratelimitv1.ShouldRateLimitResponse{
			Code: ratelimitv1.Code_CODE_OVER_LIMIT,
			Statuses: []*ratelimitv1.DescriptorStatus{
				{Code: ratelimitv1.Code_CODE_OK, Remaining: 3, ResetAfter: durationpb.New(time.Second),
					Limit: &ratelimitv1.Limit{Name: "a", Requests: 5, Window: durationpb.New(time.Minute), Algorithm: ratelimitv1.Algorithm_ALGORITHM_GCRA, Burst: 7}},
				{Code: ratelimitv1.Code_CODE_OVER_LIMIT, ResetAfter: durationpb.New(40 * time.Second), RetryAfter: durationpb.New(40 * time.Second),
					Limit: &ratelimitv1.Limit{Name: "b", Requests: 2, Window: durationpb.New(time.Minute), Algorithm: ratelimitv1.Algorithm_ALGORITHM_FIXED_WINDOW, Burst: 2}},
				{Code: ratelimitv1.Code_CODE_OVER_LIMIT, RetryAfter: durationpb.New(45 * time.Second),
					Limit: &ratelimitv1.Limit{Algorithm: ratelimitv1.Algorithm_ALGORITHM_SLIDING_LOG}},
				{Code: ratelimitv1.Code_CODE_OK, Unlimited: true, Remaining: 1<<32 - 1},
				{Code: ratelimitv1.Code_CODE_OK, RetryAfter: durationpb.New(-time.Second),
					Limit: &ratelimitv1.Limit{Algorithm: ratelimitv1.Algorithm_ALGORITHM_TOKEN_BUCKET}},
				{Code: ratelimitv1.Code_CODE_OK, Limit: &ratelimitv1.Limit{Algorithm: ratelimitv1.Algorithm_ALGORITHM_SLIDING_WINDOW}},
			},
			Headers: []*ratelimitv1.Header{{Name: "RateLimit", Value: `"b";r=0;t=40`}, {Name: "Retry-After", Value: "45"}},
		}, nil
	}}
	c := client.New(newFakeRLS(t, f), client.WithTimeout(0), client.WithRefusalCache(0))
	got := ask(t, c, "api", client.D("k", "1"), client.D("k", "2"), client.D("k", "3"), client.D("k", "4"), client.D("k", "5"), client.D("k", "6"))
	want := client.Decision{
		RetryAfter: 45 * time.Second,
		Statuses: []client.Status{
			{Remaining: 3, ResetAfter: time.Second, Limit: client.Limit{Name: "a", Requests: 5, Window: time.Minute, Algorithm: client.GCRA, Burst: 7}},
			{OverLimit: true, ResetAfter: 40 * time.Second, RetryAfter: 40 * time.Second, Limit: client.Limit{Name: "b", Requests: 2, Window: time.Minute, Algorithm: client.FixedWindow, Burst: 2}},
			{OverLimit: true, RetryAfter: 45 * time.Second, Limit: client.Limit{Algorithm: client.SlidingLog}},
			{Unlimited: true, Remaining: 1<<32 - 1},
			{Limit: client.Limit{Algorithm: client.TokenBucket}},
			{Limit: client.Limit{Algorithm: client.SlidingWindow}},
		},
		Headers: []client.Header{{Name: "RateLimit", Value: `"b";r=0;t=40`}, {Name: "Retry-After", Value: "45"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Decision mismatch (-want +got):\n%s", diff)
	}
}

// TestFailurePolicy: when ratelimitd is stopped, slower than the budget,
// or answers with an error, the failure policy decides: allowed by
// default, refused with WithFailClosed; the error is in Decision.Err,
// never returned; no refusal is remembered, and FailOpens counts the
// requests let through.
func TestFailurePolicy(t *testing.T) {
	failures := []struct {
		name     string
		setup    func(f *fakeRLS)
		wantCode codes.Code
	}{
		{"stopped", func(f *fakeRLS) { f.stop() }, codes.Unavailable},
		{"slow", func(f *fakeRLS) { f.slow.Store(true) }, codes.DeadlineExceeded},
		{"unavailable", func(f *fakeRLS) {
			err := status.Error(codes.Unavailable, "store down")
			f.fail.Store(&err)
		}, codes.Unavailable},
		{"internal", func(f *fakeRLS) {
			err := status.Error(codes.Internal, "internal error")
			f.fail.Store(&err)
		}, codes.Internal},
	}
	for _, fl := range failures {
		for _, closed := range []bool{false, true} {
			t.Run(fl.name+"/closed="+map[bool]string{false: "no", true: "yes"}[closed], func(t *testing.T) {
				f := &fakeRLS{}
				conn := newFakeRLS(t, f)
				opts := []client.Option{client.WithTimeout(30 * time.Millisecond)}
				if closed {
					opts = append(opts, client.WithFailClosed())
				}
				c := client.New(conn, opts...)
				ask(t, client.New(conn, client.WithTimeout(0)), "api", client.D("k", "v")) // connected
				fl.setup(f)
				for range 2 {
					d, err := c.ShouldRateLimit(t.Context(), "api", client.D("k", "v"))
					if err != nil {
						t.Fatalf("ShouldRateLimit: error %v, want the policy's decision", err)
					}
					if d.Allowed == closed || d.Local || d.Statuses != nil || d.RetryAfter != 0 {
						t.Errorf("ShouldRateLimit = %+v, want Allowed %v, no statuses", d, !closed)
					}
					if fl.name == "stopped" && status.Code(d.Err) == codes.DeadlineExceeded {
						// gRPC may still be reconnecting when the budget ends.
					} else {
						wantCode(t, "Decision.Err", d.Err, fl.wantCode)
					}
				}
				wantOpen := uint64(2)
				if closed {
					wantOpen = 0
				}
				if got := c.FailOpens(); got != wantOpen {
					t.Errorf("FailOpens() = %d, want %d", got, wantOpen)
				}
				if got := c.LocalRefusals(); got != 0 {
					t.Errorf("LocalRefusals() = %d, want 0", got)
				}
			})
		}
	}
}

// TestNeverReachable: a Client whose ratelimitd stopped before its first
// call, so that it never connected, fails open.
func TestNeverReachable(t *testing.T) {
	f := &fakeRLS{}
	conn := newFakeRLS(t, f)
	f.stop()
	d, err := client.New(conn).ShouldRateLimit(t.Context(), "api", client.D("api_key", "k1"))
	if err != nil || !d.Allowed || d.Err == nil {
		t.Errorf("ShouldRateLimit = %+v, %v; want allowed, with Decision.Err set", d, err)
	}
}

// TestContextEnded: when the caller's context ends first, there is no
// decision, whatever the policy: the error wraps ctx.Err(); a budget
// longer than ctx does not extend it.
func TestContextEnded(t *testing.T) {
	f := &fakeRLS{}
	conn := newFakeRLS(t, f)
	for _, opts := range [][]client.Option{{client.WithTimeout(0)}, {client.WithFailClosed()}} {
		c := client.New(conn, opts...)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		d, err := c.ShouldRateLimit(ctx, "api", client.D("k", "v"))
		if !errors.Is(err, context.Canceled) || d.Allowed {
			t.Errorf("ShouldRateLimit(canceled ctx) = %+v, %v; want an error wrapping context.Canceled", d, err)
		}
		f.slow.Store(true)
		ctx, cancel = context.WithTimeout(t.Context(), 5*time.Millisecond) // shorter than the budget
		d, err = c.ShouldRateLimit(ctx, "api", client.D("k", "v"))
		cancel()
		f.slow.Store(false)
		if !errors.Is(err, context.DeadlineExceeded) || d.Allowed {
			t.Errorf("ShouldRateLimit(ctx expiring first) = %+v, %v; want an error wrapping context.DeadlineExceeded", d, err)
		}
		if got := c.FailOpens(); got != 0 {
			t.Errorf("FailOpens() = %d, want 0: no answer was let through", got)
		}
	}
}

// TestInvalidArgument: a malformed request is an InvalidArgument error,
// found without an RPC even while ratelimitd is stopped, and whatever the
// failure policy; ratelimitd's own InvalidArgument is returned too.
func TestInvalidArgument(t *testing.T) {
	f := &fakeRLS{}
	c := client.New(newFakeRLS(t, f), client.WithTimeout(0)) // fail open
	hits := func(n uint64, d client.Descriptor) client.Descriptor { d.Hits = n; return d }
	big := make([]client.Descriptor, 64)
	for i := range big {
		big[i] = client.Descriptor{Entries: make([]client.Entry, 32)}
		for j := range big[i].Entries {
			big[i].Entries[j] = client.Entry{Key: "k", Value: strings.Repeat("v", 1000)}
		}
	}
	many := func(n int) []client.Descriptor {
		ds := make([]client.Descriptor, n)
		for i := range ds {
			ds[i] = client.D("k", "v")
		}
		return ds
	}
	cases := []struct {
		name   string
		domain string
		ds     []client.Descriptor
	}{
		{"empty domain", "", []client.Descriptor{client.D("k", "v")}},
		{"no descriptors", "api", nil},
		{"no entries", "api", []client.Descriptor{client.D("k", "v"), {}}},
		{"empty key", "api", []client.Descriptor{client.D("k", "v", "", "v")}},
		{"long domain", strings.Repeat("d", 257), []client.Descriptor{client.D("k", "v")}},
		{"domain not UTF-8", "api\xff", []client.Descriptor{client.D("k", "v")}},
		{"long key", "api", []client.Descriptor{client.D(strings.Repeat("k", 1025), "v")}},
		{"key not UTF-8", "api", []client.Descriptor{client.D("k", "v"), client.D("api_key\xff", "v")}},
		{"too many descriptors", "api", many(65)},
		{"too many entries", "api", []client.Descriptor{{Entries: slices.Repeat([]client.Entry{{Key: "k", Value: "v"}}, 33)}}},
		{"too many hits", "api", []client.Descriptor{hits(1<<32, client.D("k", "v"))}},
		{"request over 1 MiB", "api", big},
	}
	for _, tt := range cases {
		d, err := c.ShouldRateLimit(t.Context(), tt.domain, tt.ds...)
		wantCode(t, tt.name, err, codes.InvalidArgument)
		if d.Allowed || d.Err != nil {
			t.Errorf("%s: %+v, want the zero Decision", tt.name, d)
		}
		wantCode(t, "Validate: "+tt.name, client.Validate(tt.domain, tt.ds...), codes.InvalidArgument)
	}
	if got := f.rpcs(); got != 0 {
		t.Errorf("%d RPCs, want 0: the Client finds these itself", got)
	}

	// The limits themselves are fine.
	ask(t, c, "api", hits(1<<32-1, client.D(strings.Repeat("k", 1024), "v")))
	ask(t, c, strings.Repeat("d", 256), many(64)...)
	if err := client.Validate("api", client.D("k", "v")); err != nil {
		t.Errorf("Validate(well-formed) = %v, want nil", err)
	}

	invalid := status.Error(codes.InvalidArgument, "bad request")
	f.fail.Store(&invalid)
	_, err := c.ShouldRateLimit(t.Context(), "api", client.D("k", "v"))
	wantCode(t, "ratelimitd answering InvalidArgument", err, codes.InvalidArgument)

	f.stop()
	for _, tt := range cases {
		_, err := c.ShouldRateLimit(t.Context(), tt.domain, tt.ds...)
		wantCode(t, tt.name+", ratelimitd stopped", err, codes.InvalidArgument)
	}
	if got := c.FailOpens(); got != 0 {
		t.Errorf("FailOpens() = %d, want 0", got)
	}
}
