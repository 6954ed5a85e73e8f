package clientintegration_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/ratelimitd/ratelimitd/client"
)

// ExampleUnaryServerInterceptor protects a gRPC service (here the health
// service) with a limit per API key, sent by callers in the "api_key"
// metadata.
func ExampleUnaryServerInterceptor() {
	conn, stop := ratelimitd()
	defer stop()
	defer conn.Close()
	rl := client.New(conn)

	// The protected service.
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(
		client.UnaryServerInterceptor(rl, "edge", client.WithMethodKey(""), client.WithMetadataKey("api_key"))))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis := bufconn.Listen(1 << 20)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(lis); err != nil {
			log.Print(err)
		}
	}()
	defer func() { srv.Stop(); <-done }()

	// Its caller.
	cc, err := grpc.NewClient("passthrough:///service",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	health := healthpb.NewHealthClient(cc)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "api_key", "k-123")
	for range 4 {
		var hdr metadata.MD
		_, err := health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
		if err == nil {
			fmt.Println("OK", hdr.Get("ratelimit"))
			continue
		}
		st := status.Convert(err)
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				fmt.Println(st.Code(), "retry in", ri.GetRetryDelay().AsDuration().Round(60e9))
			}
		}
	}
	// Output:
	// OK ["api_key";r=2;t=1200]
	// OK ["api_key";r=1;t=2400]
	// OK ["api_key";r=0;t=3600]
	// ResourceExhausted retry in 20m0s
}
