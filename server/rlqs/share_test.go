package rlqs

import (
	"fmt"
	"runtime"
	"slices"

	"testing"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/grpctest"
)

// serveWith is serve with opts (its Now replaced by the test clock).
func serveWith(t *testing.T, rules *config.Rules, opts Options) (*Service, *grpc.ClientConn, *clock) {
	t.Helper()
	clk := &clock{now: time.Unix(1_700_000_000, 0)}
	opts.Now = clk.Now
	s := New(rules, opts)
	g := grpc.NewServer()
	s.Register(g)
	conn, _ := grpctest.Serve(t, g)
	return s, conn, clk
}

// isBlanket reports whether s is the blanket rule want.
func isBlanket(s *typev3.RateLimitStrategy, want typev3.RateLimitStrategy_BlanketRule) bool {
	_, ok := s.GetStrategy().(*typev3.RateLimitStrategy_BlanketRule_)
	return ok && s.GetBlanketRule() == want
}

// TestRefusedClientGetsNoShare: a client the tracker refuses (its bucket
// holds as many clients as it may) gets no share: it is answered as the
// failure mode says, and the shares handed out stay within the limit.
func TestRefusedClientGetsNoShare(t *testing.T) {
	for fallback, want := range map[Fallback]typev3.RateLimitStrategy_BlanketRule{
		FallbackDenyAll: typev3.RateLimitStrategy_DENY_ALL, FallbackAllowAll: typev3.RateLimitStrategy_ALLOW_ALL,
	} {
		s, conn, clk := serveWith(t, rulesOf(t, oneRule), Options{clientsPerBucket: 2, Fallback: fallback})
		id := map[string]string{"path": "/api"}
		a, b, c := newClient(t, conn, clk, "web"), newClient(t, conn, clk, "web"), newClient(t, conn, clk, "web")
		a.report(usage{id: id, allowed: 1})
		b.report(usage{id: id, allowed: 1})
		a.until(func() bool { return rate(a.strategy(id)) == 50 })
		c.report(usage{id: id, allowed: 1})
		if s := c.strategy(id); !isBlanket(s, want) {
			t.Errorf("refused client: got %v, want %v", s, want)
		}
		if sum := rate(a.strategy(id)) + rate(b.strategy(id)); sum > 100 {
			t.Errorf("shares held sum to %v, over the limit 100", sum)
		}
		if got := testutil.ToFloat64(s.metrics.refused.WithLabelValues("tracker")); got != 1 {
			t.Errorf("buckets refused by the tracker: %v, want 1", got)
		}
	}
}

// TestSlowReporterStaysCounted: a client reporting every 60 s gets an
// assignment living 120 s, and the tracker counts its share that long,
// past its own 30 s TTL: the other client's share does not grow into it.
func TestSlowReporterStaysCounted(t *testing.T) {
	s, conn, clk := serve(t, rulesOf(t, oneRule))
	id := map[string]string{"path": "/api"}
	slow, fast := newClient(t, conn, clk, "web"), newClient(t, conn, clk, "web")
	slow.report(usage{id: id, allowed: 1})
	fast.report(usage{id: id, allowed: 1})
	clk.Advance(time.Minute)
	slow.report(usage{id: id, allowed: 6000, elapsed: time.Minute}) // 100 per second
	// report returns at the first message naming the bucket, which may be
	// a push sent before the report was read: wait until the service has
	// taken the report up (its answer lives 120 s) before the clock moves.
	for !slices.ContainsFunc(s.View().Buckets, func(b BucketView) bool {
		return slices.ContainsFunc(b.Clients, func(c ClientView) bool { return c.ExpiresIn == "2m0s" })
	}) {
		time.Sleep(time.Millisecond)
	}
	fast.report(usage{id: id, allowed: 6000, elapsed: time.Minute})
	// The slow client's answer lives two of its intervals, 120 s, and it
	// holds 50: the fast client's share, read at each of its reports (its
	// answers, and the pushes the slow client's report caused), must not
	// grow past the other 50 in that time.
	for range 9 { // 90 s of the fast client's reports, none from the slow one
		clk.Advance(10 * time.Second)
		fast.report(usage{id: id, allowed: 1000, elapsed: 10 * time.Second})
		if got := rate(fast.strategy(id)); got > 50 {
			t.Fatalf("at +%v: the fast client got %v per second while the slow one's 50 is in force",
				clk.Now().Sub(time.Unix(1_700_000_060, 0)), got)
		}
	}
}

// fill has c report n buckets named prefix0, prefix1, ... in one report.
func fill(c *quotaClient, prefix string, n int) {
	c.t.Helper()
	us := make([]usage, n)
	for i := range us {
		us[i] = usage{id: map[string]string{"path": fmt.Sprint(prefix, i)}, allowed: 1}
	}
	c.report(us...)
}

// TestIdleBucketsMakeRoom: buckets not reported within their assignment's
// time to live are dropped, so a stream that filled its Bounds.PerStream,
// or streams that filled Bounds.Total, take new buckets again.
func TestIdleBucketsMakeRoom(t *testing.T) {
	s, conn, clk := serve(t, rulesOf(t, oneRule))
	c := newClient(t, conn, clk, "web")
	fill(c, "/old", DefaultMaxBucketsPerStream)
	clk.Advance(2*DefaultReportingInterval + time.Nanosecond) // past their time to live
	fresh := map[string]string{"path": "/fresh"}
	c.report(usage{id: fresh, allowed: 1})
	if got := rate(c.strategy(fresh)); got != 100 {
		t.Errorf("per stream: a new bucket after the old ones idled got %v, want 100 per second", got)
	}

	// The global bound: another stream fills it, idles; a report refused
	// at the bound has the streams drop their idle buckets.
	s.mu.Lock()
	s.bounds.Total = 3
	s.mu.Unlock()
	d := newClient(t, conn, clk, "web")
	fill(d, "/d", 2) // with c's /fresh, 3 held
	clk.Advance(2*DefaultReportingInterval + time.Nanosecond)
	e := newClient(t, conn, clk, "web")
	id := map[string]string{"path": "/e"}
	// Refused, /e gets the failure mode's assignment (allow: ALLOW_ALL).
	// The refusal wakes the others, which drop their idle buckets.
	e.report(usage{id: id, allowed: 1})
	if s := e.strategy(id); !isBlanket(s, typev3.RateLimitStrategy_ALLOW_ALL) {
		t.Errorf("global bound: a bucket refused got %v, want the failure mode's ALLOW_ALL", s)
	}
	for deadline := time.Now().Add(time.Minute); ; { // a bound against hanging, not a timing assertion
		s.mu.Lock()
		total := s.all.held
		s.mu.Unlock()
		if total == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the idle streams still hold %d buckets: the refusal did not make them drop their idle buckets", total)
		}
		runtime.Gosched()
	}
	e.report(usage{id: id, allowed: 1})
	if got := rate(e.strategy(id)); got != 100 {
		t.Errorf("global bound: a new bucket after the others idled got %v, want 100 per second", got)
	}
}
