package client_test

import (
	"log"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimitd/ratelimitd/client"
)

// ExampleQuota decides locally under the assignments of a ratelimitd
// serving RLQS (as it does on its gRPC port by default), here for an HTTP
// handler. (It has no output: it needs a running ratelimitd.)
func ExampleQuota() {
	conn, err := grpc.NewClient("ratelimitd:8081", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	q, err := client.NewQuota(conn, "edge", client.WithReportingInterval(2*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close() // before conn.Close: ends the reporting stream

	// A direct decision: no RPC, no allocation.
	ok, err := q.Allow(client.D("tenant", "acme"), client.D("path", "/search"))
	if err != nil {
		log.Fatal(err) // a malformed call: a key twice in a descriptor...
	}
	log.Printf("allowed: %v", ok)

	// Or wherever a RateLimiter goes, with its domain: the interceptors,
	// NewLimiter, the middleware.
	protected := client.HTTPMiddleware(q, q.Domain())(http.NotFoundHandler())
	_ = protected
}
