package server_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/go-cmp/cmp"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/server"
)

// A field is one response header field, as either face sends it.
type field struct{ Name, Value string }

func envoyFields(resp *rlsv3.RateLimitResponse) []field {
	var fs []field
	for _, h := range resp.GetResponseHeadersToAdd() {
		fs = append(fs, field{h.GetKey(), h.GetValue()})
	}
	return fs
}

func nativeFields(resp *ratelimitv1.ShouldRateLimitResponse) []field {
	var fs []field
	for _, h := range resp.GetHeaders() {
		fs = append(fs, field{h.GetName(), h.GetValue()})
	}
	return fs
}

// An item is one member of a RateLimit-Policy or RateLimit list, parsed.
type item struct {
	Name   string
	Params map[string]int64
}

// parseList parses the field named name of fs as a Structured Fields List
// (RFC 9651) of Strings with Integer parameters. It returns nil if the
// field is absent.
func parseList(t *testing.T, fs []field, name string) []item {
	t.Helper()
	var values []string
	for _, f := range fs {
		if f.Name == name {
			values = append(values, f.Value)
		}
	}
	if len(values) == 0 {
		return nil
	}
	if len(values) > 1 {
		t.Errorf("%s sent %d times: %q", name, len(values), values)
	}
	list, err := httpsfv.UnmarshalList(values)
	if err != nil {
		t.Fatalf("%s: %q is not a Structured Fields List: %v", name, values, err)
	}
	var items []item
	for _, m := range list {
		it, isItem := m.(httpsfv.Item)
		if !isItem {
			t.Errorf("%s: member %#v is not an Item", name, m)
			continue
		}
		s, isString := it.Value.(string)
		if !isString {
			t.Errorf("%s: member value %#v is a %T, want a String", name, it.Value, it.Value)
		}
		got := item{Name: s, Params: map[string]int64{}}
		for _, k := range it.Params.Names() {
			v, _ := it.Params.Get(k)
			n, isInt := v.(int64)
			if !isInt {
				t.Errorf("%s: %q;%s=%#v is not an Integer", name, s, k, v)
			}
			got.Params[k] = n
		}
		items = append(items, got)
	}
	return items
}

func policy(name string, q, w int64) item {
	return item{name, map[string]int64{"q": q, "w": w}}
}

func state(name string, r, t int64) item {
	return item{name, map[string]int64{"r": r, "t": t}}
}

// A headerStep is one call at t0+at and the headers it must carry:
// the parsed RateLimit-Policy and RateLimit lists, and Retry-After ("" if
// absent).
type headerStep struct {
	at         time.Duration
	req        *rlsv3.RateLimitRequest
	overall    rlsv3.RateLimitResponse_Code
	policy     []item
	state      []item
	retryAfter string
}

// TestIETFHeaders: the default headers, RateLimit-Policy and RateLimit
// (draft-ietf-httpapi-ratelimit-headers), parsed as Structured Fields: one
// item per limited, enforced descriptor, named by the limit's name or the
// key path, with q and w, r and t (seconds rounded up) and no pk;
// Retry-After only when refused.
func TestIETFHeaders(t *testing.T) {
	rules := loadRules(t, "headers.yaml")
	const quote = `quote=say "hi" \o/`
	ms := time.Millisecond
	steps := []headerStep{
		{500 * ms, request("headers",
			desc("remote_address", "10.0.0.1"),
			desc("tenant", "acme", "path", "/search"),
			desc("experiment", "e"),       // shadow: no item
			desc("health_check", "lb"),    // unlimited: no item
			desc("internal", "i"),         // no limit: no item
			desc("nothing", "z"),          // no rule: no item
			desc("quote", `say "hi" \o/`), // escaped
			desc("login", "u"),
		), ok,
			[]item{policy("per_ip", 10, 60), policy("tenant=acme.path", 5, 2), policy(quote, 3, 3600), policy("login", 2, 60)},
			[]item{state("per_ip", 9, 60), state("tenant=acme.path", 4, 1), state(quote, 2, 3600), state("login", 1, 60)},
			""},
		// Refused: Retry-After, the seconds until login admits 2 more.
		{30 * time.Second, request("headers", desc("remote_address", "10.0.0.1"), hits(2, desc("login", "u"))), over,
			[]item{policy("per_ip", 10, 60), policy("login", 2, 60)},
			[]item{state("per_ip", 9, 30), state("login", 1, 30)},
			"30"},
		// Under a second away: rounded up, never 0.
		{59*time.Second + 600*ms, request("headers", hits(2, desc("login", "u"))), over,
			[]item{policy("login", 2, 60)},
			[]item{state("login", 1, 1)},
			"1"},
		// Shadow, unlimited and unlimited-by-nothing descriptors alone:
		// no headers at all, even when the shadow rule is over.
		{time.Minute, request("headers", hits(5, desc("experiment", "e")), desc("health_check", "lb"), desc("internal", "i")), ok,
			nil, nil, ""},
		// A quota descriptor over while the request passes: its item
		// says so, and there is no Retry-After.
		{time.Minute, request("headers", hits(2, desc("project", "a")), desc("project", "b")), ok,
			[]item{policy("project", 1, 60), policy("project", 1, 60)},
			[]item{state("project", 1, 60), state("project", 0, 60)},
			""},
		{time.Minute, request("headers", desc("project", "b")), over,
			[]item{policy("project", 1, 60)},
			[]item{state("project", 0, 60)},
			"60"},
		// An unknown domain: no headers.
		{time.Minute, request("nowhere", desc("remote_address", "10.0.0.1")), ok, nil, nil, ""},
	}

	envoy := newHarness(t, rules, server.Options{})
	native := newHarness(t, rules, server.Options{Headers: server.HeadersIETF})
	for i, s := range steps {
		envoy.at(s.at)
		resp := envoy.should(t, s.req)
		if got := resp.GetOverallCode(); got != s.overall {
			t.Errorf("step %d: overall %v, want %v", i, got, s.overall)
		}
		fs := envoyFields(resp)
		for _, f := range fs {
			if !slices.Contains([]string{"RateLimit-Policy", "RateLimit", "Retry-After"}, f.Name) {
				t.Errorf("step %d: unexpected header %s: %s", i, f.Name, f.Value)
			}
		}
		if diff := cmp.Diff(s.policy, parseList(t, fs, "RateLimit-Policy")); diff != "" {
			t.Errorf("step %d: RateLimit-Policy mismatch (-want +got):\n%s\n%q", i, diff, fs)
		}
		if diff := cmp.Diff(s.state, parseList(t, fs, "RateLimit")); diff != "" {
			t.Errorf("step %d: RateLimit mismatch (-want +got):\n%s\n%q", i, diff, fs)
		}
		var retry []string
		for _, f := range fs {
			if f.Name == "Retry-After" {
				retry = append(retry, f.Value)
			}
		}
		switch {
		case s.retryAfter == "" && len(retry) > 0:
			t.Errorf("step %d: Retry-After %q on an admitted request", i, retry)
		case s.retryAfter != "" && (len(retry) != 1 || retry[0] != s.retryAfter):
			t.Errorf("step %d: Retry-After %q, want [%s]", i, retry, s.retryAfter)
		}
		for _, r := range retry {
			if n, err := strconv.Atoi(r); err != nil || n < 1 {
				t.Errorf("step %d: Retry-After %q is not a whole number of seconds ≥ 1", i, r)
			}
		}

		// The native face sends the same headers for the same decision.
		native.at(s.at)
		nreq := nativeRequest(s.req)
		nresp := native.shouldNative(t, nreq)
		if diff := cmp.Diff(fs, nativeFields(nresp)); diff != "" {
			t.Errorf("step %d: native headers differ from Envoy's (-envoy +native):\n%s", i, diff)
		}
	}
}

// nativeRequest converts an Envoy request to the native API.
func nativeRequest(r *rlsv3.RateLimitRequest) *ratelimitv1.ShouldRateLimitRequest {
	n := &ratelimitv1.ShouldRateLimitRequest{Domain: r.GetDomain(), Hits: uint64(r.GetHitsAddend())}
	for _, d := range r.GetDescriptors() {
		nd := &ratelimitv1.Descriptor{}
		for _, e := range d.GetEntries() {
			nd.Entries = append(nd.Entries, &ratelimitv1.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		if d.GetHitsAddend() != nil {
			v := d.GetHitsAddend().GetValue()
			nd.Hits = &v
		}
		n.Descriptors = append(n.Descriptors, nd)
	}
	return n
}

// TestLegacyHeaders: RateLimit-Limit, -Remaining and -Reset of the
// tightest descriptor: an over one first, else the least remaining.
func TestLegacyHeaders(t *testing.T) {
	rules := loadRules(t, "headers.yaml")
	ms := time.Millisecond
	legacy := func(limit, remaining, reset string) []field {
		return []field{{"RateLimit-Limit", limit}, {"RateLimit-Remaining", remaining}, {"RateLimit-Reset", reset}}
	}
	steps := []struct {
		at   time.Duration
		req  *rlsv3.RateLimitRequest
		want []field
	}{
		// login has the least remaining.
		{500 * ms, request("headers", desc("remote_address", "10.0.0.1"), desc("login", "u"), desc("experiment", "e")),
			legacy("2", "1", "60")},
		{500 * ms, request("headers", desc("login", "v"), hits(3, desc("remote_address", "10.0.0.1"))),
			legacy("2", "1", "60")},
		// per_ip is over, though login has less remaining.
		{10 * time.Second, request("headers", desc("login", "u"), hits(11, desc("remote_address", "10.0.0.1"))),
			legacy("10", "6", "50")},
		// Nothing enforced is limited: none.
		{10 * time.Second, request("headers", hits(3, desc("experiment", "e")), desc("health_check", "lb"), desc("nothing", "x")), nil},
		{10 * time.Second, request("nowhere", desc("remote_address", "10.0.0.1")), nil},
	}
	envoy := newHarness(t, rules, server.Options{Headers: server.HeadersLegacy})
	native := newHarness(t, rules, server.Options{Headers: server.HeadersLegacy})
	for i, s := range steps {
		envoy.at(s.at)
		got := envoyFields(envoy.should(t, s.req))
		// Pin the three fields; other fields (such as Retry-After) are
		// not this test's business.
		var legacyOnly []field
		for _, f := range got {
			switch f.Name {
			case "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset":
				legacyOnly = append(legacyOnly, f)
			case "RateLimit-Policy", "RateLimit":
				t.Errorf("step %d: IETF header %s: %s in legacy mode", i, f.Name, f.Value)
			}
		}
		if diff := cmp.Diff(s.want, legacyOnly); diff != "" {
			t.Errorf("step %d: legacy headers mismatch (-want +got):\n%s", i, diff)
		}
		native.at(s.at)
		if diff := cmp.Diff(got, nativeFields(native.shouldNative(t, nativeRequest(s.req)))); diff != "" {
			t.Errorf("step %d: native headers differ from Envoy's (-envoy +native):\n%s", i, diff)
		}
	}
}

// TestHeadersOff: no headers, even on a refused request.
func TestHeadersOff(t *testing.T) {
	h := newHarness(t, loadRules(t, "headers.yaml"), server.Options{Headers: server.HeadersOff})
	for i, req := range []*rlsv3.RateLimitRequest{
		request("headers", desc("remote_address", "10.0.0.1"), desc("login", "u")),
		request("headers", hits(3, desc("login", "u"))),
	} {
		resp := h.should(t, req)
		if got := resp.GetResponseHeadersToAdd(); len(got) > 0 {
			t.Errorf("call %d: response_headers_to_add %v, want none", i, got)
		}
		nresp := h.shouldNative(t, nativeRequest(req))
		if got := nresp.GetHeaders(); len(got) > 0 {
			t.Errorf("call %d: native headers %v, want none", i, got)
		}
		if i == 1 && (resp.GetOverallCode() != over || nresp.GetCode() != nover) {
			t.Errorf("call %d: codes %v, %v; want OVER_LIMIT on both faces", i, resp.GetOverallCode(), nresp.GetCode())
		}
	}
}

func TestHeaderMode(t *testing.T) {
	var zero server.HeaderMode
	if zero != server.HeadersIETF {
		t.Errorf("zero HeaderMode = %v, want HeadersIETF", zero)
	}
	for _, tt := range []struct {
		text string
		mode server.HeaderMode
	}{
		{"ietf", server.HeadersIETF},
		{"legacy", server.HeadersLegacy},
		{"off", server.HeadersOff},
	} {
		got, err := server.ParseHeaderMode(tt.text)
		if err != nil || got != tt.mode {
			t.Errorf("ParseHeaderMode(%q) = %v, %v; want %v", tt.text, got, err, tt.mode)
		}
		if s := tt.mode.String(); s != tt.text {
			t.Errorf("%d.String() = %q, want %q", int(tt.mode), s, tt.text)
		}
		b, err := tt.mode.MarshalText()
		if err != nil || string(b) != tt.text {
			t.Errorf("%v.MarshalText() = %q, %v; want %q", tt.mode, b, err, tt.text)
		}
		var m server.HeaderMode
		if err := m.UnmarshalText([]byte(tt.text)); err != nil || m != tt.mode {
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v", tt.text, m, err, tt.mode)
		}
	}
	for _, bad := range []string{"", "IETF", "draft", "none"} {
		if _, err := server.ParseHeaderMode(bad); err == nil {
			t.Errorf("ParseHeaderMode(%q): no error", bad)
		}
		m := server.HeadersLegacy
		if err := m.UnmarshalText([]byte(bad)); err == nil {
			t.Errorf("UnmarshalText(%q): no error", bad)
		}
	}
	if got := server.HeaderMode(7).String(); got != "HeaderMode(7)" {
		t.Errorf("HeaderMode(7).String() = %q", got)
	}
}
