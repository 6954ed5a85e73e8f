package xds_test

import (
	"fmt"
	"strings"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/config/xds"
)

// entry is a request descriptor entry for config.Match.
type entry struct{ k, v string }

func (e entry) GetKey() string   { return e.k }
func (e entry) GetValue() string { return e.v }

// mustAny packs m into an Any.
func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// limit is a RateLimitPolicy of n per unit u.
func limit(u rlsconf.RateLimitUnit, n uint32) *rlsconf.RateLimitPolicy {
	return &rlsconf.RateLimitPolicy{Unit: u, RequestsPerUnit: n}
}

func TestCompileMapsEveryField(t *testing.T) {
	rc := &rlsconf.RateLimitConfig{
		Name:   "api-config",
		Domain: "api",
		Descriptors: []*rlsconf.RateLimitDescriptor{{
			Key:   "generic_key",
			Value: "login",
			Descriptors: []*rlsconf.RateLimitDescriptor{{
				Key:            "remote_address",
				RateLimit:      &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: 5, Name: "per-ip"},
				ShadowMode:     true,
				DetailedMetric: true,
			}},
		}, {
			Key:       "user",
			Value:     "admin",
			RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true, Replaces: []*rlsconf.RateLimitReplace{{Name: "per-ip"}}},
		}, {
			Key:       "user",
			RateLimit: limit(rlsconf.RateLimitUnit_DAY, 1000),
		}},
	}
	rules, err := xds.Compile([]*anypb.Any{mustAny(t, rc)})
	if err != nil {
		t.Fatal(err)
	}
	d := rules.Domain("api")
	if d == nil {
		t.Fatal("no domain api")
	}
	r := config.Match(d, []entry{{"generic_key", "login"}, {"remote_address", "10.0.0.1"}})
	if r == nil || len(r.Limits) != 1 {
		t.Fatalf("login rule = %+v, want one limit", r)
	}
	if l := r.Limits[0]; l.Requests != 5 || l.Window.Minutes() != 1 || l.Name != "per-ip" {
		t.Errorf("login limit = %+v, want 5 per minute named per-ip", l)
	}
	if !r.ShadowMode || !r.DetailedMetric || r.Path != "generic_key=login.remote_address" {
		t.Errorf("login rule flags/path = shadow %v detailed %v path %q", r.ShadowMode, r.DetailedMetric, r.Path)
	}
	admin := config.Match(d, []entry{{"user", "admin"}})
	if admin == nil || !admin.Unlimited || len(admin.Replaces) != 1 || admin.Replaces[0] != "per-ip" {
		t.Errorf("admin rule = %+v, want unlimited replacing per-ip", admin)
	}
	other := config.Match(d, []entry{{"user", "bob"}})
	if other == nil || len(other.Limits) != 1 || other.Limits[0].Requests != 1000 || other.Limits[0].Window.Hours() != 24 {
		t.Errorf("user rule = %+v, want 1000 per day", other)
	}
}

func TestCompileEmptySetHasNoDomains(t *testing.T) {
	rules, err := xds.Compile(nil)
	if err != nil {
		t.Fatal(err)
	}
	if rules == nil || len(rules.Domains()) != 0 {
		t.Fatalf("rules = %v, want no domains", rules.Domains())
	}
}

func TestCompileRefuses(t *testing.T) {
	good := &rlsconf.RateLimitConfig{Name: "good", Domain: "a", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: limit(rlsconf.RateLimitUnit_SECOND, 1)}}}
	for _, tc := range []struct {
		name string
		res  []*anypb.Any
		want []string // substrings of the error
	}{{
		name: "no unit",
		res: []*anypb.Any{mustAny(t, good), mustAny(t, &rlsconf.RateLimitConfig{Name: "bad", Domain: "b",
			Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{RequestsPerUnit: 3}}}})},
		want: []string{`resource "bad": `, "neither unit nor window"},
	}, {
		name: "unknown unit number",
		res: []*anypb.Any{mustAny(t, &rlsconf.RateLimitConfig{Name: "bad", Domain: "b",
			Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: limit(rlsconf.RateLimitUnit(9), 3)}}})},
		want: []string{`resource "bad": `, `unknown unit "9"`},
	}, {
		name: "unlimited with a unit",
		res: []*anypb.Any{mustAny(t, &rlsconf.RateLimitConfig{Name: "bad", Domain: "b",
			Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true, Unit: rlsconf.RateLimitUnit_HOUR}}}})},
		want: []string{`resource "bad": `, "unlimited: true excludes unit"},
	}, {
		name: "empty domain",
		res:  []*anypb.Any{mustAny(t, &rlsconf.RateLimitConfig{Name: "bad"})},
		want: []string{`resource "bad": `, "domain"},
	}, {
		name: "duplicate key",
		res: []*anypb.Any{mustAny(t, &rlsconf.RateLimitConfig{Name: "bad", Domain: "b",
			Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k"}, {Key: "k"}}})},
		want: []string{`resource "bad": `, `duplicate descriptor key "k"`},
	}, {
		name: "duplicate domain",
		res:  []*anypb.Any{mustAny(t, good), mustAny(t, &rlsconf.RateLimitConfig{Name: "again", Domain: "a"})},
		want: []string{`resource "again": duplicate domain "a" (first in resource "good")`},
	}, {
		name: "unnamed resource",
		res:  []*anypb.Any{mustAny(t, good), mustAny(t, &rlsconf.RateLimitConfig{Domain: "b", Descriptors: []*rlsconf.RateLimitDescriptor{{}}})},
		want: []string{"resource 1: ", "descriptor"},
	}, {
		name: "wrong type",
		res:  []*anypb.Any{mustAny(t, structpb.NewNullValue())},
		want: []string{"resource 0: ", "type.googleapis.com/google.protobuf.Value"},
	}, {
		name: "undecodable",
		res:  []*anypb.Any{{TypeUrl: xds.TypeURL, Value: []byte{0xff}}},
		want: []string{"resource 0: decode RateLimitConfig"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			rules, err := xds.Compile(tc.res)
			if err == nil {
				t.Fatalf("Compile = %v, want an error", rules.Domains())
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestCompileBoundsItsError(t *testing.T) {
	const bad = xds.MaxBadResources + 7
	res := make([]*anypb.Any, bad)
	for i := range res {
		res[i] = mustAny(t, &rlsconf.RateLimitConfig{Name: fmt.Sprintf("bad-%d", i)}) // no domain
	}
	_, err := xds.Compile(res)
	if err == nil {
		t.Fatal("Compile of bad resources = nil error")
	}
	msg := err.Error()
	last := fmt.Sprintf(`resource "bad-%d"`, xds.MaxBadResources-1)
	if !strings.Contains(msg, last) || strings.Contains(msg, fmt.Sprintf(`resource "bad-%d"`, xds.MaxBadResources)) {
		t.Errorf("error %q should describe exactly the first %d resources", msg, xds.MaxBadResources)
	}
	if !strings.HasSuffix(msg, "... and 7 more resources refused") {
		t.Errorf("error %q does not end with the count of the others", msg)
	}
}
