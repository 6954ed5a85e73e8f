package clientintegration_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/ratelimitd/ratelimitd/client"
)

// HTTPMiddleware keys requests by their X-API-Key header: each key may
// make 3 requests at once, then one every 20 minutes (exampleRules).
func ExampleHTTPMiddleware() {
	conn, stop := ratelimitd()
	defer stop()
	defer conn.Close()

	rl := client.New(conn)
	mw := client.HTTPMiddleware(rl, "edge", client.WithAPIKeyHeader("X-API-Key"))
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "hello\n")
	}))

	for range 4 {
		r := httptest.NewRequest("GET", "/hello", nil)
		r.Header.Set("X-API-Key", "k-123")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(strings.TrimSpace(fmt.Sprint(w.Code, " ", w.Header().Get("RateLimit"), " ", w.Header().Get("Retry-After"))))
		if w.Code == http.StatusTooManyRequests {
			fmt.Print(w.Header().Get("Content-Type"), " ", w.Body.String())
		}
	}
	// Output:
	// 200 "api_key";r=2;t=1200
	// 200 "api_key";r=1;t=2400
	// 200 "api_key";r=0;t=3600
	// 429 "api_key";r=0;t=3600 1200
	// application/problem+json {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"Too many requests; retry in 1200 s.","violated-policies":["api_key"]}
}
