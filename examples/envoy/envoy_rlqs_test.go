package envoy_test

import (
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	xdscorev3 "github.com/cncf/xds/go/xds/core/v3"
	xdsmatcherv3 "github.com/cncf/xds/go/xds/type/matcher/v3"
	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	quotav3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	networkinputsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/matching/common_inputs/network/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/server"
)

// The tests below check envoy-rlqs.yaml, Envoy's rate_limit_quota filter
// against ratelimitd's RLQS: that Envoy's API accepts it, and that the
// buckets its matchers build for sample requests get, from a real
// ratelimitd serving examples/config.yaml, the assignment of the rule each
// is meant to hit.

// loadQuotaFilter loads an Envoy config file and returns its
// rate_limit_quota filter's config, of its only HTTP connection manager
// that has one.
func loadQuotaFilter(t *testing.T, file string) (*bootstrapv3.Bootstrap, *quotav3.RateLimitQuotaFilterConfig) {
	t.Helper()
	bs := loadBootstrap(t, file)
	var found *quotav3.RateLimitQuotaFilterConfig
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
				for _, hf := range hcm.GetHttpFilters() {
					q := &quotav3.RateLimitQuotaFilterConfig{}
					if !hf.GetTypedConfig().MessageIs(q) {
						continue
					}
					if err := hf.GetTypedConfig().UnmarshalTo(q); err != nil {
						t.Fatal(err)
					}
					if found != nil {
						t.Fatalf("%s: two rate_limit_quota filters; this test reads one", file)
					}
					found = q
				}
			}
		}
	}
	if found == nil {
		t.Fatalf("%s: no rate_limit_quota filter", file)
	}
	return bs, found
}

// TestEnvoyRLQSConfigIsValid: envoy-rlqs.yaml is a Bootstrap that passes
// Envoy's validation rules, names a domain of examples/config.yaml, reaches
// ratelimitd's gRPC port over HTTP/2, and reports every bucket it builds.
func TestEnvoyRLQSConfigIsValid(t *testing.T) {
	bs, q := loadQuotaFilter(t, "envoy-rlqs.yaml")
	validate(t, bs, "Bootstrap")

	rules, err := config.Load("../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if rules.Domain(q.GetDomain()) == nil {
		t.Errorf("the filter's domain %q is not a domain of examples/config.yaml", q.GetDomain())
	}
	// The stream to ratelimitd lasts as long as Envoy runs: a timeout
	// would end it.
	if q.GetRlqsServer().GetTimeout() != nil {
		t.Errorf("rlqs_server has a timeout %v: it would end the stream", q.GetRlqsServer().GetTimeout().AsDuration())
	}
	checkGRPCCluster(t, bs, q.GetRlqsServer().GetEnvoyGrpc().GetClusterName(), 8081)

	for _, a := range quotaActions(q.GetBucketMatchers()) {
		s := bucketSettings(t, a)
		if len(s.GetBucketIdBuilder().GetBucketIdBuilder()) == 0 {
			t.Errorf("action %s builds no bucket id: its requests would never be reported", a.GetName())
		}
	}
}

// quotaActions returns every action of m and of the matchers below it.
func quotaActions(m *xdsmatcherv3.Matcher) []*xdscorev3.TypedExtensionConfig {
	var as []*xdscorev3.TypedExtensionConfig
	add := func(om *xdsmatcherv3.Matcher_OnMatch) {
		switch {
		case om.GetAction() != nil:
			as = append(as, om.GetAction())
		case om.GetMatcher() != nil:
			as = append(as, quotaActions(om.GetMatcher())...)
		}
	}
	for _, fm := range m.GetMatcherList().GetMatchers() {
		add(fm.GetOnMatch())
	}
	for _, mm := range []*xdsmatcherv3.Matcher_MatcherTree_MatchMap{m.GetMatcherTree().GetExactMatchMap(), m.GetMatcherTree().GetPrefixMatchMap()} {
		for _, k := range slices.Sorted(maps.Keys(mm.GetMap())) {
			add(mm.GetMap()[k])
		}
	}
	add(m.GetOnNoMatch())
	return as
}

// bucketSettings unpacks a bucket matcher's action.
func bucketSettings(t *testing.T, a *xdscorev3.TypedExtensionConfig) *quotav3.RateLimitQuotaBucketSettings {
	t.Helper()
	s := &quotav3.RateLimitQuotaBucketSettings{}
	if err := a.GetTypedConfig().UnmarshalTo(s); err != nil {
		t.Fatalf("action %s: want RateLimitQuotaBucketSettings: %v", a.GetName(), err)
	}
	return s
}

// matchRequest returns the action m picks for r, or nil for none, as
// Envoy's matcher evaluates request headers, for the kinds of matcher
// envoy-rlqs.yaml uses; it fails on others.
func matchRequest(t *testing.T, m *xdsmatcherv3.Matcher, r request) *xdscorev3.TypedExtensionConfig {
	t.Helper()
	switch {
	case m.GetMatcherList() != nil:
		for _, fm := range m.GetMatcherList().GetMatchers() {
			if !predicateMatches(t, fm.GetPredicate(), r) {
				continue
			}
			if fm.GetOnMatch().GetMatcher() != nil {
				t.Fatalf("this test does not implement matchers nested in a matcher_list")
			}
			return onMatch(t, fm.GetOnMatch(), r)
		}
	case m.GetMatcherTree() != nil:
		if om := treeMatch(t, m.GetMatcherTree(), r); om != nil {
			return onMatch(t, om, r)
		}
	}
	return onMatch(t, m.GetOnNoMatch(), r)
}

// onMatch returns the action of om, or of the matcher it holds, or nil.
func onMatch(t *testing.T, om *xdsmatcherv3.Matcher_OnMatch, r request) *xdscorev3.TypedExtensionConfig {
	t.Helper()
	if om.GetKeepMatching() {
		t.Fatalf("this test does not implement keep_matching")
	}
	if om.GetMatcher() != nil {
		return matchRequest(t, om.GetMatcher(), r)
	}
	return om.GetAction()
}

// treeMatch returns the entry of mt that r's input picks (the longest
// prefix in a prefix_match_map), or nil.
func treeMatch(t *testing.T, mt *xdsmatcherv3.Matcher_MatcherTree, r request) *xdsmatcherv3.Matcher_OnMatch {
	t.Helper()
	v, ok := inputValue(t, mt.GetInput().GetTypedConfig(), r)
	switch {
	case !ok:
		return nil
	case mt.GetExactMatchMap() != nil:
		return mt.GetExactMatchMap().GetMap()[v]
	case mt.GetPrefixMatchMap() != nil:
		best := ""
		var om *xdsmatcherv3.Matcher_OnMatch
		for p, e := range mt.GetPrefixMatchMap().GetMap() {
			if strings.HasPrefix(v, p) && (om == nil || len(p) > len(best)) {
				best, om = p, e
			}
		}
		return om
	}
	t.Fatalf("matcher_tree %v: this test does not implement that tree", mt)
	return nil
}

// predicateMatches evaluates p on r.
func predicateMatches(t *testing.T, p *xdsmatcherv3.Matcher_MatcherList_Predicate, r request) bool {
	t.Helper()
	switch {
	case p.GetSinglePredicate() != nil:
		sp := p.GetSinglePredicate()
		if sp.GetValueMatch() == nil {
			t.Fatalf("predicate %v: this test implements value_match only", sp)
		}
		v, ok := inputValue(t, sp.GetInput().GetTypedConfig(), r)
		return ok && stringMatches(t, sp.GetValueMatch(), v)
	case p.GetAndMatcher() != nil:
		for _, q := range p.GetAndMatcher().GetPredicate() {
			if !predicateMatches(t, q, r) {
				return false
			}
		}
		return true
	case p.GetOrMatcher() != nil:
		return slices.ContainsFunc(p.GetOrMatcher().GetPredicate(), func(q *xdsmatcherv3.Matcher_MatcherList_Predicate) bool {
			return predicateMatches(t, q, r)
		})
	case p.GetNotMatcher() != nil:
		return !predicateMatches(t, p.GetNotMatcher(), r)
	}
	t.Fatalf("predicate %v: this test does not implement it", p)
	return false
}

// stringMatches evaluates sm on v.
func stringMatches(t *testing.T, sm *xdsmatcherv3.StringMatcher, v string) bool {
	t.Helper()
	if sm.GetIgnoreCase() {
		t.Fatalf("string matcher %v: this test does not implement ignore_case", sm)
	}
	switch mp := sm.GetMatchPattern().(type) {
	case *xdsmatcherv3.StringMatcher_Exact:
		return v == mp.Exact
	case *xdsmatcherv3.StringMatcher_Prefix:
		return strings.HasPrefix(v, mp.Prefix)
	case *xdsmatcherv3.StringMatcher_Suffix:
		return strings.HasSuffix(v, mp.Suffix)
	case *xdsmatcherv3.StringMatcher_Contains:
		return strings.Contains(v, mp.Contains)
	case *xdsmatcherv3.StringMatcher_SafeRegex: // the whole value must match
		return regexp.MustCompile(`^(?:` + mp.SafeRegex.GetRegex() + `)$`).MatchString(v)
	}
	t.Fatalf("string matcher %v: this test does not implement it", sm)
	return false
}

// inputValue returns what the matching input in (an HTTP or network input
// extension) reads from r, and whether it found it.
func inputValue(t *testing.T, in *anypb.Any, r request) (string, bool) {
	t.Helper()
	msg, err := in.UnmarshalNew()
	if err != nil {
		t.Fatalf("input %s: %v", in.GetTypeUrl(), err)
	}
	switch m := msg.(type) {
	case *matcherv3.HttpRequestHeaderMatchInput:
		if m.GetHeaderName() == ":path" {
			return r.path, true
		}
		v, ok := r.headers[strings.ToLower(m.GetHeaderName())]
		return v, ok
	case *networkinputsv3.SourceIPInput:
		return r.ip, true
	}
	t.Fatalf("input %s: this test does not implement it", in.GetTypeUrl())
	return "", false
}

// bucketID returns the bucket id s builds for r, as Envoy does: a static
// value as it is, a dynamic one read from r and left out when empty. ok
// is false when a dynamic value cannot be read (an absent header): Envoy
// then lets the request through without reporting it.
func bucketID(t *testing.T, s *quotav3.RateLimitQuotaBucketSettings, r request) (id map[string]string, ok bool) {
	t.Helper()
	id = map[string]string{}
	for k, vb := range s.GetBucketIdBuilder().GetBucketIdBuilder() {
		switch vs := vb.GetValueSpecifier().(type) {
		case *quotav3.RateLimitQuotaBucketSettings_BucketIdBuilder_ValueBuilder_StringValue:
			id[k] = vs.StringValue
		case *quotav3.RateLimitQuotaBucketSettings_BucketIdBuilder_ValueBuilder_CustomValue:
			v, found := inputValue(t, vs.CustomValue.GetTypedConfig(), r)
			if !found {
				return nil, false
			}
			if v != "" {
				id[k] = v
			}
		default:
			t.Fatalf("bucket_id_builder[%s]: no value", k)
		}
	}
	return id, true
}

// An assignment is what ratelimitd should assign a bucket.
type assignment struct {
	allowAll  bool   // ALLOW_ALL
	maxTokens uint32 // else a token bucket this deep: the rule's burst, for the only client
}

// TestEnvoyRLQSBucketsGetTheirAssignments: the bucket each sample request
// falls in gets, from ratelimitd, the assignment of the rule it is meant to
// hit, and every action of envoy-rlqs.yaml is some request's.
func TestEnvoyRLQSBucketsGetTheirAssignments(t *testing.T) {
	_, q := loadQuotaFilter(t, "envoy-rlqs.yaml")
	rules, err := config.Load("../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	conn := startRatelimitd(t, rules, server.Options{RLQS: true})

	var (
		allowAll = assignment{allowAll: true}
		perIP    = assignment{maxTokens: 100} // remote_address: 100 a minute
		apiKey   = assignment{maxTokens: 20}  // api_key: the burst of 20, the smallest of its limits'
		api      = assignment{maxTokens: 30}  // path=/api/*: 30 per 30 s
	)
	tests := []struct {
		name   string
		req    request
		bucket map[string]string
		want   assignment
	}{{
		name:   "health check",
		req:    request{path: "/healthz", ip: "10.0.0.1"},
		bucket: map[string]string{"path": "/healthz"},
		want:   allowAll, // unlimited
	}, {
		name:   "API call with a key",
		req:    request{path: "/api/orders?page=2", ip: "10.0.0.2", headers: map[string]string{"x-api-key": "k-1"}},
		bucket: map[string]string{"api_key": "k-1"},
		want:   apiKey,
	}, {
		name:   "page with a key",
		req:    request{path: "/account", ip: "10.0.0.3", headers: map[string]string{"x-api-key": "k-2"}},
		bucket: map[string]string{"api_key": "k-2"},
		want:   apiKey,
	}, {
		name:   "API call without a key",
		req:    request{path: "/api/orders", ip: "10.0.0.4", headers: map[string]string{"user-agent": "curl/8.5"}},
		bucket: map[string]string{"path": "/api/"},
		want:   api,
	}, {
		name:   "page",
		req:    request{path: "/index.html", ip: "10.0.0.5"},
		bucket: map[string]string{"remote_address": "10.0.0.5"},
		want:   perIP,
	}, {
		name:   "page with an empty key",
		req:    request{path: "/index.html", ip: "10.0.0.6", headers: map[string]string{"x-api-key": ""}},
		bucket: map[string]string{"remote_address": "10.0.0.6"},
		want:   perIP,
	}, {
		name:   "health check with a query string", // :path is not exactly /healthz
		req:    request{path: "/healthz?full=1", ip: "10.0.0.7"},
		bucket: map[string]string{"remote_address": "10.0.0.7"},
		want:   perIP,
	}}

	used := map[*xdscorev3.TypedExtensionConfig]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := matchRequest(t, q.GetBucketMatchers(), tt.req)
			if a == nil {
				t.Fatalf("no matcher picks %v, want bucket %v", tt.req, tt.bucket)
			}
			used[a] = true
			s := bucketSettings(t, a)
			id, ok := bucketID(t, s, tt.req)
			if !ok || !maps.Equal(id, tt.bucket) {
				t.Fatalf("action %s builds bucket %v (ok %v), want %v", a.GetName(), id, ok, tt.bucket)
			}
			checkAssignment(t, conn, q.GetDomain(), id, s.GetReportingInterval().AsDuration(), tt.want)
		})
	}

	// Every action of envoy-rlqs.yaml builds the bucket of some request.
	for _, a := range quotaActions(q.GetBucketMatchers()) {
		if !used[a] {
			t.Errorf("action %s is picked for none of the sample requests; add one", a.GetName())
		}
	}
}

// checkAssignment reports one request on bucket id, as Envoy's first report
// on a bucket does, over a new stream to ratelimitd at conn, and checks
// the assignment that answers it: want, for twice the reporting interval.
func checkAssignment(t *testing.T, conn grpc.ClientConnInterface, domain string, id map[string]string, interval time.Duration, want assignment) {
	t.Helper()
	st, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(t.Context())
	if err != nil {
		t.Fatalf("StreamRateLimitQuotas: %v", err)
	}
	bid := &rlqsv3.BucketId{Bucket: id}
	err = st.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: domain, BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
		BucketId: bid, TimeElapsed: durationpb.New(interval), NumRequestsAllowed: 1,
	}}})
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	if n := len(resp.GetBucketAction()); n != 1 || !proto.Equal(resp.GetBucketAction()[0].GetBucketId(), bid) {
		t.Fatalf("answer %v: want one action, on bucket %v", resp, id)
	}
	qa := resp.GetBucketAction()[0].GetQuotaAssignmentAction()
	if got := qa.GetAssignmentTimeToLive().AsDuration(); got != 2*interval {
		t.Errorf("bucket %v: assignment for %v, want twice the reporting interval %v", id, got, interval)
	}
	strategy := qa.GetRateLimitStrategy()
	switch {
	case want.allowAll:
		if _, ok := strategy.GetStrategy().(*typev3.RateLimitStrategy_BlanketRule_); !ok || strategy.GetBlanketRule() != typev3.RateLimitStrategy_ALLOW_ALL {
			t.Errorf("bucket %v: assigned %v, want ALLOW_ALL", id, strategy)
		}
	case strategy.GetTokenBucket() == nil:
		t.Errorf("bucket %v: assigned %v, want a token bucket", id, strategy)
	case strategy.GetTokenBucket().GetMaxTokens() != want.maxTokens:
		t.Errorf("bucket %v: token bucket %v, want %d tokens at most", id, strategy.GetTokenBucket(), want.maxTokens)
	}
}
