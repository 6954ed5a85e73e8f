package clienttest_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ratelimitd/ratelimitd/client"
	"github.com/ratelimitd/ratelimitd/client/clienttest"
)

// checkout is code under test: it depends on a client.RateLimiter, not on
// a *client.Client, so that its tests need no ratelimitd.
func checkout(ctx context.Context, rl client.RateLimiter, user string) string {
	d, err := rl.ShouldRateLimit(ctx, "shop", client.D("user", user))
	switch {
	case err != nil:
		return "error: " + err.Error()
	case !d.Allowed:
		return fmt.Sprintf("busy, retry in %v", d.RetryAfter)
	}
	return "ok"
}

// A test scripts the Fake's answers, then checks what the code did and
// what it asked.
func ExampleFake() {
	var f clienttest.Fake
	f.Push(clienttest.Allow(), clienttest.Refuse(30*time.Second))

	fmt.Println(checkout(context.Background(), &f, "u1"))
	fmt.Println(checkout(context.Background(), &f, "u1"))
	fmt.Println(checkout(context.Background(), &f, "u1")) // the queue is empty: allowed
	for _, c := range f.Calls() {
		fmt.Println(c.Domain, c.Descriptors[0].Entries, c.Decision.Allowed)
	}
	// Output:
	// ok
	// busy, retry in 30s
	// ok
	// shop [{user u1}] true
	// shop [{user u1}] false
	// shop [{user u1}] true
}

// The Fake drives HTTPMiddleware (and the gRPC interceptors) as a Client
// does.
func ExampleFake_httpMiddleware() {
	var f clienttest.Fake
	f.SetDefault(clienttest.Refuse(time.Minute))
	h := client.HTTPMiddleware(&f, "web")(http.NotFoundHandler())

	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/items/1", nil))
	fmt.Println(w.Code, w.Header().Get("Retry-After"))
	for _, d := range f.Calls()[0].Descriptors {
		fmt.Println(d.Entries)
	}
	// Output:
	// 429 60
	// [{remote_address 192.0.2.1}]
	// [{path /items/1} {method GET}]
}
