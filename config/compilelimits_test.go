package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/config"
)

func TestCompileLimits(t *testing.T) {
	got, err := config.CompileLimits([]*config.RateLimit{
		{RequestsPerUnit: 1000, Unit: "Minute"},
		{RequestsPerUnit: 5, Window: "90s", Algorithm: "token_bucket", Burst: 10, Name: "burst"},
	}, config.WithDefaultAlgorithm(backend.FixedWindow))
	if err != nil {
		t.Fatal(err)
	}
	want := []config.RuleLimit{
		{Limit: backend.Limit{Algorithm: backend.FixedWindow, Requests: 1000, Window: time.Minute}},
		{Limit: backend.Limit{Algorithm: backend.TokenBucket, Requests: 5, Window: 90 * time.Second, Burst: 10}, Name: "burst"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("CompileLimits: (-want +got)\n%s", d)
	}
}

func TestCompileLimitsErrors(t *testing.T) {
	for _, tc := range []struct {
		limits []*config.RateLimit
		want   string
	}{
		{nil, "rate_limits is empty"},
		{[]*config.RateLimit{{RequestsPerUnit: 1, Unit: "minutes"}}, `unknown unit "minutes"`},
		{[]*config.RateLimit{{RequestsPerUnit: 1}}, "neither unit nor window"},
		{[]*config.RateLimit{{RequestsPerUnit: 1, Unit: "second", Window: "1s"}}, "unit and window exclude each other"},
		{[]*config.RateLimit{{Unlimited: true}}, "unlimited is not allowed"},
		{[]*config.RateLimit{{RequestsPerUnit: 1, Unit: "second", Burst: 3}}, "burst applies to token_bucket and gcra only"},
		{[]*config.RateLimit{{RequestsPerUnit: 1, Unit: "second", Algorithm: "leaky"}}, "leaky"},
		{[]*config.RateLimit{{RequestsPerUnit: 1, Unit: "second"}, {RequestsPerUnit: 2, Window: "1s"}}, "would share one counter"},
		{[]*config.RateLimit{nil}, "rate_limits[0] is nil"},
	} {
		_, err := config.CompileLimits(tc.limits)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CompileLimits(%v) = %v, want an error with %q", tc.limits, err, tc.want)
		}
	}
}
