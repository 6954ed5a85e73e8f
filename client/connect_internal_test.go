package client

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

// BenchmarkConnectorReady measures what every call pays to learn that
// its connection is ready: the wait's fast path, from parallel callers.
func BenchmarkConnectorReady(b *testing.B) {
	lis := bufconn.Listen(1 << 20)
	g := grpc.NewServer()
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()
	conn, err := grpc.NewClient("passthrough:///bench",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	var w connector
	w.start(conn, DefaultConnectTimeout)
	ctx := b.Context()
	for s := conn.GetState(); s != connectivity.Ready; s = conn.GetState() {
		conn.WaitForStateChange(ctx, s)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := w.wait(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}
