package server_test

import (
	"crypto/sha256"
	"fmt"
	"math"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"weak"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimitd/ratelimitd/server"
)

// TestMatch pins which rule applies to a request descriptor: nested
// descriptors, exact value over wildcard over key alone, wildcards
// anywhere in the value, and what matches nothing. The limit's name
// (each rule here is unnamed: its key path) tells which rule applied.
func TestMatch(t *testing.T) {
	rules := loadRules(t, "gateway.yaml")
	tests := []struct {
		name    string
		entries []string
		want    *rlsv3.RateLimitResponse_DescriptorStatus
	}{
		{"key only", []string{"remote_address", "10.0.0.1"},
			limited(ok, "remote_address", 4, minute, 3, time.Minute)},
		{"exact", []string{"tenant", "acme"},
			limited(ok, "tenant=acme", 10, minute, 9, time.Minute)},
		{"nested exact", []string{"tenant", "acme", "path", "/v1/search"},
			limited(ok, "tenant=acme.path=/v1/search", 2, minute, 1, time.Minute)},
		{"nested wildcard", []string{"tenant", "acme", "path", "/v1/users"},
			limited(ok, "tenant=acme.path=/v1/*", 3, minute, 2, time.Minute)},
		{"nested key only", []string{"tenant", "acme", "path", "/v2/users"},
			limited(ok, "tenant=acme.path", 5, minute, 4, time.Minute)},
		{"exact over wildcard", []string{"tenant", "qa-staging"},
			limited(ok, "tenant=qa-staging", 8, minute, 7, time.Minute)},
		{"leading wildcard", []string{"tenant", "dev-staging"},
			limited(ok, "tenant=*-staging", 20, minute, 19, time.Minute)},
		{"wildcard in the middle, first in file order", []string{"tenant", "eu-west-prod"},
			limited(ok, "tenant=eu-*-prod", 30, minute, 29, time.Minute)},
		{"wildcard matches no characters", []string{"tenant", "eu--prod"},
			limited(ok, "tenant=eu-*-prod", 30, minute, 29, time.Minute)},
		{"prefix and suffix must not overlap", []string{"tenant", "eu-prod"},
			limited(ok, "tenant=eu-*", 40, minute, 39, time.Minute)},
		{"trailing wildcard", []string{"tenant", "eu-west"},
			limited(ok, "tenant=eu-*", 40, minute, 39, time.Minute)},
		{"wildcard over key only", []string{"tenant", "x-staging"},
			limited(ok, "tenant=*-staging", 20, minute, 19, time.Minute)},
		{"key only when nothing else matches", []string{"tenant", "globex"},
			limited(ok, "tenant", 7, minute, 6, time.Minute)},
		{"empty value under key only", []string{"tenant", ""},
			limited(ok, "tenant", 7, minute, 6, time.Minute)},
		{"rule without a limit", []string{"tenant", "free"}, okStatus()},
		{"child of a rule without a limit", []string{"tenant", "free", "plan", "trial"},
			limited(ok, "tenant=free.plan=trial", 1, minute, 0, time.Minute)},
		{"child not in the tree", []string{"tenant", "free", "plan", "pro"}, okStatus()},
		{"more entries than the tree", []string{"remote_address", "10.0.0.1", "path", "/"}, okStatus()},
		{"more entries than a nested tree", []string{"tenant", "acme", "path", "/v1/search", "method", "GET"}, okStatus()},
		{"entries out of order", []string{"path", "/v1/search", "tenant", "acme"}, okStatus()},
		{"unknown key", []string{"destination_cluster", "billing"}, okStatus()},
		{"key is case-sensitive", []string{"Remote_Address", "10.0.0.1"}, okStatus()},
		{"value is case-sensitive", []string{"tenant", "ACME"},
			limited(ok, "tenant", 7, minute, 6, time.Minute)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, rules, server.Options{})
			req := request("gateway", desc(tt.entries...))
			got := h.should(t, req)
			want := response(ok, tt.want)
			if diff := cmp.Diff(want, got, protocmp.Transform(), ignoreHeaders); diff != "" {
				t.Errorf("ShouldRateLimit(%s) mismatch (-want +got):\n%s", brief(req), diff)
			}
		})
	}
}

// TestCounterPerValue: a key-only or wildcard rule counts each request
// value apart; share_threshold makes every value of a wildcard share one
// counter.
func TestCounterPerValue(t *testing.T) {
	h := newHarness(t, loadRules(t, "gateway.yaml"), server.Options{})
	ip := func(v string) *rlsv3.RateLimitRequest { return request("gateway", desc("remote_address", v)) }
	ua := func(v string) *rlsv3.RateLimitRequest { return request("gateway", desc("user_agent", v)) }
	ipStatus := func(code rlsv3.RateLimitResponse_Code, rem uint32) *rlsv3.RateLimitResponse {
		return response(code, limited(code, "remote_address", 4, minute, rem, time.Minute))
	}
	h.run(t, []step{
		{0, ip("10.0.0.1"), ipStatus(ok, 3)},
		{0, ip("10.0.0.1"), ipStatus(ok, 2)},
		{0, ip("10.0.0.2"), ipStatus(ok, 3)}, // another value, another counter
		{0, ip("10.0.0.1"), ipStatus(ok, 1)},
		{0, ip("10.0.0.1"), ipStatus(ok, 0)},
		{0, ip("10.0.0.1"), ipStatus(over, 0)},
		{0, ip("10.0.0.2"), ipStatus(ok, 2)},
		{0, ip("10.0.0.10"), ipStatus(ok, 3)}, // not a prefix of another's key
		{0, ip(""), ipStatus(ok, 3)},

		// A wildcard without share_threshold: each value apart.
		{0, ua("bot-a"), response(ok, limited(ok, "user_agent=bot-*", 2, minute, 1, time.Minute))},
		{0, ua("bot-a"), response(ok, limited(ok, "user_agent=bot-*", 2, minute, 0, time.Minute))},
		{0, ua("bot-b"), response(ok, limited(ok, "user_agent=bot-*", 2, minute, 1, time.Minute))},
		{0, ua("bot-a"), response(over, limited(over, "user_agent=bot-*", 2, minute, 0, time.Minute))},

		// share_threshold: every curl shares one counter of 3.
		{0, ua("curl/7.88.1"), response(ok, limited(ok, "user_agent=curl/*", 3, minute, 2, time.Minute))},
		{0, ua("curl/8.5.0"), response(ok, limited(ok, "user_agent=curl/*", 3, minute, 1, time.Minute))},
		{0, ua("curl/"), response(ok, limited(ok, "user_agent=curl/*", 3, minute, 0, time.Minute))},
		{0, ua("curl/9"), response(over, limited(over, "user_agent=curl/*", 3, minute, 0, time.Minute))},
		// A literal value equal to the pattern shares it too, and the
		// key-only rule of another key is not disturbed.
		{0, ua("curl/*"), response(over, limited(over, "user_agent=curl/*", 3, minute, 0, time.Minute))},
		{time.Minute, ua("curl/1"), response(ok, limited(ok, "user_agent=curl/*", 3, minute, 2, time.Minute))},
	})
}

// TestHitsAddend: the request's hits_addend (0 means 1), a descriptor's
// own hits_addend overriding it, and 0 checking without consuming.
func TestHitsAddend(t *testing.T) {
	h := newHarness(t, loadRules(t, "gateway.yaml"), server.Options{})
	ipStatus := func(code rlsv3.RateLimitResponse_Code, rem uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
		return limited(code, "remote_address", 4, minute, rem, time.Minute)
	}
	acme := func(code rlsv3.RateLimitResponse_Code, rem uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
		return limited(code, "tenant=acme", 10, minute, rem, time.Minute)
	}
	withHits := func(n uint32, ds ...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
		r := request("gateway", ds...)
		r.HitsAddend = n
		return r
	}
	h.run(t, []step{
		{0, withHits(0, desc("remote_address", "a")), response(ok, ipStatus(ok, 3))},
		{0, withHits(2, desc("remote_address", "a")), response(ok, ipStatus(ok, 1))},
		// The descriptor's own hits_addend wins over the request's.
		{0, withHits(3, hits(1, desc("remote_address", "a")), desc("tenant", "acme")),
			response(ok, ipStatus(ok, 0), acme(ok, 7))},
		// 0 checks only: at the limit is not past it.
		{0, withHits(5, hits(0, desc("remote_address", "a"))), response(ok, ipStatus(ok, 0))},
		{0, withHits(0, hits(0, desc("remote_address", "a")), hits(0, desc("tenant", "acme"))),
			response(ok, ipStatus(ok, 0), acme(ok, 7))},
		{0, withHits(0, desc("remote_address", "a")), response(over, ipStatus(over, 0))},
		// Hits over the whole limit: refused, nothing counted.
		{0, withHits(11, desc("tenant", "acme")), response(over, acme(over, 7))},
		{0, withHits(0, hits(7, desc("tenant", "acme"))), response(ok, acme(ok, 0))},
	})

	// hits 0 is refused only past the limit, which a consume_when_over
	// rule can reach.
	report := func(code rlsv3.RateLimitResponse_Code, rem uint32) *rlsv3.RateLimitResponse {
		return response(code, limited(code, "usage_report", 3, minute, rem, time.Minute))
	}
	h.run(t, []step{
		{0, request("gateway", hits(3, desc("usage_report", "job-1"))), report(ok, 0)},
		{0, request("gateway", hits(0, desc("usage_report", "job-1"))), report(ok, 0)}, // at, not past
		{0, request("gateway", hits(2, desc("usage_report", "job-1"))), report(over, 0)},
		{0, request("gateway", hits(0, desc("usage_report", "job-1"))), report(over, 0)}, // past: 5 of 3
		{time.Minute, request("gateway", hits(0, desc("usage_report", "job-1"))), report(ok, 3)},
	})
}

// TestConsumeWhenOver: a consume_when_over rule counts its hits even when
// it is over, so later checks see the usage.
func TestConsumeWhenOver(t *testing.T) {
	h := newHarness(t, loadRules(t, "gateway.yaml"), server.Options{})
	report := func(code rlsv3.RateLimitResponse_Code, rem uint32, reset time.Duration) *rlsv3.RateLimitResponse {
		return response(code, limited(code, "usage_report", 3, minute, rem, reset))
	}
	h.run(t, []step{
		{0, request("gateway", hits(2, desc("usage_report", "job-2"))), report(ok, 1, time.Minute)},
		{0, request("gateway", hits(10, desc("usage_report", "job-2"))), report(over, 0, time.Minute)},
		{0, request("gateway", hits(0, desc("usage_report", "job-2"))), report(over, 0, time.Minute)},
		{30 * time.Second, request("gateway", desc("usage_report", "job-2")), report(over, 0, 30*time.Second)},
		{time.Minute, request("gateway", desc("usage_report", "job-2")), report(ok, 2, time.Minute)},
	})
}

func override(rpu uint32, unit typev3.RateLimitUnit, mult uint32, d *rlv3.RateLimitDescriptor) *rlv3.RateLimitDescriptor {
	d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
	if mult > 0 {
		d.Limit.UnitMultiplier = wrapperspb.UInt32(mult)
	}
	return d
}

// TestLimitOverride: a request descriptor's limit replaces every limit of
// the rule for that request, keeps the rule's algorithm, applies in a known
// domain even when no rule matches, and is ignored in an unknown domain.
func TestLimitOverride(t *testing.T) {
	rules := loadRules(t, "gateway.yaml", "burst_daily.yaml")
	perSecond, perMinute := typev3.RateLimitUnit_SECOND, typev3.RateLimitUnit_MINUTE

	t.Run("replaces the rule's limit", func(t *testing.T) {
		h := newHarness(t, rules, server.Options{})
		ov := func() *rlsv3.RateLimitRequest {
			return request("gateway", override(2, perSecond, 0, desc("remote_address", "a")))
		}
		h.run(t, []step{
			{0, ov(), response(ok, limited(ok, "remote_address", 2, second, 1, time.Second))},
			{0, ov(), response(ok, limited(ok, "remote_address", 2, second, 0, time.Second))},
			{0, ov(), response(over, limited(over, "remote_address", 2, second, 0, time.Second))},
			// The configured limit (4 a minute) counts apart and was
			// not touched.
			{0, request("gateway", desc("remote_address", "a")),
				response(ok, limited(ok, "remote_address", 4, minute, 3, time.Minute))},
			{time.Second, ov(), response(ok, limited(ok, "remote_address", 2, second, 1, time.Second))},
		})
	})

	t.Run("unit_multiplier", func(t *testing.T) {
		h := newHarness(t, rules, server.Options{})
		h.run(t, []step{
			// 3 a 3-minute window: no Envoy unit is 3 minutes.
			{0, request("gateway", override(3, perMinute, 3, desc("remote_address", "b"))),
				response(ok, limited(ok, "remote_address", 3, unknown, 2, 3*time.Minute))},
			// A multiplier of 1 is the unit itself.
			{0, request("gateway", override(3, perMinute, 1, desc("remote_address", "c"))),
				response(ok, limited(ok, "remote_address", 3, minute, 2, time.Minute))},
			// 60 seconds is a minute.
			{0, request("gateway", override(3, perSecond, 60, desc("remote_address", "c"))),
				response(ok, limited(ok, "remote_address", 3, minute, 1, time.Minute))},
		})
	})

	t.Run("keeps the rule's algorithm", func(t *testing.T) {
		h := newHarness(t, rules, server.Options{})
		// partner is a token bucket: after 1 of 2 per second the bucket
		// is full again in 0.5 s (a window would say 1 s).
		h.run(t, []step{
			{0, request("gateway", override(2, perSecond, 0, desc("partner", "p"))),
				response(ok, limited(ok, "partner_quota", 2, second, 1, 500*time.Millisecond))},
		})
	})

	t.Run("replaces every limit of rate_limits", func(t *testing.T) {
		h := newHarness(t, rules, server.Options{})
		// burst allows 3 a second and daily 5 a day; the override
		// allows 100 a minute, and nothing else applies.
		for i := range 8 {
			got := h.should(t, request("burst_daily", override(100, perMinute, 0, desc("api_key", "k"))))
			if got.GetOverallCode() != ok {
				t.Fatalf("call %d: overall %v, want OK (only the override applies)", i, got.GetOverallCode())
			}
			lim := got.GetStatuses()[0].GetCurrentLimit()
			if lim.GetRequestsPerUnit() != 100 || lim.GetUnit() != minute {
				t.Errorf("call %d: current_limit %v, want 100 per MINUTE", i, lim)
			}
			if rem := got.GetStatuses()[0].GetLimitRemaining(); rem != uint32(99-i) {
				t.Errorf("call %d: limit_remaining %d, want %d", i, rem, 99-i)
			}
		}
	})

	t.Run("a ban", func(t *testing.T) {
		h := newHarness(t, rules, server.Options{})
		h.run(t, []step{
			{0, request("gateway", override(0, perMinute, 0, desc("tenant", "acme"))),
				response(over, limited(over, "tenant=acme", 0, minute, 0, time.Minute))},
			{0, request("gateway", desc("tenant", "acme")),
				response(ok, limited(ok, "tenant=acme", 10, minute, 9, time.Minute))},
		})
	})

	t.Run("no rule matches", func(t *testing.T) {
		h := newHarness(t, rules, server.Options{})
		ov := func(kv ...string) *rlsv3.RateLimitRequest {
			return request("gateway", override(1, perMinute, 0, desc(kv...)))
		}
		h.run(t, []step{
			{0, ov("destination_cluster", "billing"),
				response(ok, limited(ok, "destination_cluster", 1, minute, 0, time.Minute))},
			{0, ov("destination_cluster", "billing"),
				response(over, limited(over, "destination_cluster", 1, minute, 0, time.Minute))},
			{0, ov("destination_cluster", "search"),
				response(ok, limited(ok, "destination_cluster", 1, minute, 0, time.Minute))},
			// More entries than the tree.
			{0, ov("remote_address", "a", "path", "/"),
				response(ok, limited(ok, "remote_address.path", 1, minute, 0, time.Minute))},
			// A rule without a limit.
			{0, ov("tenant", "free"),
				response(ok, limited(ok, "tenant=free", 1, minute, 0, time.Minute))},
			{0, ov("tenant", "free"),
				response(over, limited(over, "tenant=free", 1, minute, 0, time.Minute))},
		})
	})

	t.Run("unknown domain ignores it", func(t *testing.T) {
		h := newHarness(t, rules, server.Options{})
		for range 3 {
			req := request("nowhere", override(0, perMinute, 0, desc("remote_address", "a")),
				override(1, perSecond, 0, desc("tenant", "acme")))
			got := h.should(t, req)
			if diff := cmp.Diff(response(ok, okStatus(), okStatus()), got, protocmp.Transform()); diff != "" {
				t.Errorf("ShouldRateLimit(%s) mismatch (-want +got):\n%s", brief(req), diff)
			}
		}
	})
}

// TestUnknownDomain: every descriptor {OK}, overall OK, no headers, no
// metadata, no counter.
func TestUnknownDomain(t *testing.T) {
	h := newHarness(t, loadRules(t, "gateway.yaml", "metadata.yaml"), server.Options{})
	req := &rlsv3.RateLimitRequest{
		Domain:     "nowhere",
		HitsAddend: 1000,
		Descriptors: []*rlv3.RateLimitDescriptor{
			desc("remote_address", "10.0.0.1"),
			hits(5, desc("tenant", "acme", "path", "/v1/search")),
			desc("blocked_agent", "x"),
		},
	}
	for range 2 {
		got := h.should(t, req)
		want := response(ok, okStatus(), okStatus(), okStatus())
		if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
			t.Errorf("ShouldRateLimit(%s) mismatch (-want +got):\n%s", brief(req), diff)
		}
	}
	if n := h.store.Len(); n != 0 {
		t.Errorf("store holds %d counters after requests of an unknown domain, want 0", n)
	}
	// Domains are case-sensitive.
	got := h.should(t, request("Gateway", desc("blocked_agent", "x")))
	if diff := cmp.Diff(response(ok, okStatus()), got, protocmp.Transform()); diff != "" {
		t.Errorf("domain Gateway mismatch (-want +got):\n%s", diff)
	}
}

// TestBanAndUnlimited: requests_per_unit 0 always refuses, even a check;
// unlimited always admits and counts nothing.
func TestBanAndUnlimited(t *testing.T) {
	h := newHarness(t, loadRules(t, "gateway.yaml"), server.Options{})
	ban := func(reset time.Duration) *rlsv3.RateLimitResponse {
		return response(over, limited(over, "blocked_agent", 0, hour, 0, reset))
	}
	unlimited := &rlsv3.RateLimitResponse_DescriptorStatus{Code: ok, LimitRemaining: math.MaxUint32}
	h.run(t, []step{
		{0, request("gateway", desc("health_check", "lb")), response(ok, unlimited)},
		{0, request("gateway", hits(math.MaxUint32, desc("health_check", "lb"))), response(ok, unlimited)},
		{0, request("gateway", hits(0, desc("health_check", "lb")), desc("health_check", "lb")), response(ok, unlimited, unlimited)},
	})
	if n := h.store.Len(); n != 0 {
		t.Errorf("store holds %d counters after requests on an unlimited rule, want 0", n)
	}
	h.run(t, []step{
		{0, request("gateway", desc("blocked_agent", "scrapy")), ban(time.Hour)},
		{0, request("gateway", hits(0, desc("blocked_agent", "scrapy"))), ban(time.Hour)},
		{0, request("gateway", hits(0, desc("blocked_agent", "scrapy")), desc("health_check", "lb")), response(over, ban(time.Hour).Statuses[0], unlimited)},
	})
	if n := h.store.Len(); n != 0 {
		t.Errorf("store holds %d counters after requests on a ban, want 0", n)
	}
	// Alongside a limited descriptor, a ban refuses the request, which
	// consumes nothing.
	h.run(t, []step{
		{0, request("gateway", desc("tenant", "acme"), desc("blocked_agent", "x")),
			response(over, limited(ok, "tenant=acme", 10, minute, 10, time.Minute), limited(over, "blocked_agent", 0, hour, 0, time.Hour))},
		{0, request("gateway", hits(0, desc("tenant", "acme"))),
			response(ok, limited(ok, "tenant=acme", 10, minute, 10, time.Minute))},
		// A ban resets at the end of its unit's window.
		{10 * time.Minute, request("gateway", desc("blocked_agent", "wget")), ban(50 * time.Minute)},
	})
}

// TestShadowRule: a shadow_mode rule that is over reports OK, never
// refuses the request, and does not count its own over-limit hits.
func TestShadowRule(t *testing.T) {
	h := newHarness(t, loadRules(t, "modes.yaml"), server.Options{})
	signup := func(rem uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
		return limited(ok, "signup", 2, minute, rem, time.Minute)
	}
	login := func(rem uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
		return limited(ok, "login", 5, minute, rem, time.Minute)
	}
	h.run(t, []step{
		{0, request("modes", desc("signup", "a")), response(ok, signup(1))},
		// Over: reported OK, and its 5 hits not counted.
		{0, request("modes", hits(5, desc("signup", "a"))), response(ok, signup(1))},
		{0, request("modes", desc("signup", "a"), desc("login", "u")), response(ok, signup(0), login(4))},
		// Over again: the request passes and login consumes.
		{0, request("modes", desc("signup", "a"), desc("login", "u")), response(ok, signup(0), login(3))},
		{0, request("modes", hits(0, desc("login", "u"))), response(ok, login(3))},
		// Past the limit is never reached: a check is within it.
		{0, request("modes", hits(0, desc("signup", "a"))), response(ok, signup(0))},
	})
}

// TestGlobalShadowMode: Options.ShadowMode refuses nothing but keeps each
// descriptor's code, and descriptors within their limits still consume.
func TestGlobalShadowMode(t *testing.T) {
	h := newHarness(t, loadRules(t, "gateway.yaml"), server.Options{ShadowMode: true})
	ip := func(code rlsv3.RateLimitResponse_Code, rem uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
		return limited(code, "remote_address", 4, minute, rem, time.Minute)
	}
	acme := func(rem uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
		return limited(ok, "tenant=acme", 10, minute, rem, time.Minute)
	}
	h.run(t, []step{
		{0, request("gateway", hits(4, desc("remote_address", "a"))), response(ok, ip(ok, 0))},
		{0, request("gateway", desc("remote_address", "a"), desc("tenant", "acme")), response(ok, ip(over, 0), acme(9))},
		{0, request("gateway", hits(0, desc("tenant", "acme"))), response(ok, acme(9))},
		// The over-limit hit was not counted: a check is at the limit,
		// not past it.
		{0, request("gateway", hits(0, desc("remote_address", "a"))), response(ok, ip(ok, 0))},
		{0, request("gateway", desc("blocked_agent", "x")),
			response(ok, limited(over, "blocked_agent", 0, hour, 0, time.Hour))},
	})
}

// TestReplaces: a matched limit that replaces X removes every matched
// limit named X from the request: neither checked nor counted.
func TestReplaces(t *testing.T) {
	h := newHarness(t, loadRules(t, "modes.yaml"), server.Options{})
	vip := func(rem uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
		return limited(ok, "vip", 100, minute, rem, time.Minute)
	}
	plan := func(code rlsv3.RateLimitResponse_Code, rem uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
		return limited(code, "standard", 2, minute, rem, time.Minute)
	}
	route := func(code rlsv3.RateLimitResponse_Code, rem uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
		return limited(code, "standard", 3, minute, rem, time.Minute)
	}
	unlimited := &rlsv3.RateLimitResponse_DescriptorStatus{Code: ok, LimitRemaining: math.MaxUint32}
	h.run(t, []step{
		// Both "standard" limits go, whichever side of vip they are.
		{0, request("modes", desc("plan", "free"), desc("customer", "vip"), desc("route", "/x")),
			response(ok, okStatus(), vip(99), okStatus())},
		{0, request("modes", desc("plan", "free"), desc("customer", "vip"), desc("route", "/x")),
			response(ok, okStatus(), vip(98), okStatus())},
		{0, request("modes", hits(5, desc("plan", "free")), desc("customer", "vip")),
			response(ok, okStatus(), vip(97))},
		// Nothing was counted on them.
		{0, request("modes", hits(0, desc("plan", "free")), hits(0, desc("route", "/x"))),
			response(ok, plan(ok, 2), route(ok, 3))},
		// An unlimited rule replaces too.
		{0, request("modes", desc("route", "/x"), desc("source_cluster", "internal"), hits(9, desc("plan", "free"))),
			response(ok, okStatus(), unlimited, okStatus())},
		// Without a replacing limit, they apply.
		{0, request("modes", desc("plan", "free"), desc("route", "/x")), response(ok, plan(ok, 1), route(ok, 2))},
		{0, request("modes", hits(2, desc("plan", "free"))), response(over, plan(over, 1))},
		{0, request("modes", hits(2, desc("plan", "free")), desc("customer", "vip")), response(ok, okStatus(), vip(96))},
	})
}

// TestQuotaMode: an over quota-mode descriptor keeps its OVER_LIMIT code
// while the request passes, unless every quota-mode descriptor (or a
// normal one) is over.
func TestQuotaMode(t *testing.T) {
	h := newHarness(t, loadRules(t, "modes.yaml"), server.Options{})
	project := func(name string, code rlsv3.RateLimitResponse_Code, rem uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
		return limited(code, "project="+name, 2, minute, rem, time.Minute)
	}
	login := func(code rlsv3.RateLimitResponse_Code, rem uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
		return limited(code, "login", 5, minute, rem, time.Minute)
	}
	alpha, beta := desc("project", "alpha"), desc("project", "beta")
	h.run(t, []step{
		{0, request("modes", hits(2, desc("project", "alpha")), beta),
			response(ok, project("alpha", ok, 0), project("beta", ok, 1))},
		// alpha is over, beta is not: the request passes; alpha keeps
		// its code and consumes nothing, beta consumes.
		{0, request("modes", alpha, beta),
			response(ok, project("alpha", over, 0), project("beta", ok, 0))},
		{0, request("modes", hits(0, desc("project", "alpha")), hits(0, desc("project", "beta"))),
			response(ok, project("alpha", ok, 0), project("beta", ok, 0))},
		// Every quota descriptor over: refused.
		{0, request("modes", alpha, beta),
			response(over, project("alpha", over, 0), project("beta", over, 0))},
		// The only quota descriptor over: refused, login consumes nothing.
		{0, request("modes", alpha, desc("login", "u")),
			response(over, project("alpha", over, 0), login(ok, 5))},
		{0, request("modes", hits(0, desc("login", "u"))), response(ok, login(ok, 5))},
		// A normal descriptor over refuses, even with quota room; the
		// quota descriptor consumes nothing.
		{time.Minute, request("modes", alpha, hits(6, desc("login", "u"))),
			response(over, project("alpha", ok, 2), login(over, 5))},
		{time.Minute, request("modes", hits(0, desc("project", "alpha"))),
			response(ok, project("alpha", ok, 2))},
	})
}

// TestAtomic: a refused request consumes nothing (but on consume_when_over
// rules); an admitted one consumes on every descriptor within its limits.
func TestAtomic(t *testing.T) {
	h := newHarness(t, loadRules(t, "gateway.yaml"), server.Options{})
	ip := func(code rlsv3.RateLimitResponse_Code, rem uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
		return limited(code, "remote_address", 4, minute, rem, time.Minute)
	}
	acme := func(rem uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
		return limited(ok, "tenant=acme", 10, minute, rem, time.Minute)
	}
	// partner is a token bucket of 6 a minute: full, it resets in 0.
	partner := func(rem uint32, reset time.Duration) *rlsv3.RateLimitResponse_DescriptorStatus {
		return limited(ok, "partner_quota", 6, minute, rem, reset)
	}
	report := func(code rlsv3.RateLimitResponse_Code, rem uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
		return limited(code, "usage_report", 3, minute, rem, time.Minute)
	}
	h.run(t, []step{
		{0, request("gateway", hits(4, desc("remote_address", "a"))), response(ok, ip(ok, 0))},
		// Refused by remote_address: the others report what they would
		// admit, and keep it.
		{0, request("gateway", desc("tenant", "acme"), desc("remote_address", "a"), desc("partner", "p")),
			response(over, acme(10), ip(over, 0), partner(6, 0))},
		{0, request("gateway", hits(0, desc("tenant", "acme")), hits(0, desc("partner", "p"))),
			response(ok, acme(10), partner(6, 0))},
		// consume_when_over counts even in a refused request.
		{0, request("gateway", desc("usage_report", "job"), desc("remote_address", "a")),
			response(over, report(ok, 2), ip(over, 0))},
		{0, request("gateway", hits(0, desc("usage_report", "job"))), response(ok, report(ok, 2))},
		// Admitted: every descriptor consumes.
		{0, request("gateway", desc("tenant", "acme"), desc("partner", "p"), desc("usage_report", "job")),
			response(ok, acme(9), partner(5, 10*time.Second), report(ok, 1))},
	})
}

// TestRateLimits: several limits on one descriptor are decided together:
// the status reports the limit that refused, else the one with the least
// remaining, and when one is over none consumes.
func TestRateLimits(t *testing.T) {
	h := newHarness(t, loadRules(t, "burst_daily.yaml"), server.Options{})
	burst := func(code rlsv3.RateLimitResponse_Code, rem uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
		return limited(code, "burst", 3, second, rem, time.Second)
	}
	daily := func(code rlsv3.RateLimitResponse_Code, rem uint32, reset time.Duration) *rlsv3.RateLimitResponse_DescriptorStatus {
		return limited(code, "daily", 5, day, rem, reset)
	}
	other := func(rem uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
		return limited(ok, "other", 10, minute, rem, time.Minute-time.Second) // at t0+1s
	}
	key := func() *rlv3.RateLimitDescriptor { return desc("api_key", "k") }
	h.run(t, []step{
		{0, request("burst_daily", key()), response(ok, burst(ok, 2))},          // burst 2 left, daily 4
		{0, request("burst_daily", hits(2, key())), response(ok, burst(ok, 0))}, // burst 0, daily 2
		{0, request("burst_daily", key()), response(over, burst(over, 0))},      // burst refuses; daily keeps 2
		{0, request("burst_daily", hits(0, key())), response(ok, burst(ok, 0))}, // a check: at, not past
		{time.Second, request("burst_daily", hits(2, key())), response(ok, daily(ok, 0, 24*time.Hour-time.Second))},
		// daily refuses: neither burst nor the other descriptor consumes.
		{time.Second, request("burst_daily", key(), desc("other", "o")),
			response(over, daily(over, 0, 24*time.Hour-time.Second), other(10))},
		{time.Second, request("burst_daily", hits(0, desc("other", "o"))), response(ok, other(10))},
	})

	// Read the burst counter alone: a server on the same store whose rule
	// has only the burst limit (same algorithm and window: same counter).
	peek := server.New(h.store, parseRules(t, `
domain: burst_daily
descriptors:
  - key: api_key
    rate_limit:
      algorithm: fixed_window
      unit: second
      requests_per_unit: 3
`), server.Options{})
	got, err := peek.Envoy().ShouldRateLimit(t.Context(), request("burst_daily", hits(0, key())))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(response(ok, limited(ok, "api_key", 3, second, 1, time.Second)), got, protocmp.Transform(), ignoreHeaders); diff != "" {
		t.Errorf("burst counter after daily refused (-want +got):\n%s", diff)
	}
}

// TestCounterIdentity: changing a limit's count or name keeps its counter;
// changing its window or algorithm starts a fresh one.
func TestCounterIdentity(t *testing.T) {
	rule := func(alg, window string, requests int, name string) string {
		return fmt.Sprintf(`
domain: api
descriptors:
  - key: api_key
    rate_limit:
      name: %q
      algorithm: %s
      window: %s
      requests_per_unit: %d
`, name, alg, window, requests)
	}
	steps := []struct {
		rules string
		hits  uint64
		want  *rlsv3.RateLimitResponse_DescriptorStatus
	}{
		{rule("fixed_window", "1m", 5, "a"), 3, limited(ok, "a", 5, minute, 2, time.Minute)},
		{rule("fixed_window", "1m", 10, "a"), 0, limited(ok, "a", 10, minute, 7, time.Minute)},     // count: kept
		{rule("fixed_window", "1m", 10, "b"), 0, limited(ok, "b", 10, minute, 7, time.Minute)},     // name: kept
		{rule("fixed_window", "1m", 2, "b"), 0, limited(over, "b", 2, minute, 0, time.Minute)},     // now past it
		{rule("fixed_window", "1h", 10, "a"), 0, limited(ok, "a", 10, hour, 10, time.Hour)},        // window: fresh
		{rule("fixed_window", "2m", 10, "a"), 1, limited(ok, "a", 10, unknown, 9, 2*time.Minute)},  // window: fresh
		{rule("sliding_window", "1m", 10, "a"), 0, limited(ok, "a", 10, minute, 10, time.Minute)},  // algorithm: fresh
		{rule("sliding_log", "1m", 10, "a"), 0, limited(ok, "a", 10, minute, 10, 0)},               // algorithm: fresh
		{rule("fixed_window", "60s", 10, "a"), 0, limited(ok, "a", 10, minute, 7, time.Minute)},    // the first one again
		{rule("fixed_window", "2m", 20, "a"), 0, limited(ok, "a", 20, unknown, 19, 2*time.Minute)}, // and the other
	}
	h := newHarness(t, nil, server.Options{})
	for i, s := range steps {
		h.srv.SetRules(parseRules(t, s.rules))
		req := request("api", hits(s.hits, desc("api_key", "k")))
		got := h.should(t, req)
		if diff := cmp.Diff(s.want, got.GetStatuses()[0], protocmp.Transform()); diff != "" {
			t.Errorf("step %d (%s): status mismatch (-want +got):\n%s", i, strings.Join(strings.Fields(s.rules), " "), diff)
		}
	}
}

// TestStatuses: one status per descriptor in request order, with the
// limit's name or the rule's key path, and the Envoy unit only when the
// window is exactly one unit.
func TestStatuses(t *testing.T) {
	h := newHarness(t, loadRules(t, "gateway.yaml", "algorithms.yaml"), server.Options{})
	unlimited := &rlsv3.RateLimitResponse_DescriptorStatus{Code: ok, LimitRemaining: math.MaxUint32}
	h.run(t, []step{
		{0, request("gateway",
			desc("destination_cluster", "x"),
			desc("tenant", "acme", "path", "/v1/search"),
			desc("health_check", "lb"),
			desc("partner", "p"),
			desc("tenant", "free"),
			desc("remote_address", "a"),
			desc("tenant", "acme", "path", "/v1/users"),
		), response(ok,
			okStatus(),
			limited(ok, "tenant=acme.path=/v1/search", 2, minute, 1, time.Minute),
			unlimited,
			limited(ok, "partner_quota", 6, minute, 5, 10*time.Second),
			okStatus(),
			limited(ok, "remote_address", 4, minute, 3, time.Minute),
			limited(ok, "tenant=acme.path=/v1/*", 3, minute, 2, time.Minute),
		)},
		{0, request("algorithms",
			desc("half_minute", "a"),
			desc("window_of_a_minute", "a"),
			desc("window_of_a_day", "a"),
			desc("window_of_a_week", "a"),
		), response(ok,
			limited(ok, "half_minute", 5, unknown, 4, 30*time.Second),
			limited(ok, "window_of_a_minute", 5, minute, 4, time.Minute),
			limited(ok, "window_of_a_day", 5, day, 4, 24*time.Hour),
			limited(ok, "window_of_a_week", 5, week, 4, 7*24*time.Hour),
		)},
	})
}

// TestDurationUntilReset pins duration_until_reset per algorithm, on the
// manual clock.
func TestDurationUntilReset(t *testing.T) {
	rules := loadRules(t, "algorithms.yaml")
	tests := []struct {
		name  string
		key   string
		steps []hitAt
		want  *rlsv3.RateLimitResponse_DescriptorStatus
	}{
		// Windows: the end of the epoch-aligned window.
		{"fixed_window", "fixed", []hitAt{{10 * time.Second, 1}},
			limited(ok, "fixed", 10, minute, 9, 50*time.Second)},
		{"fixed_window next window", "fixed", []hitAt{{10 * time.Second, 3}, {70 * time.Second, 1}},
			limited(ok, "fixed", 10, minute, 9, 50*time.Second)},
		{"sliding_window", "sliding", []hitAt{{10 * time.Second, 1}},
			limited(ok, "sliding", 10, minute, 9, 50*time.Second)},
		// 6 of 10 a minute last window, 45 s ago: 6·15/60 = 1.5 still
		// weigh, plus 1 now: 7 left (rounded down).
		{"sliding_window next window", "sliding", []hitAt{{15 * time.Second, 6}, {105 * time.Second, 1}},
			limited(ok, "sliding", 10, minute, 7, 15*time.Second)},
		// Token bucket: until it is full again (10 a minute, one token
		// per 6 s; it holds 20).
		{"token_bucket", "bucket", []hitAt{{10 * time.Second, 1}},
			limited(ok, "bucket", 10, minute, 19, 6*time.Second)},
		{"token_bucket 5 taken", "bucket", []hitAt{{10 * time.Second, 5}, {16 * time.Second, 0}},
			limited(ok, "bucket", 10, minute, 16, 24*time.Second)},
		// GCRA: TAT - now, 6 s per hit.
		{"gcra", "gcra", []hitAt{{10 * time.Second, 2}},
			limited(ok, "gcra", 10, minute, 8, 12*time.Second)},
		{"gcra later", "gcra", []hitAt{{10 * time.Second, 2}, {13 * time.Second, 0}},
			limited(ok, "gcra", 10, minute, 8, 9*time.Second)},
		// Sliding log: the oldest counted hit + window - now.
		{"sliding_log", "log", []hitAt{{0, 1}, {10 * time.Second, 1}},
			limited(ok, "log", 5, unknown, 3, 20*time.Second)},
		{"sliding_log oldest expired", "log", []hitAt{{0, 1}, {10 * time.Second, 1}, {35 * time.Second, 0}},
			limited(ok, "log", 5, unknown, 4, 5*time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, rules, server.Options{})
			var got *rlsv3.RateLimitResponse
			for _, s := range tt.steps {
				h.at(s.at)
				got = h.should(t, request("algorithms", hits(s.hits, desc(tt.key, "k"))))
			}
			if diff := cmp.Diff(response(ok, tt.want), got, protocmp.Transform(), ignoreHeaders); diff != "" {
				t.Errorf("last response mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// A hitAt is one call's hits, at t0+at.
type hitAt struct {
	at   time.Duration
	hits uint64
}

// TestDynamicMetadata: the merged metadata of the matched rules that are
// not over, first value winning, under "metadata"; absent when none.
func TestDynamicMetadata(t *testing.T) {
	h := newHarness(t, loadRules(t, "metadata.yaml"), server.Options{})
	md := func(m map[string]any) *structpb.Struct {
		s, err := structpb.NewStruct(map[string]any{"metadata": m})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tests := []struct {
		at   time.Duration
		req  *rlsv3.RateLimitRequest
		want *structpb.Struct
	}{
		{0, request("metadata", desc("tenant", "acme"), desc("route", "/x")), md(map[string]any{
			"owner":  "team-payments",
			"tier":   "gold",
			"region": "eu",
			"limits": map[string]any{"daily": 100, "hourly": 10},
		})},
		// tenant=acme is over: only route's.
		{0, request("metadata", desc("tenant", "acme"), desc("route", "/x")), md(map[string]any{
			"owner":  "team-edge",
			"region": "eu",
			"limits": map[string]any{"daily": 5, "hourly": 10},
		})},
		// Request order decides which value wins.
		{time.Minute, request("metadata", desc("route", "/x"), desc("tenant", "acme")), md(map[string]any{
			"owner":  "team-edge",
			"tier":   "gold",
			"region": "eu",
			"limits": map[string]any{"daily": 5, "hourly": 10},
		})},
		{time.Minute, request("metadata", desc("plain", "p")), nil},
		{time.Minute, request("metadata", desc("nothing", "p")), nil},
		{time.Minute, request("nowhere", desc("tenant", "acme")), nil},
	}
	for i, tt := range tests {
		h.at(tt.at)
		got := withoutDecidedBy(t, h.should(t, tt.req)).GetDynamicMetadata()
		if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
			t.Errorf("%d: ShouldRateLimit(%s).dynamic_metadata mismatch (-want +got):\n%s", i, brief(tt.req), diff)
		}
	}
	// The rules' metadata was not modified by merging.
	got := h.should(t, request("metadata", desc("route", "/y"))).GetDynamicMetadata()
	want := md(map[string]any{"owner": "team-edge", "region": "eu", "limits": map[string]any{"daily": 5, "hourly": 10}})
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("route's metadata after merges (-want +got):\n%s", diff)
	}
}

// TestDecidedBy: a refused request names, in dynamic metadata's
// decided_by, the rule and limit that refused it (the first descriptor a
// limit refused), beside the rules' own metadata; an admitted one, a
// shadow-mode refusal and a request answered as envoyproxy/ratelimit
// answers carry none; /json answers it too.
func TestDecidedBy(t *testing.T) {
	rules := loadRules(t, "burst_daily.yaml", "gateway.yaml", "metadata.yaml", "modes.yaml")
	h := newHarness(t, rules, server.Options{})
	type by struct {
		name, domain, rule string
		descriptor         int
		algorithm          string
		rpu                uint64
		unit, window       string
	}
	decided := func(b by) *structpb.Value {
		return structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			"name":              structpb.NewStringValue(b.name),
			"domain":            structpb.NewStringValue(b.domain),
			"rule":              structpb.NewStringValue(b.rule),
			"descriptor":        structpb.NewNumberValue(float64(b.descriptor)),
			"algorithm":         structpb.NewStringValue(b.algorithm),
			"requests_per_unit": structpb.NewNumberValue(float64(b.rpu)),
			"unit":              structpb.NewStringValue(b.unit),
			"window":            structpb.NewStringValue(b.window),
		}})
	}
	burst := decided(by{"burst", "burst_daily", "testdata/burst_daily.yaml:5", 0, "fixed_window", 3, "SECOND", "1s"})
	ip := func(i int) *structpb.Value {
		return decided(by{"", "gateway", "testdata/gateway.yaml:8", i, "fixed_window", 4, "MINUTE", "1m0s"})
	}
	// got returns the decided_by of h's answer to req, nil if none.
	got := func(h *harness, req *rlsv3.RateLimitRequest) *structpb.Value {
		t.Helper()
		return h.should(t, req).GetDynamicMetadata().GetFields()[server.DecidedByKey]
	}
	check := func(what string, got, want *structpb.Value) {
		t.Helper()
		if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
			t.Errorf("%s: %s mismatch (-want +got):\n%s", what, server.DecidedByKey, diff)
		}
	}

	// A named limit, one of two on its rule; admitted until it refuses.
	key := request("burst_daily", desc("api_key", "k"))
	for i := range 3 {
		if resp := h.should(t, key); resp.GetDynamicMetadata() != nil {
			t.Errorf("admitted request %d: dynamic_metadata %v, want none", i, resp.GetDynamicMetadata())
		}
	}
	check("burst refused", got(h, key), burst)

	// Unnamed rules, several descriptors: the first the limits refused.
	for range 4 {
		h.should(t, request("gateway", desc("remote_address", "a"), desc("remote_address", "b")))
	}
	check("second descriptor refused", got(h, request("gateway", desc("tenant", "acme"), desc("remote_address", "a"))), ip(1))
	check("both refused", got(h, request("gateway", desc("remote_address", "b"), desc("remote_address", "a"))), ip(0))
	check("a ban", got(h, request("gateway", desc("tenant", "acme"), desc("blocked_agent", "x"))),
		decided(by{"", "gateway", "testdata/gateway.yaml:104", 1, "sliding_window", 0, "HOUR", "1h0m0s"}))
	// A request's limit override: the request's limit, no rule.
	check("override", got(h, request("gateway", override(0, typev3.RateLimitUnit_MINUTE, 0, desc("nothing", "x")))),
		decided(by{"", "gateway", "", 0, "sliding_window", 0, "MINUTE", "1m0s"}))

	// Beside the rules' metadata, which the refused descriptor's rule
	// does not add.
	h.should(t, request("metadata", desc("tenant", "acme")))
	md := h.should(t, request("metadata", desc("route", "/x"), desc("tenant", "acme"))).GetDynamicMetadata().GetFields()
	check("beside metadata", md[server.DecidedByKey],
		decided(by{"", "metadata", "testdata/metadata.yaml:4", 1, "fixed_window", 1, "MINUTE", "1m0s"}))
	if owner := md["metadata"].GetStructValue().GetFields()["owner"].GetStringValue(); owner != "team-edge" || len(md) != 2 {
		t.Errorf("dynamic_metadata %v: want metadata (route's owner team-edge) and %s", md, server.DecidedByKey)
	}

	// A shadow-mode rule over its limit refuses nothing.
	shadow := request("modes", desc("signup", "s"))
	for i := range 3 {
		if resp := h.should(t, shadow); resp.GetDynamicMetadata() != nil {
			t.Errorf("shadow request %d: dynamic_metadata %v, want none", i, resp.GetDynamicMetadata())
		}
	}

	// /json answers the same.
	ts := httpServer(t, h)
	code, body, _ := do(t, ts, "POST", "/json", `{"domain": "burst_daily", "descriptors": [{"entries": [{"key": "api_key", "value": "k"}]}]}`)
	var resp rlsv3.RateLimitResponse
	if err := protojson.Unmarshal([]byte(body), &resp); code != http.StatusTooManyRequests || err != nil {
		t.Fatalf("POST /json = %d %s (%v), want 429 and a RateLimitResponse", code, body, err)
	}
	check("/json", resp.GetDynamicMetadata().GetFields()[server.DecidedByKey], burst)

	// As envoyproxy/ratelimit answers: no decided_by.
	ref := newHarness(t, rules, server.Options{EnvoyproxyAnswers: true})
	for range 3 {
		ref.should(t, key)
	}
	if resp := ref.should(t, key); resp.GetOverallCode() != over || resp.GetDynamicMetadata() != nil {
		t.Errorf("EnvoyproxyAnswers: refusal %v, want OVER_LIMIT without dynamic_metadata", brief(resp))
	}
}

// decidedByValue is the decided_by value of a refusal by the limit name
// (a fixed window, requests per hour) of the rule at rule, on descriptor
// i of a request for domain.
func decidedByValue(name, domain, rule string, i int, requests uint64) *structpb.Value {
	return structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
		"name":              structpb.NewStringValue(name),
		"domain":            structpb.NewStringValue(domain),
		"rule":              structpb.NewStringValue(rule),
		"descriptor":        structpb.NewNumberValue(float64(i)),
		"algorithm":         structpb.NewStringValue("fixed_window"),
		"requests_per_unit": structpb.NewNumberValue(float64(requests)),
		"unit":              structpb.NewStringValue("HOUR"),
		"window":            structpb.NewStringValue("1h0m0s"),
	}})
}

// TestDecidedByReload: refusals by one limit share one decided_by value
// (built once, not per answer), and a reload replaces it: the same
// request refused under the new rules names the new rule's line and
// limit's name, in every answer after the reload.
func TestDecidedByReload(t *testing.T) {
	const before = `domain: api
descriptors:
  - key: api_key
    rate_limit: {name: old, algorithm: fixed_window, unit: hour, requests_per_unit: 1}
`
	const after = `domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: api_key
    rate_limit: {name: new, algorithm: fixed_window, unit: hour, requests_per_unit: 1}
`
	file := t.Name() + ".yaml"
	h := newHarness(t, parseRules(t, before), server.Options{})
	envoy := h.srv.Envoy() // in-process: the answers' own messages
	req := request("api", desc("api_key", "k"))
	h.should(t, req) // admitted; the counter outlives the reload (same limit)

	// refusals returns the decided_by of two in-process refusals of req,
	// checking that they are want and one shared value, and that the
	// gRPC answer carries want too.
	refusals := func(what string, want *structpb.Value) *structpb.Value {
		t.Helper()
		var got [2]*structpb.Value
		for i := range got {
			resp, err := envoy.ShouldRateLimit(t.Context(), req)
			if err != nil || resp.GetOverallCode() != over {
				t.Fatalf("%s: ShouldRateLimit = %v, %v; want OVER_LIMIT", what, brief(resp), err)
			}
			got[i] = resp.GetDynamicMetadata().GetFields()[server.DecidedByKey]
			if diff := cmp.Diff(want, got[i], protocmp.Transform()); diff != "" {
				t.Errorf("%s, refusal %d: %s mismatch (-want +got):\n%s", what, i, server.DecidedByKey, diff)
			}
		}
		if got[0] != got[1] {
			t.Errorf("%s: two refusals by one limit have two %s values, want one shared", what, server.DecidedByKey)
		}
		wire := h.should(t, req).GetDynamicMetadata().GetFields()[server.DecidedByKey]
		if diff := cmp.Diff(want, wire, protocmp.Transform()); diff != "" {
			t.Errorf("%s, over gRPC: %s mismatch (-want +got):\n%s", what, server.DecidedByKey, diff)
		}
		return got[0]
	}
	// refusals compares each value with the rules' own: the new rules'
	// after the reload, never the old ones' cached before it.
	refusals("before the reload", decidedByValue("old", "api", file+":3", 0, 1))
	h.srv.SetRules(parseRules(t, after))
	refusals("after the reload", decidedByValue("new", "api", file+":5", 0, 1))
}

// TestDecidedByReloadFrees: once refusals filled the decided_by cache
// and the rules reloaded, the old rules can be collected: neither the
// cache nor a pooled request holds them.
func TestDecidedByReloadFrees(t *testing.T) {
	const rules = `domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 1}
`
	old := weak.Make(parseRules(t, rules))
	h := newHarness(t, old.Value(), server.Options{})
	req := request("api", desc("api_key", "k"))
	for range 3 {
		h.should(t, req)
	}
	h.srv.SetRules(parseRules(t, rules))
	for range 3 {
		h.should(t, req)
	}
	for range 5 {
		runtime.GC()
		if old.Value() == nil {
			return
		}
	}
	t.Error("the old rules are still reachable after a reload")
}

// TestDecidedByUncached: the decided_by values that the cache does not
// keep, built for each answer: a descriptor past the first eight (the
// cache's bound per limit), and a request's own limit, whose values come
// from the request (so that requests cannot grow the cache).
func TestDecidedByUncached(t *testing.T) {
	h := newHarness(t, parseRules(t, `domain: api
descriptors:
  - key: api_key
    rate_limit: {name: per_key, algorithm: fixed_window, unit: hour, requests_per_unit: 1}
`), server.Options{})
	file := t.Name() + ".yaml:3"
	envoy := h.srv.Envoy()
	// refusals checks that the next two in-process answers to req are
	// refusals whose decided_by is want, each its own value.
	refusals := func(what string, req *rlsv3.RateLimitRequest, want *structpb.Value) {
		t.Helper()
		var got [2]*structpb.Value
		for i := range got {
			resp, err := envoy.ShouldRateLimit(t.Context(), req)
			if err != nil || resp.GetOverallCode() != over {
				t.Fatalf("%s: ShouldRateLimit = %v, %v; want OVER_LIMIT", what, brief(resp), err)
			}
			got[i] = resp.GetDynamicMetadata().GetFields()[server.DecidedByKey]
			if diff := cmp.Diff(want, got[i], protocmp.Transform()); diff != "" {
				t.Errorf("%s, refusal %d: %s mismatch (-want +got):\n%s", what, i, server.DecidedByKey, diff)
			}
		}
		if got[0] == got[1] {
			t.Errorf("%s: two refusals share one %s value, want one each (not cached)", what, server.DecidedByKey)
		}
	}

	ds := make([]*rlv3.RateLimitDescriptor, 10) // nine unmatched, then api_key
	for i := range ds {
		ds[i] = desc("other", fmt.Sprint(i))
	}
	ds[9] = desc("api_key", "k")
	tenth := request("api", ds...)
	h.should(t, tenth)
	refusals("descriptor 9", tenth, decidedByValue("per_key", "api", file, 9, 1))

	for _, n := range []uint32{2, 3} { // the rule's limit overridden: the rule, the request's limit
		req := request("api", override(n, typev3.RateLimitUnit_HOUR, 0, desc("api_key", "o")))
		for range n {
			h.should(t, req)
		}
		refusals(fmt.Sprintf("override %d per hour", n), req, decidedByValue("", "api", file, 0, uint64(n)))
	}
}

// TestDecidedByConcurrent: concurrent refusals by one limit on one
// descriptor index, with and without the rules' metadata beside
// decided_by, each get exactly their own dynamic metadata while they
// share the decided_by value (run with -race: nothing writes it once
// shared, and gRPC marshals it concurrently).
func TestDecidedByConcurrent(t *testing.T) {
	h := newHarness(t, parseRules(t, `domain: md
descriptors:
  - key: tenant
    rate_limit: {algorithm: fixed_window, unit: hour, requests_per_unit: 1}
  - key: route
    metadata: {owner: team-edge}
`), server.Options{})
	by := decidedByValue("", "md", t.Name()+".yaml:3", 0, 1)
	alone := request("md", desc("tenant", "acme"))
	beside := request("md", desc("tenant", "acme"), desc("route", "/x"))
	h.should(t, alone) // admitted: the ones below are refused
	wantAlone := &structpb.Struct{Fields: map[string]*structpb.Value{server.DecidedByKey: by}}
	wantBeside := &structpb.Struct{Fields: map[string]*structpb.Value{
		server.DecidedByKey: by,
		"metadata":          structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"owner": structpb.NewStringValue("team-edge")}}),
	}}
	envoy := h.srv.Envoy()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				req, want := alone, wantAlone
				if (g+i)%2 == 1 {
					req, want = beside, wantBeside
				}
				var resp *rlsv3.RateLimitResponse
				var err error
				if i%5 == 0 { // some in-process, the rest over gRPC
					resp, err = envoy.ShouldRateLimit(t.Context(), req)
				} else {
					resp, err = h.envoy.ShouldRateLimit(t.Context(), req)
				}
				if err != nil || resp.GetOverallCode() != over {
					t.Errorf("ShouldRateLimit(%s) = %v, %v; want OVER_LIMIT", brief(req), brief(resp), err)
					return
				}
				if diff := cmp.Diff(want, resp.GetDynamicMetadata(), protocmp.Transform()); diff != "" {
					t.Errorf("ShouldRateLimit(%s): dynamic_metadata mismatch (-want +got):\n%s", brief(req), diff)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestInvalidArgument: malformed requests are InvalidArgument, with a
// message that names the problem; the bounds themselves are accepted.
func TestInvalidArgument(t *testing.T) {
	h := newHarness(t, loadRules(t, "gateway.yaml"), server.Options{})
	many := func(n int) []*rlv3.RateLimitDescriptor {
		ds := make([]*rlv3.RateLimitDescriptor, n)
		for i := range ds {
			ds[i] = desc("remote_address", fmt.Sprint(i))
		}
		return ds
	}
	entries := func(n int) *rlv3.RateLimitDescriptor {
		var kv []string
		for i := range n {
			kv = append(kv, fmt.Sprintf("k%d", i), "v")
		}
		return desc(kv...)
	}
	long := func(n int) string { return strings.Repeat("a", n) }
	tests := []struct {
		name string
		req  *rlsv3.RateLimitRequest
		msg  []string // substrings of the message; nil: the request is valid
	}{
		{"empty domain", request("", desc("remote_address", "a")), []string{"domain"}},
		{"no descriptors", request("gateway"), []string{"no descriptors"}},
		{"65 descriptors", request("gateway", many(65)...), []string{"65 descriptors"}},
		{"64 descriptors", request("gateway", many(64)...), nil},
		{"no entries", request("gateway", desc("remote_address", "a"), desc()), []string{"descriptor 1", "no entries"}},
		{"33 entries", request("gateway", entries(33)), []string{"33 entries"}},
		{"32 entries", request("gateway", entries(32)), nil},
		{"empty key", request("gateway", desc("tenant", "acme", "", "x")), []string{"empty key"}},
		{"empty value", request("gateway", desc("tenant", "")), nil},
		{"key over 1024 bytes", request("gateway", desc(long(1025), "a")), []string{"key", "1025 bytes"}},
		{"key of 1024 bytes", request("gateway", desc(long(1024), "a")), nil},
		{"value of 1024 bytes", request("gateway", desc("remote_address", long(1024))), nil},
		{"domain over 256 bytes", request(long(257), desc("remote_address", "a")), []string{"domain", "257 bytes"}},
		{"domain of 256 bytes", request(long(256), desc("remote_address", "a")), nil},
		{"hits_addend over 4294967295", request("gateway", hits(1<<32, desc("remote_address", "a"))), []string{"hits", "4294967296"}},
		{"hits_addend of 4294967295", request("gateway", hits(1<<32-1, desc("remote_address", "a"))), nil},
		{"override unit UNKNOWN", request("gateway", override(1, typev3.RateLimitUnit_UNKNOWN, 0, desc("remote_address", "a"))), []string{"unit"}},
		{"override unit out of the enum", request("gateway", override(1, 42, 0, desc("remote_address", "a"))), []string{"unit"}},
		{"override unit_multiplier 0", request("gateway", &rlv3.RateLimitDescriptor{
			Entries: desc("remote_address", "a").Entries,
			Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{
				RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_SECOND, UnitMultiplier: wrapperspb.UInt32(0),
			},
		}), []string{"unit_multiplier"}},
		{"override of 101 years", request("gateway", override(1, typev3.RateLimitUnit_YEAR, 101, desc("remote_address", "a"))), []string{"window"}},
		{"override of 100 years", request("gateway", override(1, typev3.RateLimitUnit_YEAR, 100, desc("remote_address", "a"))), nil},
		// 73118 years overflow an int64 of nanoseconds; the product
		// must not wrap around to a window that looks valid (≈72 days).
		{"override of 73118 years", request("gateway", override(1, typev3.RateLimitUnit_YEAR, 73118, desc("remote_address", "a"))), []string{"window"}},
		{"override of 640511948 hours", request("gateway", override(1, typev3.RateLimitUnit_HOUR, 640511948, desc("remote_address", "a"))), []string{"window"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := h.envoy.ShouldRateLimit(t.Context(), tt.req)
			if tt.msg == nil {
				if err != nil {
					t.Errorf("ShouldRateLimit(%s): %v, want a response", tt.name, err)
				}
				return
			}
			if err == nil {
				t.Errorf("ShouldRateLimit(%s) = %s, want InvalidArgument", tt.name, brief(resp))
				return
			}
			wantCode(t, "ShouldRateLimit("+tt.name+")", err, codes.InvalidArgument, tt.msg...)
		})
	}
}

// TestMessageTooLarge: gRPC refuses a request over MaxRecvMsgSize.
func TestMessageTooLarge(t *testing.T) {
	h := newHarness(t, loadRules(t, "gateway.yaml"), server.Options{})
	big := strings.Repeat("x", server.MaxRecvMsgSize+1)
	_, err := h.envoy.ShouldRateLimit(t.Context(), request("gateway", desc("remote_address", big)))
	wantCode(t, "Envoy ShouldRateLimit of 1 MiB", err, codes.ResourceExhausted)
	_, err = h.native.ShouldRateLimit(t.Context(), nrequest("gateway", ndesc("remote_address", big)))
	wantCode(t, "native ShouldRateLimit of 1 MiB", err, codes.ResourceExhausted)
	// The connection is still usable.
	h.should(t, request("gateway", desc("remote_address", "a")))
}

// TestLongValues: a value over 1 KiB (a long User-Agent copied by Envoy)
// is counted by its digest, like any other value, rather than refused as
// an invalid request, which Envoy would let through unlimited.
func TestLongValues(t *testing.T) {
	h := newHarness(t, parseRules(t, `
domain: l
descriptors:
  - key: user_agent
    rate_limit: {unit: minute, requests_per_unit: 2}
`), server.Options{})
	long := func(n int) string { return strings.Repeat("a", n) }
	a, b := long(5000), long(4999)+"b"
	for i, tt := range []struct {
		value string
		want  rlsv3.RateLimitResponse_Code
	}{
		{a, ok}, {a, ok}, {a, over}, {b, ok}, {b, ok}, {b, over}, {long(1024), ok},
		// A value that reads like a's digest has a counter of its own.
		{fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(a))), ok},
		{fmt.Sprintf("%x", sha256.Sum256([]byte(a))), ok},
	} {
		resp := h.should(t, request("l", desc("user_agent", tt.value)))
		if got := resp.GetOverallCode(); got != tt.want {
			t.Errorf("call %d with a %d-byte value: %v, want %v", i, len(tt.value), got, tt.want)
		}
	}
	nresp := h.shouldNative(t, nrequest("l", ndesc("user_agent", a)))
	if nresp.GetCode() != nover {
		t.Errorf("native call with the long value: %v, want OVER_LIMIT on the same counter", nresp.GetCode())
	}
}

// TestIPPrefix: under a rule with ip_prefix, an IP address counts by its
// network, so that one IPv6 /64 cannot spread over 2^64 counters; values
// that are not addresses count as they are.
func TestIPPrefix(t *testing.T) {
	h := newHarness(t, parseRules(t, `
domain: ip
descriptors:
  - key: remote_address
    ip_prefix: {v4: 24}
    rate_limit: {algorithm: fixed_window, unit: hour, requests_per_unit: 1}
  - key: exact
    rate_limit: {algorithm: fixed_window, unit: hour, requests_per_unit: 1}
`), server.Options{})
	for i, tt := range []struct {
		key, value string
		want       rlsv3.RateLimitResponse_Code
	}{
		{"remote_address", "2001:db8:1:2::1", ok},
		{"remote_address", "2001:db8:1:2:ffff::9", over}, // the same /64
		{"remote_address", "2001:db8:1:3::1", ok},        // the next /64
		{"remote_address", "10.0.0.1", ok},
		{"remote_address", "10.0.0.200", over},      // the same /24
		{"remote_address", "::ffff:10.0.0.7", over}, // IPv4-mapped: IPv4
		{"remote_address", "10.0.1.1", ok},          // the next /24
		{"remote_address", "not an address", ok},    // as it is
		{"remote_address", "not an address", over},  // ...and counted
		{"exact", "2001:db8:1:2::1", ok},            // no ip_prefix: per address
		{"exact", "2001:db8:1:2::2", ok},
	} {
		resp := h.should(t, request("ip", desc(tt.key, tt.value)))
		if got := resp.GetOverallCode(); got != tt.want {
			t.Errorf("call %d: %s=%s: %v, want %v", i, tt.key, tt.value, got, tt.want)
		}
	}
}
