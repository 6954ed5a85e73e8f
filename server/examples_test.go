package server_test

import (
	"math"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimitd/ratelimitd/backend/backendtest"
	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/server"
)

// TestExampleConfig checks that examples/config.yaml, the rules `make run`
// serves, does what its comments say.
func TestExampleConfig(t *testing.T) {
	rules, err := config.Load("../examples/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	clock := backendtest.NewClock(t0)
	store := memory.New(memory.Options{Now: clock.Now})
	t.Cleanup(func() { store.Close() })
	rls := server.New(store, rules, server.Options{}).Envoy()

	ask := func(entries ...string) *rlsv3.RateLimitResponse {
		t.Helper()
		d := &rlv3.RateLimitDescriptor{}
		for i := 0; i < len(entries); i += 2 {
			d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: entries[i], Value: entries[i+1]})
		}
		resp, err := rls.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatalf("ShouldRateLimit(%q) error: %v", entries, err)
		}
		return resp
	}
	// admitted counts how many of n requests pass.
	admitted := func(n int, entries ...string) int {
		t.Helper()
		ok := 0
		for range n {
			if ask(entries...).OverallCode == rlsv3.RateLimitResponse_OK {
				ok++
			}
		}
		return ok
	}

	if got := admitted(120, "remote_address", "10.0.0.1"); got != 100 {
		t.Errorf("one IP: %d of 120 admitted in a minute, want 100", got)
	}
	if got := admitted(1, "remote_address", "10.0.0.2"); got != 1 {
		t.Error("another IP was refused: IPs must be counted apart")
	}
	if got := admitted(30, "api_key", "k1"); got != 20 {
		t.Errorf("one API key: %d of 30 admitted at once, want the burst of 20", got)
	}
	if got := admitted(10, "path", "/login", "remote_address", "10.0.0.3"); got != 5 {
		t.Errorf("logins: %d of 10 admitted, want 5", got)
	}
	if got := admitted(20, "path", "/api/users") + admitted(20, "path", "/api/orders"); got != 30 {
		t.Errorf("/api/*: %d of 40 admitted over two paths, want 30 shared", got)
	}
	for range 3 {
		st := ask("path", "/healthz").Statuses[0]
		if st.Code != rlsv3.RateLimitResponse_OK || st.LimitRemaining != math.MaxUint32 || st.CurrentLimit != nil {
			t.Fatalf("/healthz status = %v, want unlimited", st)
		}
	}
	if got := admitted(15, "user_agent", "googlebot/2.1"); got != 15 {
		t.Errorf("bots: %d of 15 admitted, want all: the rule is in shadow mode", got)
	}
	if st := ask("user_agent", "googlebot/2.1").Statuses[0]; st.LimitRemaining != 0 || st.CurrentLimit.GetRequestsPerUnit() != 10 {
		t.Errorf("bots: status %v, want the 10/minute limit reported, exhausted", st)
	}
}
