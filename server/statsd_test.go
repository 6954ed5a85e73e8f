package server_test

import (
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	gostats "github.com/lyft/gostats"
	"github.com/lyft/gostats/mock"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimitd/ratelimitd/server"
)

// referenceRules are rules in envoyproxy/ratelimit's format, one limit
// named.
const referenceRules = `
domain: basic
descriptors:
  - key: key1
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: fixed_window}
  - key: named
    rate_limit: {unit: hour, requests_per_unit: 5, name: mine, algorithm: fixed_window}
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: fixed_window}
  - key: client
    value: acme
    descriptors:
      - key: path
        detailed_metric: true
        rate_limit: {unit: second, requests_per_unit: 100}
  - key: tenant
    value_to_metric: true
    descriptors:
      - key: ip
        rate_limit: {unit: second, requests_per_unit: 100}
  - key: addr
    value: "10.1.2.3:80|x"
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: free
    rate_limit: {unlimited: true}
`

// TestEnvoyproxyAnswers: with EnvoyproxyAnswers, a status's limit is named
// only by the rule's name, and duration_until_reset is whole seconds, as
// envoyproxy/ratelimit answers (its integration tests compare the protos
// whole); without it, ratelimitd's own answer.
func TestEnvoyproxyAnswers(t *testing.T) {
	rules := parseRules(t, referenceRules)
	status := func(name string, rpu uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, remaining uint32, reset *durationpb.Duration) *rlsv3.RateLimitResponse_DescriptorStatus {
		return &rlsv3.RateLimitResponse_DescriptorStatus{
			Code:               ok,
			CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: rpu, Unit: unit},
			LimitRemaining:     remaining,
			DurationUntilReset: reset,
		}
	}
	req := request("basic", desc("key1", "foo"), desc("named", "x"), desc("files", "files/a.pdf"), desc("nothing", "x"))
	for _, tt := range []struct {
		name      string
		reference bool
		want      *rlsv3.RateLimitResponse
	}{
		{"ratelimitd", false, response(ok,
			status("key1", 2, minute, 1, &durationpb.Duration{Seconds: 49, Nanos: 700_000_000}),
			status("mine", 5, rlsv3.RateLimitResponse_RateLimit_HOUR, 4, &durationpb.Duration{Seconds: 3589, Nanos: 700_000_000}),
			status("files=files/*", 10, rlsv3.RateLimitResponse_RateLimit_HOUR, 9, &durationpb.Duration{Seconds: 3589, Nanos: 700_000_000}),
			okStatus())},
		// The reference: the window's length less the whole seconds since
		// its start, 60 - 10 and 3600 - 10.
		{"envoyproxy", true, response(ok,
			status("", 2, minute, 1, &durationpb.Duration{Seconds: 50}),
			status("mine", 5, rlsv3.RateLimitResponse_RateLimit_HOUR, 4, &durationpb.Duration{Seconds: 3590}),
			status("", 10, rlsv3.RateLimitResponse_RateLimit_HOUR, 9, &durationpb.Duration{Seconds: 3590}),
			okStatus())},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, rules, server.Options{EnvoyproxyAnswers: tt.reference})
			h.at(10*time.Second + 300*time.Millisecond)
			if diff := cmp.Diff(tt.want, h.should(t, req), protocmp.Transform(), ignoreHeaders); diff != "" {
				t.Errorf("response mismatch (-want +got):\n%s", diff)
			}
		})
	}
	// A limit override is never named in the reference's answers.
	overridden := request("basic", override(7, typev3.RateLimitUnit_MINUTE, 0, desc("named", "x")))
	for _, tt := range []struct {
		reference bool
		want      string
	}{{false, "mine"}, {true, ""}} {
		h := newHarness(t, rules, server.Options{EnvoyproxyAnswers: tt.reference})
		if got := h.should(t, overridden).GetStatuses()[0].GetCurrentLimit().GetName(); got != tt.want {
			t.Errorf("EnvoyproxyAnswers %v: an override's limit named %q, want %q", tt.reference, got, tt.want)
		}
	}
	// At a window's very start, the reference counts the whole window.
	h := newHarness(t, rules, server.Options{EnvoyproxyAnswers: true})
	h.at(time.Hour)
	if got := h.should(t, request("basic", desc("key1", "foo"))).GetStatuses()[0].GetDurationUntilReset(); got.GetSeconds() != 60 || got.GetNanos() != 0 {
		t.Errorf("at a window's start: duration_until_reset %v, want 60s", got)
	}
}

// TestStatsd: with Options.Statsd the rule counts go out in the
// reference's statsd names too: its stat keys (key_value levels, the
// request's values with detailed_metric and value_to_metric, the pattern
// with share_threshold, IPv4 addresses and ':' and '|' sanitized), and
// its service counters.
func TestStatsd(t *testing.T) {
	sink := mock.NewSink()
	store := gostats.NewStore(sink, false)
	h := newHarness(t, parseRules(t, referenceRules), server.Options{Statsd: store, StatsdTags: map[string]string{"env": "test"}})
	for range 3 {
		h.should(t, request("basic", desc("key1", "foo")))
	}
	h.should(t, request("basic", desc("files", "files/a.pdf"), desc("files", "files/b.csv")))
	h.should(t, request("basic", desc("client", "acme", "path", "/v1")))
	h.should(t, request("basic", desc("client", "acme", "path", "/v2\nforged:1|c\r")))
	h.should(t, request("basic", desc("tenant", "t1", "ip", "10.0.0.1")))
	h.should(t, request("basic", desc("addr", "10.1.2.3:80|x")))
	h.should(t, request("basic", desc("free", "x")))
	h.should(t, request("basic", desc("nothing", "x")))
	if _, err := h.envoy.ShouldRateLimit(t.Context(), request("basic", desc(strings.Repeat("k", 2000), "x"))); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a key of 2000 bytes: %v, want InvalidArgument", err)
	}
	store.Flush()
	for name, want := range map[string]uint64{
		"ratelimit_server.ShouldRateLimit.total_requests.__env=test":        11, // 10 decided, 1 refused as malformed
		"ratelimit.service.call.should_rate_limit.service_error.__env=test": 1,
	} {
		if got := sink.Counter(name); got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}

	const p = "ratelimit.service.rate_limit.basic."
	const tag = ".__env=test"
	want := map[string]uint64{
		p + "key1.total_hits" + tag:                   3,
		p + "key1.within_limit" + tag:                 2,
		p + "key1.over_limit" + tag:                   1,
		p + "key1.near_limit" + tag:                   1, // the 2nd hit of 2 is past 0.8 × 2
		p + "files_files/*.total_hits" + tag:          2,
		p + "files_files/*.within_limit" + tag:        2,
		p + "client_acme.path_/v1.total_hits" + tag:   1,
		p + "client_acme.path_/v1.within_limit" + tag: 1,
		// A value cannot end the line: control characters become '_'.
		p + "client_acme.path_/v2_forged_1_c_.total_hits" + tag:   1,
		p + "client_acme.path_/v2_forged_1_c_.within_limit" + tag: 1,
		p + "tenant_t1.ip.total_hits" + tag:                       1,
		p + "tenant_t1.ip.within_limit" + tag:                     1,
		p + "addr_10_1_2_3_80_x.total_hits" + tag:                 1,
		p + "addr_10_1_2_3_80_x.within_limit" + tag:               1,
		// "free", an unlimited rule, counts nothing, as in the reference.
	}
	got := map[string]uint64{}
	for name, v := range sink.Counters() {
		if len(name) > len(p) && name[:len(p)] == p {
			got[name] = v
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rule counters mismatch (-want +got):\n%s", diff)
	}

	// Loads, and refusals under the global shadow mode.
	store2 := gostats.NewStore(sink, false)
	h = newHarness(t, nil, server.Options{Statsd: store2, ShadowMode: true})
	h.srv.SetRules(parseRules(t, referenceRules))
	for range 3 {
		h.should(t, request("basic", desc("key1", "foo")))
	}
	store2.Flush()
	for name, want := range map[string]uint64{
		"ratelimit.service.config_load_success": 1,
		"ratelimit.service.global_shadow_mode":  1,
		p + "key1.shadow_mode":                  1,
	} {
		if got := sink.Counter(name); got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
}
