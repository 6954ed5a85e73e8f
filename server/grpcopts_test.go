package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratelimitd/ratelimitd/internal/grpctest"
	"github.com/ratelimitd/ratelimitd/server"
)

// TestKeepaliveDefaultsAcceptGRPCClients: grpc-go clients ping no more
// often than every 10 s, and Envoy's connection_keepalive pings idle
// connections: the defaults must take both without GOAWAY.
func TestKeepaliveDefaultsAcceptGRPCClients(t *testing.T) {
	if server.DefaultGRPCKeepaliveMinTime > 10*time.Second || !server.DefaultGRPCKeepalivePermitWithoutStream {
		t.Errorf("keepalive policy MinTime %v, PermitWithoutStream %v: want at most 10s and true",
			server.DefaultGRPCKeepaliveMinTime, server.DefaultGRPCKeepalivePermitWithoutStream)
	}
}

// TestGRPCConnLimits: a server built with ServerOptions closes a
// connection idle for MaxConnectionIdle with GOAWAY, and holds a
// connection's RPCs to MaxConcurrentStreams.
func TestGRPCConnLimits(t *testing.T) {
	serve := func(l server.GRPCConnLimits) *grpc.ClientConn {
		g := grpc.NewServer(l.ServerOptions()...)
		healthpb.RegisterHealthServer(g, health.NewServer())
		conn, _ := grpctest.Serve(t, g)
		return conn
	}
	limits := server.DefaultGRPCConnLimits()
	limits.MaxConnectionIdle, limits.MaxConnectionAge, limits.MaxConcurrentStreams = 100*time.Millisecond, 0, 1
	conn := serve(limits)
	hc := healthpb.NewHealthClient(conn)
	if _, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("Check() error: %v", err)
	}
	// READY, with no RPC in flight, until the server's GOAWAY makes the
	// client drop the connection: IDLE.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for s := conn.GetState(); s == connectivity.Ready; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			t.Fatal("the connection is still READY after 10s with MaxConnectionIdle 100ms")
		}
	}

	// One stream per connection: a second Watch waits for the first.
	first, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Recv(); err != nil {
		t.Fatalf("first Watch: %v", err)
	}
	secondCtx, endSecond := context.WithTimeout(ctx, 300*time.Millisecond)
	defer endSecond()
	if s, err := hc.Watch(secondCtx, &healthpb.HealthCheckRequest{}); err == nil {
		if _, err := s.Recv(); err == nil {
			t.Error("a second Watch answered while the first held the connection's one stream")
		}
	}
}
