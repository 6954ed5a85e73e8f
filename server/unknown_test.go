package server_test

import (
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/backend/memory"
	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/server"
)

// unknownRules have one domain, edge, which a typo misses.
const unknownRules = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// unknownLogs returns the "domain with no rules" lines of logs, decoded.
func unknownLogs(t *testing.T, logs *lockedBuffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(logs.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if strings.Contains(m["msg"].(string), "domain with no rules") {
			out = append(out, m)
		}
	}
	return out
}

// TestUnknownDomains: requests for domains without rules are answered OK
// on every face, as before, and counted: each of the first
// UnknownDomains domains under its own label, the others together; each
// is logged at most once a minute (the others together), with the
// domain of the rules one typo away; /ui/api/status lists them.
func TestUnknownDomains(t *testing.T) {
	var logs lockedBuffer
	reg := prometheus.NewRegistry()
	h := newHarness(t, parseRules(t, unknownRules), server.Options{
		Registry: reg, UnknownDomains: 2, Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	ts := httpServer(t, h)
	okOn := func(domain string) {
		t.Helper()
		if resp := h.should(t, request(domain, desc("remote_address", "10.0.0.1"))); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("%s: overall %v, want OK", domain, resp.GetOverallCode())
		}
	}
	for range 3 {
		okOn("edg")
	}
	if resp := h.shouldNative(t, nrequest("edg", ndesc("remote_address", "10.0.0.1"))); resp.GetCode() != ratelimitv1.Code_CODE_OK {
		t.Fatalf("native edg: %v, want OK", resp.GetCode())
	}
	if code, body, _ := do(t, ts, "POST", "/json", `{"domain": "edg", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.1"}]}]}`); code != 200 {
		t.Fatalf("POST /json for edg = %d %s, want 200", code, body)
	}
	okOn("nowhere")
	okOn("third") // past the bound of 2: counted with the others
	okOn("fourth")
	okOn("third")
	okOn("edge") // known: not counted
	h.should(t, request("edge", desc("remote_address", "10.0.0.1")))
	if code, _, _ := do(t, ts, "POST", "/explain", `{"domain": "edg", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.1"}]}]}`); code != 200 {
		t.Fatalf("POST /explain = %d", code) // an explanation decides nothing: not counted
	}

	fams := scrape(t, ts)
	fams.Want(t, map[string]float64{
		"ratelimitd_unknown_domain_requests_total{domain=edg}":     5,
		"ratelimitd_unknown_domain_requests_total{domain=nowhere}": 1,
		"ratelimitd_unknown_domain_requests_untracked_total":       3,
	})
	for _, d := range []string{"edge", "third", "fourth"} {
		if _, ok := fams.Value("ratelimitd_unknown_domain_requests_total", "domain="+d); ok {
			t.Errorf("a series for domain %s", d)
		}
	}

	lines := unknownLogs(t, &logs)
	if len(lines) != 3 {
		t.Fatalf("%d lines about unknown domains, want 3 (edg, nowhere, the others): %s", len(lines), logs.String())
	}
	if l := lines[0]; l["domain"] != "edg" || l["did_you_mean"] != "edge" || l["requests"] != 1.0 || l["level"] != "WARN" {
		t.Errorf("first line %v, want domain edg, did_you_mean edge, requests 1, at WARN", l)
	}
	if l := lines[2]; l["domain"] != "third" || l["untracked"] != true {
		t.Errorf("third line %v, want domain third, untracked", l)
	}

	h.at(time.Minute - time.Millisecond)
	okOn("edg")
	okOn("fourth")
	if n := len(unknownLogs(t, &logs)); n != 3 {
		t.Errorf("%d lines within the minute, want still 3", n)
	}
	h.at(time.Minute)
	okOn("edg")
	okOn("fourth")
	okOn("edg")
	lines = unknownLogs(t, &logs)
	if len(lines) != 5 || lines[3]["domain"] != "edg" || lines[3]["requests"] != 7.0 || lines[4]["domain"] != "fourth" {
		t.Errorf("after a minute: lines %v; want edg's 7th request and fourth's line", lines[3:])
	}

	code, body, _ := do(t, ts, "GET", "/ui/api/status", "")
	var st struct {
		Unknown []struct {
			Domain   string
			Requests uint64
			LastSeen string `json:"last_seen"`
		} `json:"unknown_domains"`
		Untracked uint64 `json:"unknown_domains_untracked"`
	}
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil {
		t.Fatalf("GET /ui/api/status = %d %s (%v)", code, body, err)
	}
	if len(st.Unknown) != 2 || st.Unknown[0].Domain != "edg" || st.Unknown[0].Requests != 8 || st.Unknown[1].Domain != "nowhere" || st.Untracked != 5 {
		t.Fatalf("status: %s; want edg (8), nowhere, and 5 untracked", body)
	}
	// The time of the latest request is kept to the second.
	if last, err := time.Parse(time.RFC3339, st.Unknown[0].LastSeen); err != nil || last.Before(t0.Add(59*time.Second)) || last.After(t0.Add(time.Minute)) {
		t.Errorf("edg last seen %s (%v), want within the second before t0+1m", st.Unknown[0].LastSeen, err)
	}
}

// TestUnknownDomainsMakeRoom: with the table full, a domain idle for
// ten minutes, or one that now has rules, gives its place and its label
// to a new one; a full table looks for room at most once a second.
func TestUnknownDomainsMakeRoom(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHarness(t, parseRules(t, unknownRules), server.Options{Registry: reg, UnknownDomains: 2})
	ts := httpServer(t, h)
	ask := func(domain string) { h.should(t, request(domain, desc("remote_address", "10.0.0.1"))) }
	ask("a")
	h.at(5 * time.Minute)
	ask("b")
	h.at(10*time.Minute + time.Second) // a is idle for 10 minutes, b is not
	ask("c")
	ask("d") // no room: b is in use
	fams := scrape(t, ts)
	fams.Want(t, map[string]float64{
		"ratelimitd_unknown_domain_requests_total{domain=b}": 1,
		"ratelimitd_unknown_domain_requests_total{domain=c}": 1,
		"ratelimitd_unknown_domain_requests_untracked_total": 1,
	})
	if _, ok := fams.Value("ratelimitd_unknown_domain_requests_total", "domain=a"); ok {
		t.Errorf("a, idle, still has its series")
	}

	// b gets rules: its place goes to the next new domain.
	h.srv.SetRules(parseRules(t, unknownRules+"---\ndomain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"))
	ask("b") // known now: not counted
	ask("e") // the table looked for room less than a second ago: e counts with the others
	h.at(10*time.Minute + 2*time.Second)
	ask("e")
	fams = scrape(t, ts)
	fams.Want(t, map[string]float64{
		"ratelimitd_unknown_domain_requests_total{domain=c}": 1,
		"ratelimitd_unknown_domain_requests_total{domain=e}": 1,
		"ratelimitd_unknown_domain_requests_untracked_total": 2,
	})
	if _, ok := fams.Value("ratelimitd_unknown_domain_requests_total", "domain=b"); ok {
		t.Errorf("b, now in the rules, still has its series")
	}
}

// TestUnknownDomainsNoRules: before any rules, every request is for a
// domain without rules: counted and logged as such.
func TestUnknownDomainsNoRules(t *testing.T) {
	var logs lockedBuffer
	reg := prometheus.NewRegistry()
	h := newHarness(t, nil, server.Options{Registry: reg, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	h.should(t, request("edge", desc("remote_address", "10.0.0.1")))
	scrape(t, httpServer(t, h)).Want(t, map[string]float64{"ratelimitd_unknown_domain_requests_total{domain=edge}": 1})
	if lines := unknownLogs(t, &logs); len(lines) != 1 || lines[0]["rules_loaded"] != false {
		t.Errorf("lines %v, want one saying no rules are loaded", lines)
	}
}

// BenchmarkUnknownDomains measures a decision for a domain without
// rules: one domain over and over (a typo), which has its place in the
// table, and a new domain each time past a full table (a client sending
// random domains), which costs about as much: the table looks for room
// once a second, not at every request.
func BenchmarkUnknownDomains(b *testing.B) {
	for _, bm := range []struct {
		name     string
		distinct bool
	}{{"one", false}, {"distinct_past_the_bound", true}} {
		b.Run(bm.name, func(b *testing.B) {
			store := memory.New(memory.Options{})
			b.Cleanup(func() { store.Close() })
			srv := server.New(store, parseRules(b, unknownRules), server.Options{Registry: prometheus.NewRegistry()})
			envoy := srv.Envoy()
			reqs := make([]*rlsv3.RateLimitRequest, 1<<16)
			for i := range reqs {
				reqs[i] = request("edg", desc("remote_address", "10.0.0.1"))
				if bm.distinct {
					reqs[i].Domain = "d" + strconv.Itoa(i)
				}
			}
			fill := server.DefaultUnknownDomains
			if !bm.distinct {
				fill-- // and edg takes the last place
				if _, err := envoy.ShouldRateLimit(b.Context(), reqs[0]); err != nil {
					b.Fatal(err)
				}
			}
			for i := range fill { // fill the table
				if _, err := envoy.ShouldRateLimit(b.Context(), request("fill"+strconv.Itoa(i), desc("k", "v"))); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := envoy.ShouldRateLimit(b.Context(), reqs[i%len(reqs)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// TestUnknownDomainsRLQS: an RLQS report for a domain without rules is
// answered (ALLOW_ALL) and counted as one request, as on the other APIs.
func TestUnknownDomainsRLQS(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHarness(t, parseRules(t, unknownRules), server.Options{Registry: reg, RLQS: true})
	st, err := rlqsv3.NewRateLimitQuotaServiceClient(h.conn).StreamRateLimitQuotas(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		m := &rlqsv3.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"remote_address": "10.0.0.1"}}, NumRequestsAllowed: 5},
		}}
		if i == 0 {
			m.Domain = "edg"
		}
		if err := st.Send(m); err != nil {
			t.Fatal(err)
		}
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule(); got != typev3.RateLimitStrategy_ALLOW_ALL {
			t.Fatalf("report %d for edg: %v, want ALLOW_ALL", i, got)
		}
	}
	scrape(t, httpServer(t, h)).Want(t, map[string]float64{"ratelimitd_unknown_domain_requests_total{domain=edg}": 2})
}
