package server_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimitd/ratelimitd/backend/backendtest"
	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/config"
	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/grpctest"
	"github.com/ratelimitd/ratelimitd/server"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// t0 is the instant every test's clock starts at: aligned to every window
// the tests use (second, 1.5 s, 30 s, minute, hour, day, week), so window
// ends are round numbers.
var t0 = backendtest.T0

// A harness is a Server on the memory store and a manual clock, served
// over a real gRPC connection (bufconn), with a client for each face.
type harness struct {
	clock  *backendtest.Clock
	store  *memory.Store
	srv    *server.Server
	conn   *grpc.ClientConn
	envoy  rlsv3.RateLimitServiceClient
	native ratelimitv1.RateLimitServiceClient
}

// newHarness starts a server deciding under rules (nil: none yet) and
// stops everything in t.Cleanup.
func newHarness(t testing.TB, rules *config.Rules, opts server.Options) *harness {
	t.Helper()
	clock := backendtest.NewClock(t0)
	store := memory.New(memory.Options{Now: clock.Now})
	t.Cleanup(func() { store.Close() })
	if opts.Now == nil {
		opts.Now = clock.Now
	}
	srv := server.New(store, rules, opts)
	t.Cleanup(srv.EndHealthWatches) // ends the RLQS sharing loop, after the gRPC server stops

	g := grpc.NewServer(srv.GRPCOptions()...)
	srv.Register(g)
	conn, _ := grpctest.Serve(t, g)
	return &harness{
		clock:  clock,
		store:  store,
		srv:    srv,
		conn:   conn,
		envoy:  rlsv3.NewRateLimitServiceClient(conn),
		native: ratelimitv1.NewRateLimitServiceClient(conn),
	}
}

// at moves the harness's clock to t0+d.
func (h *harness) at(d time.Duration) { h.clock.Set(t0.Add(d)) }

// should calls Envoy's ShouldRateLimit and fails the test on an error.
func (h *harness) should(t *testing.T, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := h.envoy.ShouldRateLimit(t.Context(), req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s): %v", brief(req), err)
	}
	return resp
}

// shouldNative calls the native ShouldRateLimit and fails the test on an
// error.
func (h *harness) shouldNative(t *testing.T, req *ratelimitv1.ShouldRateLimitRequest) *ratelimitv1.ShouldRateLimitResponse {
	t.Helper()
	resp, err := h.native.ShouldRateLimit(t.Context(), req)
	if err != nil {
		t.Fatalf("native ShouldRateLimit(%s): %v", brief(req), err)
	}
	return resp
}

// A step is one Envoy call at t0+at, and the response it must get
// (response headers aside: see headers_test.go).
type step struct {
	at   time.Duration
	req  *rlsv3.RateLimitRequest
	want *rlsv3.RateLimitResponse
}

// run makes the calls of steps in order, on one harness.
func (h *harness) run(t *testing.T, steps []step) {
	t.Helper()
	for i, s := range steps {
		h.at(s.at)
		got := withoutDecidedBy(t, h.should(t, s.req))
		if diff := cmp.Diff(s.want, got, protocmp.Transform(), ignoreHeaders); diff != "" {
			t.Errorf("step %d at t0+%v: ShouldRateLimit(%s) mismatch (-want +got):\n%s", i, s.at, brief(s.req), diff)
		}
	}
}

// ignoreHeaders leaves the response headers out of a comparison.
var ignoreHeaders = protocmp.IgnoreFields(&rlsv3.RateLimitResponse{}, "response_headers_to_add")

// withoutDecidedBy checks that resp names the rule that refused it under
// dynamic metadata's decided_by exactly when it refuses a descriptor with
// a limit (the first such), reporting the limit that status reports, and
// returns resp without it, for the tests that compare whole responses
// with responses of their own (TestDecidedBy checks the rest).
func withoutDecidedBy(t *testing.T, resp *rlsv3.RateLimitResponse) *rlsv3.RateLimitResponse {
	t.Helper()
	want := -1
	if resp.GetOverallCode() == over {
		want = slices.IndexFunc(resp.GetStatuses(), func(st *rlsv3.RateLimitResponse_DescriptorStatus) bool {
			return st.GetCode() == over && st.GetCurrentLimit() != nil
		})
	}
	db, has := resp.GetDynamicMetadata().GetFields()[server.DecidedByKey]
	switch {
	case want < 0 && has:
		t.Errorf("%s: %s in a response that no limit refused", brief(resp), server.DecidedByKey)
	case want >= 0 && !has:
		t.Errorf("%s: no %s in a response that descriptor %d's limit refused", brief(resp), server.DecidedByKey, want)
	case has:
		f, lim := db.GetStructValue().GetFields(), resp.GetStatuses()[want].GetCurrentLimit()
		if f["descriptor"].GetNumberValue() != float64(want) ||
			f["requests_per_unit"].GetNumberValue() != float64(lim.GetRequestsPerUnit()) ||
			f["unit"].GetStringValue() != lim.GetUnit().String() {
			t.Errorf("%s: %s = %v, want descriptor %d's limit %v", brief(resp), server.DecidedByKey, db, want, lim)
		}
	}
	if !has {
		return resp
	}
	resp = proto.CloneOf(resp)
	delete(resp.DynamicMetadata.Fields, server.DecidedByKey)
	if len(resp.DynamicMetadata.Fields) == 0 {
		resp.DynamicMetadata = nil
	}
	return resp
}

// loadRules reads and compiles the rule files of testdata.
func loadRules(t testing.TB, files ...string) *config.Rules {
	t.Helper()
	var domains []*config.Domain
	for _, f := range files {
		name := filepath.Join("testdata", f)
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		ds, err := config.Parse(name, data)
		if err != nil {
			t.Fatalf("config.Parse(%s): %v", name, err)
		}
		domains = append(domains, ds...)
	}
	rules, err := config.Compile(domains)
	if err != nil {
		t.Fatalf("config.Compile: %v", err)
	}
	return rules
}

// parseRules compiles the rules file held in yaml.
func parseRules(t testing.TB, yaml string) *config.Rules {
	t.Helper()
	domains, err := config.Parse(t.Name()+".yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	rules, err := config.Compile(domains)
	if err != nil {
		t.Fatalf("config.Compile: %v", err)
	}
	return rules
}

// brief renders a message on one line for failure messages.
func brief(m proto.Message) string {
	s := prototext.MarshalOptions{}.Format(m)
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// Envoy request builders.

// desc returns a descriptor of the entries kv, given as key, value pairs.
func desc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// hits sets d's own hits_addend.
func hits(n uint64, d *rlv3.RateLimitDescriptor) *rlv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// request returns a request of domain for descriptors ds.
func request(domain string, ds ...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds}
}

// Envoy response builders.

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

func response(code rlsv3.RateLimitResponse_Code, sts ...*rlsv3.RateLimitResponse_DescriptorStatus) *rlsv3.RateLimitResponse {
	return &rlsv3.RateLimitResponse{OverallCode: code, Statuses: sts}
}

// okStatus is the status of a descriptor that no limit applies to.
func okStatus() *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{Code: ok}
}

// limited is the status of a descriptor a limit applies to.
func limited(code rlsv3.RateLimitResponse_Code, name string, rpu uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, remaining uint32, reset time.Duration) *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:               code,
		CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: rpu, Unit: unit},
		LimitRemaining:     remaining,
		DurationUntilReset: durationpb.New(reset),
	}
}

const (
	second  = rlsv3.RateLimitResponse_RateLimit_SECOND
	minute  = rlsv3.RateLimitResponse_RateLimit_MINUTE
	hour    = rlsv3.RateLimitResponse_RateLimit_HOUR
	day     = rlsv3.RateLimitResponse_RateLimit_DAY
	week    = rlsv3.RateLimitResponse_RateLimit_WEEK
	unknown = rlsv3.RateLimitResponse_RateLimit_UNKNOWN
)

// Native request builders.

// ndesc returns a native descriptor of the entries kv.
func ndesc(kv ...string) *ratelimitv1.Descriptor {
	d := &ratelimitv1.Descriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv1.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func nrequest(domain string, ds ...*ratelimitv1.Descriptor) *ratelimitv1.ShouldRateLimitRequest {
	return &ratelimitv1.ShouldRateLimitRequest{Domain: domain, Descriptors: ds}
}

// wantCode checks that err is a status error of code whose message holds
// every substring of msg.
func wantCode(t *testing.T, call string, err error, code codes.Code, msg ...string) {
	t.Helper()
	st, isStatus := status.FromError(err)
	switch {
	case err == nil:
		t.Errorf("%s: no error, want %v", call, code)
	case !isStatus:
		t.Errorf("%s: error %v is not a gRPC status, want %v", call, err, code)
	case st.Code() != code:
		t.Errorf("%s: code %v (%q), want %v", call, st.Code(), st.Message(), code)
	default:
		for _, m := range msg {
			if !strings.Contains(st.Message(), m) {
				t.Errorf("%s: message %q does not name the problem, want it to contain %q", call, st.Message(), m)
			}
		}
	}
}

func TestHealth(t *testing.T) {
	services := []string{
		"",
		"envoy.service.ratelimit.v3.RateLimitService",
		"ratelimit.v1.RateLimitService",
		"envoy.service.rate_limit_quota.v3.RateLimitQuotaService",
		"ratelimit", // envoyproxy/ratelimit's name
	}
	h := newHarness(t, nil, server.Options{RLQS: true})
	health := healthpb.NewHealthClient(h.conn)
	check := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for _, svc := range services {
			resp, err := health.Check(t.Context(), &healthpb.HealthCheckRequest{Service: svc})
			if err != nil {
				t.Errorf("Check(%q): %v", svc, err)
				continue
			}
			if got := resp.GetStatus(); got != want {
				t.Errorf("Check(%q) = %v, want %v", svc, got, want)
			}
		}
	}
	// Without rules (those of xDS not arrived yet), not serving.
	check(healthpb.HealthCheckResponse_NOT_SERVING)

	h.srv.SetRules(loadRules(t, "gateway.yaml"))
	check(healthpb.HealthCheckResponse_SERVING)

	h.srv.Shutdown()
	check(healthpb.HealthCheckResponse_NOT_SERVING)

	// New rules after Shutdown do not bring the server back.
	h.srv.SetRules(loadRules(t, "gateway.yaml"))
	check(healthpb.HealthCheckResponse_NOT_SERVING)

	// Requests keep being answered until the listeners stop.
	resp := h.should(t, request("gateway", desc("remote_address", "10.0.0.1")))
	if resp.GetOverallCode() != ok {
		t.Errorf("ShouldRateLimit after Shutdown: overall %v, want OK", resp.GetOverallCode())
	}
}

// TestHealthWatchEndsAtShutdown: a health watcher sees NOT_SERVING at
// Shutdown and its stream stays open (a client whose stream ends
// reconnects at once); at EndHealthWatches it ends, so that it cannot
// hold a graceful stop until its timeout.
func TestHealthWatchEndsAtShutdown(t *testing.T) {
	h := newHarness(t, loadRules(t, "gateway.yaml"), server.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // past it, the stream did not end
	defer cancel()
	stream, err := healthpb.NewHealthClient(h.conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := stream.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first Watch status = %v, %v; want SERVING", resp, err)
	}
	h.srv.Shutdown()
	if resp, err := stream.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("Watch status after Shutdown = %v, %v; want NOT_SERVING", resp, err)
	}
	// Still open: a Watch started now gets NOT_SERVING, and no end.
	during, err := healthpb.NewHealthClient(h.conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := during.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("a Watch started after Shutdown: %v, %v; want NOT_SERVING", resp, err)
	}
	h.srv.EndHealthWatches()
	var got []healthpb.HealthCheckResponse_ServingStatus
	for {
		resp, err := stream.Recv()
		if err != nil {
			if status.Code(err) != codes.Unavailable {
				t.Errorf("Watch ended with %v, want Unavailable (at EndHealthWatches)", err)
			}
			break
		}
		got = append(got, resp.GetStatus())
	}
	if len(got) != 0 {
		t.Errorf("Watch statuses after EndHealthWatches = %v, want none: NOT_SERVING was sent", got)
	}
	if _, err := during.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("the second Watch after EndHealthWatches: %v, want Unavailable", err)
	}
	// A watch started after EndHealthWatches ends at once.
	late, err := healthpb.NewHealthClient(h.conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := late.Recv(); err != nil {
			if status.Code(err) != codes.Unavailable {
				t.Errorf("a Watch started after EndHealthWatches ended with %v, want Unavailable", err)
			}
			break
		}
	}
}

func TestReflection(t *testing.T) {
	h := newHarness(t, loadRules(t, "gateway.yaml"), server.Options{RLQS: true})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(h.conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatalf("ServerReflectionInfo: %v", err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatalf("CloseSend: %v", err)
	}
	got := map[string]bool{}
	for _, s := range resp.GetListServicesResponse().GetService() {
		got[s.GetName()] = true
	}
	for _, want := range []string{
		"envoy.service.ratelimit.v3.RateLimitService",
		"ratelimit.v1.RateLimitService",
		"envoy.service.rate_limit_quota.v3.RateLimitQuotaService",
		"grpc.health.v1.Health",
	} {
		if !got[want] {
			t.Errorf("reflection lists %v, want it to include %q", got, want)
		}
	}

	// The services' descriptors resolve, so grpcurl can call them.
	for _, sym := range []string{"envoy.service.ratelimit.v3.RateLimitService", "ratelimit.v1.RateLimitService", "envoy.service.rate_limit_quota.v3.RateLimitQuotaService"} {
		stream, err := reflectionpb.NewServerReflectionClient(h.conn).ServerReflectionInfo(ctx)
		if err != nil {
			t.Fatalf("ServerReflectionInfo: %v", err)
		}
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{
			MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: sym},
		}); err != nil {
			t.Fatalf("Send: %v", err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		if e := resp.GetErrorResponse(); e != nil {
			t.Errorf("FileContainingSymbol(%s): error %d %s", sym, e.GetErrorCode(), e.GetErrorMessage())
		} else if len(resp.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
			t.Errorf("FileContainingSymbol(%s): no file descriptors", sym)
		}
		if err := stream.CloseSend(); err != nil {
			t.Errorf("CloseSend: %v", err)
		}
	}
}

// TestConcurrentExact hammers one descriptor from 64 goroutines over real
// gRPC: with the clock frozen, exactly the limit is admitted, whatever the
// interleaving.
func TestConcurrentExact(t *testing.T) {
	const (
		limit      = 150
		goroutines = 64
		calls      = 8 // per goroutine: 512 in all
	)
	rules := parseRules(t, fmt.Sprintf(`
domain: hammer
descriptors:
  - key: api_key
    rate_limit:
      algorithm: fixed_window
      unit: minute
      requests_per_unit: %d
`, limit))
	h := newHarness(t, rules, server.Options{})
	h.at(10 * time.Second) // frozen: no window ends during the test

	var (
		admitted, refused atomic.Int64
		wg                sync.WaitGroup
		errs              = make(chan error, goroutines*calls)
	)
	start := make(chan struct{})
	for g := range goroutines {
		wg.Go(func() {
			<-start
			for i := range calls {
				var (
					code rlsv3.RateLimitResponse_Code
					err  error
				)
				if (g+i)%2 == 0 { // both faces share the counters
					var resp *rlsv3.RateLimitResponse
					resp, err = h.envoy.ShouldRateLimit(t.Context(), request("hammer", desc("api_key", "k1")))
					code = resp.GetOverallCode()
				} else {
					var resp *ratelimitv1.ShouldRateLimitResponse
					resp, err = h.native.ShouldRateLimit(t.Context(), nrequest("hammer", ndesc("api_key", "k1")))
					if resp.GetCode() == ratelimitv1.Code_CODE_OVER_LIMIT {
						code = over
					}
				}
				switch {
				case err != nil:
					errs <- err
				case code == over:
					refused.Add(1)
				default:
					admitted.Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("ShouldRateLimit: %v", err)
	}
	if got := admitted.Load(); got != limit {
		t.Errorf("admitted %d of %d calls, want exactly %d", got, goroutines*calls, limit)
	}
	if got, want := refused.Load(), int64(goroutines*calls-limit); got != want {
		t.Errorf("refused %d calls, want %d", got, want)
	}
}

// TestNoPanic feeds both faces odd requests in-process (where nothing
// normalizes them as the wire does): each must get an error or a response,
// never a panic.
func TestNoPanic(t *testing.T) {
	h := newHarness(t, loadRules(t, "gateway.yaml", "modes.yaml"), server.Options{})
	srv := h.srv
	huge := strings.Repeat("x", 5000)
	envoyReqs := map[string]*rlsv3.RateLimitRequest{
		"nil request":        nil,
		"empty request":      {},
		"nil descriptor":     {Domain: "gateway", Descriptors: []*rlv3.RateLimitDescriptor{nil}},
		"nil among many":     {Domain: "gateway", Descriptors: []*rlv3.RateLimitDescriptor{desc("remote_address", "a"), nil}},
		"nil entry":          {Domain: "gateway", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{nil}}}},
		"nil entry after":    {Domain: "gateway", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "acme"}, nil}}}},
		"nil entry unknown":  {Domain: "nowhere", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{nil}}}},
		"empty override":     {Domain: "gateway", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: desc("remote_address", "a").Entries, Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{}}}},
		"override of ban":    {Domain: "gateway", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: desc("blocked_agent", "a").Entries, Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: 1}}}},
		"override unlimited": {Domain: "gateway", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: desc("health_check", "a").Entries, Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: 1}}}},
		"override bad unit":  {Domain: "gateway", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: desc("remote_address", "a").Entries, Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: 99}}}},
		"override max mult":  {Domain: "gateway", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: desc("remote_address", "a").Entries, Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: 6, UnitMultiplier: wrapperspb.UInt32(1<<32 - 1)}}}},
		"max hits":           {Domain: "gateway", HitsAddend: 1<<32 - 1, Descriptors: []*rlv3.RateLimitDescriptor{desc("usage_report", "a"), desc("partner", "p")}},
		"max descriptor hit": {Domain: "gateway", Descriptors: []*rlv3.RateLimitDescriptor{hits(1<<32-1, desc("usage_report", "a")), hits(1<<32-1, desc("usage_report", "a"))}},
		"huge value":         {Domain: "gateway", Descriptors: []*rlv3.RateLimitDescriptor{desc("remote_address", huge)}},
		"binary value":       {Domain: "gateway", Descriptors: []*rlv3.RateLimitDescriptor{desc("remote_address", "\x00\xff\"\\\n")}},
		"wildcard value":     {Domain: "gateway", Descriptors: []*rlv3.RateLimitDescriptor{desc("tenant", "*"), desc("user_agent", "curl/*")}},
		"same twice":         {Domain: "gateway", Descriptors: []*rlv3.RateLimitDescriptor{desc("remote_address", "a"), desc("remote_address", "a")}},
		"deep":               {Domain: "gateway", Descriptors: []*rlv3.RateLimitDescriptor{desc("tenant", "acme", "path", "/v1/x", "a", "b", "c", "d")}},
		"all modes":          {Domain: "modes", Descriptors: []*rlv3.RateLimitDescriptor{desc("signup", "a"), desc("project", "alpha"), desc("plan", "free"), desc("customer", "vip"), desc("source_cluster", "internal")}},
		"negative hits":      {Domain: "gateway", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: desc("remote_address", "a").Entries, IsNegativeHits: true}}},
	}
	for name, req := range envoyReqs {
		t.Run("envoy/"+name, func(t *testing.T) {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("Envoy().ShouldRateLimit(%s) panicked: %v", name, r)
				}
			}()
			resp, err := srv.Envoy().ShouldRateLimit(t.Context(), req)
			if (resp == nil) == (err == nil) {
				t.Errorf("Envoy().ShouldRateLimit(%s) = %v, %v; want a response or an error", name, resp, err)
			}
			if err != nil {
				if _, isStatus := status.FromError(err); !isStatus {
					t.Errorf("Envoy().ShouldRateLimit(%s): error %v is not a gRPC status", name, err)
				}
			}
		})
	}

	nativeReqs := map[string]*ratelimitv1.ShouldRateLimitRequest{
		"nil request":     nil,
		"empty request":   {},
		"nil descriptor":  {Domain: "gateway", Descriptors: []*ratelimitv1.Descriptor{nil}},
		"nil among many":  {Domain: "gateway", Descriptors: []*ratelimitv1.Descriptor{ndesc("remote_address", "a"), nil}},
		"nil entry":       {Domain: "gateway", Descriptors: []*ratelimitv1.Descriptor{{Entries: []*ratelimitv1.Entry{nil}}}},
		"nil window":      {Domain: "gateway", Descriptors: []*ratelimitv1.Descriptor{{Entries: ndesc("remote_address", "a").Entries, Limit: &ratelimitv1.LimitOverride{Requests: 1}}}},
		"negative window": {Domain: "gateway", Descriptors: []*ratelimitv1.Descriptor{{Entries: ndesc("remote_address", "a").Entries, Limit: &ratelimitv1.LimitOverride{Requests: 1, Window: durationpb.New(-time.Second)}}}},
		"invalid window":  {Domain: "gateway", Descriptors: []*ratelimitv1.Descriptor{{Entries: ndesc("remote_address", "a").Entries, Limit: &ratelimitv1.LimitOverride{Requests: 1, Window: &durationpb.Duration{Seconds: 1, Nanos: -1}}}}},
		"max window":      {Domain: "gateway", Descriptors: []*ratelimitv1.Descriptor{{Entries: ndesc("remote_address", "a").Entries, Limit: &ratelimitv1.LimitOverride{Requests: 1, Window: &durationpb.Duration{Seconds: 1 << 62}}}}},
		"ns window":       {Domain: "gateway", Descriptors: []*ratelimitv1.Descriptor{{Entries: ndesc("partner", "a").Entries, Limit: &ratelimitv1.LimitOverride{Requests: 1 << 31, Window: durationpb.New(time.Millisecond + time.Nanosecond)}}}},
		"max hits":        {Domain: "gateway", Hits: 1<<32 - 1, Descriptors: []*ratelimitv1.Descriptor{ndesc("usage_report", "a")}},
		"huge hits":       {Domain: "gateway", Hits: 1 << 63, Descriptors: []*ratelimitv1.Descriptor{ndesc("usage_report", "a")}},
		"huge value":      {Domain: "gateway", Descriptors: []*ratelimitv1.Descriptor{ndesc("remote_address", huge)}},
		"all modes":       {Domain: "modes", Descriptors: []*ratelimitv1.Descriptor{ndesc("signup", "a"), ndesc("project", "alpha"), ndesc("plan", "free"), ndesc("customer", "vip"), ndesc("source_cluster", "internal")}},
	}
	for name, req := range nativeReqs {
		t.Run("native/"+name, func(t *testing.T) {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("Native().ShouldRateLimit(%s) panicked: %v", name, r)
				}
			}()
			resp, err := srv.Native().ShouldRateLimit(t.Context(), req)
			if (resp == nil) == (err == nil) {
				t.Errorf("Native().ShouldRateLimit(%s) = %v, %v; want a response or an error", name, resp, err)
			}
			if err != nil {
				if _, isStatus := status.FromError(err); !isStatus {
					t.Errorf("Native().ShouldRateLimit(%s): error %v is not a gRPC status", name, err)
				}
			}
		})
	}
}

// TestClosedStore: a store that can no longer decide is Unavailable, not a
// decision.
func TestClosedStore(t *testing.T) {
	h := newHarness(t, loadRules(t, "gateway.yaml"), server.Options{})
	h.store.Close()
	_, err := h.envoy.ShouldRateLimit(t.Context(), request("gateway", desc("remote_address", "10.0.0.1")))
	wantCode(t, "Envoy ShouldRateLimit on a closed store", err, codes.Unavailable)
	_, err = h.native.ShouldRateLimit(t.Context(), nrequest("gateway", ndesc("remote_address", "10.0.0.1")))
	wantCode(t, "native ShouldRateLimit on a closed store", err, codes.Unavailable)

	// Unknown domains and unlimited rules need no store.
	resp := h.should(t, request("gateway", desc("health_check", "lb")))
	if got := resp.GetOverallCode(); got != ok {
		t.Errorf("unlimited rule on a closed store: overall %v, want OK", got)
	}
}

// TestCanceled: a caller that gave up gets its context's code.
func TestCanceled(t *testing.T) {
	h := newHarness(t, loadRules(t, "gateway.yaml"), server.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := h.srv.Envoy().ShouldRateLimit(ctx, request("gateway", desc("remote_address", "10.0.0.1")))
	wantCode(t, "ShouldRateLimit with a canceled context", err, codes.Canceled)
}
