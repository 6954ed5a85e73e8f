package envoy_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/backendtest"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/server"
)

// concurrencyFile is the Envoy config of the concurrency example.
const concurrencyFile = "envoy-concurrency.yaml"

// exportRequest is an export of tenant through envoy-concurrency.yaml.
func exportRequest(tenant string) request {
	r := request{path: "/exports/report.csv", ip: "10.0.0.1", headers: map[string]string{}}
	if tenant != "" {
		r.headers["x-tenant"] = tenant
	}
	return r
}

// exportLimit returns the rule of examples/config.yaml that the export
// route's acquire descriptor hits, and its concurrency limit.
func exportLimit(t *testing.T, rules *config.Rules, p proxy, rt *routev3.Route) (*config.Rule, config.RuleLimit) {
	t.Helper()
	ds, _ := descriptors(t, rt, exportRequest("acme"))
	if len(ds) != 1 {
		t.Fatalf("an export sends %d descriptors on the request path, want 1: the acquire alone", len(ds))
	}
	rule := config.Match(rules.Domain(p.filter.GetDomain()), ds[0].GetEntries())
	if rule == nil {
		t.Fatalf("the acquire descriptor %v matches no rule of examples/config.yaml", ds[0].GetEntries())
	}
	i := slices.IndexFunc(rule.Limits, func(l config.RuleLimit) bool { return l.Algorithm == backend.Concurrency })
	if i < 0 {
		t.Fatalf("the acquire descriptor's rule %s:%d has no concurrency limit", rule.File, rule.Line)
	}
	return rule, rule.Limits[i]
}

func TestEnvoyConcurrencyConfigIsValid(t *testing.T) {
	bs, p := loadProxyFile(t, concurrencyFile)
	validate(t, bs, "Bootstrap")
	checkRateLimitService(t, bs, p, 8081)

	rules, err := config.Load("../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if rules.Domain(p.filter.GetDomain()) == nil {
		t.Fatalf("the filter's domain %q is not a domain of examples/config.yaml", p.filter.GetDomain())
	}
	rt := route(t, p.vhost, exportRequest("acme"))
	if rt == nil {
		t.Fatal("no route for an export")
	}
	_, lim := exportLimit(t, rules, p, rt)

	// The route ends every stream, and so gives its slot back, before the
	// slot's lease lapses: a give-back after the lapse would free the
	// newest slot, another export's.
	msd := rt.GetRoute().GetMaxStreamDuration().GetMaxStreamDuration().AsDuration()
	if msd <= 0 || msd+p.filter.GetTimeout().AsDuration() >= lim.Window {
		t.Errorf("the export route's max_stream_duration is %v (with the filter's timeout %v): want a bound below the lease, %v",
			msd, p.filter.GetTimeout().AsDuration(), lim.Window)
	}

	// One rate_limits entry on the request path, one at stream end giving
	// one hit back.
	done, from := streamDoneDescriptors(t, rt, request{headers: exportRequest("acme").headers,
		metadata: mustStruct(t, map[string]any{"metadata": map[string]any{"export_slot": "exports"}})})
	if len(done) != 1 || len(rt.GetRoute().GetRateLimits()) != 2 {
		t.Fatalf("the export route: %d rate_limits, %d sent at stream end; want 2 and 1", len(rt.GetRoute().GetRateLimits()), len(done))
	}
	if rl := rt.GetRoute().GetRateLimits()[from[0]]; !rl.GetHitsAddend().GetIsNegativeHits() || rl.GetHitsAddend().GetNumber().GetValue() != 1 {
		t.Errorf("the stream-done entry's hits_addend is %v, want 1 given back", rl.GetHitsAddend())
	}
}

// mustStruct returns m as a Struct.
func mustStruct(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// An exportProxy plays envoy-concurrency.yaml's ratelimit filter in front
// of a ratelimitd serving examples/config.yaml, on a clock the test moves.
type exportProxy struct {
	t         *testing.T
	p         proxy
	rt        *routev3.Route
	rls       rlsv3.RateLimitServiceClient
	clock     *backendtest.Clock
	rules     *config.Rules
	givenBack int // give-backs sent
}

func newExportProxy(t *testing.T) *exportProxy {
	t.Helper()
	_, p := loadProxyFile(t, concurrencyFile)
	rules, err := config.Load("../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	clock := backendtest.NewClock(backendtest.T0)
	e := &exportProxy{t: t, p: p, clock: clock, rules: rules,
		rls: rlsv3.NewRateLimitServiceClient(startRatelimitdOn(t, rules, server.Options{}, clock))}
	e.rt = route(t, p.vhost, exportRequest("acme"))
	return e
}

// A stream is one export through the proxy.
type stream struct {
	r      request
	answer *rlsv3.RateLimitResponse // nil when Envoy did not ask
}

// start does what the filter does on the request path: ask ratelimitd
// with the request's descriptors, if any, and keep its answer's dynamic
// metadata for the stream.
func (e *exportProxy) start(tenant string) *stream {
	e.t.Helper()
	s := &stream{r: exportRequest(tenant)}
	ds, _ := descriptors(e.t, e.rt, s.r)
	if len(ds) == 0 {
		return s
	}
	s.answer = e.ask(ds)
	s.r.metadata = s.answer.GetDynamicMetadata()
	return s
}

// admitted reports whether Envoy forwards s: ratelimitd admitted it, or
// was not asked.
func (s *stream) admitted() bool {
	return s.answer.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT
}

// end does what the filter does when s's stream is destroyed (completed,
// refused, reset): send its stream-done descriptors, if any were built,
// and report whether it sent them.
func (e *exportProxy) end(s *stream) bool {
	e.t.Helper()
	ds, _ := streamDoneDescriptors(e.t, e.rt, s.r)
	if len(ds) == 0 {
		return false
	}
	resp := e.ask(ds)
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		e.t.Errorf("give-back: %v, want OK: a give-back is never refused", resp)
	}
	e.givenBack++
	return true
}

// ask sends ds to ratelimitd as the filter does.
func (e *exportProxy) ask(ds []*commonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	e.t.Helper()
	resp, err := e.rls.ShouldRateLimit(e.t.Context(), &rlsv3.RateLimitRequest{Domain: e.p.filter.GetDomain(), Descriptors: ds})
	if err != nil {
		e.t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// free returns the slots free for tenant, as a check (hits_addend 0) of
// the acquire descriptor reports them.
func (e *exportProxy) free(tenant string) uint32 {
	e.t.Helper()
	ds, _ := descriptors(e.t, e.rt, exportRequest(tenant))
	ds[0].HitsAddend = wrapperspb.UInt64(0)
	return e.ask(ds).GetStatuses()[0].GetLimitRemaining()
}

// TestEnvoyConcurrencyLimitsExports plays exports through
// envoy-concurrency.yaml: a tenant's first 20 are admitted, the 21st is
// refused, and an export that ends gives its slot back; an export that
// took no slot (refused, or never asked about) gives nothing back, though
// Envoy runs its stream-done rate limits for it too.
func TestEnvoyConcurrencyLimitsExports(t *testing.T) {
	e := newExportProxy(t)
	rule, lim := exportLimit(t, e.rules, e.p, e.rt)
	n := int(lim.Requests)

	var running []*stream
	for i := range n {
		s := e.start("acme")
		if !s.admitted() {
			t.Fatalf("export %d of %d: %v, want OK", i+1, n, s.answer)
		}
		// What the give-back reads, and the access log prints as held=.
		if got := s.r.metadata.GetFields()["metadata"].GetStructValue().GetFields()["export_slot"].GetStringValue(); got != "exports" {
			t.Fatalf("export %d: dynamic metadata %v, want metadata.export_slot = exports", i+1, s.r.metadata)
		}
		running = append(running, s)
	}
	if got := e.free("acme"); got != 0 {
		t.Errorf("with %d exports running: %d slots free, want 0", n, got)
	}

	refused := e.start("acme")
	if refused.admitted() {
		t.Fatalf("export %d with %d running: %v, want OVER_LIMIT", n+1, n, refused.answer)
	}
	by := refused.r.metadata.GetFields()[server.DecidedByKey].GetStructValue().GetFields()["rule"].GetStringValue()
	if want := rule.File + ":" + strconv.Itoa(rule.Line); by != want {
		t.Errorf("the refusal's decided_by rule is %q, want the export rule's %q", by, want)
	}
	// Envoy runs the stream-done rate limits of the refused export too;
	// with no slot granted, the give-back descriptor is not built.
	if e.end(refused) {
		t.Errorf("the refused export gave a slot back: it would free one that a running export holds")
	}
	// Nor when ratelimitd was not asked or did not answer (the filter
	// lets it through under failure_mode_deny: false, with no metadata).
	if e.end(&stream{r: exportRequest("acme")}) {
		t.Errorf("an export ratelimitd never answered gave a slot back")
	}
	if got := e.free("acme"); got != 0 {
		t.Errorf("after the refused export ended: %d slots free, want 0", got)
	}
	// Without x-tenant, Envoy neither asks nor gives back.
	if anon := e.start(""); anon.answer != nil || e.end(anon) {
		t.Errorf("an export without x-tenant: asked %v, want no call either way", anon.answer)
	}

	// Other tenants have their own 20.
	if s := e.start("globex"); !s.admitted() {
		t.Errorf("globex's first export: %v, want OK", s.answer)
	}

	// An export ends: its slot is free for the next one, and only one.
	if !e.end(running[3]) {
		t.Fatal("an admitted export ended without giving its slot back")
	}
	if got := e.free("acme"); got != 1 {
		t.Errorf("after an export ended: %d slots free, want 1", got)
	}
	if s := e.start("acme"); !s.admitted() {
		t.Errorf("export after one ended: %v, want OK", s.answer)
	}
	if s := e.start("acme"); s.admitted() {
		t.Errorf("the next: %v, want OVER_LIMIT", s.answer)
	}
	if e.givenBack != 1 {
		t.Errorf("%d give-backs sent, want 1: the ended export's", e.givenBack)
	}

	// The access log prints the slot an export holds (held=) and the rule
	// that refused one: each path it prints is in an admitted export's
	// answer or in a refusal's.
	paths, format := accessLogMetadata(t, e.p)
	if !slices.ContainsFunc(paths, func(p []string) bool { return slices.Equal(p, []string{"metadata", "export_slot"}) }) {
		t.Errorf("the access log %q does not print metadata:export_slot", format)
	}
	for _, path := range paths {
		if metadataAt(running[0].r.metadata, path) == nil && metadataAt(refused.r.metadata, path) == nil {
			t.Errorf("the access log prints %s, which neither an admitted export's answer nor a refusal carries", strings.Join(path, ":"))
		}
	}
}

// TestEnvoyConcurrencyLeaseLapses: the slots of exports that never give
// them back (their Envoy crashed) free themselves when their lease, the
// rule's window, lapses, and not before.
func TestEnvoyConcurrencyLeaseLapses(t *testing.T) {
	e := newExportProxy(t)
	_, lim := exportLimit(t, e.rules, e.p, e.rt)
	n := int(lim.Requests)

	for i := range n { // the Envoy that runs these dies: no give-back
		if s := e.start("acme"); !s.admitted() {
			t.Fatalf("export %d: %v, want OK", i+1, s.answer)
		}
	}
	e.clock.Set(backendtest.T0.Add(lim.Window - time.Second))
	if s := e.start("acme"); s.admitted() {
		t.Fatalf("a second before the leases lapse: %v, want OVER_LIMIT", s.answer)
	}
	// (The store stamps each lease a microsecond apart: they lapse within
	// microseconds of each other.)
	e.clock.Set(backendtest.T0.Add(lim.Window + time.Second))
	if got := e.free("acme"); got != uint32(n) {
		t.Errorf("once the leases lapsed: %d slots free, want all %d", got, n)
	}
	s := e.start("acme")
	if !s.admitted() {
		t.Fatalf("an export once the leases lapsed: %v, want OK", s.answer)
	}
	if !e.end(s) || e.free("acme") != uint32(n) {
		t.Errorf("after the new export ended: %d slots free, want %d", e.free("acme"), n)
	}
}
