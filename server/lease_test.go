package server_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/server"
)

// giveBack returns d as a descriptor that gives its hits back.
func giveBack(d *rlv3.RateLimitDescriptor) *rlv3.RateLimitDescriptor {
	d.IsNegativeHits = true
	return d
}

// TestNegativeHits: Envoy's is_negative_hits gives a descriptor's hits
// back on every algorithm, never past the limit, and is never refused.
func TestNegativeHits(t *testing.T) {
	for _, tc := range []struct {
		key string
		// remaining after taking 5, then after giving 3 back
		took, gave uint32
	}{
		{"fixed", 5, 8},
		{"sliding", 5, 8},
		{"log", 0, 3},
		{"bucket", 15, 18},
		{"gcra", 5, 8},
	} {
		t.Run(tc.key, func(t *testing.T) {
			h := newHarness(t, loadRules(t, "algorithms.yaml"), server.Options{})
			d := func() *rlv3.RateLimitDescriptor { return desc(tc.key, "x") }
			// A give-back on a fresh budget changes nothing.
			resp := h.should(t, request("algorithms", giveBack(hits(3, d()))))
			full := resp.GetStatuses()[0].GetLimitRemaining()
			if resp.GetOverallCode() != ok || resp.GetStatuses()[0].GetCode() != ok {
				t.Fatalf("give-back on a fresh budget: %s, want OK", brief(resp))
			}
			if got := h.should(t, request("algorithms", hits(0, d()))).GetStatuses()[0].GetLimitRemaining(); got != full {
				t.Errorf("after a give-back on a fresh budget: remaining %d, want %d as before", got, full)
			}
			if got := h.should(t, request("algorithms", hits(5, d()))).GetStatuses()[0].GetLimitRemaining(); got != tc.took {
				t.Errorf("after taking 5: remaining %d, want %d", got, tc.took)
			}
			resp = h.should(t, request("algorithms", giveBack(hits(3, d()))))
			if got := resp.GetStatuses()[0]; got.GetCode() != ok || got.GetLimitRemaining() != tc.gave {
				t.Errorf("giving 3 back: %s, want OK with %d remaining", brief(resp), tc.gave)
			}
			// More than was taken gives back no more than the limit.
			resp = h.should(t, request("algorithms", giveBack(hits(1000, d()))))
			if got := resp.GetStatuses()[0].GetLimitRemaining(); got != full {
				t.Errorf("giving 1000 back: remaining %d, want the full %d", got, full)
			}
		})
	}
}

// TestNegativeHitsBesideTakes: a request's positive descriptors are
// decided all or nothing among themselves; its give-backs apply whatever
// they decide, and are reported OK.
func TestNegativeHitsBesideTakes(t *testing.T) {
	h := newHarness(t, loadRules(t, "concurrency.yaml"), server.Options{})
	h.should(t, request("jobs", desc("report", "r"))) // report's only hit
	h.should(t, request("jobs", desc("exports", "acme"), desc("exports", "acme")))
	// report is over: the call is refused, and exports gets its slot back
	// all the same.
	resp := h.should(t, request("jobs", desc("report", "r"), giveBack(desc("exports", "acme"))))
	if resp.GetOverallCode() != over || resp.GetStatuses()[0].GetCode() != over || resp.GetStatuses()[1].GetCode() != ok {
		t.Fatalf("refused take beside a give-back: %s, want OVER_LIMIT, [OVER_LIMIT, OK]", brief(resp))
	}
	if got := resp.GetStatuses()[1].GetLimitRemaining(); got != 1 {
		t.Errorf("the give-back's remaining: %d, want 1", got)
	}
	// The request's hits_addend is what a descriptor without its own gives back.
	h.should(t, request("jobs", desc("exports", "acme")))
	resp = h.should(t, &rlsv3.RateLimitRequest{Domain: "jobs", HitsAddend: 2, Descriptors: []*rlv3.RateLimitDescriptor{giveBack(desc("exports", "acme"))}})
	if got := resp.GetStatuses()[0].GetLimitRemaining(); got != 2 {
		t.Errorf("giving back the request's hits_addend 2: remaining %d, want 2", got)
	}
}

// TestEnvoyConcurrency: Envoy acquires with a positive hit and releases
// with is_negative_hits; a slot never released frees itself when its
// lease lapses.
func TestEnvoyConcurrency(t *testing.T) {
	h := newHarness(t, loadRules(t, "concurrency.yaml"), server.Options{})
	acquire := func() *rlsv3.RateLimitResponse { return h.should(t, request("jobs", desc("exports", "acme"))) }
	release := func() *rlsv3.RateLimitResponse {
		return h.should(t, request("jobs", giveBack(desc("exports", "acme"))))
	}
	h.at(0)
	acquire() // this caller crashes and never releases
	h.at(time.Minute)
	acquire()
	if resp := acquire(); resp.GetOverallCode() != over {
		t.Fatalf("third acquire of 2: %s, want OVER_LIMIT", brief(resp))
	}
	release() // frees the newest slot: the crashed caller's stays held
	if resp := acquire(); resp.GetOverallCode() != ok {
		t.Fatalf("acquire after a release: %s, want OK", brief(resp))
	}
	if resp := acquire(); resp.GetOverallCode() != over {
		t.Fatalf("acquire with both slots held: %s, want OVER_LIMIT", brief(resp))
	}
	h.at(10 * time.Minute) // the crashed caller's lease lapses
	if resp := acquire(); resp.GetOverallCode() != ok {
		t.Fatalf("acquire once the first lease lapsed: %s, want OK", brief(resp))
	}
	st := h.should(t, request("jobs", hits(0, desc("exports", "acme")))).GetStatuses()[0]
	if st.GetLimitRemaining() != 0 || st.GetCurrentLimit().GetRequestsPerUnit() != 2 {
		t.Errorf("check: %v, want 0 remaining of 2", st)
	}
	// Releasing more than is held frees what is held, no more.
	release()
	release()
	release()
	if got := h.should(t, request("jobs", hits(0, desc("exports", "acme")))).GetStatuses()[0].GetLimitRemaining(); got != 2 {
		t.Errorf("after releasing three of two: remaining %d, want 2", got)
	}
}

// TestJSONNegativeHits: /json takes isNegativeHits as gRPC does.
func TestJSONNegativeHits(t *testing.T) {
	h := newHarness(t, loadRules(t, "concurrency.yaml"), server.Options{})
	ts := httpServer(t, h)
	body := func(negative bool) string {
		return fmt.Sprintf(`{"domain":"jobs","descriptors":[{"entries":[{"key":"exports","value":"a"}],"isNegativeHits":%v}]}`, negative)
	}
	for i, want := range []string{"OK", "OK", "OVER_LIMIT"} {
		if _, got, _ := do(t, ts, "POST", "/json", body(false)); !strings.Contains(got, `"overall_code":"`+want+`"`) && !strings.Contains(got, `"overallCode":"`+want+`"`) {
			t.Fatalf("acquire %d: %s, want %s", i, got, want)
		}
	}
	code, got, _ := do(t, ts, "POST", "/json", body(true))
	var resp struct {
		Statuses []struct {
			Code           string `json:"code"`
			LimitRemaining uint32 `json:"limitRemaining"`
		} `json:"statuses"`
	}
	if err := json.Unmarshal([]byte(got), &resp); err != nil || code != 200 || len(resp.Statuses) != 1 {
		t.Fatalf("release: %d %s (%v)", code, got, err)
	}
	if st := resp.Statuses[0]; st.Code != "OK" || st.LimitRemaining != 1 {
		t.Errorf("release: %+v, want OK with 1 remaining", st)
	}
}

// nativeDesc returns a native descriptor of key=value.
func nativeDesc(key, value string) *ratelimitv1.Descriptor {
	return &ratelimitv1.Descriptor{Entries: []*ratelimitv1.Entry{{Key: key, Value: value}}}
}

// TestNativeGiveBack: the native API's give_back field.
func TestNativeGiveBack(t *testing.T) {
	h := newHarness(t, loadRules(t, "algorithms.yaml"), server.Options{})
	take := &ratelimitv1.ShouldRateLimitRequest{Domain: "algorithms", Hits: 4, Descriptors: []*ratelimitv1.Descriptor{nativeDesc("fixed", "x")}}
	h.shouldNative(t, take)
	back := nativeDesc("fixed", "x")
	back.GiveBack = true
	resp := h.shouldNative(t, &ratelimitv1.ShouldRateLimitRequest{Domain: "algorithms", Hits: 3, Descriptors: []*ratelimitv1.Descriptor{back}})
	if st := resp.GetStatuses()[0]; resp.GetCode() != ratelimitv1.Code_CODE_OK || st.GetRemaining() != 9 {
		t.Errorf("give_back of 3 after 4 of 10: %v, want OK with 9 remaining", resp)
	}
}

// TestLeases: Acquire answers a lease that Release gives back exactly,
// once; Renew extends it, and fails once it lapsed.
func TestLeases(t *testing.T) {
	h := newHarness(t, loadRules(t, "concurrency.yaml"), server.Options{})
	ctx := t.Context()
	descs := []*ratelimitv1.Descriptor{nativeDesc("mixed", "acme")}
	acquire := func() *ratelimitv1.AcquireResponse {
		t.Helper()
		resp, err := h.native.Acquire(ctx, &ratelimitv1.AcquireRequest{Domain: "jobs", Descriptors: descs})
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		return resp
	}
	h.at(0)
	a := acquire()
	if a.GetCode() != ratelimitv1.Code_CODE_OK || a.GetLease() == nil {
		t.Fatalf("Acquire: %v, want OK with a lease", a)
	}
	if got, want := a.GetLease().GetExpiresAt().AsTime(), t0.Add(time.Minute); !got.Equal(want) {
		t.Errorf("lease expires at %v, want %v (the in_flight limit's window)", got, want)
	}
	h.at(time.Second)
	b, c := acquire(), acquire()
	if c.GetLease() == nil || string(b.GetLease().GetId()) == string(c.GetLease().GetId()) {
		t.Fatalf("two leases: %x and %x, want two different ids", b.GetLease().GetId(), c.GetLease().GetId())
	}
	if d := acquire(); d.GetCode() != ratelimitv1.Code_CODE_OVER_LIMIT || d.GetLease() != nil {
		t.Fatalf("fourth Acquire of 3: %v, want OVER_LIMIT without a lease", d)
	}
	release := func(l *ratelimitv1.Lease) {
		t.Helper()
		resp, err := h.native.Release(ctx, &ratelimitv1.ReleaseRequest{Domain: "jobs", Descriptors: descs, LeaseId: l.GetId()})
		if err != nil {
			t.Fatalf("Release: %v", err)
		}
		if resp.GetStatuses()[0].GetCode() != ratelimitv1.Code_CODE_OK {
			t.Errorf("Release: %v, want OK", resp)
		}
	}
	release(b.GetLease())
	release(b.GetLease()) // a second release of one lease frees nothing more
	if d := acquire(); d.GetCode() != ratelimitv1.Code_CODE_OK {
		t.Fatalf("Acquire after a release: %v, want OK", d)
	}
	if d := acquire(); d.GetCode() != ratelimitv1.Code_CODE_OVER_LIMIT {
		t.Fatalf("Acquire after a double release: %v, want OVER_LIMIT: a lease is released once", d)
	}
	// Release gives back the slot only: per_hour keeps the 5 hits taken.
	st := h.shouldNative(t, &ratelimitv1.ShouldRateLimitRequest{Domain: "jobs", Descriptors: []*ratelimitv1.Descriptor{{Entries: descs[0].Entries, Hits: new(uint64)}}})
	for _, s := range st.GetStatuses() {
		if s.GetLimit().GetName() == "per_hour" && s.GetRemaining() != 95 {
			t.Errorf("per_hour after 5 acquires and a release: %d remaining, want 95", s.GetRemaining())
		}
	}

	// a's lease ends at t0+1m: renewed at t0+50s, it holds until t0+1m50s.
	h.at(50 * time.Second)
	r, err := h.native.Renew(ctx, &ratelimitv1.RenewRequest{Domain: "jobs", Descriptors: descs, LeaseId: a.GetLease().GetId()})
	if err != nil || r.GetCode() != ratelimitv1.Code_CODE_OK || r.GetLease() == nil {
		t.Fatalf("Renew: %v, %v; want OK with a lease", r, err)
	}
	if got, want := r.GetLease().GetExpiresAt().AsTime(), t0.Add(110*time.Second); !got.Equal(want) {
		t.Errorf("renewed lease expires at %v, want %v", got, want)
	}
	h.at(61*time.Second + 500*time.Millisecond) // c's lease and the third acquire's lapsed, a's renewed one holds
	free := func() uint64 {
		t.Helper()
		resp := h.shouldNative(t, &ratelimitv1.ShouldRateLimitRequest{Domain: "jobs", Descriptors: []*ratelimitv1.Descriptor{{Entries: descs[0].Entries, Hits: new(uint64)}}})
		for _, s := range resp.GetStatuses() {
			return s.GetRemaining() // in_flight, the one with the least remaining while per_hour has 95
		}
		return 0
	}
	if got := free(); got != 2 {
		t.Errorf("at t0+61.5s: %d slots free, want 2 (the renewed lease holds one)", got)
	}
	// The old id of a renewed lease no longer names it.
	if r2, err := h.native.Renew(ctx, &ratelimitv1.RenewRequest{Domain: "jobs", Descriptors: descs, LeaseId: c.GetLease().GetId()}); err != nil || r2.GetCode() != ratelimitv1.Code_CODE_OVER_LIMIT || r2.GetLease() != nil {
		t.Errorf("Renew of a lapsed lease: %v, %v; want OVER_LIMIT without a lease", r2, err)
	}
	release(r.GetLease())
	if got := free(); got != 3 {
		t.Errorf("after releasing the renewed lease: %d slots free, want 3", got)
	}
}

// TestLeaseInvalid: bad lease requests get InvalidArgument.
func TestLeaseInvalid(t *testing.T) {
	h := newHarness(t, loadRules(t, "concurrency.yaml"), server.Options{})
	ctx := t.Context()
	descs := []*ratelimitv1.Descriptor{nativeDesc("exports", "acme")}
	back := nativeDesc("exports", "acme")
	back.GiveBack = true
	_, err := h.native.Acquire(ctx, &ratelimitv1.AcquireRequest{Domain: "jobs", Descriptors: []*ratelimitv1.Descriptor{back}})
	wantCode(t, "Acquire(give_back)", err, codes.InvalidArgument, "give_back")
	_, err = h.native.Release(ctx, &ratelimitv1.ReleaseRequest{Domain: "jobs", Descriptors: descs})
	wantCode(t, "Release(no lease)", err, codes.InvalidArgument, "lease_id")
	_, err = h.native.Renew(ctx, &ratelimitv1.RenewRequest{Domain: "jobs", Descriptors: descs, LeaseId: []byte{9, 9}})
	wantCode(t, "Renew(bad version)", err, codes.InvalidArgument, "lease_id")
	a, err := h.native.Acquire(ctx, &ratelimitv1.AcquireRequest{Domain: "jobs", Descriptors: descs})
	if err != nil {
		t.Fatal(err)
	}
	two := []*ratelimitv1.Descriptor{descs[0], nativeDesc("exports", "globex")}
	_, err = h.native.Release(ctx, &ratelimitv1.ReleaseRequest{Domain: "jobs", Descriptors: two, LeaseId: a.GetLease().GetId()})
	wantCode(t, "Release(another request's lease)", err, codes.InvalidArgument, "lease_id")
	_, err = h.native.Release(ctx, &ratelimitv1.ReleaseRequest{Domain: "jobs", Descriptors: descs, LeaseId: append(a.GetLease().GetId(), 0)})
	wantCode(t, "Release(trailing bytes)", err, codes.InvalidArgument, "lease_id")
	_, err = h.native.Release(ctx, &ratelimitv1.ReleaseRequest{Domain: "jobs", Descriptors: descs, LeaseId: make([]byte, 5000)})
	wantCode(t, "Release(huge lease)", err, codes.InvalidArgument, "lease_id")
}

// TestExplainConcurrency: explain shows the slots held and when the
// oldest lease lapses.
func TestExplainConcurrency(t *testing.T) {
	h := newHarness(t, loadRules(t, "concurrency.yaml"), server.Options{})
	h.at(0)
	h.should(t, request("jobs", desc("exports", "acme")))
	h.at(time.Minute)
	h.should(t, request("jobs", desc("exports", "acme")))
	h.at(2 * time.Minute)
	resp, err := h.native.Explain(t.Context(), &ratelimitv1.ExplainRequest{Request: &ratelimitv1.ShouldRateLimitRequest{Domain: "jobs", Descriptors: []*ratelimitv1.Descriptor{nativeDesc("exports", "acme")}}})
	if err != nil {
		t.Fatal(err)
	}
	l := resp.GetDescriptors()[0].GetLimits()[0]
	if l.GetHeld() != 2 || l.GetNextLeaseExpiry().AsDuration() != 8*time.Minute || l.GetLimit().GetAlgorithm() != ratelimitv1.Algorithm_ALGORITHM_CONCURRENCY {
		t.Errorf("explained: %v, want 2 held, the next lapsing in 8m, algorithm CONCURRENCY", l)
	}
}
