package clientintegration_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/client"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/server"
)

// exampleRules lets each API key through 3 times at once, then once every
// 20 minutes.
const exampleRules = `
domain: edge
descriptors:
  - key: api_key
    rate_limit: {algorithm: token_bucket, unit: hour, requests_per_unit: 3}
`

// ratelimitd starts an in-process ratelimitd on the memory store, and
// returns a connection to it and a function that stops it.
func ratelimitd() (*grpc.ClientConn, func()) {
	domains, err := config.Parse("rules.yaml", []byte(exampleRules))
	if err != nil {
		log.Fatal(err)
	}
	rules, err := config.Compile(domains)
	if err != nil {
		log.Fatal(err)
	}
	store := memory.New(memory.Options{})
	srv := server.New(store, rules, server.Options{})
	g := grpc.NewServer(srv.GRPCOptions()...)
	srv.Register(g)
	lis := bufconn.Listen(1 << 20)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// nil after stop, or ErrServerStopped when an example stops
		// ratelimitd before Serve begins.
		_ = g.Serve(lis)
	}()
	conn, err := grpc.NewClient("passthrough:///ratelimitd",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	)
	if err != nil {
		log.Fatal(err)
	}
	return conn, func() {
		g.Stop()
		<-done
		store.Close()
	}
}

func ExampleNew() {
	conn, stop := ratelimitd()
	defer stop()
	defer conn.Close()

	rl := client.New(conn)
	for range 5 {
		d, err := rl.ShouldRateLimit(context.Background(), "edge", client.D("api_key", "k-123"))
		if err != nil {
			log.Fatal(err) // a malformed request
		}
		if d.Allowed {
			fmt.Printf("allowed, %d remaining\n", d.Statuses[0].Remaining)
			continue
		}
		fmt.Printf("refused, retry in %v (local %v)\n", d.RetryAfter.Round(time.Minute), d.Local)
	}
	fmt.Println("local refusals:", rl.LocalRefusals())
	// Output:
	// allowed, 2 remaining
	// allowed, 1 remaining
	// allowed, 0 remaining
	// refused, retry in 20m0s (local false)
	// refused, retry in 20m0s (local true)
	// local refusals: 1
}

// With ratelimitd away, a Client fails open by default; WithFailClosed
// makes it refuse. Either way Decision.Err says why.
func ExampleWithFailClosed() {
	conn, stop := ratelimitd()
	defer conn.Close()
	stop() // ratelimitd is away

	for _, rl := range []*client.Client{
		client.New(conn),
		client.New(conn, client.WithFailClosed()),
	} {
		d, err := rl.ShouldRateLimit(context.Background(), "edge", client.D("api_key", "k-123"))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("allowed %v: %v\n", d.Allowed, status.Code(d.Err))
	}
	// Output:
	// allowed true: Unavailable
	// allowed false: Unavailable
}
