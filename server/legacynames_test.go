package server_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ratelimitd/ratelimitd/server"
)

// TestLegacyHeaderNamesSent: custom names replace the three defaults on
// both faces, values unchanged.
func TestLegacyHeaderNamesSent(t *testing.T) {
	rules := loadRules(t, "headers.yaml")
	names, err := server.ParseLegacyHeaderNames("X-RL-Limit,x-rl-remaining,X-RL-Reset")
	if err != nil {
		t.Fatal(err)
	}
	opts := server.Options{Headers: server.HeadersLegacy, LegacyHeaders: names}
	envoy, native := newHarness(t, rules, opts), newHarness(t, rules, opts)
	envoy.at(500 * time.Millisecond)
	native.at(500 * time.Millisecond)
	req := request("headers", desc("remote_address", "10.0.0.1"), desc("login", "u"))
	want := []field{{"X-RL-Limit", "2"}, {"x-rl-remaining", "1"}, {"X-RL-Reset", "60"}}
	if diff := cmp.Diff(want, envoyFields(envoy.should(t, req))); diff != "" {
		t.Errorf("Envoy headers mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, nativeFields(native.shouldNative(t, nativeRequest(req)))); diff != "" {
		t.Errorf("native headers mismatch (-want +got):\n%s", diff)
	}
}

func TestParseLegacyHeaderNames(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want server.LegacyHeaderNames
		text string
	}{
		{"", server.LegacyHeaderNames{}, "RateLimit-Limit,RateLimit-Remaining,RateLimit-Reset"},
		{"a,b,c", server.LegacyHeaderNames{Limit: "a", Remaining: "b", Reset: "c"}, "a,b,c"},
		{" X-Limit , X-Left,X-Reset ", server.LegacyHeaderNames{Limit: "X-Limit", Remaining: "X-Left", Reset: "X-Reset"}, "X-Limit,X-Left,X-Reset"},
		{"x!#$%&'*+-.^_`|~9,b,c", server.LegacyHeaderNames{Limit: "x!#$%&'*+-.^_`|~9", Remaining: "b", Reset: "c"}, "x!#$%&'*+-.^_`|~9,b,c"},
	} {
		got, err := server.ParseLegacyHeaderNames(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseLegacyHeaderNames(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
		if s := got.String(); s != tt.text {
			t.Errorf("%+v.String() = %q, want %q", got, s, tt.text)
		}
		var n server.LegacyHeaderNames
		if err := n.UnmarshalText([]byte(tt.in)); err != nil || n != tt.want {
			t.Errorf("UnmarshalText(%q) = %+v, %v", tt.in, n, err)
		}
		if b, err := tt.want.MarshalText(); err != nil || string(b) != tt.text {
			t.Errorf("MarshalText = %q, %v; want %q", b, err, tt.text)
		}
	}
	for _, bad := range []string{
		"a,b", "a,b,c,d", ",b,c", "a,,c", "a,b, ",
		"a b,c,d", "a:b,c,d", "a,b\tc,d", ":status,b,c", "é,b,c", `a"b,c,d`, "a(b),c,d",
		"a,A,c", "x,y,X", "limit,RATELIMIT-REMAINING,RateLimit-Remaining",
	} {
		if got, err := server.ParseLegacyHeaderNames(bad); err == nil {
			t.Errorf("ParseLegacyHeaderNames(%q) = %+v, want an error", bad, got)
		}
		n := server.LegacyHeaderNames{Limit: "keep"}
		if err := n.UnmarshalText([]byte(bad)); err == nil || n.Limit != "keep" {
			t.Errorf("UnmarshalText(%q): %v, left %+v", bad, err, n)
		}
	}
	// Validate fills in defaults before comparing.
	if err := (server.LegacyHeaderNames{Limit: "ratelimit-reset"}).Validate(); err == nil {
		t.Error("Validate: a name equal to another's default: no error")
	}
	if err := (server.LegacyHeaderNames{Reset: "X-Reset"}).Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	if err := (server.LegacyHeaderNames{Remaining: "bad name"}).Validate(); err == nil {
		t.Error("Validate: a space in a name: no error")
	}
}
