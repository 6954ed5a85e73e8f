package rlqs

import (
	"context"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/grpctest"
	"github.com/ratelimitd/ratelimitd/server/rlqs/fairshare"
)

// rulesOf compiles the rules file text y.
func rulesOf(t testing.TB, y string) *config.Rules {
	t.Helper()
	domains, err := config.Parse("rules.yaml", []byte(y))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	r, err := config.Compile(domains)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return r
}

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *clock) Advance(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.now = c.now.Add(d) }

// serve starts a Service under rules on a gRPC server, and returns it, a
// client connection to it and its clock.
func serve(t *testing.T, rules *config.Rules) (*Service, *grpc.ClientConn, *clock) {
	t.Helper()
	clk := &clock{now: time.Unix(1_700_000_000, 0)}
	s := New(rules, Options{Now: clk.Now})
	g := grpc.NewServer()
	s.Register(g)
	conn, _ := grpctest.Serve(t, g)
	return s, conn, clk
}

// quotaClient behaves as Envoy's rate_limit_quota filter: it reports on a
// bucket's first request and then at every reporting interval, keeps the
// assignments it receives until their time to live, and drops abandoned
// buckets.
type quotaClient struct {
	t       *testing.T
	clk     *clock
	domain  string
	st      rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient
	actions map[string]*rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction
	expires map[string]time.Time
	sent    bool // the domain was sent
}

// newClient opens a stream. Its deadline only guards against hangs.
func newClient(t *testing.T, conn *grpc.ClientConn, clk *clock, domain string) *quotaClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	st, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatalf("StreamRateLimitQuotas: %v", err)
	}
	return &quotaClient{t: t, clk: clk, domain: domain, st: st,
		actions: map[string]*rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{},
		expires: map[string]time.Time{}}
}

// usage is one bucket's usage in a report.
type usage struct {
	id              map[string]string
	allowed, denied uint64
	elapsed         time.Duration
}

// report sends the usages, and reads responses until each bucket reported
// has its answer.
func (c *quotaClient) report(us ...usage) {
	c.t.Helper()
	want := c.send(us...)
	for len(want) > 0 {
		for _, k := range c.recv() {
			delete(want, k)
		}
	}
}

// send sends the usages, and returns the keys of their buckets.
func (c *quotaClient) send(us ...usage) map[string]bool {
	c.t.Helper()
	m := &rlqsv3.RateLimitQuotaUsageReports{}
	if !c.sent {
		m.Domain, c.sent = c.domain, true
	}
	want := map[string]bool{}
	for _, u := range us {
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqsv3.BucketId{Bucket: u.id},
			TimeElapsed:        durationpb.New(u.elapsed),
			NumRequestsAllowed: u.allowed,
			NumRequestsDenied:  u.denied,
		})
		want[bucketKey("", u.id)] = true
	}
	if err := c.st.Send(m); err != nil {
		c.t.Fatalf("Send: %v", err)
	}
	return want
}

// recv reads one response, applies it, and returns the buckets it named.
func (c *quotaClient) recv() []string {
	c.t.Helper()
	resp, err := c.st.Recv()
	if err != nil {
		c.t.Fatalf("Recv: %v", err)
	}
	var keys []string
	for _, a := range resp.GetBucketAction() {
		k := bucketKey("", a.GetBucketId().GetBucket())
		keys = append(keys, k)
		if a.GetAbandonAction() != nil {
			delete(c.actions, k)
			delete(c.expires, k)
			continue
		}
		qa := a.GetQuotaAssignmentAction()
		if qa.GetAssignmentTimeToLive() == nil {
			c.t.Errorf("assignment to %v without a time to live", a.GetBucketId().GetBucket())
		}
		c.actions[k] = qa
		c.expires[k] = c.clk.Now().Add(qa.GetAssignmentTimeToLive().AsDuration())
	}
	return keys
}

// until reads responses until cond holds; the stream's deadline stops a
// hang.
func (c *quotaClient) until(cond func() bool) {
	c.t.Helper()
	for !cond() {
		c.recv()
	}
}

// strategy returns the bucket's strategy in force, nil if it has none or
// it expired.
func (c *quotaClient) strategy(id map[string]string) *typev3.RateLimitStrategy {
	k := bucketKey("", id)
	if a, ok := c.actions[k]; ok && c.clk.Now().Before(c.expires[k]) {
		return a.GetRateLimitStrategy()
	}
	return nil
}

// rate returns the requests per second of a token-bucket strategy, -1 for
// any other.
func rate(s *typev3.RateLimitStrategy) float64 {
	tb := s.GetTokenBucket()
	if tb == nil {
		return -1
	}
	return float64(tb.GetTokensPerFill().GetValue()) / tb.GetFillInterval().AsDuration().Seconds()
}

// near reports whether an assigned rate got is the share want as bucketFor
// rounds it: at most want, and within 1% of it.
func near(got, want float64) bool {
	return got <= want && got >= want*0.99
}

const actionsRules = `
domain: web
descriptors:
  - key: path
    value: /limited
    rate_limit: {unit: minute, requests_per_unit: 600, algorithm: token_bucket, burst: 120}
  - key: path
    value: /free
    rate_limit: {unlimited: true}
  - key: path
    value: /banned
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: path
    value: /shadow
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: /two
    rate_limits:
      - {unit: second, requests_per_unit: 50}
      - {unit: minute, requests_per_unit: 600}
`

func TestActions(t *testing.T) {
	_, conn, clk := serve(t, rulesOf(t, actionsRules))
	c := newClient(t, conn, clk, "web")
	id := func(p string) map[string]string { return map[string]string{"path": p} }
	c.report(usage{id: id("/limited"), allowed: 1}, usage{id: id("/free"), allowed: 1},
		usage{id: id("/banned"), allowed: 1}, usage{id: id("/other"), allowed: 1},
		usage{id: id("/shadow"), allowed: 1}, usage{id: id("/two"), allowed: 1})

	tb := c.strategy(id("/limited")).GetTokenBucket()
	if tb.GetMaxTokens() != 120 || tb.GetTokensPerFill().GetValue() != 10 || tb.GetFillInterval().AsDuration() != time.Second {
		t.Errorf("/limited: got token bucket %v, want 10 per second, 120 at most", tb)
	}
	if ttl := c.actions[bucketKey("", id("/limited"))].GetAssignmentTimeToLive().AsDuration(); ttl != 2*DefaultReportingInterval {
		t.Errorf("/limited: time to live %v before any reporting interval, want %v", ttl, 2*DefaultReportingInterval)
	}
	if got := rate(c.strategy(id("/two"))); got != 10 {
		t.Errorf("/two (50/s and 10/s): got %v per second, want the tightest, 10", got)
	}
	for p, want := range map[string]typev3.RateLimitStrategy_BlanketRule{
		"/free": typev3.RateLimitStrategy_ALLOW_ALL, "/other": typev3.RateLimitStrategy_ALLOW_ALL,
		"/shadow": typev3.RateLimitStrategy_ALLOW_ALL, "/banned": typev3.RateLimitStrategy_DENY_ALL,
	} {
		s := c.strategy(id(p))
		if _, ok := s.GetStrategy().(*typev3.RateLimitStrategy_BlanketRule_); !ok || s.GetBlanketRule() != want {
			t.Errorf("%s: got %v, want %v", p, s, want)
		}
	}

	// The next report, a reporting interval later, renews the assignment
	// for two intervals; an assignment left unrenewed expires.
	clk.Advance(5 * time.Second)
	c.report(usage{id: id("/limited"), allowed: 50, elapsed: 5 * time.Second})
	if ttl := c.actions[bucketKey("", id("/limited"))].GetAssignmentTimeToLive().AsDuration(); ttl != 10*time.Second {
		t.Errorf("/limited: time to live %v after a 5s interval, want 10s", ttl)
	}
	clk.Advance(16 * time.Second)
	if s := c.strategy(id("/free")); s != nil {
		t.Errorf("/free: assignment %v still in force past its time to live", s)
	}
}

func TestFairShares(t *testing.T) {
	_, conn, clk := serve(t, rulesOf(t, `
domain: web
descriptors:
  - key: path
    rate_limit: {unit: second, requests_per_unit: 100}
`))
	id := map[string]string{"path": "/api"}
	a, b := newClient(t, conn, clk, "web"), newClient(t, conn, clk, "web")
	a.report(usage{id: id, allowed: 1})
	b.report(usage{id: id, allowed: 1})
	clk.Advance(10 * time.Second)
	a.report(usage{id: id, allowed: 100, elapsed: 10 * time.Second})               // 10 per second
	b.report(usage{id: id, allowed: 900, denied: 1100, elapsed: 10 * time.Second}) // 200 per second

	want := make([]float64, 2)
	fairshare.Allocate(100, []float64{10, 200}, want)
	wantA, wantB := want[0], want[1]
	// b's report changed a's share: a receives it without reporting. (The
	// responses read by report may be pushes that the other's report
	// caused; the last one each reads is the current share.)
	a.until(func() bool { return near(rate(a.strategy(id)), wantA) })
	b.until(func() bool { return near(rate(b.strategy(id)), wantB) })
	if sum := rate(a.strategy(id)) + rate(b.strategy(id)); sum > 100 {
		t.Errorf("shares sum to %v per second, over the limit of 100", sum)
	}
	if wantA < 10 || wantB <= wantA {
		t.Errorf("max-min shares %v, %v: a gets less than its demand, or b not the rest", wantA, wantB)
	}

	// a's demand rises to 80 per second: the two now split the limit.
	clk.Advance(10 * time.Second)
	a.report(usage{id: id, allowed: 800, elapsed: 10 * time.Second})
	b.report(usage{id: id, allowed: 900, denied: 1100, elapsed: 10 * time.Second})
	fairshare.Allocate(100, []float64{80, 200}, want)
	wantA, wantB = want[0], want[1]
	a.until(func() bool { return near(rate(a.strategy(id)), wantA) })
	b.until(func() bool { return near(rate(b.strategy(id)), wantB) })
	if wantA != 50 || wantB != 50 {
		t.Errorf("after the shift: shares %v and %v, want 50 each", wantA, wantB)
	}
}

func TestReload(t *testing.T) {
	const before = `
domain: web
descriptors:
  - key: path
    value: /a
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: path
    value: /b
    rate_limit: {unit: second, requests_per_unit: 10}
`
	s, conn, clk := serve(t, rulesOf(t, before))
	c := newClient(t, conn, clk, "web")
	a, b := map[string]string{"path": "/a"}, map[string]string{"path": "/b"}
	c.report(usage{id: a, allowed: 1}, usage{id: b, allowed: 1})
	if rate(c.strategy(a)) != 10 || rate(c.strategy(b)) != 10 {
		t.Fatalf("before the reload: got %v and %v per second, want 10", c.strategy(a), c.strategy(b))
	}
	s.SetRules(rulesOf(t, `
domain: web
descriptors:
  - key: path
    value: /a
    rate_limit: {unit: second, requests_per_unit: 20}
`))
	// Without a report: the new limit is pushed, and /b, whose rule is
	// gone, abandoned.
	c.until(func() bool { return rate(c.strategy(a)) == 20 && c.strategy(b) == nil })
	if _, ok := c.actions[bucketKey("", b)]; ok {
		t.Errorf("/b kept an assignment after its rule was removed")
	}
}
