package client_test

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/google/go-cmp/cmp"

	"github.com/ratelimitd/ratelimitd/client"
)

// TestLocalHeaders: the headers of a remembered refusal count down:
// Retry-After from the refusal's RetryAfter, the t parameters of every item
// of RateLimit and the legacy RateLimit-Reset by the whole seconds elapsed,
// and nothing else changes.
func TestLocalHeaders(t *testing.T) {
	s := time.Second
	ietf := []client.Header{
		{"RateLimit-Policy", `"a";q=2;w=60, "b";q=10;w=60, "c";q=5;w=3600`},
		{"RateLimit", `"a";r=0;t=60, "b";r=3;t=10, "c";r=4;t=3600`},
		{"Retry-After", "60"},
	}
	legacy := []client.Header{
		{"RateLimit-Limit", "2"},
		{"RateLimit-Remaining", "0"},
		{"RateLimit-Reset", "60"},
	}
	for _, c := range []struct {
		name       string
		hs         []client.Header
		elapsed    time.Duration
		retryAfter time.Duration
		want       []client.Header
	}{
		{"none", nil, 20 * s, 40 * s, nil},
		{"empty", []client.Header{}, 20 * s, 40 * s, nil},
		{"ietf, at once", ietf, 0, 60 * s, ietf},
		{"ietf, under a second", ietf, 999 * time.Millisecond, 60*s - 999*time.Millisecond, ietf},
		{"ietf, +20.3s", ietf, 20*s + 300*time.Millisecond, 40*s - 300*time.Millisecond, []client.Header{
			{"RateLimit-Policy", `"a";q=2;w=60, "b";q=10;w=60, "c";q=5;w=3600`},
			{"RateLimit", `"a";r=0;t=40, "b";r=3;t=0, "c";r=4;t=3580`},
			{"Retry-After", "40"},
		}},
		{"Retry-After at least 1", ietf, 59*s + 900*time.Millisecond, 100 * time.Millisecond, []client.Header{
			{"RateLimit-Policy", `"a";q=2;w=60, "b";q=10;w=60, "c";q=5;w=3600`},
			{"RateLimit", `"a";r=0;t=1, "b";r=3;t=0, "c";r=4;t=3541`},
			{"Retry-After", "1"},
		}},
		{"names in any case", []client.Header{{"ratelimit", `"a";r=0;t=60`}, {"retry-after", "60"}}, 30 * s, 30 * s,
			[]client.Header{{"ratelimit", `"a";r=0;t=30`}, {"retry-after", "30"}}},
		{"items without t", []client.Header{{"RateLimit", `"a";r=0, "b";r=1;t=30, "c", "d";t=5;r=2`}}, 10 * s, 0,
			[]client.Header{{"RateLimit", `"a";r=0, "b";r=1;t=20, "c", "d";t=0;r=2`}}},
		{"legacy", legacy, 45 * s, 15 * s, []client.Header{
			{"RateLimit-Limit", "2"},
			{"RateLimit-Remaining", "0"},
			{"RateLimit-Reset", "15"},
		}},
		{"Retry-After as a date", []client.Header{{"Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT"}}, 10 * s, 10 * s,
			[]client.Header{{"Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT"}}},
		{"other headers", []client.Header{{"X-Reset", "60"}, {"RateLimit-Policy", `"a";q=2;w=60;t=60`}}, 10 * s, 10 * s,
			[]client.Header{{"X-Reset", "60"}, {"RateLimit-Policy", `"a";q=2;w=60;t=60`}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := slices.Clone(c.hs)
			got := client.LocalHeaders(c.hs, c.elapsed, c.retryAfter)
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("LocalHeaders(%v, %v) mismatch (-want +got):\n%s", c.elapsed, c.retryAfter, diff)
			}
			if !cmp.Equal(in, c.hs) {
				t.Errorf("LocalHeaders modified its argument: %q, was %q", c.hs, in)
			}
			if len(got) > 0 && &got[0] == &c.hs[0] {
				t.Errorf("LocalHeaders returned its argument, want a copy")
			}
		})
	}
}

// TestCountDownT: countDownT lowers exactly the t Integer parameters of the
// top-level members of a Structured Fields List, as a parser sees them,
// whatever else the list holds.
func TestCountDownT(t *testing.T) {
	for _, c := range []struct {
		v    string
		secs int64
		want string
	}{
		{`"a";r=0;t=45`, 5, `"a";r=0;t=40`},
		{`"a";r=0;t=45`, 45, `"a";r=0;t=0`},
		{`"a";r=0;t=45`, 100, `"a";r=0;t=0`},
		{`"a";r=0;t=45`, 0, `"a";r=0;t=45`},
		{`"a";r=0;t=0`, 10, `"a";r=0;t=0`},
		{`"a";r=0;t=100, "b";r=5, "c";t=7;r=1, "d"`, 10, `"a";r=0;t=90, "b";r=5, "c";t=0;r=1, "d"`},
		{`"a";t=1000000000000000`, 1, `"a";t=1000000000000000`}, // 16 digits: not an Integer
		{`"a";t=999999999999999`, 1, `"a";t=999999999999998`},
		{`"a";t=050`, 20, `"a";t=30`},
		{`"a"; t=50`, 20, `"a"; t=30`},
		{`"a";t=50,"b";t=60`, 20, `"a";t=30,"b";t=40`},
		{"\"a\";t=50\t,\t\"b\";t=60", 20, "\"a\";t=30\t,\t\"b\";t=40"},
		// Not t, or not a non-negative Integer: unchanged.
		{`"a";tt=50;at=50;t`, 20, `"a";tt=50;at=50;t`},
		{`"a";t=-5;u=1`, 20, `"a";t=-5;u=1`},
		{`"a";t=4.5`, 20, `"a";t=4.5`},
		{`"a";t=?1`, 20, `"a";t=?1`},
		{`"a";t="50"`, 20, `"a";t="50"`},
		{`"a";t=t50`, 20, `"a";t=t50`},
		// t inside Strings, escaped quotes and all: unchanged.
		{`"x;t=50";t=50`, 20, `"x;t=50";t=30`},
		{`"x\";t=50\\";t=50, "y\\";t=9`, 5, `"x\";t=50\\";t=45, "y\\";t=4`},
		{`"a";s="b;t=50";t=50`, 20, `"a";s="b;t=50";t=30`},
		// Tokens, Byte Sequences, Display Strings, inner lists.
		{`a/b:c;t=50`, 20, `a/b:c;t=30`},
		{`:dDs1MA==:;t=50`, 20, `:dDs1MA==:;t=30`},
		{`%"t;t=%22";t=50`, 20, `%"t;t=%22";t=30`},
		{`("a";t=50 "b";t=60);t=70, "c";t=80`, 20, `("a";t=50 "b";t=60);t=50, "c";t=60`},
	} {
		got := client.CountDownT(c.v, c.secs)
		if got != c.want {
			t.Errorf("CountDownT(%q, %d) = %q, want %q", c.v, c.secs, got, c.want)
		}
		want, err := sfCountDown(c.v, c.secs)
		if err != nil {
			continue // not a Structured Fields List: the exact answer above is all
		}
		gotList, err := httpsfv.UnmarshalList([]string{got})
		if err != nil {
			t.Errorf("CountDownT(%q, %d) = %q, not a Structured Fields List: %v", c.v, c.secs, got, err)
			continue
		}
		gotSF, err := httpsfv.Marshal(gotList)
		if err != nil {
			t.Fatal(err)
		}
		if gotSF != want {
			t.Errorf("CountDownT(%q, %d) = %q, which parses as %q, want %q", c.v, c.secs, got, gotSF, want)
		}
	}
}

// FuzzCountDownT: on every field that httpsfv parses as a List, countDownT
// agrees with sfCountDown, the same count-down through httpsfv, and keeps a
// List; no time elapsed changes no field; and no field makes it panic.
func FuzzCountDownT(f *testing.F) {
	for _, v := range []string{
		`"a";r=0;t=45`, `"a";r=0;t=100, "b";r=5, "c";t=7;r=1, "d"`, `"a"; t=50`,
		"\"a\";t=50\t,\t\"b\";t=60", `"x\";t=50\\";t=50, "y\\";t=9`, `a/b:c;t=50`,
		`:dDs1MA==:;t=50`, `%"t;t=%22";t=50`, `("a";t=50 "b";t=60);t=70, "c";t=80`,
		`"a";t=-5;u=1`, `"a";t=4.5`, `"a";t=?1`, `"a";t=999999999999999`,
	} {
		f.Add(v, int64(20))
	}
	f.Fuzz(func(t *testing.T, v string, secs int64) {
		got := client.CountDownT(v, secs)
		if secs <= 0 {
			if got != v {
				t.Fatalf("CountDownT(%q, %d) = %q, want it unchanged", v, secs, got)
			}
			return
		}
		want, err := sfCountDown(v, secs)
		if err != nil {
			return // not a Structured Fields List: TestCountDownT says what is lowered
		}
		gotList, err := httpsfv.UnmarshalList([]string{got})
		if err != nil {
			t.Fatalf("CountDownT(%q, %d) = %q, not a Structured Fields List: %v", v, secs, got, err)
		}
		gotSF, err := httpsfv.Marshal(gotList)
		if err != nil {
			t.Fatal(err)
		}
		if gotSF != want {
			t.Fatalf("CountDownT(%q, %d) = %q, which parses as %q, want %q", v, secs, got, gotSF, want)
		}
	})
}

// sfCountDown is countDownT through a Structured Fields parser: it parses
// v, lowers the non-negative Integer t parameters of its members by secs
// (not below 0), and serializes the result.
func sfCountDown(v string, secs int64) (string, error) {
	list, err := httpsfv.UnmarshalList([]string{v})
	if err != nil {
		return "", err
	}
	for _, m := range list {
		var p *httpsfv.Params
		switch m := m.(type) {
		case httpsfv.Item:
			p = m.Params
		case httpsfv.InnerList:
			p = m.Params
		}
		if t, ok := p.Get("t"); ok {
			if t, ok := t.(int64); ok && t >= 0 {
				p.Add("t", max(t-secs, 0))
			}
		}
	}
	return httpsfv.Marshal(list)
}

// TestCountDownTAllocs: nothing to change, nothing allocated; a change
// allocates the new value only.
func TestCountDownTAllocs(t *testing.T) {
	v := `"api_key";r=0;t=3600, "login";r=0;t=0, "search";r=12`
	for _, c := range []struct {
		secs int64
		v    string
		want float64
	}{
		{0, v, 0},
		{5, `"a";r=0;t=0, "b";r=1`, 0},
		{5, v, 1},
	} {
		if got := testing.AllocsPerRun(100, func() { client.CountDownT(c.v, c.secs) }); got != c.want {
			t.Errorf("CountDownT(%q, %d): %v allocations, want %v", c.v, c.secs, got, c.want)
		}
	}
	hs := []client.Header{{"RateLimit-Policy", `"a";q=2;w=60`}, {"RateLimit", `"a";r=0;t=60`}, {"Retry-After", "60"}}
	if got := testing.AllocsPerRun(100, func() { client.LocalHeaders(hs, 500*time.Millisecond, 59*time.Second+500*time.Millisecond) }); got != 1 {
		t.Errorf("LocalHeaders, nothing to change: %v allocations, want 1 (the copy)", got)
	}
}

// BenchmarkCountDownT measures the count-down of a remembered refusal's
// RateLimit field by countDownT's scan and, for comparison, through
// httpsfv (sfCountDown: parse, lower, serialize).
func BenchmarkCountDownT(b *testing.B) {
	v := `"api_key";r=0;t=3600, "login";r=0;t=0, "search";r=12`
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			client.CountDownT(v, 5)
		}
	})
	b.Run("httpsfv", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := sfCountDown(v, 5); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestSeconds: durations in whole seconds, rounded up, never negative and
// never wrapping, even for the saturated durations that a far-off
// retry-after decodes to.
func TestSeconds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{math.MinInt64, 0},
		{-time.Second, 0},
		{0, 0},
		{1, 1},
		{time.Second, 1},
		{time.Second + 1, 2},
		{9223372036 * time.Second, 9223372036},
		{9223372036*time.Second + 1, 9223372037},
		{math.MaxInt64, 9223372037}, // 9223372036.854775807 s
	} {
		if got := client.Seconds(tc.d); got != tc.want {
			t.Errorf("seconds(%d) = %d, want %d", int64(tc.d), got, tc.want)
		}
	}
}

// TestLocalHeadersSaturated: a remembered refusal whose retry-after is the
// largest Duration keeps a huge Retry-After, not a wrapped one.
func TestLocalHeadersSaturated(t *testing.T) {
	hs := []client.Header{{"Retry-After", "9223372037"}, {"RateLimit", `"a";r=0;t=9223372037`}}
	got := client.LocalHeaders(hs, 500*time.Millisecond, math.MaxInt64-500*time.Millisecond)
	want := hs // 9223372036.35 s, rounded up; no whole second elapsed
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("LocalHeaders mismatch (-want +got):\n%s", diff)
	}
}
