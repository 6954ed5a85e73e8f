package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimitd/ratelimitd/client"
	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

// ratelimitd starts a stand-in for ratelimitd in process, over bufconn:
// it admits 3 hits per descriptor per hour, then refuses for 20 minutes,
// and holds one slot per descriptor at once (Acquire). It returns a
// connection to it and a function that stops it. (The client against
// the real server is internal/clientintegration's, in the module
// ratelimitd.)
func ratelimitd() (*grpc.ClientConn, func()) {
	f := &fakeRLS{limit: 3, retryAfter: durationpb.New(20 * time.Minute), slots: 1}
	f.makeMaps()
	g := grpc.NewServer()
	ratelimitv1.RegisterRateLimitServiceServer(g, f)
	lis := bufconn.Listen(1 << 20)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Serve(lis) // nil after Stop, or ErrServerStopped when stopped first
	}()
	conn, err := grpc.NewClient("passthrough:///ratelimitd",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	)
	if err != nil {
		log.Fatal(err)
	}
	return conn, func() { g.Stop(); <-done }
}

func ExampleNew() {
	conn, stop := ratelimitd()
	defer stop()
	defer conn.Close()

	rl := client.New(conn) // starts connecting; calls wait up to 1 s for it
	for range 5 {
		d, err := rl.ShouldRateLimit(context.Background(), "edge", client.D("api_key", "k-123"))
		switch {
		case err != nil:
			log.Fatal(err) // a malformed request, or ctx ended
		case d.Err != nil:
			// ratelimitd could not be asked: the failure policy decided
			// (allowed, by default), and there are no Statuses.
			fmt.Printf("ratelimitd failed (%v); allowed: %v\n", status.Code(d.Err), d.Allowed)
		case d.Allowed:
			fmt.Printf("allowed, %d remaining\n", d.Statuses[0].Remaining)
		default:
			fmt.Printf("refused, retry in %v (local %v)\n", d.RetryAfter.Round(time.Minute), d.Local)
		}
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

// A decision hook feeds metrics and logs: here it prints each decision,
// and FailOpens counts the requests let through while ratelimitd was
// away (export it as a counter, say with prometheus.NewCounterFunc).
func ExampleWithDecisionHook() {
	conn, stop := ratelimitd()
	defer conn.Close()

	hook := func(_ context.Context, o client.Observation) {
		switch {
		case o.Err != nil:
			fmt.Println(o.Domain, "error:", status.Code(o.Err))
		case o.FailedOpen():
			fmt.Println(o.Domain, "failed open:", status.Code(o.Decision.Err))
		default:
			fmt.Println(o.Domain, o.Descriptors[0].Entries, "allowed:", o.Decision.Allowed, "local:", o.Decision.Local)
		}
		_ = o.Duration // for a latency histogram
	}
	rl := client.New(conn, client.WithDecisionHook(hook))
	ctx := context.Background()
	for range 5 {
		_, _ = rl.ShouldRateLimit(ctx, "edge", client.D("api_key", "k-123"))
	}
	_, _ = rl.ShouldRateLimit(ctx, "", client.D("api_key", "k-123")) // malformed: no domain
	stop()                                                           // ratelimitd is away
	_, _ = rl.ShouldRateLimit(ctx, "edge", client.D("api_key", "k-456"))
	fmt.Println("fail opens:", rl.FailOpens())
	// Output:
	// edge [{api_key k-123}] allowed: true local: false
	// edge [{api_key k-123}] allowed: true local: false
	// edge [{api_key k-123}] allowed: true local: false
	// edge [{api_key k-123}] allowed: false local: false
	// edge [{api_key k-123}] allowed: false local: true
	//  error: InvalidArgument
	// edge failed open: Unavailable
	// fail opens: 1
}

func ExampleClient_Acquire() {
	conn, stop := ratelimitd()
	defer stop()
	defer conn.Close()
	rl := client.New(conn)
	ctx := context.Background()
	export := client.D("job", "export")

	release, d, err := rl.Acquire(ctx, "jobs", export)
	if err != nil {
		log.Fatal(err) // a malformed request, or ctx ended
	}
	defer release() // never nil; gives the slot back once, even after ctx ended
	fmt.Println("first export allowed:", d.Allowed)

	// While the first holds the only slot, a second is refused.
	again, d, err := rl.Acquire(ctx, "jobs", export)
	if err != nil {
		log.Fatal(err)
	}
	again() // holds nothing: does nothing
	fmt.Printf("second export allowed: %v, retry in %v\n", d.Allowed, d.RetryAfter)
	// Output:
	// first export allowed: true
	// second export allowed: false, retry in 1s
}

func ExampleClient_AcquireLease() {
	conn, stop := ratelimitd()
	defer stop()
	defer conn.Close()
	rl := client.New(conn)
	ctx := context.Background()

	lease, d, err := rl.AcquireLease(ctx, "jobs", client.D("job", "reindex"))
	if err != nil || !d.Allowed {
		log.Fatal(d, err)
	}
	defer func() {
		if err := lease.Release(ctx); err != nil {
			log.Printf("release failed (the slot frees itself when the lease expires): %v", err)
		}
	}()
	// Long work renews its lease before it expires (halfway, say).
	if err := lease.Renew(ctx); errors.Is(err, client.ErrLeaseLost) {
		log.Fatal("the lease lapsed: the slot may be someone else's now")
	}
	fmt.Println("held until a minute from now:", time.Until(lease.ExpiresAt()).Round(time.Minute))
	// Output:
	// held until a minute from now: 1m0s
}
