package envoyunit_test

import (
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/ratelimitd/ratelimitd/internal/envoyunit"
)

// TestNumbers: each unit's number and name are Envoy's, in responses and,
// but for the week, in overrides.
func TestNumbers(t *testing.T) {
	for _, u := range envoyunit.All() {
		if got := rlsv3.RateLimitResponse_RateLimit_Unit(u.Envoy).String(); got != u.EnvoyName {
			t.Errorf("%s: response unit %d is %s", u.Name, u.Envoy, got)
		}
		name, known := typev3.RateLimitUnit_name[u.Envoy]
		if known != u.Override || known && name != u.EnvoyName {
			t.Errorf("%s: override unit %d is %q (known %v), want Override %v", u.Name, u.Envoy, name, known, u.Override)
		}
	}
	// Every unit of Envoy's but UNKNOWN is in the table.
	for n := range rlsv3.RateLimitResponse_RateLimit_Unit_name {
		if _, ok := envoyunit.ByEnvoy(n); !ok && n != 0 {
			t.Errorf("response unit %d missing", n)
		}
	}
}

// TestLookups: by name in any case, by number, by length; a month is 30
// days and a year 365; an override cannot be a week.
func TestLookups(t *testing.T) {
	if u, ok := envoyunit.ByName("Month"); !ok || u.Window != 30*24*time.Hour {
		t.Errorf("ByName(Month) = %+v, %v", u, ok)
	}
	if _, ok := envoyunit.ByName("fortnight"); ok {
		t.Error("ByName(fortnight) found a unit")
	}
	if u, ok := envoyunit.ByWindow(365 * 24 * time.Hour); !ok || u.Name != "year" {
		t.Errorf("ByWindow(365 days) = %+v, %v", u, ok)
	}
	if _, ok := envoyunit.ByWindow(90 * time.Second); ok {
		t.Error("ByWindow(90s) found a unit")
	}
	if w, ok := envoyunit.OverrideWindow(int32(typev3.RateLimitUnit_HOUR)); !ok || w != time.Hour {
		t.Errorf("OverrideWindow(HOUR) = %v, %v", w, ok)
	}
	for _, n := range []int32{0, 7, 8, -1} {
		if _, ok := envoyunit.OverrideWindow(n); ok {
			t.Errorf("OverrideWindow(%d) is a unit", n)
		}
	}
	all := envoyunit.All()
	for i := 1; i < len(all); i++ {
		if all[i].Window >= all[i-1].Window {
			t.Errorf("All not longest first at %s", all[i].Name)
		}
	}
}
