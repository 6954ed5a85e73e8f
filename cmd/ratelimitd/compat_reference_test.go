package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/google/go-cmp/cmp"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimitd/ratelimitd/internal/certtest"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// The tests of this file start ratelimitd as envoyproxy/ratelimit's users
// run it: only the reference's environment and RATELIMITD_COMPAT, rules
// in its runtime tree. They ask what the reference's own integration
// tests ask, and expect the protos and statsd series those tests expect,
// whole: the reference's users compare them so. Where ratelimitd decides
// otherwise on purpose (a refused request consumes nothing on its other
// descriptors), the expectation is the one the reference's tests have
// with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, the same here.

// Rule files in the reference's form: no algorithm, a unit.
const (
	refBasicRules = `domain: basic
descriptors:
  - {key: key1, rate_limit: {unit: second, requests_per_unit: 50}}
  - {key: key1_local, rate_limit: {unit: second, requests_per_unit: 50}}
`
	refAnotherRules = `domain: another
descriptors:
  - {key: key2, rate_limit: {unit: minute, requests_per_unit: 20}}
  - {key: key3, rate_limit: {unit: hour, requests_per_unit: 10}}
  - {key: key2_local, rate_limit: {unit: minute, requests_per_unit: 20}}
  - {key: key3_local, rate_limit: {unit: hour, requests_per_unit: 10}}
  - {key: key4, rate_limit: {unit: day, requests_per_unit: 20}}
`
	refShareRules = `domain: share-threshold-test
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: files_no_share
    value: files_no_share/*
    rate_limit: {unit: hour, requests_per_unit: 10}
`
	refReloadRules = `domain: reload
descriptors:
  - {key: key1, rate_limit: {unit: second, requests_per_unit: 50}}
  - {key: block, rate_limit: {unit: second, requests_per_unit: 0}}
`
)

// refRuntime writes the reference's runtime tree, ROOT/ratelimit/config
// holding the rule files, and returns ROOT and the rules directory.
func refRuntime(t *testing.T) (root, dir string) {
	t.Helper()
	root = filepath.Join(t.TempDir(), "runtime", "current")
	dir = filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, rules := range map[string]string{"basic.yaml": refBasicRules, "another.yaml": refAnotherRules, "share_threshold.yaml": refShareRules} {
		writeFile(t, filepath.Join(dir, name), rules)
	}
	return root, dir
}

// startReference starts ratelimitd with the reference's environment
// vars (on top of listeners on free ports, the runtime tree at root, and
// statsd sent to st every 50ms), and nothing else but RATELIMITD_COMPAT.
func startReference(t *testing.T, root string, st *statsdServer, vars map[string]string) *process {
	t.Helper()
	env := map[string]string{
		"RATELIMITD_COMPAT": "envoyproxy",
		"HOST":              "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0",
		"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0",
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false",
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_SOCKET_TYPE": "tcp",
		"USE_STATSD": "true", "STATSD_HOST": "127.0.0.1", "STATSD_PORT": st.port(), "STATS_FLUSH_INTERVAL": "50ms",
		"LOG_LEVEL": "info", "LOG_FORMAT": "json",
	}
	for k, v := range vars {
		env[k] = v
	}
	list := []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	return startProcessEnv(t, list)
}

// statsdServer is a statsd server over TCP that sums the counters it
// receives and keeps each gauge's last value.
type statsdServer struct {
	lis      net.Listener
	wg       sync.WaitGroup
	mu       sync.Mutex
	counters map[string]uint64
	gauges   map[string]uint64
	bad      []string // lines that are not name:value|c or |g
	conns    []net.Conn
}

func startStatsdServer(t *testing.T) *statsdServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &statsdServer{lis: lis, counters: map[string]uint64{}, gauges: map[string]uint64{}}
	s.wg.Go(func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Go(func() { s.read(c) })
		}
	})
	t.Cleanup(func() {
		lis.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.bad) > 0 {
			t.Errorf("statsd lines not name:value|c or |g: %q", s.bad)
		}
	})
	return s
}

func (s *statsdServer) port() string { return strconv.Itoa(s.lis.Addr().(*net.TCPAddr).Port) }

func (s *statsdServer) read(c net.Conn) {
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok1 := strings.Cut(line, ":")
		value, typ, ok2 := strings.Cut(rest, "|")
		n, err := strconv.ParseUint(value, 10, 64)
		s.mu.Lock()
		switch {
		case !ok1 || !ok2 || err != nil:
			s.bad = append(s.bad, line)
		case typ == "c":
			s.counters[name] += n
		case typ == "g":
			s.gauges[name] = n
		default:
			s.bad = append(s.bad, line)
		}
		s.mu.Unlock()
	}
}

// wait waits until the counters and gauges named in want have their
// values, and fails the test with the differences if they do not within
// a few seconds. A name ending in "|g" is a gauge.
func (s *statsdServer) wait(t *testing.T, what string, want map[string]uint64) {
	t.Helper()
	got := func() map[string]uint64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		m := map[string]uint64{}
		for name := range want {
			if g, ok := strings.CutSuffix(name, "|g"); ok {
				m[name] = s.gauges[g]
			} else {
				m[name] = s.counters[name]
			}
		}
		return m
	}
	deadline := time.Now().Add(5 * time.Second)
	for !cmp.Equal(want, got()) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: statsd mismatch (-want +got):\n%s", what, cmp.Diff(want, got()))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// refStatus is a status as the reference's tests build it: the limit
// unnamed, the reset in whole seconds as got (which they take from the
// answer, checking only that it is whole seconds).
func refStatus(code rlsv3.RateLimitResponse_Code, rpu uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, remaining uint32, got *rlsv3.RateLimitResponse_DescriptorStatus) *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:               code,
		CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: rpu, Unit: unit},
		LimitRemaining:     remaining,
		DurationUntilReset: &durationpb.Duration{Seconds: got.GetDurationUntilReset().GetSeconds()},
	}
}

// refRequest is a request of domain with one descriptor per entry kv[i],
// kv[i+1].
func refRequest(domain string, kv ...string) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: domain}
	for i := 0; i+1 < len(kv); i += 2 {
		req.Descriptors = append(req.Descriptors, &commonv3.RateLimitDescriptor{
			Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: kv[i], Value: kv[i+1]}},
		})
	}
	return req
}

// call asks p and fails the test on an error.
func call(t *testing.T, p *process, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := p.client.ShouldRateLimit(t.Context(), req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	return resp
}

// expect fails the test unless got is want, whole.
func expect(t *testing.T, what string, want, got *rlsv3.RateLimitResponse) {
	t.Helper()
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Fatalf("%s: response mismatch (-want +got):\n%s", what, diff)
	}
}

const (
	refOK      = rlsv3.RateLimitResponse_OK
	refOver    = rlsv3.RateLimitResponse_OVER_LIMIT
	refSecond  = rlsv3.RateLimitResponse_RateLimit_SECOND
	refMinute  = rlsv3.RateLimitResponse_RateLimit_MINUTE
	refHour    = rlsv3.RateLimitResponse_RateLimit_HOUR
	statPrefix = "ratelimit.service.rate_limit."
)

// awayFromMinuteEnd waits for the next minute in its last 10 seconds: the
// calls that follow count a 20-a-minute limit, which must not reset
// among them.
func awayFromMinuteEnd() {
	if s := time.Now().Second(); s >= 50 {
		time.Sleep(time.Duration(61-s) * time.Second)
	}
}

// refBasic runs the reference's basic sequence against p: a descriptor
// without a rule, one per-second limit, 25 calls of a 20-a-minute limit,
// then 15 calls of two descriptors, 20 a minute and 10 an hour; with
// the statsd series it expects, local cache or not (then the rules' keys
// end in "_local", as in the reference's tests).
func refBasic(t *testing.T, p *process, st *statsdServer, local bool) {
	key := func(k string) string {
		if local {
			return k + "_local"
		}
		return k
	}
	cache := func(n uint64) uint64 {
		if local {
			return n
		}
		return 0
	}

	expect(t, "no rule", &rlsv3.RateLimitResponse{OverallCode: refOK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: refOK}}},
		call(t, p, refRequest("foo", key("hello"), "world")))
	st.wait(t, "no rule", map[string]uint64{"ratelimit.localcache.hitCount|g": 0, "ratelimit.localcache.missCount|g": 0})

	resp := call(t, p, refRequest("basic", key("key1"), "foo"))
	expect(t, "key1", &rlsv3.RateLimitResponse{OverallCode: refOK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
		refStatus(refOK, 50, refSecond, 49, resp.GetStatuses()[0]),
	}}, resp)
	if d := resp.GetStatuses()[0].GetDurationUntilReset(); d.GetSeconds() != 1 || d.GetNanos() != 0 {
		t.Errorf("key1: duration_until_reset %v, want 1s whole (a one-second window)", d)
	}
	st.wait(t, "key1", map[string]uint64{
		statPrefix + "basic." + key("key1") + ".total_hits": 1,
		"ratelimit.localcache.hitCount|g":                   0,
		"ratelimit.localcache.missCount|g":                  cache(1),
	})

	awayFromMinuteEnd()
	value := strconv.FormatUint(rand.Uint64(), 10)
	for i := range 25 {
		resp := call(t, p, refRequest("another", key("key2"), value))
		code, remaining := refOK, uint32(20-(i+1))
		if i >= 20 {
			code, remaining = refOver, 0
		}
		expect(t, "key2 call "+strconv.Itoa(i), &rlsv3.RateLimitResponse{OverallCode: code, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
			refStatus(code, 20, refMinute, remaining, resp.GetStatuses()[0]),
		}}, resp)
	}
	k2 := statPrefix + "another." + key("key2")
	st.wait(t, "key2", map[string]uint64{
		k2 + ".total_hits":                  25,
		k2 + ".over_limit":                  5,
		k2 + ".over_limit_with_local_cache": cache(4),
		"ratelimit.localcache.hitCount|g":   cache(4),
		"ratelimit.localcache.missCount|g":  cache(22),
	})

	awayFromMinuteEnd()
	value = strconv.FormatUint(rand.Uint64(), 10)
	for i := range 15 {
		resp := call(t, p, refRequest("another", key("key2"), value, key("key3"), value))
		code, remaining1, remaining2 := refOK, uint32(20-(i+1)), uint32(10-(i+1))
		if i >= 10 {
			// A refused request consumes nothing: key2 stays at 10.
			code, remaining1, remaining2 = refOver, 10, 0
		}
		expect(t, "key2 and key3 call "+strconv.Itoa(i), &rlsv3.RateLimitResponse{OverallCode: code, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
			refStatus(refOK, 20, refMinute, remaining1, resp.GetStatuses()[0]),
			refStatus(code, 10, refHour, remaining2, resp.GetStatuses()[1]),
		}}, resp)
	}
	k3 := statPrefix + "another." + key("key3")
	st.wait(t, "key2 and key3", map[string]uint64{
		k2 + ".total_hits":                  40,
		k2 + ".over_limit":                  5,
		k2 + ".over_limit_with_local_cache": cache(4),
		k3 + ".total_hits":                  15,
		k3 + ".over_limit":                  5,
		k3 + ".over_limit_with_local_cache": cache(4),
		"ratelimit.localcache.hitCount|g":   cache(8),
		"ratelimit.localcache.missCount|g":  cache(48),
	})

	// duration_until_reset counts down in whole seconds.
	first := call(t, p, refRequest("another", "key4", "durTest")).GetStatuses()[0].GetDurationUntilReset()
	time.Sleep(1100 * time.Millisecond)
	second := call(t, p, refRequest("another", "key4", "durTest")).GetStatuses()[0].GetDurationUntilReset()
	if second.GetSeconds() >= first.GetSeconds() || first.GetNanos() != 0 || second.GetNanos() != 0 {
		t.Errorf("key4: duration_until_reset %v then %v a second later, want fewer whole seconds", first, second)
	}
}

// refPassword is the password of startRedisWithPassword's servers.
const refPassword = "password123"

// startRedisWithPassword starts a redis-server that requires refPassword.
func startRedisWithPassword(t *testing.T) *redistest.Server {
	t.Helper()
	srv := redistest.Start(t)
	c := srv.Client(t)
	if err := c.ConfigSet(t.Context(), "requirepass", refPassword).Err(); err != nil {
		t.Fatal(err)
	}
	return srv
}

// TestCompatReferenceRedis: the reference's basic sequence on one Redis,
// with its local cache, with a key prefix, and with a password.
func TestCompatReferenceRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Redis and ratelimitd processes: skipped in -short mode")
	}
	rds := redistest.Start(t)
	auth := startRedisWithPassword(t)
	root, _ := refRuntime(t)
	for _, tt := range []struct {
		name  string
		vars  map[string]string
		local bool
	}{
		{"redis", map[string]string{"REDIS_URL": rds.Addr}, false},
		{"local cache", map[string]string{"REDIS_URL": rds.Addr, "LOCAL_CACHE_SIZE_IN_BYTES": "1000"}, true},
		{"key prefix", map[string]string{"REDIS_URL": rds.Addr, "CACHE_KEY_PREFIX": "prefix:"}, false},
		{"auth", map[string]string{"REDIS_URL": auth.Addr, "REDIS_AUTH": refPassword}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Each counts under keys of its own: its Redis, prefix, rule
			// key (_local) or random value.
			t.Parallel()
			st := startStatsdServer(t)
			p := startReference(t, root, st, tt.vars)
			refBasic(t, p, st, tt.local)
		})
	}
	t.Cleanup(func() { checkPrefix(t, rds) })
}

// checkPrefix fails the test unless rds holds keys under the reference's
// CACHE_KEY_PREFIX of TestCompatReferenceRedis.
func checkPrefix(t *testing.T, rds *redistest.Server) {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: rds.Addr})
	defer c.Close()
	keys, err := c.Keys(context.Background(), "prefix:*").Result()
	if err != nil || len(keys) == 0 {
		t.Errorf("keys under CACHE_KEY_PREFIX: %q, %v; want some", keys, err)
	}
}

// TestCompatReferencePerSecond: with REDIS_PERSECOND, one-second limits
// count in the second Redis, the others in the main one, and the
// reference's basic sequence answers the same, local cache or not.
func TestCompatReferencePerSecond(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Redis and ratelimitd processes: skipped in -short mode")
	}
	main, perSecond := startRedisWithPassword(t), startRedisWithPassword(t)
	root, _ := refRuntime(t)
	for _, local := range []bool{false, true} {
		t.Run("local cache "+strconv.FormatBool(local), func(t *testing.T) {
			vars := map[string]string{
				"REDIS_URL": main.Addr, "REDIS_AUTH": refPassword,
				"REDIS_PERSECOND": "true", "REDIS_PERSECOND_URL": perSecond.Addr, "REDIS_PERSECOND_AUTH": refPassword,
			}
			if local {
				vars["LOCAL_CACHE_SIZE_IN_BYTES"] = "1000"
			}
			st := startStatsdServer(t)
			p := startReference(t, root, st, vars)
			refBasic(t, p, st, local)
			// A one-second counter lives a second or two: look at once.
			call(t, p, refRequest("basic", "key1", "where"))
			for _, tt := range []struct {
				srv        *redistest.Server
				has, lacks string
			}{
				{perSecond, "*key1*", "*key2*"},
				{main, "*key2*", "*key1*"},
			} {
				c := goredis.NewClient(&goredis.Options{Addr: tt.srv.Addr, Password: refPassword})
				has, err1 := c.Keys(context.Background(), tt.has).Result()
				lacks, err2 := c.Keys(context.Background(), tt.lacks).Result()
				c.Close()
				if err := errors.Join(err1, err2); err != nil || len(has) == 0 || len(lacks) != 0 {
					t.Errorf("Redis %s: keys %s %q, %s %q (%v); want the first only", tt.srv.Addr, tt.has, has, tt.lacks, lacks, err)
				}
			}
		})
	}
}

// TestCompatReferenceShareAndReload: share_threshold, a rule file added
// and removed (counted in config_load_success), and EXTRA_TAGS on every
// series.
func TestCompatReferenceShareAndReload(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Redis and ratelimitd processes: skipped in -short mode")
	}
	rds := redistest.Start(t)
	root, dir := refRuntime(t)
	st := startStatsdServer(t)
	p := startReference(t, root, st, map[string]string{"REDIS_URL": rds.Addr, "EXTRA_TAGS": "foo:bar,a:b"})
	const tags = ".__a=b.__foo=bar"

	// Values matching files/* share one counter.
	for range 10 {
		call(t, p, refRequest("share-threshold-test", "files", "files/a.pdf"))
	}
	resp := call(t, p, refRequest("share-threshold-test", "files", "files/b.csv"))
	expect(t, "files/b.csv", &rlsv3.RateLimitResponse{OverallCode: refOver, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
		refStatus(refOver, 10, refHour, 0, resp.GetStatuses()[0]),
	}}, resp)
	for i := range 10 {
		v := "files_no_share/" + strconv.Itoa(i) + "-" + strconv.FormatUint(rand.Uint64(), 10)
		resp := call(t, p, refRequest("share-threshold-test", "files_no_share", v))
		expect(t, v, &rlsv3.RateLimitResponse{OverallCode: refOK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
			refStatus(refOK, 10, refHour, 9, resp.GetStatuses()[0]),
		}}, resp)
	}
	st.wait(t, "share_threshold", map[string]uint64{
		statPrefix + "share-threshold-test.files_files/*.total_hits" + tags:                   11,
		statPrefix + "share-threshold-test.files_files/*.over_limit" + tags:                   1,
		statPrefix + "share-threshold-test.files_no_share_files_no_share/*.total_hits" + tags: 10,
		"ratelimit.service.config_load_success" + tags:                                        1,
	})

	// An unknown domain: OK, no limit.
	expect(t, "before the reload", &rlsv3.RateLimitResponse{OverallCode: refOK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: refOK}}},
		call(t, p, refRequest("reload", "block", "foo")))
	writeFile(t, filepath.Join(dir, "reload.yaml"), refReloadRules)
	st.wait(t, "the reload", map[string]uint64{"ratelimit.service.config_load_success" + tags: 2})
	resp = call(t, p, refRequest("reload", "key1", "foo"))
	expect(t, "after the reload", &rlsv3.RateLimitResponse{OverallCode: refOK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
		refStatus(refOK, 50, refSecond, 49, resp.GetStatuses()[0]),
	}}, resp)
	if err := os.Remove(filepath.Join(dir, "reload.yaml")); err != nil {
		t.Fatal(err)
	}
	st.wait(t, "the removal", map[string]uint64{"ratelimit.service.config_load_success" + tags: 3})
}

// TestCompatReferenceClusterSentinel: the reference's basic sequence with
// REDIS_TYPE=cluster for the main counters and a Sentinel's master for
// the one-second ones.
func TestCompatReferenceClusterSentinel(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Redis Cluster, Sentinel and ratelimitd processes: skipped in -short mode")
	}
	cluster := redistest.StartCluster(t, 3)
	sentinel := redistest.StartSentinel(t)
	root, _ := refRuntime(t)
	st := startStatsdServer(t)
	p := startReference(t, root, st, map[string]string{
		"REDIS_TYPE": "cluster", "REDIS_URL": strings.Join(cluster.Addrs, ","),
		"REDIS_PERSECOND": "true", "REDIS_PERSECOND_TYPE": "sentinel",
		"REDIS_PERSECOND_URL":       sentinel.MasterName + "," + sentinel.Addr,
		"LOCAL_CACHE_SIZE_IN_BYTES": "1000",
	})
	refBasic(t, p, st, true)
}

// TestCompatReferenceXDSAndTLS: rules over xDS (CONFIG_TYPE=GRPC_XDS_SOTW),
// the gRPC listener under mutual TLS with the client's SAN checked
// (GRPC_SERVER_USE_TLS, GRPC_CLIENT_TLS_CACERT, GRPC_CLIENT_TLS_SAN), and
// the server's certificate replaced on disk, as the reference's tests do.
func TestCompatReferenceXDSAndTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Redis and ratelimitd processes: skipped in -short mode")
	}
	rds := redistest.Start(t)
	xdsAddr, cache := startXDS(t)
	publish(t, cache, "1", &rlsconf.RateLimitConfig{
		Name: "basic", Domain: "basic",
		Descriptors: []*rlsconf.RateLimitDescriptor{{
			Key: "key1", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 50},
		}},
	})
	dir := t.TempDir()
	serverCA, clientCA := certtest.NewCA(t, "server CA"), certtest.NewCA(t, "client CA")
	srvCert := serverCA.Server(t, dir, "server", "localhost", "127.0.0.1")
	client := clientCA.Client(t, dir, "client", "localhost")
	stranger := clientCA.Client(t, dir, "stranger", "elsewhere.example")
	root, _ := refRuntime(t)
	st := startStatsdServer(t)
	p := startReference(t, root, st, map[string]string{
		"REDIS_URL":   rds.Addr,
		"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": xdsAddr, "CONFIG_GRPC_XDS_NODE_ID": xdsNodeID,
		"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": srvCert.CertFile, "GRPC_SERVER_TLS_KEY": srvCert.KeyFile,
		"GRPC_CLIENT_TLS_CACERT": clientCA.WriteCert(t, dir, "client-ca"), "GRPC_CLIENT_TLS_SAN": "localhost",
	})
	dial := func(cfg *tls.Config) rlsv3.RateLimitServiceClient {
		conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return rlsv3.NewRateLimitServiceClient(conn)
	}
	rl := dial(serverCA.ClientTLS(client))
	var resp *rlsv3.RateLimitResponse
	eventually(t, "the rules over xDS", func() bool {
		var err error
		resp, err = rl.ShouldRateLimit(t.Context(), refRequest("basic", "key1", "foo"))
		return err == nil && resp.GetStatuses()[0].GetCurrentLimit() != nil
	})
	expect(t, "key1 over mutual TLS", &rlsv3.RateLimitResponse{OverallCode: refOK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
		refStatus(refOK, 50, refSecond, 49, resp.GetStatuses()[0]),
	}}, resp)
	if _, err := dial(serverCA.ClientTLS(stranger)).ShouldRateLimit(t.Context(), refRequest("basic", "key1", "foo")); err == nil {
		t.Error("a client certificate without the SAN GRPC_CLIENT_TLS_SAN names was served")
	}
	if _, err := dial(serverCA.ClientTLS(nil)).ShouldRateLimit(t.Context(), refRequest("basic", "key1", "foo")); err == nil {
		t.Error("a client without a certificate was served")
	}

	// A new certificate, from another CA, renamed over the old files.
	newCA := certtest.NewCA(t, "new server CA")
	next := newCA.Server(t, t.TempDir(), "server", "localhost", "127.0.0.1")
	for from, to := range map[string]string{next.CertFile: srvCert.CertFile, next.KeyFile: srvCert.KeyFile} {
		if err := os.Rename(from, to); err != nil {
			t.Fatal(err)
		}
	}
	handshake := func(ca *certtest.CA) error {
		cfg := ca.ClientTLS(client)
		cfg.ServerName = "localhost"
		conn, err := tls.Dial("tcp", p.grpc, cfg)
		if err == nil {
			conn.Close()
		}
		return err
	}
	eventually(t, "the new server certificate", func() bool { return handshake(newCA) == nil })
	if err := handshake(serverCA); err == nil {
		t.Error("the old server certificate is still served after the new one")
	}
}
