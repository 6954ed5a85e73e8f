package envoy_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/backendtest"
	"github.com/ratelimitd/ratelimitd/backend/memory"
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

// leases returns the dynamic metadata of an answer that names lease as
// the one taken on the rule at path, as ratelimitd's admitted answers do.
func leases(t *testing.T, path, lease string) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(map[string]any{server.LeasesKey: map[string]any{path: lease}})
	if err != nil {
		t.Fatal(err)
	}
	return s
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
	rule, lim := exportLimit(t, rules, p, rt)

	// The route ends every stream before its slot's lease lapses: an
	// export that outlives its lease no longer holds a slot (its release
	// then frees nothing), and one more may start beside it.
	msd := rt.GetRoute().GetMaxStreamDuration().GetMaxStreamDuration().AsDuration()
	if msd <= 0 || msd+p.filter.GetTimeout().AsDuration() >= lim.Window {
		t.Errorf("the export route's max_stream_duration is %v (with the filter's timeout %v): want a bound below the lease, %v",
			msd, p.filter.GetTimeout().AsDuration(), lim.Window)
	}

	// One rate_limits entry on the request path, one at stream end: the
	// acquire's descriptor, ending in the lease that the answer named
	// under the rule's path, giving one hit back.
	acquire, _ := descriptors(t, rt, exportRequest("acme"))
	r := exportRequest("acme")
	r.metadata = leases(t, rule.Path, "L1")
	done, from := streamDoneDescriptors(t, rt, r)
	if len(done) != 1 || len(rt.GetRoute().GetRateLimits()) != 2 {
		t.Fatalf("the export route: %d rate_limits, %d sent at stream end; want 2 and 1", len(rt.GetRoute().GetRateLimits()), len(done))
	}
	want := append(slices.Clone(acquire[0].GetEntries()), &commonv3.RateLimitDescriptor_Entry{Key: server.LeaseEntryKey, Value: "L1"})
	if !slices.EqualFunc(done[0].GetEntries(), want, func(a, b *commonv3.RateLimitDescriptor_Entry) bool {
		return a.GetKey() == b.GetKey() && a.GetValue() == b.GetValue()
	}) {
		t.Errorf("the release's entries are %v, want the acquire's with the lease last, %v", done[0].GetEntries(), want)
	}
	if rl := rt.GetRoute().GetRateLimits()[from[0]]; !rl.GetHitsAddend().GetIsNegativeHits() || rl.GetHitsAddend().GetNumber().GetValue() != 1 {
		t.Errorf("the stream-done entry's hits_addend is %v, want 1 given back", rl.GetHitsAddend())
	}
	// No lease under the rule's path, no release: an answer with none, or
	// with another rule's.
	for _, md := range []*structpb.Struct{nil, leases(t, rule.Path+".other", "L1")} {
		r.metadata = md
		if ds, _ := streamDoneDescriptors(t, rt, r); len(ds) != 0 {
			t.Errorf("with dynamic metadata %v the release is built, %v: want none without this rule's lease", md, ds)
		}
	}
}

// A switchStore is the memory store, out of reach while down is set, as
// a Redis store is while Redis is down: every Take fails.
type switchStore struct {
	*memory.Store
	down atomic.Bool
}

func (s *switchStore) Take(ctx context.Context, reqs []backend.Request, res []backend.Result) error {
	if s.down.Load() {
		return errors.New("dial tcp 127.0.0.1:6379: connection refused")
	}
	return s.Store.Take(ctx, reqs, res)
}

// An exportProxy plays envoy-concurrency.yaml's ratelimit filter in front
// of a ratelimitd serving examples/config.yaml, on a clock the test moves.
type exportProxy struct {
	t         *testing.T
	p         proxy
	rt        *routev3.Route
	rls       rlsv3.RateLimitServiceClient
	clock     *backendtest.Clock
	store     *switchStore
	rules     *config.Rules
	rule      *config.Rule // the export rule
	n         int          // its limit: slots held at once
	window    time.Duration
	givenBack int // releases sent
}

// newExportProxy starts ratelimitd with opts behind the example's filter.
func newExportProxy(t *testing.T, opts server.Options) *exportProxy {
	t.Helper()
	_, p := loadProxyFile(t, concurrencyFile)
	rules, err := config.Load("../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	clock := backendtest.NewClock(backendtest.T0)
	store := &switchStore{Store: memory.New(memory.Options{Now: clock.Now})}
	t.Cleanup(func() { store.Close() })
	e := &exportProxy{t: t, p: p, clock: clock, store: store, rules: rules,
		rls: rlsv3.NewRateLimitServiceClient(serveRatelimitd(t, store, rules, opts))}
	e.rt = route(t, p.vhost, exportRequest("acme"))
	var lim config.RuleLimit
	e.rule, lim = exportLimit(t, rules, p, e.rt)
	e.n, e.window = int(lim.Requests), lim.Window
	return e
}

// at sets the clock to d after backendtest.T0.
func (e *exportProxy) at(d time.Duration) { e.clock.Set(backendtest.T0.Add(d)) }

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

// lease returns the lease that s's answer names for the export rule, or
// "".
func (e *exportProxy) lease(s *stream) string {
	return metadataAt(s.r.metadata, []string{server.LeasesKey, e.rule.Path}).GetStringValue()
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
		e.t.Errorf("release: %v, want OK: a release is never refused", resp)
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
func (e *exportProxy) free(tenant string) int {
	e.t.Helper()
	ds, _ := descriptors(e.t, e.rt, exportRequest(tenant))
	ds[0].HitsAddend = wrapperspb.UInt64(0)
	return int(e.ask(ds).GetStatuses()[0].GetLimitRemaining())
}

// fill starts the tenant's n exports, all admitted.
func (e *exportProxy) fill(tenant string) []*stream {
	e.t.Helper()
	running := make([]*stream, e.n)
	for i := range running {
		running[i] = e.start(tenant)
		if !running[i].admitted() {
			e.t.Fatalf("export %d of %d: %v, want OK", i+1, e.n, running[i].answer)
		}
	}
	return running
}

// TestEnvoyConcurrencyLimitsExports plays exports through
// envoy-concurrency.yaml: a tenant's first 20 are admitted, each naming
// its lease, the 21st is refused, and an export that ends gives its own
// slot back; an export that took no slot (refused, or never asked about)
// sends no release, though Envoy runs its stream-done rate limits for it
// too.
func TestEnvoyConcurrencyLimitsExports(t *testing.T) {
	e := newExportProxy(t, server.Options{})

	running := e.fill("acme")
	seen := map[string]bool{}
	for i, s := range running {
		// What the release reads, and the access log prints as lease=.
		l := e.lease(s)
		if l == "" || seen[l] {
			t.Fatalf("export %d: dynamic metadata %v, want a lease of its own under %s.%s", i+1, s.r.metadata, server.LeasesKey, e.rule.Path)
		}
		seen[l] = true
	}
	if got := e.free("acme"); got != 0 {
		t.Errorf("with %d exports running: %d slots free, want 0", e.n, got)
	}

	refused := e.start("acme")
	if refused.admitted() {
		t.Fatalf("export %d with %d running: %v, want OVER_LIMIT", e.n+1, e.n, refused.answer)
	}
	by := refused.r.metadata.GetFields()[server.DecidedByKey].GetStructValue().GetFields()["rule"].GetStringValue()
	if want := e.rule.File + ":" + strconv.Itoa(e.rule.Line); by != want {
		t.Errorf("the refusal's decided_by rule is %q, want the export rule's %q", by, want)
	}
	// Envoy runs the stream-done rate limits of the refused export too;
	// its answer names no lease, so the release is not built.
	if l := e.lease(refused); l != "" || e.end(refused) {
		t.Errorf("the refused export (lease %q) sent a release: it would free a slot that a running export holds", l)
	}
	// Nor when ratelimitd was not asked or did not answer (the filter
	// lets it through under failure_mode_deny: false, with no metadata).
	if e.end(&stream{r: exportRequest("acme")}) {
		t.Errorf("an export ratelimitd never answered sent a release")
	}
	if got := e.free("acme"); got != 0 {
		t.Errorf("after the refused export ended: %d slots free, want 0", got)
	}
	// Without x-tenant, Envoy neither asks nor releases.
	if anon := e.start(""); anon.answer != nil || e.end(anon) {
		t.Errorf("an export without x-tenant: asked %v, want no call either way", anon.answer)
	}

	// Other tenants have their own 20.
	if s := e.start("globex"); !s.admitted() {
		t.Errorf("globex's first export: %v, want OK", s.answer)
	}

	// An export ends: its slot is free for the next one, and only one.
	if !e.end(running[3]) {
		t.Fatal("an admitted export ended without a release")
	}
	if got := e.free("acme"); got != 1 {
		t.Errorf("after an export ended: %d slots free, want 1", got)
	}
	next := e.start("acme")
	if !next.admitted() {
		t.Errorf("export after one ended: %v, want OK", next.answer)
	}
	// A release sent twice (a retried call) frees nothing the second
	// time: the lease it names is released already.
	if !e.end(running[3]) || e.free("acme") != 0 {
		t.Errorf("a second release of one lease: %d slots free, want 0", e.free("acme"))
	}
	if s := e.start("acme"); s.admitted() {
		t.Errorf("the next: %v, want OVER_LIMIT", s.answer)
	}
	if e.givenBack != 2 {
		t.Errorf("%d releases sent, want 2: the ended export's, twice", e.givenBack)
	}

	// The access log prints the lease an export holds (lease=) and the
	// rule that refused one: each path it prints is in an admitted
	// export's answer or in a refusal's.
	paths, format := accessLogMetadata(t, e.p)
	if !slices.ContainsFunc(paths, func(p []string) bool { return slices.Equal(p, []string{server.LeasesKey, e.rule.Path}) }) {
		t.Errorf("the access log %q does not print %s:%s", format, server.LeasesKey, e.rule.Path)
	}
	for _, path := range paths {
		if metadataAt(running[0].r.metadata, path) == nil && metadataAt(refused.r.metadata, path) == nil {
			t.Errorf("the access log prints %s, which neither an admitted export's answer nor a refusal carries", strings.Join(path, ":"))
		}
	}
}

// TestEnvoyConcurrencyReleaseFreesItsOwnSlot: exports start a second
// apart and the oldest ends; its release frees its own slot, so when its
// lease would have lapsed no other slot frees. (A release that freed the
// newest slot would leave the oldest held, and it would lapse then: two
// free with 19 running.)
func TestEnvoyConcurrencyReleaseFreesItsOwnSlot(t *testing.T) {
	e := newExportProxy(t, server.Options{})
	running := make([]*stream, e.n)
	for i := range running {
		e.at(time.Duration(i) * time.Second)
		if running[i] = e.start("acme"); !running[i].admitted() {
			t.Fatalf("export %d: %v, want OK", i+1, running[i].answer)
		}
	}
	e.at(time.Duration(e.n) * time.Second)
	if !e.end(running[0]) {
		t.Fatal("the oldest export ended without a release")
	}
	e.at(e.window + time.Second/2) // the oldest's lease would have lapsed, no other's
	if got := e.free("acme"); got != 1 {
		t.Errorf("with %d exports running: %d slots free, want 1", e.n-1, got)
	}
	if s := e.start("acme"); !s.admitted() {
		t.Errorf("an export beside %d: %v, want OK", e.n-1, s.answer)
	}
	if s := e.start("acme"); s.admitted() {
		t.Errorf("an export beside %d: %v, want OVER_LIMIT", e.n, s.answer)
	}
}

// TestEnvoyConcurrencyNeverOverruns plays the README's sequence: 20
// exports start at 0:00; one ends at 1:40 and a new one, B, starts; the
// other 19 end at 2:00; at 5:01, with B still running, 20 more try. The
// releases name their leases, so B's slot is held and only 19 more are
// admitted: never more than 20 run. (Released anonymously, the newest
// slots would free, B's among them, and the one left, taken at 0:00,
// would lapse at 5:00 under B: 20 more admitted, 21 running.)
func TestEnvoyConcurrencyNeverOverruns(t *testing.T) {
	e := newExportProxy(t, server.Options{})
	running := map[*stream]bool{}
	start := func(n int) (admitted int) {
		t.Helper()
		for range n {
			if s := e.start("acme"); s.admitted() {
				running[s] = true
				admitted++
			}
			if len(running) > e.n {
				t.Fatalf("%d exports run at once, over the limit of %d", len(running), e.n)
			}
		}
		return admitted
	}
	end := func(s *stream) {
		t.Helper()
		if !e.end(s) {
			t.Fatal("an admitted export ended without a release")
		}
		delete(running, s)
	}

	e.at(0)
	if got := start(e.n); got != e.n {
		t.Fatalf("at 0:00: %d of %d admitted", got, e.n)
	}
	first := make([]*stream, 0, e.n)
	for s := range running {
		first = append(first, s)
	}
	e.at(100 * time.Second)
	end(first[0])
	if start(1) != 1 {
		t.Fatal("B, at 1:40 after one ended: refused")
	}
	e.at(120 * time.Second)
	for _, s := range first[1:] {
		end(s)
	}
	e.at(e.window + time.Second) // 5:01: the 0:00 leases have lapsed, B's has not
	if got := start(e.n); got != e.n-1 {
		t.Errorf("at 5:01 with B running: %d of %d more admitted, want %d", got, e.n, e.n-1)
	}
}

// TestEnvoyConcurrencyLeaseLapses: the slots of exports that never give
// them back (their Envoy crashed) free themselves when their lease, the
// rule's window, lapses, and not before; a release that comes after its
// lease lapsed frees nothing, not another export's slot.
func TestEnvoyConcurrencyLeaseLapses(t *testing.T) {
	e := newExportProxy(t, server.Options{})
	crashed := e.fill("acme") // the Envoy that runs these dies: no release
	e.at(e.window - time.Second)
	if s := e.start("acme"); s.admitted() {
		t.Fatalf("a second before the leases lapse: %v, want OVER_LIMIT", s.answer)
	}
	// (The store stamps each lease a microsecond apart: they lapse within
	// microseconds of each other.)
	e.at(e.window + time.Second)
	if got := e.free("acme"); got != e.n {
		t.Errorf("once the leases lapsed: %d slots free, want all %d", got, e.n)
	}
	s := e.start("acme")
	if !s.admitted() {
		t.Fatalf("an export once the leases lapsed: %v, want OK", s.answer)
	}
	if !e.end(crashed[0]) || e.free("acme") != e.n-1 {
		t.Errorf("after a release of a lapsed lease: %d slots free, want %d: the new export's is held", e.free("acme"), e.n-1)
	}
	if !e.end(s) || e.free("acme") != e.n {
		t.Errorf("after the new export ended: %d slots free, want %d", e.free("acme"), e.n)
	}
}

// TestEnvoyConcurrencyNoLeaseNoRelease: an export admitted without a slot
// (ratelimitd's store down under --failure-mode allow, or over the limit
// in shadow mode) is answered without a lease and sends no release, so
// it frees no other export's slot; under --envoyproxy-answers no answer
// names a lease, and no export sends a release.
func TestEnvoyConcurrencyNoLeaseNoRelease(t *testing.T) {
	t.Run("store down", func(t *testing.T) {
		e := newExportProxy(t, server.Options{FailureMode: server.FailAllow})
		running := e.fill("acme")
		e.store.down.Store(true)
		s := e.start("acme")
		e.store.down.Store(false)
		if !s.admitted() || e.lease(s) != "" {
			t.Fatalf("an export while the store is down: %v, want OK without a lease", s.answer)
		}
		if e.end(s) || e.free("acme") != 0 {
			t.Errorf("it ended: %d slots free, want 0 and no release", e.free("acme"))
		}
		if !e.end(running[0]) || e.free("acme") != 1 {
			t.Errorf("an admitted export ended: %d slots free, want 1", e.free("acme"))
		}
	})
	t.Run("shadow mode", func(t *testing.T) {
		e := newExportProxy(t, server.Options{ShadowMode: true})
		e.fill("acme")
		s := e.start("acme")
		if !s.admitted() || e.lease(s) != "" {
			t.Fatalf("an export over the limit in shadow mode: %v, want OK without a lease", s.answer)
		}
		if e.end(s) || e.free("acme") != 0 {
			t.Errorf("it ended: %d slots free, want 0 and no release", e.free("acme"))
		}
	})
	t.Run("envoyproxy answers", func(t *testing.T) {
		e := newExportProxy(t, server.Options{EnvoyproxyAnswers: true})
		s := e.start("acme")
		if !s.admitted() || e.lease(s) != "" {
			t.Fatalf("an export: %v, want OK without a lease", s.answer)
		}
		// Its slot is held until its lease lapses.
		if e.end(s) || e.free("acme") != e.n-1 {
			t.Errorf("it ended: %d slots free, want %d and no release", e.free("acme"), e.n-1)
		}
		e.at(e.window + time.Second)
		if got := e.free("acme"); got != e.n {
			t.Errorf("once its lease lapsed: %d slots free, want %d", got, e.n)
		}
	})
}
