// Package grpctest serves gRPC servers in memory for tests, over a real
// gRPC connection (bufconn) rather than by calling handlers directly.
package grpctest

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

// Serve serves g on an in-memory listener until the test ends, and
// returns a client connection to it (with dialOpts added) and a function
// that stops g early. Both are cleaned up with t; stopping twice is safe.
func Serve(t testing.TB, g *grpc.Server, dialOpts ...grpc.DialOption) (*grpc.ClientConn, func()) {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	served := make(chan error, 1)
	go func() { served <- g.Serve(lis) }()
	stop := sync.OnceFunc(func() {
		g.Stop()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) { // stopped before serving
			t.Errorf("Serve: %v", err)
		}
	})
	t.Cleanup(stop)
	conn, err := grpc.NewClient("passthrough:///bufnet", append([]grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}, dialOpts...)...)
	if err != nil {
		t.Fatalf("grpc.NewClient: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, stop
}
