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

// TestExamplePlans checks that examples/plans.yaml, the plans and
// endpoint limits example, does what its comments say.
func TestExamplePlans(t *testing.T) {
	rules, err := config.Load("../examples/plans.yaml")
	if err != nil {
		t.Fatal(err)
	}
	clock := backendtest.NewClock(t0)
	store := memory.New(memory.Options{Now: clock.Now})
	t.Cleanup(func() { store.Close() })
	rls := server.New(store, rules, server.Options{}).Envoy()

	// admitted counts how many of n requests with descriptors ds pass.
	admitted := func(n int, ds ...[]string) int {
		t.Helper()
		req := &rlsv3.RateLimitRequest{Domain: "api"}
		for _, kv := range ds {
			d := &rlv3.RateLimitDescriptor{}
			for i := 0; i < len(kv); i += 2 {
				d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
			}
			req.Descriptors = append(req.Descriptors, d)
		}
		ok := 0
		for range n {
			resp, err := rls.ShouldRateLimit(t.Context(), req)
			if err != nil {
				t.Fatalf("ShouldRateLimit(%q) error: %v", ds, err)
			}
			if resp.OverallCode == rlsv3.RateLimitResponse_OK {
				ok++
			}
		}
		return ok
	}
	plan := func(p, key string) []string { return []string{"plan", p, "api_key", key} }

	if got := admitted(70, plan("free", "f1")); got != 60 {
		t.Errorf("free plan: %d of 70 admitted in a minute, want 60", got)
	}
	if got := admitted(1, plan("free", "f2")); got != 1 {
		t.Error("another free key was refused: keys must be counted apart")
	}
	if got := admitted(60, plan("pro", "p1")); got != 50 {
		t.Errorf("pro plan: %d of 60 admitted at once, want the burst of 50", got)
	}
	if got := admitted(1000, plan("enterprise", "e1")); got != 1000 {
		t.Errorf("enterprise plan: %d of 1000 admitted, want all (unlimited)", got)
	}
	login := []string{"endpoint", "login", "remote_address", "10.0.0.1"}
	if got := admitted(8, login); got != 5 {
		t.Errorf("login: %d of 8 attempts admitted, want 5 a minute", got)
	}
	// Search on the enterprise plan: the endpoint's limit still applies.
	search := []string{"endpoint", "search", "api_key", "e1"}
	if got := admitted(40, plan("enterprise", "e1"), search); got != 30 {
		t.Errorf("search on enterprise: %d of 40 admitted, want 30 a minute", got)
	}
	// A refused search consumed nothing of the plan: free key f3 makes 30
	// searches, then 10 more are refused, and its plan still has 30 left.
	if got := admitted(40, plan("free", "f3"), []string{"endpoint", "search", "api_key", "f3"}); got != 30 {
		t.Errorf("search on free: %d of 40 admitted, want 30", got)
	}
	if got := admitted(40, plan("free", "f3")); got != 30 {
		t.Errorf("free key after refused searches: %d of 40 admitted, want the 30 left of 60", got)
	}
}
