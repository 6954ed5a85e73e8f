package clientintegration_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/client"
	"github.com/ratelimitd/ratelimitd/internal/grpctest"
	"github.com/ratelimitd/ratelimitd/server"
)

// benchRules admit any method (a limit never reached) and one call per
// hour per API key.
const benchRules = `
domain: bench
descriptors:
  - key: method
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: x-api-key
    rate_limit: {name: api_keys, algorithm: fixed_window, unit: hour, requests_per_unit: 1}
`

// newBenchClient serves ratelimitd in-process (the memory store on the
// wall clock, over bufconn) and returns a Client of it with opts.
func newBenchClient(b *testing.B, opts ...client.Option) *client.Client {
	b.Helper()
	store := memory.New(memory.Options{})
	b.Cleanup(func() { store.Close() })
	srv := server.New(store, compileRules(b, benchRules), server.Options{})
	g := grpc.NewServer(srv.GRPCOptions()...)
	srv.Register(g)
	conn, _ := grpctest.Serve(b, g)
	return client.New(conn, opts...)
}

// BenchmarkUnaryServerInterceptor measures what UnaryServerInterceptor
// adds to a unary call (Health.Check over bufconn): allowed/without is the
// call alone, allowed/with the call through the interceptor asking an
// in-process ratelimitd (an RPC over bufconn), refused-local the call
// refused from the Client's memory of refusals, without an RPC to
// ratelimitd nor a call of the handler.
func BenchmarkUnaryServerInterceptor(b *testing.B) {
	call := func(b *testing.B, tg *target, ctx context.Context, want codes.Code) {
		b.Helper()
		req := &healthpb.HealthCheckRequest{}
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if _, err := tg.health.Check(ctx, req); status.Code(err) != want {
				b.Fatalf("Check: %v, want %v", err, want)
			}
		}
	}
	b.Run("allowed", func(b *testing.B) {
		b.Run("without", func(b *testing.B) {
			tg := newTarget(b, nil)
			call(b, tg, b.Context(), codes.OK)
		})
		b.Run("with", func(b *testing.B) {
			c := newBenchClient(b)
			tg := newTarget(b, []grpc.ServerOption{grpc.UnaryInterceptor(
				client.UnaryServerInterceptor(c, "bench", client.WithMetadataKey("x-api-key")))})
			call(b, tg, b.Context(), codes.OK)
			if n := c.LocalRefusals(); n != 0 {
				b.Errorf("%d local refusals, want 0", n)
			}
		})
	})
	b.Run("refused-local", func(b *testing.B) {
		c := newBenchClient(b, client.WithRefusalCache(time.Hour))
		tg := newTarget(b, []grpc.ServerOption{grpc.UnaryInterceptor(
			client.UnaryServerInterceptor(c, "bench", client.WithMetadataKey("x-api-key")))})
		ctx := metadata.AppendToOutgoingContext(b.Context(), "x-api-key", "k1")
		if _, err := tg.health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			b.Fatalf("first Check: %v", err)
		}
		if _, err := tg.health.Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.ResourceExhausted {
			b.Fatalf("second Check: %v, want ResourceExhausted", err)
		}
		calls := tg.calls.Load()
		call(b, tg, ctx, codes.ResourceExhausted)
		b.StopTimer()
		if got := tg.calls.Load() - calls; got != 0 {
			b.Errorf("%d calls reached the handler, want 0", got)
		}
		if got := c.LocalRefusals(); got != uint64(b.N) {
			b.Errorf("%d local refusals, want %d (no RPC to ratelimitd)", got, b.N)
		}
	})
}

// BenchmarkShouldRateLimit measures the Client alone: an allowed request
// of one descriptor, asked of an in-process ratelimitd over bufconn.
func BenchmarkShouldRateLimit(b *testing.B) {
	c := newBenchClient(b)
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		d, err := c.ShouldRateLimit(ctx, "bench", client.D("method", checkMethod))
		if err != nil || !d.Allowed || d.Err != nil {
			b.Fatalf("ShouldRateLimit: %+v, %v; want allowed", d, err)
		}
	}
}
