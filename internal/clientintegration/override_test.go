package clientintegration_test

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimitd/ratelimitd/client"
	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

// TestLimitOverrideApplied: ratelimitd applies a descriptor's limit
// override in place of its rule's limits, with the rule's algorithm and
// name.
func TestLimitOverrideApplied(t *testing.T) {
	h := newHarness(t)
	c := h.client(client.WithRefusalCache(0))
	d := client.D("api_key", "k1") // the rule admits 2 a minute
	d.Limit = &client.LimitOverride{Requests: 1, Window: 30 * time.Second}
	first := ask(t, c, "api", d)
	want := client.Limit{Name: "api_key", Requests: 1, Window: 30 * time.Second, Algorithm: client.FixedWindow, Burst: 1}
	if !first.Allowed || first.Statuses[0].Limit != want {
		t.Errorf("first: %+v, want allowed under %+v", first, want)
	}
	if second := ask(t, c, "api", d); second.Allowed || second.RetryAfter != 30*time.Second {
		t.Errorf("second: %+v, want refused for 30s", second)
	}
	d.Limit.Requests = 0
	if zero := ask(t, c, "api", client.D("api_key", "k2"), d); zero.Allowed {
		t.Errorf("an override of 0 requests: %+v, want refused", zero)
	}
}

// TestLimitOverrideValidation: the Client refuses exactly the overrides
// ratelimitd refuses: each window is sent to ratelimitd as is, bypassing
// the Client, and both must agree.
func TestLimitOverrideValidation(t *testing.T) {
	h := newHarness(t)
	rls := ratelimitv1.NewRateLimitServiceClient(h.conn)
	const years100 = 100 * 365 * 24 * time.Hour
	for _, w := range []time.Duration{
		0, -time.Second, time.Millisecond - time.Microsecond, time.Millisecond, 1500 * time.Microsecond,
		time.Second + time.Nanosecond, time.Hour, years100, years100 + time.Microsecond,
	} {
		for _, domain := range []string{"api", "no_such_domain"} {
			d := client.D("api_key", "k")
			d.Limit = &client.LimitOverride{Requests: 5, Window: w}
			clientErr := client.Validate(domain, d)
			_, serverErr := rls.ShouldRateLimit(t.Context(), &ratelimitv1.ShouldRateLimitRequest{
				Domain: domain,
				Descriptors: []*ratelimitv1.Descriptor{{
					Entries: []*ratelimitv1.Entry{{Key: "api_key", Value: "k"}},
					Limit:   &ratelimitv1.LimitOverride{Requests: 5, Window: durationpb.New(w)},
				}},
			})
			if status.Code(clientErr) != status.Code(serverErr) || (serverErr != nil && status.Code(serverErr) != codes.InvalidArgument) {
				t.Errorf("window %v in %s: Client says %v, ratelimitd says %v", w, domain, clientErr, serverErr)
			}
		}
	}
}

// TestLimitOverrideCounters: overrides of one window share the
// descriptor's count whatever their requests; another window counts
// apart.
func TestLimitOverrideCounters(t *testing.T) {
	h := newHarness(t)
	c := h.client(client.WithRefusalCache(0))
	with := func(requests uint32, window time.Duration) client.Descriptor {
		d := client.D("api_key", "k1")
		d.Limit = &client.LimitOverride{Requests: requests, Window: window}
		return d
	}
	ask(t, c, "api", with(2, time.Minute))
	ask(t, c, "api", with(2, time.Minute))
	if d := ask(t, c, "api", with(3, time.Minute)); !d.Allowed || d.Statuses[0].Remaining != 0 {
		t.Errorf("third hit under 3 a minute: %+v, want allowed, 0 remaining (the count is shared)", d)
	}
	if d := ask(t, c, "api", with(2, 30*time.Second)); !d.Allowed || d.Statuses[0].Remaining != 1 {
		t.Errorf("under another window: %+v, want allowed, 1 remaining (counted apart)", d)
	}
}
