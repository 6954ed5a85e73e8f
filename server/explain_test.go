package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/backendtest"
	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/backend/redis"
	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
	"github.com/ratelimitd/ratelimitd/server"
)

// explained is POST /explain's answer, as a client reads it.
type explained struct {
	Domain      string `json:"domain"`
	Overall     string `json:"overall"`
	ShadowMode  bool   `json:"shadow_mode"`
	Descriptors []struct {
		Entries []struct{ Key, Value string } `json:"entries"`
		Rule    *struct {
			Path string `json:"path"`
			File string `json:"file"`
			Line int    `json:"line"`
		} `json:"rule"`
		Unlimited  bool           `json:"unlimited"`
		ShadowMode bool           `json:"shadow_mode"`
		QuotaMode  bool           `json:"quota_mode"`
		Replaces   []string       `json:"replaces"`
		Decision   string         `json:"decision"`
		Hits       uint64         `json:"hits"`
		Limits     []explainedLim `json:"limits"`
	} `json:"descriptors"`
}

// explainedLim is one limit of an explained descriptor.
type explainedLim struct {
	Name            string `json:"name"`
	Algorithm       string `json:"algorithm"`
	RequestsPerUnit uint64 `json:"requests_per_unit"`
	Window          string `json:"window"`
	Burst           uint64 `json:"burst"`
	Replaced        bool   `json:"replaced"`
	Counter         string `json:"counter"`
	Remaining       uint64 `json:"remaining"`
	Reset           string `json:"reset"`
	WouldAdmit      bool   `json:"would_admit"`
	RetryAfter      string `json:"retry_after"`
}

// explain posts body to ts's /explain and decodes the answer, failing the
// test unless it is a 200.
func explain(t *testing.T, ts *httptest.Server, body string) explained {
	t.Helper()
	code, out, hdr := do(t, ts, http.MethodPost, "/explain", body)
	if code != http.StatusOK {
		t.Fatalf("POST /explain %s: %d %s", body, code, out)
	}
	if ct := hdr.Get("Content-Type"); ct != "application/json" {
		t.Errorf("POST /explain: Content-Type %q, want application/json", ct)
	}
	var ex explained
	if err := json.Unmarshal([]byte(out), &ex); err != nil {
		t.Fatalf("POST /explain: decoding %s: %v", out, err)
	}
	return ex
}

// decideJSON posts body to ts's /json and returns the status code.
func decideJSON(t *testing.T, ts *httptest.Server, body string) int {
	t.Helper()
	code, out, _ := do(t, ts, http.MethodPost, "/json", body)
	if code != http.StatusOK && code != http.StatusTooManyRequests {
		t.Fatalf("POST /json %s: %d %s", body, code, out)
	}
	return code
}

// explainServer serves rules on store, with the test clock, over HTTP.
func explainServer(t *testing.T, store backend.Store, clock *backendtest.Clock, opts server.Options, files ...string) *httptest.Server {
	t.Helper()
	opts.Now = clock.Now
	srv := server.New(store, loadRules(t, files...), opts)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return ts
}

// jsonBody is a /json body of one descriptor of entries ("k=v" each) in
// domain, with hits.
func jsonBody(domain string, hits int, entries ...string) string {
	var es []string
	for _, e := range entries {
		k, v, _ := strings.Cut(e, "=")
		es = append(es, fmt.Sprintf(`{"key": %q, "value": %q}`, k, v))
	}
	return fmt.Sprintf(`{"domain": %q, "hits_addend": %d, "descriptors": [{"entries": [%s]}]}`, domain, hits, strings.Join(es, ", "))
}

var counterDigest = regexp.MustCompile(`^sha256:[0-9a-f]{16}$`)

// TestExplainStores: on the memory store and on a real Redis, after some
// traffic, explain reports each algorithm's counter as it stands, says
// whether the hits asked for would pass, and consumes nothing: a second
// explain reads the same, and the next real decision finds the counts
// explain reported.
func TestExplainStores(t *testing.T) {
	stores := map[string]func(t *testing.T, clock *backendtest.Clock) backend.Store{
		"memory": func(t *testing.T, clock *backendtest.Clock) backend.Store {
			s := memory.New(memory.Options{Now: clock.Now})
			t.Cleanup(func() { s.Close() })
			return s
		},
		"redis": func(t *testing.T, clock *backendtest.Clock) backend.Store {
			rs := redistest.Start(t)
			client, err := redis.NewClient("redis://"+rs.Addr, redis.ClientOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { client.Close() })
			s, err := redis.New(client, redis.Options{Now: clock.Now, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
		"redis-cluster": func(t *testing.T, clock *backendtest.Clock) backend.Store {
			c := redistest.StartCluster(t, 3)
			client, err := redis.NewClient(c.URL(), redis.ClientOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { client.Close() })
			s, err := redis.New(client, redis.Options{Now: clock.Now, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
	// Each algorithm's rule in algorithms.yaml, its line and what is left
	// after 3 hits at t0 (token bucket: a burst of 20; the log: 5 per 30 s).
	cases := []struct {
		key, alg       string
		line           int
		requests, left uint64
		burst          uint64
	}{
		{"fixed", "fixed_window", 4, 10, 7, 10},
		{"sliding", "sliding_window", 9, 10, 7, 10},
		{"bucket", "token_bucket", 13, 10, 17, 20},
		{"gcra", "gcra", 19, 10, 7, 10},
		{"log", "sliding_log", 24, 5, 2, 5},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			clock := backendtest.NewClock(t0)
			// FailError: a decision the store could not make (a Cluster
			// node slow on a loaded machine) fails the test instead of
			// passing as admitted by the failure mode.
			ts := explainServer(t, open(t, clock), clock, server.Options{FailureMode: server.FailError}, "algorithms.yaml")
			for _, c := range cases {
				t.Run(c.key, func(t *testing.T) {
					for range 3 {
						if code := decideJSON(t, ts, jsonBody("algorithms", 1, c.key+"=k")); code != http.StatusOK {
							t.Fatalf("traffic: %d, want 200", code)
						}
					}
					clock.Set(t0.Add(time.Second / 2)) // within every window; nothing refills a whole hit
					fits := explain(t, ts, jsonBody("algorithms", 1, c.key+"=k"))
					d := fits.Descriptors[0]
					if fits.Overall != "OK" || d.Decision != "OK" || d.Rule == nil || len(d.Limits) != 1 {
						t.Fatalf("explain: %+v, want OK under one rule and one limit", fits)
					}
					if d.Rule.Path != c.key || d.Rule.File != "testdata/algorithms.yaml" || d.Rule.Line != c.line {
						t.Errorf("rule %+v, want %s at testdata/algorithms.yaml:%d", *d.Rule, c.key, c.line)
					}
					l := d.Limits[0]
					if l.Algorithm != c.alg || l.RequestsPerUnit != c.requests || l.Burst != c.burst || l.Remaining != c.left || !l.WouldAdmit {
						t.Errorf("limit %+v, want %s, %d per window, burst %d, %d remaining, would admit", l, c.alg, c.requests, c.burst, c.left)
					}
					if !counterDigest.MatchString(l.Counter) {
						t.Errorf("counter %q, want sha256: and 16 hex digits", l.Counter)
					}
					again := explain(t, ts, jsonBody("algorithms", 1, c.key+"=k"))
					if diff := cmp.Diff(fits, again); diff != "" {
						t.Errorf("a second explain differs (-first +second): the first consumed?\n%s", diff)
					}
					over := explain(t, ts, jsonBody("algorithms", int(c.left)+1, c.key+"=k"))
					if lo := over.Descriptors[0].Limits[0]; over.Overall != "OVER_LIMIT" || over.Descriptors[0].Decision != "OVER_LIMIT" || lo.WouldAdmit || lo.Remaining != c.left {
						t.Errorf("explain of %d hits: %+v, want OVER_LIMIT, %d remaining", c.left+1, over, c.left)
					}
					// The real decision finds what explain read: exactly
					// left hits pass, and nothing more.
					if code := decideJSON(t, ts, jsonBody("algorithms", int(c.left), c.key+"=k")); code != http.StatusOK {
						t.Errorf("deciding the %d hits explain said remain: %d, want 200", c.left, code)
					}
					if code := decideJSON(t, ts, jsonBody("algorithms", 1, c.key+"=k")); code != http.StatusTooManyRequests {
						t.Errorf("one more hit: %d, want 429", code)
					}
					clock.Set(t0)
				})
			}
			t.Run("several descriptors", func(t *testing.T) {
				explainSeveral(t, ts)
			})
		})
	}
}

// explainSeveral explains a request of several descriptors (on a Redis
// Cluster, counters that may live on several nodes) and checks that it consumes none of
// their counters.
func explainSeveral(t *testing.T, ts *httptest.Server) {
	t.Helper()
	var descs []string
	for _, key := range []string{"half_minute", "window_of_a_minute", "window_of_a_day", "window_of_a_week"} {
		descs = append(descs, fmt.Sprintf(`{"entries": [{"key": %q, "value": "many"}]}`, key))
	}
	body := `{"domain": "algorithms", "descriptors": [` + strings.Join(descs, ", ") + `]}`
	remaining := func() []uint64 {
		t.Helper()
		var r []uint64
		for _, d := range explain(t, ts, body).Descriptors {
			r = append(r, d.Limits[0].Remaining)
		}
		return r
	}
	decideJSON(t, ts, body)
	for _, want := range [][]uint64{{4, 4, 4, 4}, {4, 4, 4, 4}} { // twice: explain consumed nothing
		if diff := cmp.Diff(want, remaining()); diff != "" {
			t.Errorf("remaining after one decision (-want +got):\n%s", diff)
		}
	}
	decideJSON(t, ts, body)
	if diff := cmp.Diff([]uint64{3, 3, 3, 3}, remaining()); diff != "" {
		t.Errorf("remaining after a second decision (-want +got):\n%s", diff)
	}
}

// TestExplainRetryAfter: for a fixed window and GCRA, a refusal says
// when the hits would pass; for a sliding window, whose state a check
// does not report, it says nothing.
func TestExplainRetryAfter(t *testing.T) {
	clock := backendtest.NewClock(t0)
	store := memory.New(memory.Options{Now: clock.Now})
	t.Cleanup(func() { store.Close() })
	ts := explainServer(t, store, clock, server.Options{}, "algorithms.yaml")
	for _, key := range []string{"fixed", "gcra", "sliding"} {
		decideJSON(t, ts, jsonBody("algorithms", 10, key+"=k"))
	}
	clock.Set(t0.Add(time.Second))
	for key, want := range map[string]string{
		"fixed": "59s", // the window's end
		// 10 per minute, a hit every 6 s: the 10 hits took the burst
		// until t0+60s, and one more fits once 9 × 6 s are left.
		"gcra":    "5s",
		"sliding": "",
	} {
		l := explain(t, ts, jsonBody("algorithms", 1, key+"=k")).Descriptors[0].Limits[0]
		if l.WouldAdmit || l.RetryAfter != want {
			t.Errorf("%s: would_admit %v, retry_after %q; want false, %q", key, l.WouldAdmit, l.RetryAfter, want)
		}
	}
}

// TestExplainModes: shadow and quota modes, replaced limits, unlimited
// rules and descriptors no rule matches, each as a decision would treat
// them.
func TestExplainModes(t *testing.T) {
	clock := backendtest.NewClock(t0)
	store := memory.New(memory.Options{Now: clock.Now})
	t.Cleanup(func() { store.Close() })
	ts := explainServer(t, store, clock, server.Options{}, "modes.yaml")
	for range 2 {
		decideJSON(t, ts, jsonBody("modes", 1, "signup=x"))
		decideJSON(t, ts, jsonBody("modes", 1, "project=alpha"))
	}

	shadow := explain(t, ts, jsonBody("modes", 1, "signup=x"))
	if d := shadow.Descriptors[0]; shadow.Overall != "OK" || d.Decision != "OK" || !d.ShadowMode || d.Limits[0].WouldAdmit {
		t.Errorf("a shadow rule over its limit: %+v, want OK, shadow_mode, would_admit false", shadow)
	}

	quota := `{"domain": "modes", "descriptors": [{"entries": [{"key": "project", "value": "alpha"}]}, {"entries": [{"key": "project", "value": "beta"}]}]}`
	q := explain(t, ts, quota)
	if q.Overall != "OK" || !q.Descriptors[0].QuotaMode || q.Descriptors[0].Decision != "OVER_LIMIT" || q.Descriptors[1].Decision != "OK" {
		t.Errorf("quotas alpha spent, beta not: %+v, want overall OK, alpha OVER_LIMIT, beta OK", q)
	}
	alphaOnly := explain(t, ts, jsonBody("modes", 1, "project=alpha"))
	if alphaOnly.Overall != "OVER_LIMIT" {
		t.Errorf("the only quota spent: overall %s, want OVER_LIMIT", alphaOnly.Overall)
	}

	replaced := `{"domain": "modes", "descriptors": [{"entries": [{"key": "plan", "value": "free"}]}, {"entries": [{"key": "customer", "value": "vip"}]}]}`
	r := explain(t, ts, replaced)
	if l := r.Descriptors[0].Limits; len(l) != 1 || !l[0].Replaced || l[0].Counter != "" || l[0].Name != "standard" {
		t.Errorf("plan=free beside customer=vip: limits %+v, want standard, replaced, no counter", l)
	}
	if d := r.Descriptors[1]; !cmp.Equal(d.Replaces, []string{"standard"}) || d.Limits[0].Replaced {
		t.Errorf("customer=vip: replaces %v, limits %+v; want [standard], its own limit applied", d.Replaces, d.Limits)
	}

	other := `{"domain": "modes", "descriptors": [{"entries": [{"key": "source_cluster", "value": "internal"}]}, {"entries": [{"key": "nothing", "value": "here"}]}]}`
	o := explain(t, ts, other)
	want := []string{"UNLIMITED", "NO_RULE"}
	var got []string
	for _, d := range o.Descriptors {
		got = append(got, d.Decision)
	}
	if diff := cmp.Diff(want, got); diff != "" || !o.Descriptors[0].Unlimited || o.Descriptors[1].Rule != nil {
		t.Errorf("unlimited and unmatched: %+v (decisions -want +got %s)", o, diff)
	}
	if len(o.Descriptors[1].Entries) != 1 || o.Descriptors[1].Entries[0].Value != "here" {
		t.Errorf("entries %+v, want the request's echoed", o.Descriptors[1].Entries)
	}

	ovr := `{"domain": "modes", "descriptors": [{"entries": [{"key": "nothing", "value": "here"}], "limit": {"requests_per_unit": 3, "unit": "HOUR"}}]}`
	od := explain(t, ts, ovr).Descriptors[0]
	if od.Decision != "OK" || od.Rule != nil || len(od.Limits) != 1 || od.Limits[0].RequestsPerUnit != 3 || od.Limits[0].Window != "1h0m0s" || od.Limits[0].Remaining != 3 {
		t.Errorf("an unmatched descriptor with its own limit: %+v, want OK under 3 per hour, 3 remaining", od)
	}
}

// TestExplainShadowDaemon: a daemon in shadow mode refuses nothing, and
// explain says so.
func TestExplainShadowDaemon(t *testing.T) {
	clock := backendtest.NewClock(t0)
	store := memory.New(memory.Options{Now: clock.Now})
	t.Cleanup(func() { store.Close() })
	ts := explainServer(t, store, clock, server.Options{ShadowMode: true}, "algorithms.yaml")
	ex := explain(t, ts, jsonBody("algorithms", 11, "fixed=k"))
	if !ex.ShadowMode || ex.Overall != "OK" || ex.Descriptors[0].Limits[0].WouldAdmit {
		t.Errorf("11 hits on 10 in shadow mode: %+v, want shadow_mode, overall OK, would_admit false", ex)
	}
}

// TestExplainBadRequests: a body /json refuses gets the same 400 and its
// reason.
func TestExplainBadRequests(t *testing.T) {
	h := newHarness(t, loadRules(t, "algorithms.yaml"), server.Options{})
	ts := httpServer(t, h)
	for body, want := range map[string]string{
		`{`:                     "invalid RateLimitRequest",
		`{"domain": "x"}`:       "no descriptors",
		`{"descriptors": [{}]}`: "domain is empty",
		`{"domain": "algorithms", "descriptors": [{"entries": [{"key": "fixed", "value": "k"}], "hits_addend": 5000000000}]}`: "over the maximum",
	} {
		code, out, _ := do(t, ts, http.MethodPost, "/explain", body)
		if code != http.StatusBadRequest || !strings.Contains(out, want) {
			t.Errorf("POST /explain %s: %d %q, want 400 naming %q", body, code, out, want)
		}
	}
	if code, _, _ := do(t, ts, http.MethodGet, "/explain", ""); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /explain: %d, want 405", code)
	}
}

// TestExplainNative: the native Explain RPC explains a ShouldRateLimit
// request as /explain does, consumes nothing, and refuses a malformed
// request as ShouldRateLimit does.
func TestExplainNative(t *testing.T) {
	h := newHarness(t, loadRules(t, "algorithms.yaml"), server.Options{})
	req := nrequest("algorithms", ndesc("fixed", "k"))
	for range 4 {
		h.shouldNative(t, req)
	}
	h.at(time.Second)
	explainNative := func(req *ratelimitv1.ShouldRateLimitRequest) *ratelimitv1.ExplainResponse {
		t.Helper()
		resp, err := h.native.Explain(t.Context(), &ratelimitv1.ExplainRequest{Request: req})
		if err != nil {
			t.Fatalf("Explain(%s): %v", brief(req), err)
		}
		return resp
	}
	want := &ratelimitv1.ExplainResponse{
		Code: nok,
		Descriptors: []*ratelimitv1.DescriptorExplanation{{
			Rule:     &ratelimitv1.MatchedRule{Path: "fixed", File: "testdata/algorithms.yaml", Line: 4},
			Decision: ratelimitv1.Decision_DECISION_OK,
			Hits:     1,
			Limits: []*ratelimitv1.LimitExplanation{{
				Limit:      nlimit(10, time.Minute, ratelimitv1.Algorithm_ALGORITHM_FIXED_WINDOW, "fixed", 10),
				Remaining:  6,
				ResetAfter: durationpb.New(59 * time.Second),
				WouldAdmit: true,
			}},
		}},
	}
	ignoreCounter := protocmp.IgnoreFields(&ratelimitv1.LimitExplanation{}, "counter")
	first := explainNative(req)
	if diff := cmp.Diff(want, first, protocmp.Transform(), ignoreCounter); diff != "" {
		t.Errorf("Explain after 4 hits of 10 (-want +got):\n%s", diff)
	}
	if c := first.GetDescriptors()[0].GetLimits()[0].GetCounter(); !counterDigest.MatchString(c) {
		t.Errorf("counter %q, want sha256: and 16 hex digits", c)
	}
	if diff := cmp.Diff(first, explainNative(req), protocmp.Transform()); diff != "" {
		t.Errorf("a second Explain differs (-first +second):\n%s", diff)
	}
	if got := h.shouldNative(t, req).GetStatuses()[0].GetRemaining(); got != 5 {
		t.Errorf("the decision after two Explains left %d, want 5 (6 explained, less its hit)", got)
	}

	over := explainNative(&ratelimitv1.ShouldRateLimitRequest{Domain: "algorithms", Hits: 6, Descriptors: []*ratelimitv1.Descriptor{ndesc("fixed", "k")}})
	lo := over.GetDescriptors()[0].GetLimits()[0]
	if over.GetCode() != nover || lo.GetWouldAdmit() || lo.GetRetryAfter().AsDuration() != 59*time.Second {
		t.Errorf("Explain of 6 hits on 5 left: %v, want CODE_OVER_LIMIT, would_admit false, retry_after 59s", over)
	}

	_, err := h.native.Explain(t.Context(), &ratelimitv1.ExplainRequest{Request: nrequest("")})
	wantCode(t, "Explain of an empty request", err, codes.InvalidArgument, "domain is empty")
}

// TestExplainStoreDown: a store that cannot be read gets 503, whatever
// the failure mode, since explain reports counters.
func TestExplainStoreDown(t *testing.T) {
	clock := backendtest.NewClock(t0)
	store := memory.New(memory.Options{Now: clock.Now})
	ts := explainServer(t, store, clock, server.Options{FailureMode: server.FailAllow}, "algorithms.yaml")
	store.Close()
	code, out, _ := do(t, ts, http.MethodPost, "/explain", jsonBody("algorithms", 1, "fixed=k"))
	if code != http.StatusServiceUnavailable {
		t.Errorf("POST /explain on a closed store: %d %q, want 503", code, out)
	}
}

// TestExplainRPCWithAdmin: with the operators' endpoints on a listener of
// their own, the native Explain RPC, on the callers' gRPC port, answers
// PermissionDenied.
func TestExplainRPCWithAdmin(t *testing.T) {
	h := newHarness(t, loadRules(t, "algorithms.yaml"), server.Options{OperatorsOnAdmin: true})
	_, err := h.native.Explain(t.Context(), &ratelimitv1.ExplainRequest{Request: &ratelimitv1.ShouldRateLimitRequest{
		Domain: "algorithms", Descriptors: []*ratelimitv1.Descriptor{ndesc("fixed", "k")}}})
	wantCode(t, "Explain with OperatorsOnAdmin", err, codes.PermissionDenied, "admin listener")
}
