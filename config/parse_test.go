package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/ratelimitd/ratelimitd/backend"
)

// ignoreSrc compares syntax trees without their positions.
var ignoreSrc = cmpopts.IgnoreUnexported(Domain{}, Descriptor{}, RateLimit{}, Replace{})

// loadErrors returns the *Errors joined in err, failing t if one is not an
// *Error.
func loadErrors(t *testing.T, err error) []*Error {
	t.Helper()
	if err == nil {
		return nil
	}
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		t.Fatalf("error %v is not a joined error", err)
	}
	var errs []*Error
	for _, e := range joined.Unwrap() {
		var le *Error
		if !errors.As(e, &le) {
			t.Fatalf("error %v (%T) is not an *Error", e, e)
		}
		errs = append(errs, le)
	}
	return errs
}

func TestGoodConfigs(t *testing.T) {
	files, err := filepath.Glob("testdata/*.good.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata/*.good.yaml: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			domains, err := Parse(f, data)
			if err != nil {
				t.Fatalf("Parse(%q) = %v", f, err)
			}
			if len(domains) == 0 {
				t.Fatalf("Parse(%q) returned no domains", f)
			}
			if _, err := Compile(domains); err != nil {
				t.Fatalf("Compile(%q) = %v", f, err)
			}
			out, err := Marshal(domains)
			if err != nil {
				t.Fatalf("Marshal(%q) = %v", f, err)
			}
			again, err := Parse("marshaled", out)
			if err != nil {
				t.Fatalf("Parse(Marshal(%q)) = %v\n%s", f, err, out)
			}
			if diff := cmp.Diff(again, domains, ignoreSrc); diff != "" {
				t.Errorf("Parse(Marshal(%q)) mismatch (-got +want):\n%s", f, diff)
			}
		})
	}
}

// badConfigs lists, for each testdata/*.bad.yaml, every error that Parse
// must report, in order (substrings of the errors' text).
var badConfigs = map[string][]string{
	"syntax":                        {`syntax.bad.yaml:4:6: yaml: mapping values are not allowed in this context: line 4 is indented by 5, the entries of "- key: a" (line 3) by 4`},
	"indentation":                   {`indentation.bad.yaml:6:6: yaml: did not find expected key: line 6 is indented by 5, the entries of "rate_limit:" (line 4) by 6`},
	"indentation_item":              {`indentation_item.bad.yaml:6:4: yaml: did not find expected '-' indicator: line 6 is indented by 3, the entries of "- key: c" (line 5) by 4`},
	"indentation_second_doc":        {`indentation_second_doc.bad.yaml:11:6: yaml: did not find expected key: line 11 is indented by 5, the entries of "rate_limit:" (line 9) by 6`},
	"not_mapping":                   {"not_mapping.bad.yaml:1:1: document must be a mapping with domain and descriptors, got a sequence"},
	"not_mapping_second_doc":        {`not_mapping_second_doc.bad.yaml:3:1: document must be a mapping with domain and descriptors, got "just a string"`},
	"unknown_field_domain":          {`unknown_field_domain.bad.yaml:2:1: unknown field "descriptor" in domain`},
	"unknown_field_descriptor":      {`unknown_field_descriptor.bad.yaml:4:5: unknown field "vaule" in descriptor`},
	"unknown_field_rate_limit":      {`unknown_field_rate_limit.bad.yaml:7:7: unknown field "requests_per_hour" in rate limit`},
	"unknown_field_replaces":        {`unknown_field_replaces.bad.yaml:8:11: unknown field "limit" in replaces entry`},
	"duplicate_field":               {`duplicate_field.bad.yaml:6:7: field "unit" given twice (first at line 5)`},
	"missing_domain":                {"missing_domain.bad.yaml:1:1: missing domain"},
	"empty_domain":                  {"empty_domain.bad.yaml:1:9: domain is empty"},
	"descriptors_not_sequence":      {"descriptors_not_sequence.bad.yaml:3:3: descriptors must be a sequence, got a mapping"},
	"descriptor_not_mapping":        {`descriptor_not_mapping.bad.yaml:4:5: descriptor must be a mapping with key and value, got "just_a_key"`},
	"missing_key":                   {"missing_key.bad.yaml:3:5: descriptor has no key"},
	"empty_key":                     {"empty_key.bad.yaml:3:10: descriptor key is empty"},
	"key_not_string":                {"key_not_string.bad.yaml:3:10: key must be a string, got a sequence"},
	"duplicate_value":               {`duplicate_value.bad.yaml:7:5: duplicate descriptor key "plan" value "free" (first at line 3)`},
	"duplicate_key_only":            {`duplicate_key_only.bad.yaml:7:9: duplicate descriptor key "user" without value (first at line 5)`},
	"duplicate_wildcard":            {`duplicate_wildcard.bad.yaml:5:5: duplicate descriptor key "path" value "/api/*" (first at line 3)`},
	"duplicate_domain":              {`duplicate_domain.bad.yaml:5:9: duplicate domain "d" (first at duplicate_domain.bad.yaml:1)`},
	"rate_limit_and_rate_limits":    {"rate_limit_and_rate_limits.bad.yaml:6:7: descriptor has both rate_limit and rate_limits"},
	"empty_rate_limits":             {"empty_rate_limits.bad.yaml:4:18: rate_limits is empty"},
	"rate_limits_entry_not_mapping": {`rate_limits_entry_not_mapping.bad.yaml:6:9: rate_limits entry must be a mapping with unit and requests_per_unit, got "100/hour"`},
	"share_threshold_no_wildcard":   {`share_threshold_no_wildcard.bad.yaml:5:22: share_threshold needs a wildcard value (one with '*'), got "/api/v1"`},
	"bad_unit":                      {`bad_unit.bad.yaml:5:13: unknown unit "fortnight" (want second, minute, hour, day, week, month or year)`},
	"no_unit":                       {"no_unit.bad.yaml:5:7: rate limit has neither unit nor window"},
	"unit_and_window":               {"unit_and_window.bad.yaml:6:15: unit and window exclude each other"},
	"window_not_duration":           {`window_not_duration.bad.yaml:5:15: window "5 minutes" is not a duration`},
	"window_too_short":              {"window_too_short.bad.yaml:5:15: window 500µs is outside [1ms, 876000h0m0s]"},
	"window_too_long":               {"window_too_long.bad.yaml:5:15: window 1000000h0m0s is outside [1ms, 876000h0m0s]"},
	"window_submicrosecond":         {"window_submicrosecond.bad.yaml:5:15: window 1.0000005s is not a whole number of microseconds"},
	"unlimited_with_unit":           {"unlimited_with_unit.bad.yaml:6:13: unlimited: true excludes unit"},
	"unlimited_with_window":         {"unlimited_with_window.bad.yaml:6:15: unlimited: true excludes window"},
	"unlimited_with_requests":       {"unlimited_with_requests.bad.yaml:6:26: unlimited: true excludes requests_per_unit"},
	"unlimited_with_algorithm":      {"unlimited_with_algorithm.bad.yaml:6:18: unlimited: true excludes algorithm"},
	"unlimited_with_burst":          {"unlimited_with_burst.bad.yaml:6:14: unlimited: true excludes burst"},
	"unlimited_in_rate_limits":      {"unlimited_in_rate_limits.bad.yaml:7:20: unlimited is not allowed in rate_limits"},
	"bad_algorithm":                 {`bad_algorithm.bad.yaml:5:18: unknown algorithm "leaky_bucket" (want sliding_window, fixed_window, sliding_log, token_bucket, gcra or concurrency)`},
	"burst_wrong_algorithm":         {"burst_wrong_algorithm.bad.yaml:7:14: burst applies to token_bucket and gcra only, not sliding_window"},
	"sliding_log_cap":               {"sliding_log_cap.bad.yaml:7:26: sliding_log allows at most 10000 requests per window, got 20000"},
	"concurrency_cap":               {"concurrency_cap.bad.yaml:7:26: concurrency allows at most 10000 held at once, got 20000"},
	"concurrency_consume_when_over": {"concurrency_consume_when_over.bad.yaml:4:24: consume_when_over does not apply to a concurrency limit"},
	"gcra_tolerance":                {"gcra_tolerance.bad.yaml:8:14: gcra: burst × (window / requests) exceeds 285 years"},
	"replaces_empty_name":           {"replaces_empty_name.bad.yaml:8:11: replaces entry has an empty name"},
	"replaces_self":                 {`replaces_self.bad.yaml:9:17: limit "per_a" replaces itself`},
	"rate_limits_same_counter":      {"rate_limits_same_counter.bad.yaml:7:9: rate_limits[1] has the same algorithm (sliding_window) and window (1m0s) as rate_limits[0] at line 5: they would share one counter"},
	"requests_negative":             {`requests_negative.bad.yaml:6:26: requests_per_unit must be an integer from 0 to 4294967295, got "-1"`},
	"requests_not_integer":          {`requests_not_integer.bad.yaml:6:26: requests_per_unit must be an integer from 0 to 4294967295, got "abc"`},
	"requests_overflow":             {`requests_overflow.bad.yaml:6:26: requests_per_unit must be an integer from 0 to 4294967295, got "4294967296"`},
	"bool_not_bool":                 {`bool_not_bool.bad.yaml:4:18: shadow_mode must be true or false, got "maybe"`},
	"alias_cycle":                   {"alias_cycle.bad.yaml:4:18: alias *loop refers to a node that contains it"},
	"alias_bomb":                    {"alias_bomb.bad.yaml:2:1: aliases expand the document to more than 11"},
	"metadata_not_finite":           {"metadata_not_finite.bad.yaml:5:14: metadata value .nan is not a finite number"},
	"too_deep":                      {"too_deep.bad.yaml:68:133: descriptors nested more than 32 levels deep: a request descriptor has at most 32 entries, so no request can match this rule"},
	"key_too_long":                  {"key_too_long.bad.yaml:5:10: descriptor key is 1025 bytes, over the maximum 1024: no request can match it"},
	"ip_prefix_range": {
		"ip_prefix_range.bad.yaml:4:21: ip_prefix v4 must be a prefix length, from 1 to 32, got 33",
		"ip_prefix_range.bad.yaml:4:29: ip_prefix v6 must be a prefix length, from 1 to 128, got 0",
		"ip_prefix_range.bad.yaml:7:11: ip_prefix v6 must be a prefix length, from 1 to 128, got 129",
	},
	"ip_prefix_not_mapping":   {`ip_prefix_not_mapping.bad.yaml:4:16: ip_prefix must be a mapping with v4 and v6, got "24"`},
	"ip_prefix_unknown_field": {`ip_prefix_unknown_field.bad.yaml:4:25: unknown field "ipv6" in ip_prefix`},
	"ip_prefix_not_integer":   {`ip_prefix_not_integer.bad.yaml:4:21: ip_prefix v4 must be a prefix length, from 1 to 32, got "/24"`},
}

func TestBadConfigs(t *testing.T) {
	files, err := filepath.Glob("testdata/*.bad.yaml")
	if err != nil {
		t.Fatal(err)
	}
	seen := make(map[string]bool)
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".bad.yaml")
		seen[name] = true
		t.Run(name, func(t *testing.T) {
			want, ok := badConfigs[name]
			if !ok {
				t.Fatalf("%s has no entry in badConfigs", f)
			}
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			domains, err := Parse(filepath.Base(f), data)
			if err == nil {
				t.Fatalf("Parse(%q) = %d domains, nil error; want errors %q", f, len(domains), want)
			}
			if domains != nil {
				t.Errorf("Parse(%q) returned domains with an error", f)
			}
			errs := loadErrors(t, err)
			if len(errs) != len(want) {
				t.Errorf("Parse(%q) = %d errors, want %d:\n%v", f, len(errs), len(want), err)
			}
			for i := range min(len(errs), len(want)) {
				if got := errs[i].Error(); !strings.Contains(got, want[i]) {
					t.Errorf("Parse(%q) error %d = %q, want it to contain %q", f, i, got, want[i])
				}
			}
		})
	}
	for name := range badConfigs {
		if !seen[name] {
			t.Errorf("badConfigs[%q] has no file testdata/%s.bad.yaml", name, name)
		}
	}
}

func TestParseReportsEveryError(t *testing.T) {
	data := `domain: d
descriptors:
  - key: a
    rate_limit: {unit: parsec, requests_per_unit: 1}
  - key: b
    colour: blue
---
domain: ""
---
domain: e
descriptors:
  - value: x
`
	_, err := Parse("f.yaml", []byte(data))
	var got []string
	for _, e := range loadErrors(t, err) {
		got = append(got, e.Error())
	}
	want := []string{
		`f.yaml:4:24: unknown unit "parsec" (want second, minute, hour, day, week, month or year)`,
		`f.yaml:6:5: unknown field "colour" in descriptor`,
		`f.yaml:8:9: domain is empty`,
		`f.yaml:12:5: descriptor has no key`,
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("Parse errors mismatch (-got +want):\n%s", diff)
	}
}

func TestParseCapsErrors(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	for range 25 {
		b.WriteString("  - {}\n")
	}
	_, err := Parse("many.yaml", []byte(b.String()))
	errs := loadErrors(t, err)
	if len(errs) != maxErrors+1 {
		t.Fatalf("Parse = %d errors, want %d", len(errs), maxErrors+1)
	}
	if got, want := errs[maxErrors-1].Error(), "many.yaml:22:5: descriptor has no key"; got != want {
		t.Errorf("error %d = %q, want %q", maxErrors-1, got, want)
	}
	if got, want := errs[maxErrors].Error(), "too many errors: 5 more not shown"; got != want {
		t.Errorf("last error = %q, want %q", got, want)
	}
}

func TestParseEmpty(t *testing.T) {
	for _, in := range []string{"", "# just a comment\n", "---\n---\n# nothing\n", "\n\n  \n"} {
		domains, err := Parse("empty.yaml", []byte(in))
		if err != nil || len(domains) != 0 {
			t.Errorf("Parse(%q) = %v, %v; want no domains, nil", in, domains, err)
		}
	}
}

// TestParseTree checks the syntax tree of a file using every field,
// anchors and merge keys.
func TestParseTree(t *testing.T) {
	data := `
domain: tree
descriptors:
  - key: k
    value: 42
    rate_limit: &base
      unit: Minute
      requests_per_unit: 7
      name: base
      replaces: [{name: other}]
      algorithm: token_bucket
      burst: 9
    shadow_mode: yes
    quota_mode: true
    detailed_metric: true
    value_to_metric: true
    consume_when_over: true
    metadata: {n: 1, f: 1.5, g: 2.0, s: "x", b: false, z: null, l: [1, a], m: {k: v}, t: 2026-11-22}
    descriptors:
      - key: w
        value: a*
        share_threshold: true
        rate_limits:
          - <<: *base
            name: merged
            replaces: []
          - {window: 90s, requests_per_unit: 3, algorithm: fixed_window}
      - key: u
        rate_limit: {unlimited: true, requests_per_unit: 0}
`
	got, err := Parse("tree.yaml", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	base := &RateLimit{Unit: "Minute", RequestsPerUnit: 7, Name: "base", Replaces: []Replace{{Name: "other"}}, Algorithm: "token_bucket", Burst: 9}
	want := []*Domain{{
		Domain: "tree",
		Descriptors: []*Descriptor{{
			Key: "k", Value: "42",
			RateLimit:  base,
			ShadowMode: true, QuotaMode: true, DetailedMetric: true, ValueToMetric: true, ConsumeWhenOver: true,
			Metadata: map[string]any{
				"n": 1, "f": 1.5, "g": 2, "s": "x", "b": false, "z": nil,
				"l": []any{1, "a"}, "m": map[string]any{"k": "v"}, "t": "2026-11-22",
			},
			Descriptors: []*Descriptor{
				{
					Key: "w", Value: "a*", ShareThreshold: true,
					RateLimits: []*RateLimit{
						{Unit: "Minute", RequestsPerUnit: 7, Name: "merged", Algorithm: "token_bucket", Burst: 9},
						{Window: "90s", RequestsPerUnit: 3, Algorithm: "fixed_window"},
					},
				},
				{Key: "u", RateLimit: &RateLimit{Unlimited: true}},
			},
		}},
	}}
	if diff := cmp.Diff(got, want, ignoreSrc); diff != "" {
		t.Errorf("Parse mismatch (-got +want):\n%s", diff)
	}

	rules, err := Compile(got)
	if err != nil {
		t.Fatal(err)
	}
	d := rules.Domain("tree")
	r := Match(d, []entry{{"k", "42"}, {"w", "abc"}})
	if r == nil {
		t.Fatal("Match(k=42, w=abc) = nil")
	}
	wantLimits := []RuleLimit{
		{Limit: backend.Limit{Algorithm: backend.TokenBucket, Requests: 7, Window: time.Minute, Burst: 9}, Name: "merged"},
		{Limit: backend.Limit{Algorithm: backend.FixedWindow, Requests: 3, Window: 90 * time.Second}},
	}
	if diff := cmp.Diff(r.Limits, wantLimits); diff != "" {
		t.Errorf("Limits mismatch (-got +want):\n%s", diff)
	}
	if got, want := r.Path, "k=42.w=a*"; got != want {
		t.Errorf("Path = %q, want %q", got, want)
	}
	if r.File != "tree.yaml" || r.Line != 20 {
		t.Errorf("rule at %s:%d, want tree.yaml:20", r.File, r.Line)
	}
	if len(r.Levels) != 2 || r.Levels[1] != r || r.Levels[0] != Match(d, []entry{{"k", "42"}}) {
		t.Errorf("Levels = %v, want [k=42 rule, this rule]", r.Levels)
	}
	top := r.Levels[0]
	if diff := cmp.Diff(top.Limits, []RuleLimit{{
		Limit: backend.Limit{Algorithm: backend.TokenBucket, Requests: 7, Window: time.Minute, Burst: 9},
		Name:  "base", Replaces: []string{"other"},
	}}); diff != "" {
		t.Errorf("k=42 Limits mismatch (-got +want):\n%s", diff)
	}
	if !top.ShadowMode || !top.QuotaMode || !top.DetailedMetric || !top.ValueToMetric || !top.ConsumeWhenOver || top.ShareThreshold {
		t.Errorf("k=42 flags = %+v, want all but ShareThreshold", top)
	}
	if u := Match(d, []entry{{"k", "42"}, {"u", "x"}}); u == nil || !u.Unlimited || len(u.Limits) != 0 {
		t.Errorf("Match(k=42, u=x) = %+v, want an Unlimited rule without Limits", u)
	}
}

func TestUnits(t *testing.T) {
	for unit, want := range map[string]time.Duration{
		"second": time.Second, "MINUTE": time.Minute, "Hour": time.Hour, "day": 24 * time.Hour,
		"week": 7 * 24 * time.Hour, "month": 30 * 24 * time.Hour, "year": 365 * 24 * time.Hour,
	} {
		rules, err := Compile([]*Domain{{Domain: "d", Descriptors: []*Descriptor{{Key: "k", RateLimit: &RateLimit{Unit: unit, RequestsPerUnit: 1}}}}})
		if err != nil {
			t.Fatalf("unit %q: %v", unit, err)
		}
		if got := Match(rules.Domain("d"), []entry{{"k", "v"}}).Limits[0].Window; got != want {
			t.Errorf("unit %q: Window = %v, want %v", unit, got, want)
		}
	}
}

func TestCompileDuplicateDomains(t *testing.T) {
	a, err := Parse("a.yaml", []byte("domain: x\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse("b.yaml", []byte("# b\ndomain: x\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Compile(append(a, b...))
	if got, want := errorString(err), `b.yaml:2:9: duplicate domain "x" (first at a.yaml:1)`; got != want {
		t.Errorf("Compile = %q, want %q", got, want)
	}
}

// TestCompileBuiltInCode checks that Compile checks trees that Parse did
// not make, and that their errors name no place.
func TestCompileBuiltInCode(t *testing.T) {
	_, err := Compile([]*Domain{{Domain: "d", Descriptors: []*Descriptor{
		{Key: "a", RateLimit: &RateLimit{Unit: "lightyear"}},
		{Key: "a"},
	}}})
	want := `unknown unit "lightyear" (want second, minute, hour, day, week, month or year)` + "\n" +
		`duplicate descriptor key "a" without value`
	if got := errorString(err); got != want {
		t.Errorf("Compile = %q, want %q", got, want)
	}

	rules, err := Compile(nil)
	if err != nil || rules.Domain("x") != nil || len(rules.Domains()) != 0 {
		t.Errorf("Compile(nil) = %v, %v; want empty rules", rules, err)
	}
}

func TestErrorString(t *testing.T) {
	for _, tc := range []struct {
		err  Error
		want string
	}{
		{Error{File: "a.yaml", Line: 3, Column: 7, Msg: "bad"}, "a.yaml:3:7: bad"},
		{Error{File: "a.yaml", Line: 3, Msg: "bad"}, "a.yaml:3: bad"},
		{Error{File: "a.yaml", Msg: "bad"}, "a.yaml: bad"},
		{Error{Msg: "bad"}, "bad"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("%#v.Error() = %q, want %q", tc.err, got, tc.want)
		}
	}
}

func errorString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
