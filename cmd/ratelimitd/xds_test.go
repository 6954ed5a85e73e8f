package main

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

const xdsNodeID = "ratelimitd-daemon-test"

// startXDS starts a go-control-plane management server on loopback that
// serves a snapshot cache, and returns its address and cache.
func startXDS(t *testing.T) (string, cachev3.SnapshotCache) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cache := cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil)
	g := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, serverv3.NewServer(ctx, cache, nil))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Serve(lis)
	}()
	t.Cleanup(func() {
		cancel()
		g.Stop()
		<-done
	})
	return lis.Addr().String(), cache
}

// publish sets configs as snapshot version for the daemon's node.
func publish(t *testing.T, cache cachev3.SnapshotCache, version string, configs ...*rlsconf.RateLimitConfig) {
	t.Helper()
	res := make([]types.Resource, len(configs))
	for i, c := range configs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		t.Fatal(err)
	}
	if err := cache.SetSnapshot(context.Background(), xdsNodeID, snap); err != nil {
		t.Fatal(err)
	}
}

// rateLimitConfig is domain "d" with the rule k: n per minute.
func rateLimitConfig(n uint32) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{
		Name:   "d-config",
		Domain: "d",
		Descriptors: []*rlsconf.RateLimitDescriptor{{
			Key:       "k",
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: n},
		}},
	}
}

// eventually polls cond until it holds, failing t with what after a
// generous deadline: a bound against hanging, not a timing assertion.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// decide asks the daemon about d: k=v and returns the descriptor's
// status.
func (d *daemon) decide(t *testing.T) *rlsv3.RateLimitResponse_DescriptorStatus {
	t.Helper()
	resp, err := rlsv3.NewRateLimitServiceClient(d.conn).ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{
		Domain:      "d",
		Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}},
	})
	if err != nil {
		t.Fatalf("ShouldRateLimit() error: %v", err)
	}
	return resp.GetStatuses()[0]
}

// readiness returns the status of GET /readyz and of gRPC health's
// "ratelimit" service.
func (d *daemon) readiness(t *testing.T) (int, healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	code, _ := get(t, nil, "http://"+d.httpAddr+"/readyz")
	resp, err := healthpb.NewHealthClient(d.conn).Check(t.Context(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
	if err != nil {
		t.Fatalf("health Check(ratelimit): %v", err)
	}
	return code, resp.GetStatus()
}

// TestDaemonRulesOverXDS: with --xds-server, the daemon is not ready until
// the management server sends rules; it then decides by them, follows a
// change, keeps its rules through a bad change (NACKed and counted as a
// refused load) and drops the domain when it is removed. Limits without an
// algorithm count by --default-algorithm.
func TestDaemonRulesOverXDS(t *testing.T) {
	addr, cache := startXDS(t)
	d := startDaemon(t, "--xds-server", addr, "--xds-node-id", xdsNodeID, "--xds-retry-interval", "50ms",
		"--default-algorithm", "fixed_window")

	if code, health := d.readiness(t); code != http.StatusServiceUnavailable || health != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("before any rules: /readyz %d, health %v; want 503, NOT_SERVING", code, health)
	}
	if st := d.decide(t); st.GetCurrentLimit() != nil {
		t.Errorf("before any rules: a limit applies: %v", st)
	}

	publish(t, cache, "1", rateLimitConfig(3))
	eventually(t, "ready after the first rules", func() bool {
		code, health := d.readiness(t)
		return code == http.StatusOK && health == healthpb.HealthCheckResponse_SERVING
	})
	for i := range 4 {
		st := d.decide(t)
		want := rlsv3.RateLimitResponse_OK
		if i == 3 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if st.GetCode() != want || st.GetCurrentLimit().GetRequestsPerUnit() != 3 {
			t.Fatalf("hit %d under version 1: %v, want %v under a limit of 3", i+1, st, want)
		}
	}
	// The resource names no algorithm: --default-algorithm's counts.
	native, err := ratelimitv1.NewRateLimitServiceClient(d.conn).ShouldRateLimit(t.Context(), &ratelimitv1.ShouldRateLimitRequest{
		Domain:      "d",
		Descriptors: []*ratelimitv1.Descriptor{{Entries: []*ratelimitv1.Entry{{Key: "k", Value: "native"}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := native.GetStatuses()[0].GetLimit().GetAlgorithm(); got != ratelimitv1.Algorithm_ALGORITHM_FIXED_WINDOW {
		t.Errorf("the limit counts by %v, want --default-algorithm's fixed window", got)
	}
	if !strings.Contains(d.logs.String(), `"version":"1"`) {
		t.Errorf("the accepted version is not logged:\n%s", d.logs)
	}

	publish(t, cache, "2", rateLimitConfig(50))
	eventually(t, "version 2's limit", func() bool { return d.decide(t).GetCurrentLimit().GetRequestsPerUnit() == 50 })

	bad := rateLimitConfig(1)
	bad.Descriptors[0].RateLimit.Unit = rlsconf.RateLimitUnit_UNKNOWN
	publish(t, cache, "3", bad)
	eventually(t, "the refused version 3 counted", func() bool {
		v, _ := scrapeDaemon(t, d).Value("ratelimitd_config_loads_total", "result=error")
		return v >= 1
	})
	if got := d.decide(t).GetCurrentLimit().GetRequestsPerUnit(); got != 50 {
		t.Errorf("after a refused change: limit %d, want version 2's 50", got)
	}
	if code, _ := d.readiness(t); code != http.StatusOK {
		t.Errorf("after a refused change: /readyz %d, want 200", code)
	}

	publish(t, cache, "4")
	eventually(t, "the domain removed", func() bool { return d.decide(t).GetCurrentLimit() == nil })
	if code, _ := d.readiness(t); code != http.StatusOK {
		t.Errorf("with no domains: /readyz %d, want 200 (an empty set is a good set)", code)
	}
	if logs := d.logs.String(); !strings.Contains(logs, `"version":"3"`) || !strings.Contains(logs, "neither unit nor window") {
		t.Errorf("the refused version and its error are not logged:\n%s", logs)
	}
	// One line for each set accepted, with its version and its domains;
	// one for each refused (the management server may send version 3
	// again), with its version and its error.
	var accepted, refused int
	for line := range strings.Lines(d.logs.String()) {
		if strings.Contains(line, `"domains":`) {
			accepted++
			if !strings.Contains(line, `"version":"`) {
				t.Errorf("a line on accepted rules names no version: %s", line)
			}
		}
		if strings.Contains(line, "neither unit nor window") {
			refused++
			if !strings.Contains(line, `"msg":"xds: rules refused"`) || !strings.Contains(line, `"version":"3"`) {
				t.Errorf("a second line on the refused version 3: %s", line)
			}
		}
	}
	if accepted < 3 || refused == 0 {
		t.Errorf("%d lines on accepted sets and %d on refused ones, want 3 or more and some:\n%s", accepted, refused, d.logs)
	}
}

// TestDaemonXDSReadyWithoutRules: with --xds-wait-for-rules=false the
// daemon is ready before the management server sends anything, answering
// OK with no limit, and takes the rules when they come.
func TestDaemonXDSReadyWithoutRules(t *testing.T) {
	addr, cache := startXDS(t)
	d := startDaemon(t, "--xds-server", addr, "--xds-node-id", xdsNodeID, "--xds-retry-interval", "50ms",
		"--xds-wait-for-rules=false")
	if code, health := d.readiness(t); code != http.StatusOK || health != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("before any rules: /readyz %d, health %v; want 200, SERVING", code, health)
	}
	if st := d.decide(t); st.GetCode() != rlsv3.RateLimitResponse_OK || st.GetCurrentLimit() != nil {
		t.Errorf("before any rules: %v, want OK without a limit", st)
	}
	publish(t, cache, "1", rateLimitConfig(3))
	eventually(t, "the first rules", func() bool { return d.decide(t).GetCurrentLimit().GetRequestsPerUnit() == 3 })
}
