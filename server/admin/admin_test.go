package admin_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/server/admin"
	"github.com/ratelimitd/ratelimitd/server/internal/engine"
)

// epoch is the tests' clock: the store's, the engine's and the samples'.
var epoch = time.Unix(1_800_000_000, 0).UTC()

// compile parses yaml as the rules file rules.yaml and compiles it.
func compile(t *testing.T, yaml string) *config.Rules {
	t.Helper()
	domains, err := config.Parse("rules.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := config.Compile(domains)
	if err != nil {
		t.Fatal(err)
	}
	return rules
}

// fixture is an Admin over a real engine and memory store, both on a
// clock that stands still at epoch, and the mux its routes are on.
type fixture struct {
	eng    *engine.Engine
	admin  *admin.Admin
	mux    *http.ServeMux
	counts *ruleCounts
}

// newFixture builds a fixture under rules (nil: none loaded) with the
// engine options eo and the admin options ao. ao.RuleCounts, when nil,
// reads what the engine counted.
func newFixture(t *testing.T, rules *config.Rules, eo engine.Options, ao admin.Options) *fixture {
	t.Helper()
	clock := func() time.Time { return epoch }
	store := memory.New(memory.Options{Now: clock})
	t.Cleanup(func() { store.Close() })
	f := &fixture{counts: new(ruleCounts), mux: http.NewServeMux()}
	eo.Now, eo.Metrics = clock, f.counts
	f.eng = engine.New(store, rules, eo)
	if ao.RuleCounts == nil {
		ao.RuleCounts = f.counts.each
	}
	f.admin = admin.New(f.eng, ao)
	f.admin.Routes(f.mux)
	f.mux.Handle("GET /rlconfig", f.admin.RLConfig())
	return f
}

// do sends method path with body through the fixture's mux.
func (f *fixture) do(t *testing.T, method, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	f.mux.ServeHTTP(w, httptest.NewRequest(method, path, strings.NewReader(body)))
	return w
}

// decide decides hits of one descriptor of domain with entries, key and
// value pairs, and reports whether the engine refused it.
func (f *fixture) decide(t *testing.T, domain string, hits uint64, entries ...string) bool {
	t.Helper()
	var d engine.Decision
	err := f.eng.DecideRequest(context.Background(), func(r *engine.Request) error {
		r.Domain = domain
		for i := 0; i < len(entries); i += 2 {
			r.Entries = append(r.Entries, engine.Entry{Key: entries[i], Value: entries[i+1]})
		}
		r.Add(0, hits)
		return nil
	}, &d)
	if err != nil {
		t.Fatal(err)
	}
	return d.Over
}

// ruleCounts is an engine.Metrics keeping the cumulative hits of each
// rule as the server's rule metrics count them: within the limit, over
// it, and over it but let through by shadow mode.
type ruleCounts struct {
	mu sync.Mutex
	m  map[[2]string]*[3]uint64 // domain and rule: within, over, shadow
}

func (*ruleCounts) StoreTook(time.Duration)                {}
func (*ruleCounts) StoreFailed(string, engine.FailureMode) {}
func (*ruleCounts) GlobalShadowMode()                      {}

func (c *ruleCounts) Rule(domain string, rc engine.RuleCount) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[[2]string]*[3]uint64{}
	}
	k := [2]string{domain, rc.Rule.Path}
	if c.m[k] == nil {
		c.m[k] = new([3]uint64)
	}
	switch {
	case rc.Over && rc.Shadow:
		c.m[k][1] += rc.Hits
		c.m[k][2] += rc.Hits
	case rc.Over:
		c.m[k][1] += rc.Hits
	default:
		c.m[k][0] += rc.Hits
	}
}

// each is admin.Options.RuleCounts.
func (c *ruleCounts) each(f func(domain, rule string, within, over, shadow uint64)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, n := range c.m {
		f(k[0], k[1], n[0], n[1], n[2])
	}
}

// smallRules are the rules of the tests of /config, /rlconfig and
// /ui/api/rules.
const smallRules = `domain: web
descriptors:
  - key: tenant
    value: acme
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window}
    descriptors:
      - key: path
        rate_limits:
          - {window: 90s, requests_per_unit: 5, algorithm: token_bucket, burst: 2, name: search}
          - {unit: day, requests_per_unit: 1000}
  - key: health
    rate_limit: {unlimited: true}
---
domain: api
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
`

// TestConfig: GET /config is the rules in force as YAML under a comment
// naming their file, which loads back to the same rules; 503 before any
// are loaded.
func TestConfig(t *testing.T) {
	f := newFixture(t, nil, engine.Options{}, admin.Options{})
	if w := f.do(t, "GET", "/config", ""); w.Code != http.StatusServiceUnavailable || w.Body.String() != "no rules loaded\n" {
		t.Errorf("GET /config without rules = %d %q, want 503 no rules loaded", w.Code, w.Body)
	}
	f.eng.SetRules(compile(t, smallRules))
	w := f.do(t, "GET", "/config", "")
	want := `# the rules in force, loaded from rules.yaml
domain: web
descriptors:
  - key: tenant
    value: acme
    rate_limit:
      unit: minute
      requests_per_unit: 10
      algorithm: fixed_window
    shadow_mode: true
    descriptors:
      - key: path
        rate_limits:
          - requests_per_unit: 5
            name: search
            algorithm: token_bucket
            burst: 2
            window: 90s
          - unit: day
            requests_per_unit: 1000
  - key: health
    rate_limit:
      unlimited: true
---
domain: api
descriptors:
  - key: k
    rate_limit:
      unit: second
      requests_per_unit: 1
`
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/yaml; charset=utf-8" || w.Header().Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("GET /config = %d, headers %v; want 200 application/yaml; charset=utf-8, nosniff", w.Code, w.Header())
	}
	if diff := cmp.Diff(want, w.Body.String()); diff != "" {
		t.Errorf("GET /config (-want +got):\n%s", diff)
	}
	if _, err := config.Parse("config.yaml", w.Body.Bytes()); err != nil {
		t.Errorf("GET /config does not load back: %v", err)
	}
}

// TestRLConfig: /rlconfig is one line per rule with a limit or
// unlimited, domains in name order and rules in path order, each limit's requests, window,
// algorithm, burst and name, then the rule's modes; a rule that only
// leads to others has no line. 503 before any rules are loaded.
func TestRLConfig(t *testing.T) {
	f := newFixture(t, nil, engine.Options{}, admin.Options{})
	if w := f.do(t, "GET", "/rlconfig", ""); w.Code != http.StatusServiceUnavailable {
		t.Errorf("GET /rlconfig without rules = %d %q, want 503", w.Code, w.Body)
	}
	f.eng.SetRules(compile(t, smallRules+`  - key: lead
    descriptors:
      - key: q
        quota_mode: true
        detailed_metric: true
        rate_limit: {unit: hour, requests_per_unit: 7}
  - key: exports
    rate_limit: {algorithm: concurrency, window: 5m, requests_per_unit: 20}
`))
	w := f.do(t, "GET", "/rlconfig", "")
	want := `api.exports: 20 at once lease 5m0s concurrency
api.k: 1 per second sliding_window
api.lead.q: 7 per hour sliding_window quota_mode detailed_metric
web.health: unlimited
web.tenant=acme: 10 per minute fixed_window shadow_mode
web.tenant=acme.path: 5 per 1m30s token_bucket burst=2 name=search + 1000 per day sliding_window
`
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Errorf("GET /rlconfig = %d %s, want 200 text/plain; charset=utf-8", w.Code, w.Header().Get("Content-Type"))
	}
	if diff := cmp.Diff(want, w.Body.String()); diff != "" {
		t.Errorf("GET /rlconfig (-want +got):\n%s", diff)
	}
}

// hotRules limit each address to 10 hits a minute.
const hotRules = `
domain: edge
descriptors:
  - key: addr
    rate_limit: {unit: minute, requests_per_unit: 10}
`

// hotView is the part of GET /hotkeys's body the tests read.
type hotView struct {
	Replica       string  `json:"replica"`
	WindowSeconds float64 `json:"window_seconds"`
	K             int     `json:"k"`
	Values        string  `json:"values"`
	DigestKey     string  `json:"digest_key"`
	DigestKeyID   string  `json:"digest_key_id"`
	Lookup        *struct {
		Value string `json:"value"`
		Found int    `json:"found"`
	} `json:"lookup"`
	Domains []hotDomain `json:"domains"`
}

type hotDomain struct {
	Domain  string     `json:"domain"`
	Refused []hotEntry `json:"refused"`
	Nearest []hotEntry `json:"nearest"`
}

type hotEntry struct {
	Rule       string `json:"rule"`
	File       string `json:"file"`
	Line       int    `json:"line"`
	Descriptor []struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	} `json:"descriptor"`
	Hits      uint64  `json:"hits"`
	Refused   uint64  `json:"refused"`
	Limit     uint64  `json:"limit"`
	Algorithm string  `json:"algorithm"`
	Window    string  `json:"window"`
	Remaining uint64  `json:"remaining"`
	Reset     string  `json:"reset"`
	Used      float64 `json:"used"`
	Seen      string  `json:"seen"`
}

// getHotKeys returns GET path's body decoded, failing unless it is 200
// and JSON.
func (f *fixture) getHotKeys(t *testing.T, path string) hotView {
	t.Helper()
	w := f.do(t, "GET", path, "")
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s = %d (%s) %s", path, w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	var v hotView
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, w.Body)
	}
	return v
}

// hotTraffic sends 13 hits of 10.0.0.1 one by one (3 refused) and 4 of
// 10.0.0.2, and checks the engine's verdicts.
func (f *fixture) hotTraffic(t *testing.T) {
	t.Helper()
	for i := range 13 {
		if over := f.decide(t, "edge", 1, "addr", "10.0.0.1"); over != (i >= 10) {
			t.Fatalf("hit %d of 10.0.0.1: over %v", i+1, over)
		}
	}
	if f.decide(t, "edge", 4, "addr", "10.0.0.2") {
		t.Fatal("4 hits of 10.0.0.2 refused")
	}
}

// TestHotKeys: after refusals, GET /hotkeys lists the refused counter
// with its rule, file, line, counts, limit and reset on the engine's
// clock, and the nearest counters most used first, values as they are
// with HotKeysShowValues; ?value= keeps the counters holding the value
// and counts them; any other parameter is ignored.
func TestHotKeys(t *testing.T) {
	f := newFixture(t, compile(t, hotRules),
		engine.Options{HotKeys: engine.HotKeysOptions{Enabled: true, K: 5, Window: time.Minute}},
		admin.Options{HotKeysShowValues: true, HotKeysReplica: "replica-a"})
	f.hotTraffic(t)

	v := f.getHotKeys(t, "/hotkeys")
	if v.Replica != "replica-a" || v.WindowSeconds != 60 || v.K != 5 || v.Values != "shown" || v.DigestKey != "" || v.DigestKeyID != "" || v.Lookup != nil {
		t.Errorf("GET /hotkeys = %+v, want replica-a, window 60 s, k 5, values shown, no digest key, no lookup", v)
	}
	if len(v.Domains) != 1 || v.Domains[0].Domain != "edge" {
		t.Fatalf("domains %+v, want edge alone", v.Domains)
	}
	entry := func(addr string, hits, refused, remaining uint64, used float64) hotEntry {
		e := hotEntry{
			Rule: "addr", File: "rules.yaml", Line: 4, Hits: hits, Refused: refused, Limit: 10,
			Algorithm: "sliding_window", Window: "1m0s", Remaining: remaining, Reset: "1m0s", Used: used,
			Seen: epoch.Format(time.RFC3339Nano),
		}
		e.Descriptor = append(e.Descriptor, struct {
			Key   string `json:"key"`
			Value string `json:"value"`
		}{"addr", addr})
		return e
	}
	refused := entry("10.0.0.1", 3, 3, 0, 1)
	// The nearest list holds admitted hits: 10.0.0.1's 10th used all of
	// its limit, 10.0.0.2's 4 hits 0.4 of it.
	nearest := []hotEntry{entry("10.0.0.1", 10, 0, 0, 1), entry("10.0.0.2", 4, 0, 6, 0.4)}
	got := v.Domains[0]
	if diff := cmp.Diff([]hotEntry{refused}, got.Refused); diff != "" {
		t.Errorf("refused (-want +got):\n%s", diff)
	}
	if len(got.Nearest) != 2 || got.Nearest[0].Descriptor[0].Value != "10.0.0.1" || got.Nearest[1].Descriptor[0].Value != "10.0.0.2" {
		t.Fatalf("nearest %+v, want 10.0.0.1 then 10.0.0.2", got.Nearest)
	}
	for i := range got.Nearest { // how many hits the list saw is the tracker's business
		got.Nearest[i].Hits, got.Nearest[i].Refused = nearest[i].Hits, nearest[i].Refused
	}
	if diff := cmp.Diff(nearest, got.Nearest); diff != "" {
		t.Errorf("nearest (-want +got):\n%s", diff)
	}

	v = f.getHotKeys(t, "/hotkeys?value=10.0.0.2")
	if v.Lookup == nil || v.Lookup.Value != "10.0.0.2" || v.Lookup.Found != 1 || len(v.Domains) != 1 ||
		len(v.Domains[0].Refused) != 0 || len(v.Domains[0].Nearest) != 1 || v.Domains[0].Nearest[0].Descriptor[0].Value != "10.0.0.2" {
		t.Errorf("?value=10.0.0.2 = %+v, want found 1: its nearest counter alone", v)
	}
	v = f.getHotKeys(t, "/hotkeys?value=10.0.0.1")
	if v.Lookup == nil || v.Lookup.Found != 2 || len(v.Domains) != 1 || len(v.Domains[0].Refused) != 1 || len(v.Domains[0].Nearest) != 1 {
		t.Errorf("?value=10.0.0.1 = %+v, want found 2, in both lists", v)
	}
	v = f.getHotKeys(t, "/hotkeys?value=192.0.2.1")
	if v.Lookup == nil || v.Lookup.Found != 0 || len(v.Domains) != 0 {
		t.Errorf("?value= of a value never sent = %+v, want nothing found, no domain", v)
	}
	// /hotkeys takes no other parameter: it answers them as without.
	if v := f.getHotKeys(t, "/hotkeys?limit=x&domain=nope"); v.Lookup != nil || len(v.Domains) != 1 || len(v.Domains[0].Refused) != 1 {
		t.Errorf("GET /hotkeys with unknown parameters = %+v, want the whole view", v)
	}
}

// TestHotKeysDigests: by default the values show as their keyed digests,
// the digests' key named; ?value= answers how the value shows.
func TestHotKeysDigests(t *testing.T) {
	key := []byte("0123456789abcdef-test-key")
	f := newFixture(t, compile(t, hotRules),
		engine.Options{HotKeys: engine.HotKeysOptions{Enabled: true, DigestKey: key}}, admin.Options{})
	f.hotTraffic(t)
	_, dig := f.eng.HotKeys()
	v := f.getHotKeys(t, "/hotkeys?value=10.0.0.1")
	if v.Values != "digest" || v.DigestKey != "file" || v.DigestKeyID == "" || v.DigestKeyID != dig.KeyID() || v.Replica == "" {
		t.Errorf("GET /hotkeys: values %q, digest key %q (%q), replica %q; want digest, file (%q), a host name",
			v.Values, v.DigestKey, v.DigestKeyID, v.Replica, dig.KeyID())
	}
	if v.Lookup == nil || !strings.HasPrefix(v.Lookup.Value, "hmac:") || len(v.Lookup.Value) != len("hmac:")+16 || v.Lookup.Found != 2 {
		t.Fatalf("lookup %+v, want 10.0.0.1 as hmac: and 16 hex digits, found 2", v.Lookup)
	}
	if got := v.Domains[0].Refused[0].Descriptor[0].Value; got != v.Lookup.Value {
		t.Errorf("the refused counter's value shows as %s, the lookup as %s", got, v.Lookup.Value)
	}
	w := f.do(t, "GET", "/hotkeys", "")
	if strings.Contains(w.Body.String(), "10.0.0.") {
		t.Errorf("GET /hotkeys shows an address as itself: %s", w.Body)
	}
}

// TestHotKeysOff: with the engine's hot keys off, GET /hotkeys is 404
// and says why.
func TestHotKeysOff(t *testing.T) {
	f := newFixture(t, compile(t, hotRules), engine.Options{}, admin.Options{})
	if w := f.do(t, "GET", "/hotkeys", ""); w.Code != http.StatusNotFound || w.Body.String() != "hot keys are off (--hotkeys=false)\n" {
		t.Errorf("GET /hotkeys = %d %q, want 404 and why", w.Code, w.Body)
	}
}

// errTeapot is what the tests' HTTPStatus maps an invalid request to: a
// status no handler answers of itself.
const errTeapot = http.StatusTeapot

// explainOptions are admin.Options for POST /explain with a small
// decoder of its own: the body is an Envoy RateLimitRequest in JSON
// (400 "bad body" when not), its descriptors decided with 1 hit each;
// an invalid request maps to errTeapot, any other error to 500.
func explainOptions(eng func() *engine.Engine) admin.Options {
	return admin.Options{
		ReadRequest: func(w http.ResponseWriter, r *http.Request) (*rlsv3.RateLimitRequest, bool) {
			body, _ := io.ReadAll(r.Body)
			req := new(rlsv3.RateLimitRequest)
			if err := protojson.Unmarshal(body, req); err != nil {
				http.Error(w, "bad body", http.StatusBadRequest)
				return nil, false
			}
			return req, true
		},
		Explain: func(ctx context.Context, req *rlsv3.RateLimitRequest) (*engine.Explanation, error) {
			sc := new(engine.Scratch)
			sc.Req.Domain = req.GetDomain()
			for _, d := range req.GetDescriptors() {
				from := len(sc.Req.Entries)
				for _, e := range d.GetEntries() {
					sc.Req.Entries = append(sc.Req.Entries, engine.Entry{Key: e.GetKey(), Value: e.GetValue()})
				}
				sc.Req.Add(from, 1)
			}
			return eng().Explain(ctx, sc)
		},
		HTTPStatus: func(err error) int {
			if engine.IsInvalid(err) {
				return errTeapot
			}
			return http.StatusInternalServerError
		},
	}
}

// TestExplain: POST /explain answers the engine's explanation of the
// request ReadRequest decoded, indented JSON, consuming nothing; a body
// ReadRequest refuses gets ReadRequest's answer, and a request the
// engine finds invalid the status HTTPStatus maps its error to, with the
// error.
func TestExplain(t *testing.T) {
	var f *fixture
	f = newFixture(t, compile(t, hotRules), engine.Options{}, explainOptions(func() *engine.Engine { return f.eng }))
	for range 4 {
		f.decide(t, "edge", 1, "addr", "10.0.0.1")
	}
	const body = `{"domain": "edge", "descriptors": [{"entries": [{"key": "addr", "value": "10.0.0.1"}]}]}`
	for range 2 { // an explanation consumes nothing: twice the same
		w := f.do(t, "POST", "/explain", body)
		if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" || !strings.HasPrefix(w.Body.String(), "{\n  \"domain\"") {
			t.Fatalf("POST /explain = %d (%s) %s, want 200 and indented JSON", w.Code, w.Header().Get("Content-Type"), w.Body)
		}
		var ex engine.Explanation
		if err := json.Unmarshal(w.Body.Bytes(), &ex); err != nil {
			t.Fatalf("POST /explain: %v in %s", err, w.Body)
		}
		if ex.Domain != "edge" || ex.Overall != "OK" || len(ex.Descriptors) != 1 {
			t.Fatalf("explanation %+v, want edge, OK, one descriptor", ex)
		}
		d := ex.Descriptors[0]
		if d.Rule == nil || *d.Rule != (engine.ExplainRule{Path: "addr", File: "rules.yaml", Line: 4}) || d.Decision != "OK" || d.Hits != 1 ||
			len(d.Limits) != 1 || d.Limits[0].RequestsPerUnit != 10 || d.Limits[0].Remaining != 6 || !d.Limits[0].WouldAdmit {
			t.Errorf("descriptor %+v, want rule addr at rules.yaml:4, OK, 1 hit, 6 of 10 remaining, would admit", d)
		}
	}

	if w := f.do(t, "POST", "/explain", `{"domain": `); w.Code != http.StatusBadRequest || w.Body.String() != "bad body\n" {
		t.Errorf("POST /explain of a malformed body = %d %q, want ReadRequest's 400 bad body", w.Code, w.Body)
	}
	w := f.do(t, "POST", "/explain", `{"descriptors": [{"entries": [{"key": "addr", "value": "10.0.0.1"}]}]}`)
	if w.Code != errTeapot || !strings.Contains(w.Body.String(), "domain") {
		t.Errorf("POST /explain without a domain = %d %q, want HTTPStatus's %d and the engine's reason", w.Code, w.Body, errTeapot)
	}
	if w := f.do(t, "GET", "/explain", ""); w.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET /explain = %d, want 405", w.Code)
	}
}

// TestUIFiles: /ui/ serves the embedded index.html, ui.css and ui.js as
// they are in ui/, each with its content type, under a policy of the
// page's own files only.
func TestUIFiles(t *testing.T) {
	f := newFixture(t, nil, engine.Options{}, admin.Options{})
	for _, c := range []struct{ path, file, ctype string }{
		{"/ui/", "ui/index.html", "text/html; charset=utf-8"},
		{"/ui/index.html", "ui/index.html", ""}, // redirects to /ui/
		{"/ui/ui.css", "ui/ui.css", "text/css; charset=utf-8"},
		{"/ui/ui.js", "ui/ui.js", "text/javascript; charset=utf-8"},
	} {
		w := f.do(t, "GET", c.path, "")
		if c.ctype == "" {
			if w.Code != http.StatusMovedPermanently || w.Header().Get("Location") != "./" {
				t.Errorf("GET %s = %d to %q, want a redirect to ./", c.path, w.Code, w.Header().Get("Location"))
			}
			continue
		}
		want, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		if w.Code != http.StatusOK || w.Body.String() != string(want) {
			t.Errorf("GET %s = %d (%d bytes), want 200 and %s (%d bytes)", c.path, w.Code, w.Body.Len(), c.file, len(want))
		}
		h := w.Header()
		if h.Get("Content-Type") != c.ctype {
			t.Errorf("GET %s: Content-Type %q, want %q", c.path, h.Get("Content-Type"), c.ctype)
		}
		if csp := h.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "default-src 'none'; script-src 'self';") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("GET %s: Content-Security-Policy %q, want the page's own files only, no framing", c.path, csp)
		}
		if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" || h.Get("Cache-Control") != "no-cache" {
			t.Errorf("GET %s: headers %v, want nosniff, no-referrer, no-cache", c.path, h)
		}
	}
	if w := f.do(t, "GET", "/ui/nope.js", ""); w.Code != http.StatusNotFound {
		t.Errorf("GET /ui/nope.js = %d, want 404", w.Code)
	}
}

// getJSON returns GET path's body, failing unless it is 200, compact
// JSON and not to be cached.
func (f *fixture) getJSON(t *testing.T, path string) string {
	t.Helper()
	w := f.do(t, "GET", path, "")
	h := w.Header()
	if w.Code != http.StatusOK || h.Get("Content-Type") != "application/json" || h.Get("Cache-Control") != "no-store" || h.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("GET %s = %d, headers %v, %s; want 200 application/json, no-store, nosniff", path, w.Code, h, w.Body)
	}
	return w.Body.String()
}

// TestUIRates: Sample's samples, on explicit instants, are the rule
// counters' growth each second, admitted and refused (over the limit
// but let through by shadow mode counts as admitted), the busiest rule
// first; the first sample only sets the base; a second without a sample counts nothing; ?limit=N keeps N
// rules and counts the others; a limit that is no number of rules is 400
// with the reason; the traffic leaves after RateSeconds.
func TestUIRates(t *testing.T) {
	f := newFixture(t, compile(t, `
domain: edge
descriptors:
  - key: addr
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: user
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`), engine.Options{}, admin.Options{})
	if got, want := f.getJSON(t, "/ui/api/rates"), `{"end":0,"seconds":0,"span":300,"rules":[],"more":0,"uncharted":0}`+"\n"; got != want {
		t.Errorf("GET /ui/api/rates before any sample = %s, want %s", got, want)
	}
	f.decide(t, "edge", 2, "user", "bob")     // before the first sample: not charted
	base := epoch.Add(500 * time.Millisecond) // a sample counts as its second
	f.admin.Sample(base)                      // the base: counts nothing
	for range 6 {                             // 4 admitted, 2 refused
		f.decide(t, "edge", 1, "addr", "10.0.0.1")
	}
	f.decide(t, "edge", 3, "user", "ann") // over, but let through by shadow mode
	f.admin.Sample(base.Add(time.Second))
	f.decide(t, "edge", 1, "addr", "10.0.0.1") // refused
	f.admin.Sample(base.Add(3 * time.Second))  // second 2 had no sample

	want := `{"end":1800000003,"seconds":4,"span":300,"rules":[` +
		`{"domain":"edge","rule":"addr","admitted":[0,4,0,0],"refused":[0,2,0,1]},` +
		`{"domain":"edge","rule":"user","admitted":[0,3,0,0],"refused":[0,0,0,0]}],"more":0,"uncharted":0}` + "\n"
	if got := f.getJSON(t, "/ui/api/rates"); got != want {
		t.Errorf("GET /ui/api/rates =\n%s\nwant\n%s", got, want)
	}
	want = `{"end":1800000003,"seconds":4,"span":300,"rules":[` +
		`{"domain":"edge","rule":"addr","admitted":[0,4,0,0],"refused":[0,2,0,1]}],"more":1,"uncharted":0}` + "\n"
	if got := f.getJSON(t, "/ui/api/rates?limit=1"); got != want {
		t.Errorf("GET /ui/api/rates?limit=1 =\n%s\nwant\n%s", got, want)
	}
	for _, q := range []string{"x", "-1", "1.5"} {
		w := f.do(t, "GET", "/ui/api/rates?limit="+q, "")
		if wantBody := `limit "` + q + `": want a number of rules, 0 or more` + "\n"; w.Code != http.StatusBadRequest || w.Body.String() != wantBody {
			t.Errorf("GET /ui/api/rates?limit=%s = %d %q, want 400 %q", q, w.Code, w.Body, wantBody)
		}
	}

	f.admin.Sample(base.Add(3*time.Second + admin.RateSeconds*time.Second))
	want = `{"end":1800000303,"seconds":300,"span":300,"rules":[],"more":0,"uncharted":0}` + "\n"
	if got := f.getJSON(t, "/ui/api/rates"); got != want {
		t.Errorf("GET /ui/api/rates %d s on = %s, want %s", admin.RateSeconds, got, want)
	}
}

// TestSampleRates: SampleRates returns nil once its context is done.
// That it samples each second is not tested here: its ticker is the wall
// clock's (TestUIRates calls Sample on explicit instants instead).
func TestSampleRates(t *testing.T) {
	f := newFixture(t, compile(t, hotRules), engine.Options{}, admin.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.admin.SampleRates(ctx) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("SampleRates = %v, want nil", err)
		}
	case <-time.After(10 * time.Second): // waits only when it fails
		t.Fatal("SampleRates still running 10 s after its context was done")
	}
}

// TestUIRules: /ui/api/rules is the rule tree of each domain, domains in
// name order, rules in path order, nested rules under their parents,
// with limits, modes, file and line; 503 without rules.
func TestUIRules(t *testing.T) {
	f := newFixture(t, nil, engine.Options{}, admin.Options{})
	if w := f.do(t, "GET", "/ui/api/rules", ""); w.Code != http.StatusServiceUnavailable {
		t.Errorf("GET /ui/api/rules without rules = %d, want 503", w.Code)
	}
	f.eng.SetRules(compile(t, smallRules))
	want := `{"files":["rules.yaml"],"domains":[` +
		`{"domain":"api","rules":[{"key":"k","path":"k","file":"rules.yaml","line":17,"limits":[{"algorithm":"sliding_window","requests":1,"window":"second"}],"children":[]}]},` +
		`{"domain":"web","rules":[` +
		`{"key":"health","path":"health","file":"rules.yaml","line":12,"limits":[],"unlimited":true,"children":[]},` +
		`{"key":"tenant","value":"acme","path":"tenant=acme","file":"rules.yaml","line":3,"limits":[{"algorithm":"fixed_window","requests":10,"window":"minute"}],"shadow_mode":true,"children":[` +
		`{"key":"path","path":"tenant=acme.path","file":"rules.yaml","line":8,"limits":[{"name":"search","algorithm":"token_bucket","requests":5,"window":"1m30s","burst":2},{"algorithm":"sliding_window","requests":1000,"window":"day"}],"children":[]}]}]}]}` + "\n"
	if got := f.getJSON(t, "/ui/api/rules"); got != want {
		t.Errorf("GET /ui/api/rules =\n%s\nwant\n%s", got, want)
	}
}

// TestUIStatus: /ui/api/status is what Options.Ready reports, the
// server's modes, and the engine's rules and unknown domains.
func TestUIStatus(t *testing.T) {
	f := newFixture(t, compile(t, hotRules), engine.Options{}, admin.Options{
		Ready:       func() (bool, string) { return false, "open" },
		FailureMode: engine.FailDeny, ReadyWithoutStore: true, ShadowMode: true, Replica: "r1",
	})
	f.decide(t, "nowhere", 1, "addr", "10.0.0.1")
	want := `{"ready":false,"store":"open","breakers":[],"failure_mode":"deny","failure_answers":0,` +
		`"ready_without_store":true,"shadow_mode":true,"replica":"r1","rules_loaded":true,"files":["rules.yaml"],` +
		`"unknown_domains":[{"domain":"nowhere","requests":1,"last_seen":"2027-01-15T08:00:00Z"}],"unknown_domains_untracked":0}` + "\n"
	if got := f.getJSON(t, "/ui/api/status"); got != want {
		t.Errorf("GET /ui/api/status =\n%s\nwant\n%s", got, want)
	}
}

// TestHotKeysLongValue: a value over engine.MaxEntryBytes is counted by
// its SHA-256, which /hotkeys shows as "sha256:" and the digest in hex
// when it shows values; ?value= with the value itself finds its counter.
func TestHotKeysLongValue(t *testing.T) {
	long := strings.Repeat("k", engine.MaxEntryBytes+1)
	sum := sha256.Sum256([]byte(long))
	shown := "sha256:" + hex.EncodeToString(sum[:])
	f := newFixture(t, compile(t, hotRules),
		engine.Options{HotKeys: engine.HotKeysOptions{Enabled: true}}, admin.Options{HotKeysShowValues: true})
	for range 11 { // over the limit of 10
		f.decide(t, "edge", 1, "addr", long)
	}
	v := f.getHotKeys(t, "/hotkeys?value="+long)
	if v.Lookup == nil || v.Lookup.Value != shown || v.Lookup.Found != 2 || len(v.Domains) != 1 || len(v.Domains[0].Refused) != 1 {
		t.Fatalf("?value= of %d bytes = %+v, want %s found 2, one refused", len(long), v, shown)
	}
	if got := v.Domains[0].Refused[0].Descriptor[0].Value; got != shown {
		t.Errorf("the refused counter's value shows as %q, want %s", got, shown)
	}
}

// TestZeroOptions: an Admin built with no Options serves every page
// without calling a function it was not given: ready once the engine has
// rules, no rates, and POST /explain answering 501.
func TestZeroOptions(t *testing.T) {
	clock := func() time.Time { return epoch }
	store := memory.New(memory.Options{Now: clock})
	t.Cleanup(func() { store.Close() })
	eng := engine.New(store, compile(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"), engine.Options{Now: clock})
	a := admin.New(eng, admin.Options{})
	mux := http.NewServeMux()
	a.Routes(mux)
	a.Sample(epoch.Add(time.Second)) // RuleCounts
	for _, tt := range []struct {
		method, path string
		code         int
		body         string
	}{
		{"GET", "/ui/api/status", http.StatusOK, `"ready":true`},
		{"GET", "/ui/api/rates", http.StatusOK, ""},
		{"GET", "/config", http.StatusOK, "domain: d"},
		{"GET", "/hotkeys", http.StatusNotFound, ""},
		{"POST", "/explain", http.StatusNotImplemented, "decodes no requests"},
	} {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest(tt.method, tt.path, strings.NewReader(`{"domain":"d"}`)))
		if w.Code != tt.code || !strings.Contains(w.Body.String(), tt.body) {
			t.Errorf("%s %s: %d %q, want %d with %q", tt.method, tt.path, w.Code, w.Body, tt.code, tt.body)
		}
	}
}
