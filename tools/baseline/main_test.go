package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// TestShouldRateLimit checks, on a real Redis, that a counter admits up
// to the limit and then refuses, that a request is refused when any of
// its descriptors is over, and that the counters expire with the window.
func TestShouldRateLimit(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	at := time.Unix(1732400123, 0)
	s := &server{rdb: rdb, limit: 3, window: time.Hour, now: func() time.Time { return at }}
	entry := func(k, v string) *rlv3.RateLimitDescriptor {
		return &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: k, Value: v}}}
	}
	user := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{entry("user", "u42")}}
	ctx := context.Background()
	for i := range 4 {
		resp, err := s.ShouldRateLimit(ctx, user)
		if err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		want := rlsv3.RateLimitResponse_OK
		if i == 3 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if got := resp.GetOverallCode(); got != want {
			t.Errorf("call %d: %v, want %v", i+1, got, want)
		}
		if got := resp.GetStatuses()[0].GetCode(); got != want {
			t.Errorf("call %d: descriptor status %v, want %v", i+1, got, want)
		}
	}

	const key = "bench_user_u42_1732399200" // the window starts on the hour
	if n, err := rdb.Get(ctx, key).Int(); err != nil || n != 4 {
		t.Errorf("GET %s = %d, %v; want 4", key, n, err)
	}
	if ttl, err := rdb.TTL(ctx, key).Result(); err != nil || ttl <= 0 || ttl > time.Hour {
		t.Errorf("TTL %s = %v, %v; want in (0, 1h]", key, ttl, err)
	}

	// A fresh tenant under the limit does not save the request.
	both := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{entry("tenant", "t1"), entry("user", "u42")}}
	resp, err := s.ShouldRateLimit(ctx, both)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT ||
		resp.GetStatuses()[0].GetCode() != rlsv3.RateLimitResponse_OK ||
		resp.GetStatuses()[1].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("tenant t1 and over-limit user u42: %v, want OVER_LIMIT with statuses OK, OVER_LIMIT", resp)
	}

	// The next window starts a new counter.
	at = at.Add(time.Hour)
	if resp, err := s.ShouldRateLimit(ctx, user); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Errorf("next window: %v, %v; want OK", resp, err)
	}
}

// TestShouldRateLimitCluster checks, on a real Redis Cluster, that one
// request's descriptors in different slots are counted each on the node
// that serves its key, in one pipeline, and that the limit holds.
func TestShouldRateLimitCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	rdb := c.Client(t)
	at := time.Unix(1732400123, 0)
	s := &server{rdb: rdb, limit: 2, window: time.Hour, now: func() time.Time { return at }}
	entry := func(k, v string) *rlv3.RateLimitDescriptor {
		return &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: k, Value: v}}}
	}
	// A tenant whose counter another node serves than the user's.
	user := c.NodeForKey(t, "bench_user_u1_1732399200").Addr
	tenant := ""
	for i := 0; tenant == ""; i++ {
		if v := "t" + strconv.Itoa(i); c.NodeForKey(t, "bench_tenant_"+v+"_1732399200").Addr != user {
			tenant = v
		}
	}
	req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{
		entry("user", "u1"), entry("path", "/p1"), entry("tenant", tenant),
	}}
	ctx := context.Background()
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp, err := s.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		if got := resp.GetOverallCode(); got != want {
			t.Errorf("call %d: %v, want %v", i+1, got, want)
		}
	}
	nodes := map[string]bool{}
	for _, key := range []string{"bench_user_u1_1732399200", "bench_path_/p1_1732399200", "bench_tenant_" + tenant + "_1732399200"} {
		nodes[c.NodeForKey(t, key).Addr] = true
		if n, err := rdb.Get(ctx, key).Int(); err != nil || n != 3 {
			t.Errorf("GET %s = %d, %v; want 3", key, n, err)
		}
	}
	if len(nodes) < 2 {
		t.Fatal("the three keys are all on one node")
	}
}
