package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/ratelimitd/ratelimitd/client"
	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

const checkMethod = "/grpc.health.v1.Health/Check"

// TestServerInterceptors: against the scripted server (1 hit per hour per
// descriptor), the server interceptors send the call's descriptors, pass
// allowed calls with the rate-limit headers, and refuse the others with
// ResourceExhausted, RetryInfo, QuotaFailure and the headers.
func TestServerInterceptors(t *testing.T) {
	f := &fakeRLS{limit: 1}
	c := client.New(newFakeRLS(t, f), client.WithTimeout(0), client.WithRefusalCache(0))
	tg := newTarget(t, []grpc.ServerOption{
		grpc.UnaryInterceptor(client.UnaryServerInterceptor(c, "grpc", client.WithMetadataKey("X-Api-Key"), client.WithPeerAddress(),
			client.WithDescriptors(func(context.Context, string) []client.Descriptor {
				return []client.Descriptor{client.D("tenant", "acme")}
			}))),
		grpc.StreamInterceptor(client.StreamServerInterceptor(c, "grpc")),
	})
	md, err := tg.check(t, "x-api-key", "k1")
	if err != nil {
		t.Fatalf("first call: %v", err)
	}
	if got := md.Get("ratelimit"); len(got) != 4 {
		t.Errorf("allowed call: ratelimit metadata %q, want one per descriptor", got)
	}
	want := []*ratelimitv1.Descriptor{
		{Entries: []*ratelimitv1.Entry{{Key: "method", Value: checkMethod}}},
		{Entries: []*ratelimitv1.Entry{{Key: "x-api-key", Value: "k1"}}},
		{Entries: []*ratelimitv1.Entry{{Key: "remote_address", Value: "bufconn"}}},
		{Entries: []*ratelimitv1.Entry{{Key: "tenant", Value: "acme"}}},
	}
	if diff := cmp.Diff(want, f.requests()[0].GetDescriptors(), protocmp.Transform()); diff != "" {
		t.Errorf("descriptors sent mismatch (-want +got):\n%s", diff)
	}
	md, err = tg.check(t, "x-api-key", "k1")
	wantRefused(t, "second call", err, time.Hour, "method", "x-api-key", "remote_address", "tenant")
	if got := md.Get("retry-after"); len(got) != 1 || got[0] != "3600" {
		t.Errorf("refused call: retry-after metadata %q, want [3600]", got)
	}
	if got := tg.calls.Load(); got != 1 {
		t.Errorf("%d calls reached the service, want 1", got)
	}

	// The stream interceptor asks once, when the stream starts.
	for i, wantCode := range []codes.Code{codes.OK, codes.ResourceExhausted} {
		stream, err := tg.health.Watch(t.Context(), &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = stream.Recv()
		}
		if got := status.Code(err); got != wantCode {
			t.Errorf("stream %d: %v, want %v", i, err, wantCode)
		}
	}
}

// TestInterceptorFailures: when the failure policy refuses, the call fails
// with Unavailable; a descriptor the interceptor's configuration makes
// malformed fails it with Internal, whatever the policy.
func TestInterceptorFailures(t *testing.T) {
	f := &fakeRLS{}
	conn := newFakeRLS(t, f)
	unavailable := status.Error(codes.Unavailable, "down")
	f.fail.Store(&unavailable)
	for _, tc := range []struct {
		name string
		opts []client.Option
		ds   []client.Descriptor
		want codes.Code
	}{
		{"fail open", nil, nil, codes.OK},
		{"fail closed", []client.Option{client.WithFailClosed()}, nil, codes.Unavailable},
		{"malformed", nil, []client.Descriptor{{}}, codes.Internal},
	} {
		c := client.New(conn, tc.opts...)
		tg := newTarget(t, []grpc.ServerOption{grpc.UnaryInterceptor(client.UnaryServerInterceptor(c, "grpc",
			client.WithDescriptors(func(context.Context, string) []client.Descriptor { return tc.ds })))})
		if _, err := tg.check(t); status.Code(err) != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// TestInterceptorContext: an outbound call whose context has ended fails
// with the context's status and is not invoked.
func TestInterceptorContext(t *testing.T) {
	c := client.New(newFakeRLS(t, &fakeRLS{}), client.WithTimeout(0))
	in := client.UnaryClientInterceptor(c, "grpc")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	invoked := false
	err := in(ctx, checkMethod, nil, nil, nil, func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		invoked = true
		return nil
	})
	if got := status.Code(err); got != codes.Canceled || invoked {
		t.Errorf("interceptor with a canceled ctx: %v (code %v), invoked %v; want Canceled, not invoked", err, got, invoked)
	}
}

// TestClientInterceptors: the client interceptors throttle outbound calls
// locally: a refused call is never sent.
func TestClientInterceptors(t *testing.T) {
	f := &fakeRLS{limit: 1}
	c := client.New(newFakeRLS(t, f), client.WithTimeout(0))
	tg := newTarget(t, nil,
		grpc.WithUnaryInterceptor(client.UnaryClientInterceptor(c, "out", client.WithMetadataKey("x-api-key"))),
		grpc.WithStreamInterceptor(client.StreamClientInterceptor(c, "out")))
	if _, err := tg.check(t, "x-api-key", "k1"); err != nil {
		t.Fatalf("first call: %v", err)
	}
	_, err := tg.check(t, "x-api-key", "k2") // the method's descriptor is spent
	wantRefused(t, "second call", err, time.Hour, "method")
	for i, want := range []codes.Code{codes.OK, codes.ResourceExhausted} {
		ctx, cancel := context.WithCancel(t.Context())
		stream, err := tg.health.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = stream.Recv()
		}
		cancel()
		if got := status.Code(err); got != want {
			t.Errorf("stream %d: %v, want %v", i, err, want)
		}
	}
	if got := tg.calls.Load(); got != 2 {
		t.Errorf("%d calls reached the service, want 2 (one call, one stream)", got)
	}
}

// TestLimiter: NewLimiter plugs into go-grpc-middleware's interceptor,
// building a call's descriptors from its context with the interceptors'
// options (method, incoming metadata, peer, WithDescriptors, in that
// order); a refusal fails the call with ResourceExhausted; outside a
// gRPC call, no method descriptor is made up.
func TestLimiter(t *testing.T) {
	f := &fakeRLS{limit: 1}
	c := client.New(newFakeRLS(t, f), client.WithTimeout(0))
	l := client.NewLimiter(c, "grpc", client.WithMetadataKey("X-Api-Key"), client.WithPeerAddress(),
		client.WithDescriptors(func(context.Context, string) []client.Descriptor {
			return []client.Descriptor{client.D("tenant", "acme")}
		}))
	tg := newTarget(t, []grpc.ServerOption{grpc.UnaryInterceptor(ratelimit.UnaryServerInterceptor(l))})
	if _, err := tg.check(t, "x-api-key", "k1"); err != nil {
		t.Fatalf("first call: %v", err)
	}
	_, err := tg.check(t, "x-api-key", "k1")
	wantCode(t, "second call", err, codes.ResourceExhausted)
	want := []*ratelimitv1.Descriptor{
		{Entries: []*ratelimitv1.Entry{{Key: "method", Value: checkMethod}}},
		{Entries: []*ratelimitv1.Entry{{Key: "x-api-key", Value: "k1"}}},
		{Entries: []*ratelimitv1.Entry{{Key: "remote_address", Value: "bufconn"}}},
		{Entries: []*ratelimitv1.Entry{{Key: "tenant", Value: "acme"}}},
	}
	if diff := cmp.Diff(want, f.requests()[0].GetDescriptors(), protocmp.Transform()); diff != "" {
		t.Errorf("descriptors sent mismatch (-want +got):\n%s", diff)
	}
	if got := tg.calls.Load(); got != 1 {
		t.Errorf("%d calls reached the service, want 1", got)
	}

	n := len(f.requests())
	if err := client.NewLimiter(c, "grpc").Limit(t.Context()); err != nil { // no method: no descriptors
		t.Errorf("Limit outside a call: %v, want nil", err)
	}
	if got := len(f.requests()); got != n {
		t.Errorf("Limit outside a call asked ratelimitd (%d requests, want %d)", got, n)
	}
	only := client.NewLimiter(c, "grpc", client.WithMethodKey(""), client.WithDescriptors(func(context.Context, string) []client.Descriptor {
		return []client.Descriptor{client.D("tenant", "other")}
	}))
	if err := only.Limit(t.Context()); err != nil {
		t.Fatalf("Limit with WithDescriptors: %v", err)
	}
	want = []*ratelimitv1.Descriptor{{Entries: []*ratelimitv1.Entry{{Key: "tenant", Value: "other"}}}}
	if diff := cmp.Diff(want, f.requests()[n].GetDescriptors(), protocmp.Transform()); diff != "" {
		t.Errorf("WithDescriptors alone: descriptors sent mismatch (-want +got):\n%s", diff)
	}
}
