package clientintegration_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratelimitd/ratelimitd/client"
	"github.com/ratelimitd/ratelimitd/internal/grpctest"
)

// grpcRules are the limits of the interceptor tests: the protected service
// is grpc.health.v1.Health.
const grpcRules = `
domain: grpc
descriptors:
  - key: method
    value: /grpc.health.v1.Health/Check
    rate_limit: {name: check, algorithm: fixed_window, unit: minute, requests_per_unit: 2}
  - key: method
    value: /grpc.health.v1.Health/Watch
    rate_limit: {name: watch, algorithm: fixed_window, unit: minute, requests_per_unit: 1}
  - key: x-api-key
    rate_limit: {name: api_keys, algorithm: fixed_window, unit: minute, requests_per_unit: 1}
  - key: remote_address
    value: bufconn
    rate_limit: {name: bufconn_peers, algorithm: fixed_window, unit: minute, requests_per_unit: 1}
  - key: tenant
    rate_limit: {name: tenants, algorithm: fixed_window, unit: minute, requests_per_unit: 1}
`

const (
	checkMethod = "/grpc.health.v1.Health/Check"
	watchMethod = "/grpc.health.v1.Health/Watch"
)

// A target is the protected service, grpc.health.v1.Health, counting the
// calls and streams that reach it.
type target struct {
	*health.Server
	health healthpb.HealthClient
	calls  atomic.Int64
}

// Check implements healthpb.HealthServer, counting the call.
func (tg *target) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	tg.calls.Add(1)
	return tg.Server.Check(ctx, req)
}

// Watch implements healthpb.HealthServer, counting the stream.
func (tg *target) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	tg.calls.Add(1)
	return tg.Server.Watch(req, stream)
}

// newTarget serves the target with the server options (interceptors) of
// opts, and calls it through a connection with dialOpts.
func newTarget(t testing.TB, opts []grpc.ServerOption, dialOpts ...grpc.DialOption) *target {
	t.Helper()
	tg := &target{Server: health.NewServer()}
	g := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(g, tg)
	conn, _ := grpctest.Serve(t, g, dialOpts...)
	tg.health = healthpb.NewHealthClient(conn)
	return tg
}

// check calls Health.Check with the outgoing metadata kv, and returns the
// response header metadata and the error.
func (tg *target) check(t *testing.T, kv ...string) (metadata.MD, error) {
	t.Helper()
	var hdr metadata.MD
	ctx := metadata.AppendToOutgoingContext(t.Context(), kv...)
	_, err := tg.health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
	return hdr, err
}

// refusal returns the code of err, the delay of its RetryInfo (-1
// without one) and the subjects of its QuotaFailure, joined by commas; a
// violation without a description, or a detail that does not decode, is
// named as such among the subjects, so that no expected list matches.
func refusal(err error) (code codes.Code, retry time.Duration, subjects string) {
	st := status.Convert(err)
	retry = -1
	var names []string
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			retry = d.GetRetryDelay().AsDuration()
		case *errdetails.QuotaFailure:
			for _, v := range d.GetViolations() {
				if v.GetDescription() == "" {
					names = append(names, v.GetSubject()+" (without a description)")
					continue
				}
				names = append(names, v.GetSubject())
			}
		case error:
			names = append(names, "undecodable detail: "+d.Error())
		}
	}
	return st.Code(), retry, strings.Join(names, ",")
}

// wantRefused checks that err is ResourceExhausted with a RetryInfo of
// retry and a QuotaFailure of the violations of subjects.
func wantRefused(t *testing.T, call string, err error, retry time.Duration, subjects ...string) {
	t.Helper()
	code, gotRetry, got := refusal(err)
	if want := strings.Join(subjects, ","); code != codes.ResourceExhausted || gotRetry != retry || got != want {
		t.Errorf("%s: %v, retry after %v, violations %q; want ResourceExhausted, %v, %q", call, code, gotRetry, got, retry, want)
	}
}

// TestUnaryServerInterceptor: by default a call's descriptor is its
// method; allowed calls pass with the rate-limit headers in the response
// metadata, refused ones fail with ResourceExhausted, RetryInfo,
// QuotaFailure and the headers too.
func TestUnaryServerInterceptor(t *testing.T) {
	e := newHarnessRules(t, grpcRules)
	tg := newTarget(t, []grpc.ServerOption{grpc.UnaryInterceptor(client.UnaryServerInterceptor(e.client(client.WithRefusalCache(0)), "grpc"))})

	steps := []struct {
		at      time.Duration
		wantErr bool
		want    metadata.MD
	}{
		{0, false, metadata.MD{"ratelimit-policy": {`"check";q=2;w=60`}, "ratelimit": {`"check";r=1;t=60`}}},
		{10 * time.Second, false, metadata.MD{"ratelimit-policy": {`"check";q=2;w=60`}, "ratelimit": {`"check";r=0;t=50`}}},
		{15 * time.Second, true, metadata.MD{"ratelimit-policy": {`"check";q=2;w=60`}, "ratelimit": {`"check";r=0;t=45`}, "retry-after": {"45"}}},
	}
	for i, st := range steps {
		e.clock.Set(t0.Add(st.at))
		hdr, err := tg.check(t)
		if st.wantErr {
			wantRefused(t, "Check", err, 45*time.Second, "check")
		} else if err != nil {
			t.Fatalf("step %d: Check: %v", i, err)
		}
		for _, k := range []string{"ratelimit-policy", "ratelimit", "retry-after"} {
			if diff := cmp.Diff(st.want[k], hdr[k]); diff != "" {
				t.Errorf("step %d: header %q mismatch (-want +got):\n%s", i, k, diff)
			}
		}
	}
	if got, want := tg.calls.Load(), int64(2); got != want {
		t.Errorf("target calls = %d, want %d", got, want)
	}
}

// TestServerInterceptorDescriptors: metadata keys, the peer's address and
// the caller's descriptors are sent, and counted by rules keyed on them.
func TestServerInterceptorDescriptors(t *testing.T) {
	tenant := func(ctx context.Context, fullMethod string) []client.Descriptor {
		if fullMethod != checkMethod {
			t.Errorf("WithDescriptors: fullMethod %q, want %q", fullMethod, checkMethod)
		}
		md, _ := metadata.FromIncomingContext(ctx)
		if vs := md.Get("tenant"); len(vs) > 0 {
			return []client.Descriptor{client.D("tenant", vs[0])}
		}
		return nil
	}
	type call struct {
		md      []string
		subject string // of the refusal; "" when allowed
	}
	tests := []struct {
		name  string
		opts  []client.InterceptorOption
		calls []call
	}{
		{"metadata key", []client.InterceptorOption{client.WithMethodKey(""), client.WithMetadataKey("X-API-Key")}, []call{
			{[]string{"x-api-key", "k1"}, ""},
			{[]string{"x-api-key", "k1"}, "api_keys"},
			{[]string{"x-api-key", "k2"}, ""},
			{nil, ""}, // no descriptors: not asked
			{nil, ""},
			{[]string{"x-api-key", ""}, ""}, // an empty value: no descriptor
		}},
		{"peer", []client.InterceptorOption{client.WithMethodKey(""), client.WithPeerAddress()}, []call{
			{nil, ""},
			{nil, "bufconn_peers"},
		}},
		{"descriptors", []client.InterceptorOption{client.WithMethodKey(""), client.WithDescriptors(tenant)}, []call{
			{[]string{"tenant", "acme"}, ""},
			{[]string{"tenant", "globex"}, ""},
			{[]string{"tenant", "acme"}, "tenants"},
			{nil, ""},
		}},
		{"all", []client.InterceptorOption{client.WithMetadataKey("x-api-key"), client.WithPeerAddress(), client.WithDescriptors(tenant)}, []call{
			{[]string{"x-api-key", "k1"}, ""},
			// method and tenant allowed, x-api-key and peer over.
			{[]string{"x-api-key", "k1", "tenant", "acme"}, "api_keys,bufconn_peers"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newHarnessRules(t, grpcRules)
			tg := newTarget(t, []grpc.ServerOption{grpc.UnaryInterceptor(client.UnaryServerInterceptor(e.client(client.WithRefusalCache(0)), "grpc", tt.opts...))})
			for i, c := range tt.calls {
				_, err := tg.check(t, c.md...)
				switch {
				case c.subject == "" && err != nil:
					t.Errorf("call %d %v: %v", i, c.md, err)
				case c.subject != "":
					if code, _, got := refusal(err); code != codes.ResourceExhausted || got != c.subject {
						t.Errorf("call %d %v: %v, violations %q; want ResourceExhausted, %q", i, c.md, code, got, c.subject)
					}
				}
			}
		})
	}
}

// TestServerInterceptorRefusalMemory: a refusal remembered by the Client
// fails the call in the same way, with the remembered headers.
func TestServerInterceptorRefusalMemory(t *testing.T) {
	e := newHarnessRules(t, grpcRules)
	c := e.client(client.WithRefusalCache(time.Minute))
	tg := newTarget(t, []grpc.ServerOption{grpc.UnaryInterceptor(client.UnaryServerInterceptor(c, "grpc"))})
	for i := range 2 {
		if _, err := tg.check(t); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	_, err := tg.check(t)
	wantRefused(t, "Check", err, time.Minute, "check")

	e.clock.Set(t0.Add(20 * time.Second))
	hdr, err := tg.check(t)
	wantRefused(t, "Check (local)", err, 40*time.Second, "check")
	if got := c.LocalRefusals(); got != 1 {
		t.Errorf("LocalRefusals() = %d, want 1", got)
	}
	// The headers are the remembered answer's, counted down as RetryInfo
	// is (see Decision.Headers).
	for k, want := range map[string][]string{
		"retry-after":      {"40"},
		"ratelimit":        {`"check";r=0;t=40`},
		"ratelimit-policy": {`"check";q=2;w=60`},
	} {
		if got := hdr.Get(k); !cmp.Equal(got, want) {
			t.Errorf("local refusal: %s header %q, want %q", k, got, want)
		}
	}
}

// TestStreamServerInterceptor: a stream asks once, when it starts, and
// gets the headers; a refused one fails with the details.
func TestStreamServerInterceptor(t *testing.T) {
	e := newHarnessRules(t, grpcRules)
	tg := newTarget(t, []grpc.ServerOption{grpc.StreamInterceptor(client.StreamServerInterceptor(e.client(client.WithRefusalCache(0)), "grpc"))})

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w, err := tg.health.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatalf("Watch: Recv: %v", err)
	}
	hdr, err := w.Header()
	if err != nil {
		t.Fatalf("Watch: Header: %v", err)
	}
	if got, want := hdr.Get("ratelimit"), []string{`"watch";r=0;t=60`}; !cmp.Equal(got, want) {
		t.Errorf("Watch: ratelimit header %q, want %q", got, want)
	}

	w2, err := tg.health.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("second Watch: %v", err)
	}
	_, err = w2.Recv()
	wantRefused(t, "second Watch: Recv", err, time.Minute, "watch")
	hdr, _ = w2.Header()
	if got, want := hdr.Get("retry-after"), []string{"60"}; !cmp.Equal(got, want) {
		t.Errorf("second Watch: retry-after header %q, want %q", got, want)
	}
	if got, want := tg.calls.Load(), int64(1); got != want {
		t.Errorf("target streams = %d, want %d", got, want)
	}
}

// TestClientInterceptorsServer: outbound calls are throttled by
// ratelimitd's rules: a refused call never reaches the target.
func TestClientInterceptorsServer(t *testing.T) {
	e := newHarnessRules(t, grpcRules)
	c := e.client(client.WithRefusalCache(0))
	tg := newTarget(t, nil,
		grpc.WithChainUnaryInterceptor(client.UnaryClientInterceptor(c, "grpc", client.WithMetadataKey("x-api-key"))),
		grpc.WithChainStreamInterceptor(client.StreamClientInterceptor(c, "grpc")))

	if _, err := tg.check(t, "x-api-key", "k1"); err != nil {
		t.Fatalf("Check: %v", err)
	}
	_, err := tg.check(t, "x-api-key", "k1")
	wantRefused(t, "second Check", err, time.Minute, "api_keys")
	if _, err := tg.check(t, "x-api-key", "k2"); err != nil {
		t.Fatalf("Check k2: %v", err)
	}
	_, err = tg.check(t)
	wantRefused(t, "Check without key", err, time.Minute, "check")
	if got, want := tg.calls.Load(), int64(2); got != want {
		t.Errorf("target calls after Check = %d, want %d", got, want)
	}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w, err := tg.health.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatalf("Watch: Recv: %v", err)
	}
	_, err = tg.health.Watch(ctx, &healthpb.HealthCheckRequest{})
	wantRefused(t, "second Watch", err, time.Minute, "watch")
	if got, want := tg.calls.Load(), int64(3); got != want {
		t.Errorf("target calls after Watch = %d, want %d", got, want)
	}
}

// TestLimiterServer: the adapter in go-grpc-middleware's interceptor
// refuses with ResourceExhausted, but that interceptor drops the details;
// Limit itself returns them.
func TestLimiterServer(t *testing.T) {
	e := newHarnessRules(t, grpcRules)
	c := e.client(client.WithRefusalCache(0))
	tg := newTarget(t, []grpc.ServerOption{grpc.UnaryInterceptor(ratelimit.UnaryServerInterceptor(client.NewLimiter(c, "grpc")))})
	for i := range 2 {
		if _, err := tg.check(t); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	_, err := tg.check(t)
	if got := status.Code(err); got != codes.ResourceExhausted {
		t.Errorf("Check: %v, want ResourceExhausted", err)
	}
	if _, retry, subjects := refusal(err); retry != -1 || subjects != "" {
		t.Errorf("Check: details %v, %q; go-grpc-middleware was expected to drop them", retry, subjects)
	}

	l := client.NewLimiter(c, "grpc", client.WithDescriptors(func(context.Context, string) []client.Descriptor {
		return []client.Descriptor{client.D("tenant", "acme")}
	}))
	if err := l.Limit(t.Context()); err != nil {
		t.Fatalf("Limit: %v", err)
	}
	wantRefused(t, "second Limit", l.Limit(t.Context()), time.Minute, "tenants")
	if err := client.NewLimiter(c, "grpc").Limit(t.Context()); err != nil { // no method: no descriptors
		t.Errorf("Limit outside a call: %v, want nil", err)
	}
}
