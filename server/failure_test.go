package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/backendtest"
	"github.com/ratelimitd/ratelimitd/backend/memory"
	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/grpctest"
	"github.com/ratelimitd/ratelimitd/server"
)

// downStore is a store whose counters are out of reach, as a Redis store
// is while Redis is down: every Take fails, and it reports its breaker
// open. (The Redis store's own faults are tested against real Redis
// processes in backend/redis and cmd/ratelimitd.)
type downStore struct{}

func (downStore) Take(context.Context, []backend.Request, []backend.Result) error {
	return errors.New("dial tcp 127.0.0.1:6379: connection refused")
}

func (downStore) State() string { return "open" }

// TestFailureMode: when the store fails, the server answers by its
// failure mode, and /readyz follows it.
func TestFailureMode(t *testing.T) {
	req := request("gateway",
		desc("remote_address", "10.0.0.1"), // a limit applies
		desc("health_check", "lb"),         // unlimited
		desc("no_such_key", "x"),           // no rule
	)
	statuses := func(codes ...rlsv3.RateLimitResponse_Code) []*rlsv3.RateLimitResponse_DescriptorStatus {
		var sts []*rlsv3.RateLimitResponse_DescriptorStatus
		for _, c := range codes {
			sts = append(sts, &rlsv3.RateLimitResponse_DescriptorStatus{Code: c})
		}
		sts[1].LimitRemaining = 1<<32 - 1 // unlimited
		return sts
	}
	tests := []struct {
		mode      server.FailureMode
		want      *rlsv3.RateLimitResponse // nil: Unavailable
		wantReady int
	}{
		{server.FailAllow, &rlsv3.RateLimitResponse{OverallCode: ok, Statuses: statuses(ok, ok, ok)}, http.StatusOK},
		{server.FailDeny, &rlsv3.RateLimitResponse{OverallCode: over, Statuses: statuses(over, ok, ok)}, http.StatusServiceUnavailable},
		{server.FailError, nil, http.StatusServiceUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			srv := server.New(downStore{}, loadRules(t, "gateway.yaml"), server.Options{FailureMode: tt.mode})
			resp, err := srv.Envoy().ShouldRateLimit(t.Context(), req)
			if tt.want == nil {
				// The store's error names an internal address: it goes to
				// the log, and callers learn only that the store is away.
				wantCode(t, "ShouldRateLimit on a down store", err, codes.Unavailable, "counter store unavailable")
				if strings.Contains(err.Error(), "127.0.0.1") {
					t.Errorf("ShouldRateLimit on a down store: %v, names the store's address", err)
				}
			} else {
				if err != nil {
					t.Fatalf("ShouldRateLimit on a down store: %v", err)
				}
				if diff := cmp.Diff(tt.want, resp, protocmp.Transform()); diff != "" {
					t.Errorf("ShouldRateLimit on a down store mismatch (-want +got):\n%s", diff)
				}
			}
			nresp, err := srv.Native().ShouldRateLimit(t.Context(), nrequest("gateway", ndesc("remote_address", "10.0.0.1")))
			switch {
			case tt.want == nil:
				wantCode(t, "native ShouldRateLimit on a down store", err, codes.Unavailable)
			case err != nil:
				t.Errorf("native ShouldRateLimit on a down store: %v", err)
			case nresp.GetCode() != ratelimitv1.Code(tt.want.GetOverallCode()):
				t.Errorf("native ShouldRateLimit on a down store: code %v, want %v", nresp.GetCode(), tt.want.GetOverallCode())
			}
			wantAnswers := uint64(2)
			if tt.want == nil {
				wantAnswers = 0
			}
			if got := srv.FailureAnswers(); got != wantAnswers {
				t.Errorf("FailureAnswers() = %d, want %d", got, wantAnswers)
			}

			ts := httptest.NewServer(srv.Handler())
			defer ts.Close()
			r, err := ts.Client().Get(ts.URL + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			defer r.Body.Close()
			body, _ := io.ReadAll(r.Body)
			if r.StatusCode != tt.wantReady || !strings.Contains(string(body), "backend: open") {
				t.Errorf("GET /readyz = %d %q, want %d naming the backend state \"open\"", r.StatusCode, body, tt.wantReady)
			}
		})
	}
}

// TestReadyWithoutStore: with Options.ReadyWithoutStore the server stays
// ready while its store is down, even under a failure mode that would
// take it out (error), as envoyproxy/ratelimit stays healthy through a
// Redis outage; without it, /readyz and /healthcheck report the outage.
// gRPC health does not follow the store either way.
func TestReadyWithoutStore(t *testing.T) {
	for _, tt := range []struct {
		readyWithoutStore bool
		wantReadyz        int
		wantHealthcheck   int
	}{
		{true, http.StatusOK, http.StatusOK},
		{false, http.StatusServiceUnavailable, http.StatusInternalServerError},
	} {
		t.Run(fmt.Sprint(tt.readyWithoutStore), func(t *testing.T) {
			srv := server.New(downStore{}, loadRules(t, "gateway.yaml"), server.Options{
				FailureMode:         server.FailError,
				ReadyWithoutStore:   tt.readyWithoutStore,
				EnvoyproxyEndpoints: true,
			})
			ts := httptest.NewServer(srv.Handler())
			defer ts.Close()
			code, body := get(t, ts, "/readyz")
			if code != tt.wantReadyz || !strings.Contains(body, "backend: open") {
				t.Errorf("GET /readyz = %d %q, want %d naming the backend state \"open\"", code, body, tt.wantReadyz)
			}
			if code, _ := get(t, ts, "/healthcheck"); code != tt.wantHealthcheck {
				t.Errorf("GET /healthcheck = %d, want %d", code, tt.wantHealthcheck)
			}

			g := grpc.NewServer(srv.GRPCOptions()...)
			srv.Register(g)
			conn, _ := grpctest.Serve(t, g)
			resp, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
			if err != nil {
				t.Fatalf("health Check: %v", err)
			}
			if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("health Check = %v, want SERVING", resp.GetStatus())
			}
			// The failure mode still answers the requests themselves.
			_, err = srv.Envoy().ShouldRateLimit(t.Context(), request("gateway", desc("remote_address", "10.0.0.1")))
			wantCode(t, "ShouldRateLimit on a down store", err, codes.Unavailable)
		})
	}
}

// get answers GET path on ts: its status and body.
func get(t *testing.T, ts *httptest.Server, path string) (int, string) {
	t.Helper()
	r, err := ts.Client().Get(ts.URL + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer r.Body.Close()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", path, err)
	}
	return r.StatusCode, string(body)
}

// TestFailureModeShadow: deny refuses nothing that shadow mode lets pass.
func TestFailureModeShadow(t *testing.T) {
	srv := server.New(downStore{}, loadRules(t, "gateway.yaml"), server.Options{FailureMode: server.FailDeny, ShadowMode: true})
	resp, err := srv.Envoy().ShouldRateLimit(t.Context(), request("gateway", desc("remote_address", "10.0.0.1")))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetOverallCode() != ok {
		t.Errorf("deny in global shadow mode: overall %v, want OK", resp.GetOverallCode())
	}
}

func TestParseFailureMode(t *testing.T) {
	for _, m := range []server.FailureMode{server.FailAllow, server.FailDeny, server.FailError} {
		if got, err := server.ParseFailureMode(m.String()); err != nil || got != m {
			t.Errorf("ParseFailureMode(%q) = %v, %v; want %v", m, got, err, m)
		}
	}
	if _, err := server.ParseFailureMode("open"); err == nil {
		t.Error(`ParseFailureMode("open") error = nil, want an error`)
	}
}

// countingDownStore is a downStore that counts its calls.
type countingDownStore struct {
	downStore
	calls atomic.Int64
}

func (s *countingDownStore) Take(ctx context.Context, reqs []backend.Request, res []backend.Result) error {
	s.calls.Add(1)
	return s.downStore.Take(ctx, reqs, res)
}

// TestBansWithoutStore: a ban (requests_per_unit: 0) needs no counter, so
// it refuses while the store is down, under every failure mode; a request
// of bans alone never reaches the store; and the other descriptors of a
// request answer by the failure mode as before.
func TestBansWithoutStore(t *testing.T) {
	rules := parseRules(t, `
domain: g
descriptors:
  - key: blocked_agent
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: shadow_ban
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: quota_ban
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: quota
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 10}
`)
	ban := limited(over, "blocked_agent", 0, hour, 0, time.Hour)
	const (
		allow, deny, fail = server.FailAllow, server.FailDeny, server.FailError
	)
	for _, tt := range []struct {
		name  string
		req   *rlsv3.RateLimitRequest
		store bool // the request reaches the store
		want  map[server.FailureMode]*rlsv3.RateLimitResponse
	}{
		{"ban alone", request("g", desc("blocked_agent", "scrapy")), false, map[server.FailureMode]*rlsv3.RateLimitResponse{
			allow: response(over, ban), deny: response(over, ban), fail: response(over, ban),
		}},
		{"ban with a limited descriptor", request("g", desc("remote_address", "a"), desc("blocked_agent", "scrapy")), true, map[server.FailureMode]*rlsv3.RateLimitResponse{
			allow: response(over, okStatus(), ban), deny: response(over, okWith(over), ban), fail: response(over, okStatus(), ban),
		}},
		{"shadow ban", request("g", desc("remote_address", "a"), desc("shadow_ban", "x")), true, map[server.FailureMode]*rlsv3.RateLimitResponse{
			allow: response(ok, okStatus(), limited(ok, "shadow_ban", 0, hour, 0, time.Hour)),
			deny:  response(over, okWith(over), limited(ok, "shadow_ban", 0, hour, 0, time.Hour)),
			fail:  nil,
		}},
		{"quota ban beside an open quota", request("g", desc("quota_ban", "x"), desc("quota", "y")), true, map[server.FailureMode]*rlsv3.RateLimitResponse{
			allow: response(ok, limited(over, "quota_ban", 0, hour, 0, time.Hour), okStatus()),
			deny:  response(over, limited(over, "quota_ban", 0, hour, 0, time.Hour), okWith(over)),
			fail:  nil,
		}},
	} {
		for _, mode := range []server.FailureMode{allow, deny, fail} {
			t.Run(tt.name+"/"+mode.String(), func(t *testing.T) {
				store := new(countingDownStore)
				clock := backendtest.NewClock(t0)
				srv := server.New(store, rules, server.Options{FailureMode: mode, Now: clock.Now, Headers: server.HeadersOff})
				resp, err := srv.Envoy().ShouldRateLimit(t.Context(), tt.req)
				want := tt.want[mode]
				if want == nil {
					wantCode(t, "ShouldRateLimit", err, codes.Unavailable)
				} else {
					if err != nil {
						t.Fatalf("ShouldRateLimit: %v", err)
					}
					if diff := cmp.Diff(want, withoutDecidedBy(t, resp), protocmp.Transform()); diff != "" {
						t.Errorf("ShouldRateLimit mismatch (-want +got):\n%s", diff)
					}
				}
				if got := store.calls.Load() > 0; got != tt.store {
					t.Errorf("the store was called: %v, want %v", got, tt.store)
				}
			})
		}
	}
}

// okWith returns a status of code without a limit, as failure answers are.
func okWith(code rlsv3.RateLimitResponse_Code) *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{Code: code}
}

// stateStore is a memory store whose state is what state holds, as a
// Redis store reports "unreached" until Redis first answers.
type stateStore struct {
	*memory.Store
	state atomic.Value // string
}

func (s *stateStore) State() string { return s.state.Load().(string) }

// TestReadyUntilStoreAnswers: a store that has never answered
// ("unreached") keeps the server not ready under deny and error (but
// with ReadyWithoutStore), and ready under allow; once it answers, the
// server is ready under every mode.
func TestReadyUntilStoreAnswers(t *testing.T) {
	for _, c := range []struct {
		mode              server.FailureMode
		readyWithoutStore bool
		readyBefore       bool
	}{
		{server.FailDeny, false, false},
		{server.FailError, false, false},
		{server.FailAllow, false, true},
		{server.FailDeny, true, true},
	} {
		store := &stateStore{Store: memory.New(memory.Options{})}
		t.Cleanup(func() { store.Close() })
		store.state.Store("unreached")
		srv := server.New(store, parseRules(t, hotRules), server.Options{FailureMode: c.mode, ReadyWithoutStore: c.readyWithoutStore})
		readyz := func(when string, ready bool, state string) {
			t.Helper()
			rec := httptest.NewRecorder()
			srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
			if want := map[bool]int{true: http.StatusOK, false: http.StatusServiceUnavailable}[ready]; rec.Code != want || !strings.Contains(rec.Body.String(), "backend: "+state+"\n") {
				t.Errorf("%v, ready without store %v, %s: GET /readyz = %d %q, want %d with backend: %s",
					c.mode, c.readyWithoutStore, when, rec.Code, rec.Body.String(), want, state)
			}
		}
		readyz("unreached", c.readyBefore, "unreached")
		store.state.Store("ok")
		readyz("answered", true, "ok")
	}
}
