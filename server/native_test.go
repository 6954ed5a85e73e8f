package server_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/server"
)

const (
	nok   = ratelimitv1.Code_CODE_OK
	nover = ratelimitv1.Code_CODE_OVER_LIMIT
)

func nlimit(requests uint32, window time.Duration, alg ratelimitv1.Algorithm, name string, burst uint32) *ratelimitv1.Limit {
	return &ratelimitv1.Limit{Requests: requests, Window: durationpb.New(window), Algorithm: alg, Name: name, Burst: burst}
}

func nlimited(code ratelimitv1.Code, l *ratelimitv1.Limit, remaining uint64, reset, retry time.Duration) *ratelimitv1.DescriptorStatus {
	return &ratelimitv1.DescriptorStatus{
		Code:       code,
		Limit:      l,
		Remaining:  remaining,
		ResetAfter: durationpb.New(reset),
		RetryAfter: durationpb.New(retry),
	}
}

func nresponse(code ratelimitv1.Code, sts ...*ratelimitv1.DescriptorStatus) *ratelimitv1.ShouldRateLimitResponse {
	return &ratelimitv1.ShouldRateLimitResponse{Code: code, Statuses: sts}
}

// nhits sets a native descriptor's own hits.
func nhits(n uint64, d *ratelimitv1.Descriptor) *ratelimitv1.Descriptor {
	d.Hits = proto.Uint64(n)
	return d
}

var ignoreNativeHeaders = protocmp.IgnoreFields(&ratelimitv1.ShouldRateLimitResponse{}, "headers")

// A nstep is one native call at t0+at.
type nstep struct {
	at   time.Duration
	req  *ratelimitv1.ShouldRateLimitRequest
	want *ratelimitv1.ShouldRateLimitResponse
}

func (h *harness) runNative(t *testing.T, steps []nstep) {
	t.Helper()
	for i, s := range steps {
		h.at(s.at)
		got := h.shouldNative(t, s.req)
		if diff := cmp.Diff(s.want, got, protocmp.Transform(), ignoreNativeHeaders); diff != "" {
			t.Errorf("step %d at t0+%v: native ShouldRateLimit(%s) mismatch (-want +got):\n%s", i, s.at, brief(s.req), diff)
		}
	}
}

// TestNativeAlgorithms pins the native status per algorithm: the limit
// that decided (requests, window, algorithm, name, burst), remaining,
// reset_after and retry_after (zero when admitted; when over, the time
// until the same hits would pass).
func TestNativeAlgorithms(t *testing.T) {
	rules := loadRules(t, "algorithms.yaml")
	req := func(key string, hits uint64) *ratelimitv1.ShouldRateLimitRequest {
		return nrequest("algorithms", nhits(hits, ndesc(key, "k")))
	}
	fixed := nlimit(10, time.Minute, ratelimitv1.Algorithm_ALGORITHM_FIXED_WINDOW, "fixed", 10)
	sliding := nlimit(10, time.Minute, ratelimitv1.Algorithm_ALGORITHM_SLIDING_WINDOW, "sliding", 10)
	bucket := nlimit(10, time.Minute, ratelimitv1.Algorithm_ALGORITHM_TOKEN_BUCKET, "bucket", 20)
	gcra := nlimit(10, time.Minute, ratelimitv1.Algorithm_ALGORITHM_GCRA, "gcra", 10)
	log := nlimit(5, 30*time.Second, ratelimitv1.Algorithm_ALGORITHM_SLIDING_LOG, "log", 5)
	s := time.Second
	tests := []struct {
		name  string
		steps []nstep
	}{
		{"fixed_window", []nstep{
			{15 * s, req("fixed", 10), nresponse(nok, nlimited(nok, fixed, 0, 45*s, 0))},
			{15 * s, req("fixed", 1), nresponse(nover, nlimited(nover, fixed, 0, 45*s, 45*s))},
			{15 * s, req("fixed", 0), nresponse(nok, nlimited(nok, fixed, 0, 45*s, 0))},
			{50 * s, req("fixed", 2), nresponse(nover, nlimited(nover, fixed, 0, 10*s, 10*s))},
			{60 * s, req("fixed", 1), nresponse(nok, nlimited(nok, fixed, 9, 60*s, 0))},
		}},
		{"sliding_window", []nstep{
			{0, req("sliding", 10), nresponse(nok, nlimited(nok, sliding, 0, 60*s, 0))},
			// Next window: 10·(60-e)/60 + 1 ≤ 10 from e = 6 s, at 66 s.
			{30 * s, req("sliding", 1), nresponse(nover, nlimited(nover, sliding, 0, 30*s, 36*s))},
			{66 * s, req("sliding", 1), nresponse(nok, nlimited(nok, sliding, 0, 54*s, 0))},
		}},
		{"token_bucket", []nstep{
			{0, req("bucket", 20), nresponse(nok, nlimited(nok, bucket, 0, 120*s, 0))},
			{0, req("bucket", 1), nresponse(nover, nlimited(nover, bucket, 0, 120*s, 6*s))},
			// Half a token at 3 s; 2 need 1.5 more: 9 s.
			{3 * s, req("bucket", 2), nresponse(nover, nlimited(nover, bucket, 0, 117*s, 9*s))},
			{12 * s, req("bucket", 2), nresponse(nok, nlimited(nok, bucket, 0, 120*s, 0))},
		}},
		{"gcra", []nstep{
			{0, req("gcra", 10), nresponse(nok, nlimited(nok, gcra, 0, 60*s, 0))},
			{0, req("gcra", 1), nresponse(nover, nlimited(nover, gcra, 0, 60*s, 6*s))},
			{0, req("gcra", 3), nresponse(nover, nlimited(nover, gcra, 0, 60*s, 18*s))},
			{6 * s, req("gcra", 1), nresponse(nok, nlimited(nok, gcra, 0, 60*s, 0))},
		}},
		{"sliding_log", []nstep{
			{0, req("log", 3), nresponse(nok, nlimited(nok, log, 2, 30*s, 0))},
			{10 * s, req("log", 2), nresponse(nok, nlimited(nok, log, 0, 20*s, 0))},
			// The 3 hits at 0 leave at 30 s.
			{20 * s, req("log", 1), nresponse(nover, nlimited(nover, log, 0, 10*s, 10*s))},
			{20 * s, req("log", 4), nresponse(nover, nlimited(nover, log, 0, 10*s, 20*s))},
			{30 * s, req("log", 3), nresponse(nok, nlimited(nok, log, 0, 10*s, 0))},
		}},
		{"hits over the whole limit", []nstep{
			{15 * s, req("fixed", 11), nresponse(nover, nlimited(nover, fixed, 10, 45*s, 60*s))},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, rules, server.Options{})
			h.runNative(t, tt.steps)
		})
	}
}

// TestNative pins the native face's own fields and request shape: code,
// unlimited, hits on the request and per descriptor, limit overrides.
func TestNative(t *testing.T) {
	h := newHarness(t, loadRules(t, "gateway.yaml", "modes.yaml"), server.Options{})
	fixed := func(requests uint32, window time.Duration, name string) *ratelimitv1.Limit {
		return nlimit(requests, window, ratelimitv1.Algorithm_ALGORITHM_FIXED_WINDOW, name, requests)
	}
	ip := fixed(4, time.Minute, "remote_address")
	acme := fixed(10, time.Minute, "tenant=acme")
	m := time.Minute
	withHits := func(n uint64, r *ratelimitv1.ShouldRateLimitRequest) *ratelimitv1.ShouldRateLimitRequest {
		r.Hits = n
		return r
	}
	ovr := func(requests uint32, window time.Duration, d *ratelimitv1.Descriptor) *ratelimitv1.Descriptor {
		d.Limit = &ratelimitv1.LimitOverride{Requests: requests, Window: durationpb.New(window)}
		return d
	}
	h.runNative(t, []nstep{
		{0, nrequest("gateway", ndesc("remote_address", "a")), nresponse(nok, nlimited(nok, ip, 3, m, 0))},
		// Request hits apply to every descriptor; a descriptor's own
		// hits win, and 0 checks only.
		{0, withHits(2, nrequest("gateway", ndesc("remote_address", "a"), ndesc("tenant", "acme"))),
			nresponse(nok, nlimited(nok, ip, 1, m, 0), nlimited(nok, acme, 8, m, 0))},
		{0, withHits(5, nrequest("gateway", nhits(1, ndesc("remote_address", "a")), nhits(0, ndesc("tenant", "acme")))),
			nresponse(nok, nlimited(nok, ip, 0, m, 0), nlimited(nok, acme, 8, m, 0))},
		// Refused: the descriptor within its limit has no retry_after
		// and keeps what it had.
		{0, nrequest("gateway", ndesc("remote_address", "a"), ndesc("tenant", "acme")),
			nresponse(nover, nlimited(nover, ip, 0, m, m), nlimited(nok, acme, 8, m, 0))},
		// No rule, a rule without a limit, an unlimited rule, a ban.
		{0, nrequest("gateway", ndesc("nothing", "x"), ndesc("tenant", "free")),
			nresponse(nok, &ratelimitv1.DescriptorStatus{Code: nok}, &ratelimitv1.DescriptorStatus{Code: nok})},
		{0, nrequest("gateway", ndesc("blocked_agent", "x")),
			nresponse(nover, nlimited(nover, nlimit(0, time.Hour, ratelimitv1.Algorithm_ALGORITHM_SLIDING_WINDOW, "blocked_agent", 0), 0, time.Hour, time.Hour))},
		// A limit override keeps the rule's algorithm (and name).
		{0, nrequest("gateway", ovr(2, 10*time.Second, ndesc("tenant", "acme"))),
			nresponse(nok, nlimited(nok, fixed(2, 10*time.Second, "tenant=acme"), 1, 10*time.Second, 0))},
		{0, nrequest("gateway", ovr(3, 30*time.Second, ndesc("partner", "p"))),
			nresponse(nok, nlimited(nok, nlimit(3, 30*time.Second, ratelimitv1.Algorithm_ALGORITHM_TOKEN_BUCKET, "partner_quota", 3), 2, 10*time.Second, 0))},
		{0, nrequest("gateway", ovr(1, time.Minute, ndesc("nothing", "x"))),
			nresponse(nok, nlimited(nok, nlimit(1, time.Minute, ratelimitv1.Algorithm_ALGORITHM_SLIDING_WINDOW, "nothing", 1), 0, time.Minute, 0))},
		{0, nrequest("nowhere", ovr(0, time.Minute, ndesc("tenant", "acme"))),
			nresponse(nok, &ratelimitv1.DescriptorStatus{Code: nok})},
		// Quota mode, on the same engine: the over descriptor keeps its
		// code (and, its hits being more than the limit ever admits, a
		// retry_after of one window).
		{0, nrequest("modes", nhits(3, ndesc("project", "alpha")), ndesc("project", "beta")),
			nresponse(nok, nlimited(nover, fixed(2, m, "project=alpha"), 2, m, m), nlimited(nok, fixed(2, m, "project=beta"), 1, m, 0))},
	})

	// A shadow-mode rule over its limit: CODE_OK, and so is the request.
	got := h.shouldNative(t, nrequest("modes", nhits(3, ndesc("signup", "s"))))
	if got.GetCode() != nok || got.GetStatuses()[0].GetCode() != nok {
		t.Errorf("shadow rule over its limit: code %v, status %v; want CODE_OK and CODE_OK", got.GetCode(), got.GetStatuses()[0])
	}

	// unlimited: OK, no limit, and the flag set.
	got = h.shouldNative(t, nrequest("gateway", ndesc("health_check", "lb")))
	st := got.GetStatuses()[0]
	if got.GetCode() != nok || st.GetCode() != nok || !st.GetUnlimited() || st.GetLimit() != nil {
		t.Errorf("unlimited rule: code %v, status %v; want CODE_OK, unlimited, no limit", got.GetCode(), st)
	}
	for _, st := range h.shouldNative(t, nrequest("gateway", ndesc("remote_address", "b"), ndesc("nothing", "x"))).GetStatuses() {
		if st.GetUnlimited() {
			t.Errorf("status %v: unlimited set on a rule that is not unlimited", st)
		}
	}
}

// TestNativeInvalidArgument: malformed native requests are
// InvalidArgument, with a message that names the problem.
func TestNativeInvalidArgument(t *testing.T) {
	h := newHarness(t, loadRules(t, "gateway.yaml"), server.Options{})
	many := func(n int) []*ratelimitv1.Descriptor {
		ds := make([]*ratelimitv1.Descriptor, n)
		for i := range ds {
			ds[i] = ndesc("remote_address", fmt.Sprint(i))
		}
		return ds
	}
	entries := func(n int) *ratelimitv1.Descriptor {
		var kv []string
		for i := range n {
			kv = append(kv, fmt.Sprintf("k%d", i), "v")
		}
		return ndesc(kv...)
	}
	long := func(n int) string { return strings.Repeat("a", n) }
	ovr := func(w *durationpb.Duration) *ratelimitv1.Descriptor {
		d := ndesc("remote_address", "a")
		d.Limit = &ratelimitv1.LimitOverride{Requests: 1, Window: w}
		return d
	}
	withHits := func(n uint64, r *ratelimitv1.ShouldRateLimitRequest) *ratelimitv1.ShouldRateLimitRequest {
		r.Hits = n
		return r
	}
	tests := []struct {
		name string
		req  *ratelimitv1.ShouldRateLimitRequest
		msg  []string // nil: valid
	}{
		{"empty domain", nrequest("", ndesc("remote_address", "a")), []string{"domain"}},
		{"no descriptors", nrequest("gateway"), []string{"no descriptors"}},
		{"65 descriptors", nrequest("gateway", many(65)...), []string{"65 descriptors"}},
		{"64 descriptors", nrequest("gateway", many(64)...), nil},
		{"no entries", nrequest("gateway", ndesc()), []string{"descriptor 0", "no entries"}},
		{"33 entries", nrequest("gateway", entries(33)), []string{"33 entries"}},
		{"32 entries", nrequest("gateway", entries(32)), nil},
		{"empty key", nrequest("gateway", ndesc("", "x")), []string{"empty key"}},
		{"key over 1024 bytes", nrequest("gateway", ndesc(long(1025), "a")), []string{"key", "1025 bytes"}},
		{"domain over 256 bytes", nrequest(long(257), ndesc("remote_address", "a")), []string{"domain", "257 bytes"}},
		{"hits over 4294967295", withHits(1<<32, nrequest("gateway", ndesc("remote_address", "a"))), []string{"hits", "4294967296"}},
		{"hits of 4294967295", withHits(1<<32-1, nrequest("gateway", ndesc("remote_address", "a"))), nil},
		{"descriptor hits over 4294967295", nrequest("gateway", ndesc("tenant", "acme"), nhits(1<<32, ndesc("remote_address", "a"))), []string{"descriptor 1", "hits", "4294967296"}},
		{"override without window", nrequest("gateway", ovr(nil)), []string{"window"}},
		{"override window 0", nrequest("gateway", ovr(durationpb.New(0))), []string{"window"}},
		{"override window negative", nrequest("gateway", ovr(durationpb.New(-time.Second))), []string{"window"}},
		{"override window over 100 years", nrequest("gateway", ovr(durationpb.New(101*365*24*time.Hour))), []string{"window"}},
		{"override window not in µs", nrequest("gateway", ovr(durationpb.New(time.Second+time.Nanosecond))), []string{"window"}},
		{"override window of 1 ms", nrequest("gateway", ovr(durationpb.New(time.Millisecond))), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := h.native.ShouldRateLimit(t.Context(), tt.req)
			if tt.msg == nil {
				if err != nil {
					t.Errorf("native ShouldRateLimit(%s): %v, want a response", tt.name, err)
				}
				return
			}
			if err == nil {
				t.Errorf("native ShouldRateLimit(%s) = %s, want InvalidArgument", tt.name, brief(resp))
				return
			}
			wantCode(t, "native ShouldRateLimit("+tt.name+")", err, codes.InvalidArgument, tt.msg...)
		})
	}
}
