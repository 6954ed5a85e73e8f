// Package envoy_test checks examples/envoy/envoy.yaml: that Envoy's own
// API accepts it, and that the descriptors its route actions build hit the
// rules of examples/config.yaml in a real ratelimitd.
package envoy_test

import (
	"cmp"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	streamv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/backendtest"
	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/grpctest"
	"github.com/ratelimitd/ratelimitd/server"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// loadBootstrap reads an Envoy config file into Envoy's Bootstrap, as
// Envoy reads YAML: through its JSON form, refusing unknown fields.
func loadBootstrap(t *testing.T, file string) *bootstrapv3.Bootstrap {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	bs := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(yamlToJSON(t, file, data), bs); err != nil {
		t.Fatalf("%s is no Bootstrap: %v", file, err)
	}
	return bs
}

// yamlToJSON returns the JSON form of the YAML data, read from where.
func yamlToJSON(t *testing.T, where string, data []byte) []byte {
	t.Helper()
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatalf("%s as JSON: %v", where, err)
	}
	return js
}

// validate runs the PGV rules (ValidateAll) of m and of every message
// packed in an Any below it, which m's own ValidateAll does not open.
func validate(t *testing.T, m proto.Message, where string) {
	t.Helper()
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			t.Errorf("%s: %v", where, err)
		}
	}
	walkAnys(t, m.ProtoReflect(), where)
}

// walkAnys validates the contents of every Any in m.
func walkAnys(t *testing.T, m protoreflect.Message, where string) {
	t.Helper()
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			t.Errorf("%s: %s: %v", where, a.GetTypeUrl(), err)
			return
		}
		validate(t, inner, where+"/"+string(inner.ProtoReflect().Descriptor().Name()))
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() == nil {
			return true
		}
		at := where + "." + string(fd.Name())
		switch {
		case fd.IsList():
			for i := range v.List().Len() {
				walkAnys(t, v.List().Get(i).Message(), at)
			}
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
					walkAnys(t, mv.Message(), at+"["+k.String()+"]")
					return true
				})
			}
		default:
			walkAnys(t, v.Message(), at)
		}
		return true
	})
}

// proxy is the part of envoy.yaml that rate limiting depends on.
type proxy struct {
	filter    *ratelimitv3.RateLimit
	vhost     *routev3.VirtualHost
	accessLog []*accesslogv3.AccessLog // the connection manager's
}

// loadProxy loads envoy.yaml, this directory's Envoy config.
func loadProxy(t *testing.T) (*bootstrapv3.Bootstrap, proxy) {
	t.Helper()
	return loadProxyFile(t, "envoy.yaml")
}

// loadProxyFile loads an Envoy config file and finds its HTTP connection
// manager's virtual host and rate limit filter.
func loadProxyFile(t *testing.T, file string) (*bootstrapv3.Bootstrap, proxy) {
	t.Helper()
	bs := loadBootstrap(t, file)
	var p proxy
	for _, l := range bs.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				hcm := &hcmv3.HttpConnectionManager{}
				if !f.GetTypedConfig().MessageIs(hcm) {
					continue
				}
				if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
					t.Fatal(err)
				}
				// The connection manager with the rate limit filter; others
				// (a backend's) are not rate limited.
				rl := rateLimitFilter(t, hcm.GetHttpFilters())
				if rl == nil {
					continue
				}
				if p.filter != nil {
					t.Fatalf("%s: two HTTP connection managers with the ratelimit filter; this test reads one", file)
				}
				p.filter, p.accessLog = rl, hcm.GetAccessLog()
				if vhs := hcm.GetRouteConfig().GetVirtualHosts(); len(vhs) == 1 {
					p.vhost = vhs[0]
				}
			}
		}
	}
	if p.filter == nil || p.vhost == nil {
		t.Fatalf("%s: want one HTTP connection manager with one virtual host and the ratelimit filter", file)
	}
	return bs, p
}

// rateLimitFilter returns the config of the ratelimit filter among fs, or
// nil.
func rateLimitFilter(t *testing.T, fs []*hcmv3.HttpFilter) *ratelimitv3.RateLimit {
	t.Helper()
	for _, hf := range fs {
		rl := &ratelimitv3.RateLimit{}
		if hf.GetTypedConfig().MessageIs(rl) {
			if err := hf.GetTypedConfig().UnmarshalTo(rl); err != nil {
				t.Fatal(err)
			}
			return rl
		}
	}
	return nil
}

func TestEnvoyConfigIsValid(t *testing.T) {
	bs, p := loadProxy(t)
	validate(t, bs, "Bootstrap")

	rules, err := config.Load("../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if rules.Domain(p.filter.GetDomain()) == nil {
		t.Errorf("the filter's domain %q is not a domain of examples/config.yaml", p.filter.GetDomain())
	}

	checkRateLimitService(t, bs, p, 8081)
}

// checkRateLimitService checks that p's filter asks ratelimitd over the v3
// API within a fitting timeout, on a cluster of bs that speaks HTTP/2 to
// port grpcPort, and returns that cluster's address.
func checkRateLimitService(t *testing.T, bs *bootstrapv3.Bootstrap, p proxy, grpcPort uint32) *corev3.SocketAddress {
	t.Helper()
	checkFilter(t, p.filter)
	return checkGRPCCluster(t, bs, p.filter.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName(), grpcPort)
}

// checkGRPCCluster checks that bs defines cluster, speaking HTTP/2 (which
// gRPC needs) to port grpcPort, and returns its address.
func checkGRPCCluster(t *testing.T, bs *bootstrapv3.Bootstrap, cluster string, grpcPort uint32) *corev3.SocketAddress {
	t.Helper()
	for _, c := range bs.GetStaticResources().GetClusters() {
		if c.GetName() != cluster {
			continue
		}
		opts := &upstreamhttpv3.HttpProtocolOptions{}
		if err := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].UnmarshalTo(opts); err != nil {
			t.Errorf("cluster %s: no HttpProtocolOptions: %v", cluster, err)
		} else if opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
			t.Errorf("cluster %s does not speak HTTP/2: gRPC calls to ratelimitd would fail", cluster)
		}
		addr := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
		if addr.GetPortValue() != grpcPort {
			t.Errorf("cluster %s points at port %d, want ratelimitd's gRPC port %d", cluster, addr.GetPortValue(), grpcPort)
		}
		return addr
	}
	t.Errorf("the filter's cluster %q is not defined", cluster)
	return nil
}

// checkFilter checks the rate limit filter's API version and timeout.
func checkFilter(t *testing.T, f *ratelimitv3.RateLimit) {
	t.Helper()
	if v := f.GetRateLimitService().GetTransportApiVersion(); v != corev3.ApiVersion_V3 {
		t.Errorf("rate_limit_service.transport_api_version = %v, want V3", v)
	}
	// Above ratelimitd's 50 ms Redis budget, so that ratelimitd's failure
	// mode answers a slow Redis before Envoy gives up; short enough not to
	// stall requests.
	if d := f.GetTimeout().AsDuration(); d <= 50*time.Millisecond || d > 250*time.Millisecond {
		t.Errorf("the filter's timeout is %v: want more than ratelimitd's 50 ms Redis budget, at most 250 ms", d)
	}
}

// A request is what the sample requests carry that actions read.
type request struct {
	path    string            // :path, with the query string
	headers map[string]string // lower-case names
	ip      string            // the downstream address
	// metadata is the stream's dynamic metadata under the ratelimit
	// filter's namespace (envoy.filters.http.ratelimit): what ratelimitd's
	// answer on the request path carried, which the actions applied at
	// stream end may read. nil before that answer.
	metadata *structpb.Struct
}

// ratelimitNamespace is where Envoy's ratelimit filter keeps the dynamic
// metadata of ratelimitd's answers.
const ratelimitNamespace = "envoy.filters.http.ratelimit"

// route returns the first route of vh that matches r, as Envoy picks it,
// for the kinds of match envoy.yaml uses.
func route(t *testing.T, vh *routev3.VirtualHost, r request) *routev3.Route {
	t.Helper()
	path, _, _ := strings.Cut(r.path, "?")
	for _, rt := range vh.GetRoutes() {
		m := rt.GetMatch()
		if len(m.GetHeaders()) > 0 || len(m.GetQueryParameters()) > 0 {
			t.Fatalf("route %v: this test does not implement header or query matches", m)
		}
		switch m.GetPathSpecifier().(type) {
		case *routev3.RouteMatch_Path:
			if path == m.GetPath() {
				return rt
			}
		case *routev3.RouteMatch_Prefix:
			if strings.HasPrefix(path, m.GetPrefix()) {
				return rt
			}
		default:
			t.Fatalf("route %v: this test does not implement that path match", m)
		}
	}
	return nil
}

// descriptors returns what Envoy sends for r on route rt before
// forwarding it: one descriptor per rate_limits entry (but those applied
// on stream done) whose actions all produced an entry, and which entries
// of rt's rate_limits produced them. It implements the actions the
// examples use, and fails on any other.
func descriptors(t *testing.T, rt *routev3.Route, r request) (ds []*commonv3.RateLimitDescriptor, from []int) {
	t.Helper()
	return envoyDescriptors(t, rt, r, false)
}

// streamDoneDescriptors returns what Envoy sends for r on route rt when
// its stream ends (the filter's onDestroy): the descriptors of the
// rate_limits entries with apply_on_stream_done, built as descriptors
// builds the others, reading r.metadata as it was then.
func streamDoneDescriptors(t *testing.T, rt *routev3.Route, r request) (ds []*commonv3.RateLimitDescriptor, from []int) {
	t.Helper()
	return envoyDescriptors(t, rt, r, true)
}

// envoyDescriptors builds the descriptors of the rate_limits entries of
// rt whose apply_on_stream_done is onStreamDone, as Envoy does: stage 0,
// no limit override; a hits_addend's number and is_negative_hits go into
// the descriptor (a format is not implemented).
func envoyDescriptors(t *testing.T, rt *routev3.Route, r request, onStreamDone bool) (ds []*commonv3.RateLimitDescriptor, from []int) {
	t.Helper()
	header := func(name string) (string, bool) {
		if name == ":path" {
			return r.path, true
		}
		v, ok := r.headers[strings.ToLower(name)]
		return v, ok
	}
entries:
	for i, rl := range rt.GetRoute().GetRateLimits() {
		if rl.GetStage().GetValue() != 0 || rl.GetLimit() != nil || rl.GetHitsAddend().GetFormat() != "" {
			t.Fatalf("rate_limits[%d]: this test implements stage 0, without limit or a hits_addend format", i)
		}
		if rl.GetApplyOnStreamDone() != onStreamDone {
			continue
		}
		d := &commonv3.RateLimitDescriptor{}
		if ha := rl.GetHitsAddend(); ha != nil {
			d.HitsAddend, d.IsNegativeHits = ha.GetNumber(), ha.GetIsNegativeHits()
		}
		add := func(k, v string) {
			d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		for _, a := range rl.GetActions() {
			switch {
			case a.GetRequestHeaders() != nil:
				rh := a.GetRequestHeaders()
				v, ok := header(rh.GetHeaderName())
				if !ok {
					if rh.GetSkipIfAbsent() {
						continue
					}
					continue entries // an absent header drops the descriptor
				}
				add(rh.GetDescriptorKey(), v)
			case a.GetRemoteAddress() != nil:
				add("remote_address", r.ip)
			case a.GetGenericKey() != nil:
				k := cmp.Or(a.GetGenericKey().GetDescriptorKey(), "generic_key")
				add(k, a.GetGenericKey().GetDescriptorValue())
			case a.GetMetadata() != nil:
				md := a.GetMetadata()
				if md.GetSource() != routev3.RateLimit_Action_MetaData_DYNAMIC || md.GetMetadataKey().GetKey() != ratelimitNamespace {
					t.Fatalf("rate_limits[%d]: this test implements metadata actions on the dynamic metadata of %s only", i, ratelimitNamespace)
				}
				// As Envoy: a string value, else default_value, else the
				// action is skipped (skip_if_absent) or drops the
				// descriptor.
				var path []string
				for _, seg := range md.GetMetadataKey().GetPath() {
					path = append(path, seg.GetKey())
				}
				switch s := cmp.Or(metadataAt(r.metadata, path).GetStringValue(), md.GetDefaultValue()); {
				case s != "":
					add(md.GetDescriptorKey(), s)
				case md.GetSkipIfAbsent():
				default:
					continue entries
				}
			case a.GetHeaderValueMatch() != nil:
				hm := a.GetHeaderValueMatch()
				want := hm.GetExpectMatch() == nil || hm.GetExpectMatch().GetValue()
				if matchHeaders(t, hm.GetHeaders(), header) != want {
					continue entries
				}
				add(cmp.Or(hm.GetDescriptorKey(), "header_match"), hm.GetDescriptorValue())
			default:
				t.Fatalf("rate_limits[%d]: this test does not implement the action %v", i, a)
			}
		}
		if len(d.Entries) > 0 {
			ds = append(ds, d)
			from = append(from, i)
		}
	}
	return ds, from
}

// matchHeaders reports whether every matcher in ms matches, for the kinds
// of match envoy.yaml uses.
func matchHeaders(t *testing.T, ms []*routev3.HeaderMatcher, header func(string) (string, bool)) bool {
	t.Helper()
	for _, m := range ms {
		v, ok := header(m.GetName())
		sm := m.GetStringMatch()
		if sm == nil || m.GetInvertMatch() || sm.GetIgnoreCase() {
			t.Fatalf("header matcher %v: this test implements string_match only", m)
		}
		var match bool
		switch {
		case sm.GetSafeRegex() != nil: // the whole value must match
			match = regexp.MustCompile(`^(?:` + sm.GetSafeRegex().GetRegex() + `)$`).MatchString(v)
		case sm.GetExact() != "":
			match = v == sm.GetExact()
		case sm.GetPrefix() != "":
			match = strings.HasPrefix(v, sm.GetPrefix())
		default:
			t.Fatalf("header matcher %v: this test does not implement that string match", m)
		}
		if !ok || !match {
			return false
		}
	}
	return true
}

// rls starts ratelimitd on examples/config.yaml and the memory store, on a
// clock that stands still, and returns an Envoy RateLimitService client.
func rls(t *testing.T, rules *config.Rules) rlsv3.RateLimitServiceClient {
	t.Helper()
	return rlsv3.NewRateLimitServiceClient(startRatelimitd(t, rules, server.Options{}))
}

// startRatelimitd starts ratelimitd's server with opts under rules, on the
// memory store with a clock that stands still, and returns a connection to
// its gRPC port.
func startRatelimitd(t *testing.T, rules *config.Rules, opts server.Options) *grpc.ClientConn {
	t.Helper()
	return startRatelimitdOn(t, rules, opts, backendtest.NewClock(backendtest.T0))
}

// startRatelimitdOn is startRatelimitd on the memory store with clock,
// which the test moves.
func startRatelimitdOn(t *testing.T, rules *config.Rules, opts server.Options, clock *backendtest.Clock) *grpc.ClientConn {
	t.Helper()
	store := memory.New(memory.Options{Now: clock.Now})
	t.Cleanup(func() { store.Close() })
	return serveRatelimitd(t, store, rules, opts)
}

// serveRatelimitd starts ratelimitd's server with opts under rules on
// store, and returns a connection to its gRPC port.
func serveRatelimitd(t *testing.T, store backend.Store, rules *config.Rules, opts server.Options) *grpc.ClientConn {
	t.Helper()
	srv := server.New(store, rules, opts)
	t.Cleanup(srv.EndHealthWatches) // ends the RLQS sharing loop, after the gRPC server stops
	g := grpc.NewServer(srv.GRPCOptions()...)
	srv.Register(g)
	conn, _ := grpctest.Serve(t, g)
	return conn
}

// A want is the status a descriptor should get: the limit ratelimitd
// reports, or none when the descriptor matches no rule.
type want struct {
	name string // current_limit.name: the limit's name, else the rule's key path
	rpu  uint32 // requests_per_unit
	unit rlsv3.RateLimitResponse_RateLimit_Unit
	none bool // matches no rule: {code: OK} alone
}

func TestEnvoyDescriptorsHitTheExampleRules(t *testing.T) {
	_, p := loadProxy(t)
	rules, err := config.Load("../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	domain := rules.Domain(p.filter.GetDomain())
	client := rls(t, rules)

	const (
		second = rlsv3.RateLimitResponse_RateLimit_SECOND
		minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
		// A 30 s window is not a whole Envoy unit.
		unknown = rlsv3.RateLimitResponse_RateLimit_UNKNOWN
	)
	ipLimit := want{name: "remote_address", rpu: 100, unit: minute}
	tests := []struct {
		name string
		req  request
		want []want // one per descriptor Envoy sends, in order
	}{{
		name: "API call with a key",
		req:  request{path: "/api/orders?page=2", ip: "10.0.0.1", headers: map[string]string{"x-api-key": "k-1", "user-agent": "curl/8.5"}},
		want: []want{
			{name: "path=/api/*", rpu: 30, unit: unknown},
			ipLimit,
			{name: "burst", rpu: 10, unit: second}, // of burst and daily, the one with least left
			{none: true},                           // curl is no bot
		},
	}, {
		name: "login by a bot",
		req:  request{path: "/login?next=/home", ip: "10.0.0.2", headers: map[string]string{"user-agent": "Googlebot/2.1"}},
		want: []want{
			{name: "path=/login.remote_address", rpu: 5, unit: minute},
			ipLimit,
			{name: "user_agent=*bot*", rpu: 10, unit: minute},
		},
	}, {
		name: "page without headers",
		req:  request{path: "/index.html", ip: "10.0.0.3"},
		want: []want{ipLimit},
	}, {
		name: "page with a key",
		req:  request{path: "/account", ip: "10.0.0.5", headers: map[string]string{"x-api-key": "k-2"}},
		want: []want{ipLimit, {name: "burst", rpu: 10, unit: second}},
	}, {
		name: "health check",
		req:  request{path: "/healthz", ip: "10.0.0.4"},
		want: nil, // the route has no rate_limits: Envoy does not ask
	}}

	used := map[*routev3.Route][]int{} // the rate_limits entries some request used
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := route(t, p.vhost, tt.req)
			if rt == nil {
				t.Fatalf("no route for %s", tt.req.path)
			}
			ds, from := descriptors(t, rt, tt.req)
			used[rt] = append(used[rt], from...)
			if len(ds) != len(tt.want) {
				t.Fatalf("Envoy would send %d descriptors %v, want %d", len(ds), ds, len(tt.want))
			}
			if len(ds) == 0 {
				return
			}
			resp, err := client.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: p.filter.GetDomain(), Descriptors: ds})
			if err != nil {
				t.Fatalf("ShouldRateLimit: %v", err)
			}
			if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				t.Errorf("overall code %v, want OK on a first request", resp.GetOverallCode())
			}
			for i, d := range ds {
				st, w := resp.GetStatuses()[i], tt.want[i]
				rule := config.Match(domain, d.GetEntries())
				if w.none {
					if rule != nil || st.GetCurrentLimit() != nil {
						t.Errorf("descriptor %v matched %v (status %v), want no rule", d.GetEntries(), rule, st)
					}
					continue
				}
				lim := st.GetCurrentLimit()
				if lim.GetName() != w.name || lim.GetRequestsPerUnit() != w.rpu || lim.GetUnit() != w.unit {
					t.Errorf("descriptor %v: current_limit %v, want %s: %d per %v", d.GetEntries(), lim, w.name, w.rpu, w.unit)
				}
				// The numbers are those of examples/config.yaml's rule.
				if rule == nil || !slices.ContainsFunc(rule.Limits, func(l config.RuleLimit) bool {
					return l.Requests == uint64(lim.GetRequestsPerUnit()) && cmp.Or(l.Name, rule.Path) == lim.GetName()
				}) {
					t.Errorf("descriptor %v: current_limit %v is no limit of the rule it matches, %v", d.GetEntries(), lim, rule)
				}
			}
		})
	}

	// Every rate_limits entry of envoy.yaml is exercised by some request.
	for _, rt := range p.vhost.GetRoutes() {
		for i := range rt.GetRoute().GetRateLimits() {
			if !slices.Contains(used[rt], i) {
				t.Errorf("route %v: rate_limits[%d] sends a descriptor for none of the sample requests; add one", rt.GetMatch(), i)
			}
		}
	}
}

// TestEnvoyLoginLimitIsEnforced checks that the login descriptor is the
// one the 5-a-minute rule counts: the sixth login from one address is
// refused, and other addresses are not.
func TestEnvoyLoginLimitIsEnforced(t *testing.T) {
	_, p := loadProxy(t)
	rules, err := config.Load("../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	client := rls(t, rules)
	ask := func(r request) rlsv3.RateLimitResponse_Code {
		t.Helper()
		ds, _ := descriptors(t, route(t, p.vhost, r), r)
		resp, err := client.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: p.filter.GetDomain(), Descriptors: ds})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		return resp.GetOverallCode()
	}
	login := request{path: "/login", ip: "192.0.2.1"}
	for i := range 5 {
		if got := ask(login); got != rlsv3.RateLimitResponse_OK {
			t.Fatalf("login %d: %v, want OK", i+1, got)
		}
	}
	if got := ask(request{path: "/login?retry=1", ip: "192.0.2.1"}); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("sixth login in a minute: %v, want OVER_LIMIT", got)
	}
	if got := ask(request{path: "/login", ip: "192.0.2.2"}); got != rlsv3.RateLimitResponse_OK {
		t.Errorf("login from another address: %v, want OK", got)
	}
	if got := ask(request{path: "/logins", ip: "192.0.2.1"}); got != rlsv3.RateLimitResponse_OK {
		t.Errorf("/logins from the refused address: %v, want OK (not a login)", got)
	}
}

// TestEnvoyAccessLogNamesTheRefusingRule checks the access log of
// envoy.yaml: that it prints what ratelimitd's refusals carry in their
// dynamic metadata, read where Envoy's ratelimit filter keeps it (the
// namespace envoy.filters.http.ratelimit), and that the rule it names is
// the one that refused.
func TestEnvoyAccessLogNamesTheRefusingRule(t *testing.T) {
	_, p := loadProxy(t)
	paths, format := accessLogMetadata(t, p)
	if !slices.ContainsFunc(paths, func(p []string) bool { return p[0] == server.DecidedByKey }) {
		t.Fatalf("the access log %q prints no %s", format, server.DecidedByKey)
	}

	rules, err := config.Load("../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	client := rls(t, rules)
	login := request{path: "/login", ip: "192.0.2.1"}
	ds, _ := descriptors(t, route(t, p.vhost, login), login)
	var resp *rlsv3.RateLimitResponse
	for i := range 6 {
		resp, err = client.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: p.filter.GetDomain(), Descriptors: ds})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		if i < 5 && resp.GetDynamicMetadata().GetFields()[server.DecidedByKey] != nil {
			t.Errorf("login %d, admitted: dynamic metadata %v, want no %s", i+1, resp.GetDynamicMetadata(), server.DecidedByKey)
		}
	}
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("sixth login in a minute: %v, want OVER_LIMIT", resp.GetOverallCode())
	}
	// Each path the log prints resolves in the refusal's metadata.
	for _, path := range paths {
		if metadataAt(resp.GetDynamicMetadata(), path) == nil {
			t.Errorf("the access log prints %s, which the refusal's dynamic metadata %v lacks", strings.Join(path, ":"), resp.GetDynamicMetadata())
		}
	}
	// The rule named is the login rule of examples/config.yaml.
	rule := config.Match(rules.Domain(p.filter.GetDomain()), ds[0].GetEntries())
	want := rule.File + ":" + strconv.Itoa(rule.Line)
	if got := resp.GetDynamicMetadata().GetFields()[server.DecidedByKey].GetStructValue().GetFields()["rule"].GetStringValue(); got != want {
		t.Errorf("decided_by's rule is %q, want the login rule's %q", got, want)
	}
}

// accessLogMetadata returns the paths of ratelimitd's dynamic metadata
// that p's access log prints (%DYNAMIC_METADATA(NAMESPACE:KEY:...)%, with
// an optional length), and the log's format. It fails on other
// namespaces than the ratelimit filter's.
func accessLogMetadata(t *testing.T, p proxy) (paths [][]string, format string) {
	t.Helper()
	for _, al := range p.accessLog {
		stdout := &streamv3.StdoutAccessLog{}
		if err := al.GetTypedConfig().UnmarshalTo(stdout); err != nil {
			t.Fatalf("access log %s: %v", al.GetName(), err)
		}
		format += stdout.GetLogFormat().GetTextFormatSource().GetInlineString()
	}
	for _, m := range regexp.MustCompile(`%DYNAMIC_METADATA\(([^)]*)\)(:[0-9]+)?%`).FindAllStringSubmatch(format, -1) {
		ns, path, _ := strings.Cut(m[1], ":")
		if ns != ratelimitNamespace {
			t.Errorf("the access log reads dynamic metadata of %q; the ratelimit filter keeps ratelimitd's under %s", ns, ratelimitNamespace)
		}
		paths = append(paths, strings.Split(path, ":"))
	}
	return paths, format
}

// metadataAt returns the value at path in md, or nil.
func metadataAt(md *structpb.Struct, path []string) *structpb.Value {
	v := structpb.NewStructValue(md)
	for _, k := range path {
		v = v.GetStructValue().GetFields()[k]
	}
	return v
}
