package config

import (
	"net/netip"
	"testing"
)

func TestIPPrefixApply(t *testing.T) {
	p := IPPrefix{V4: 24, V6: 64}
	for _, tc := range []struct {
		p     IPPrefix
		value string
		want  string
	}{
		{p, "192.0.2.77", "192.0.2.0"},
		{p, "192.0.2.0", "192.0.2.0"},
		{p, "2001:db8:1:2:3:4:5:6", "2001:db8:1:2::"},
		{p, "2001:DB8:1:2::", "2001:db8:1:2::"}, // canonical form
		{p, "fe80::1:2:3:4%eth0", "fe80::"},     // zone dropped
		{p, "::ffff:192.0.2.77", "192.0.2.0"},   // IPv4-mapped: as IPv4
		{p, "::ffff:c000:24d", "192.0.2.0"},
		{IPPrefix{V4: 32, V6: 128}, "192.0.2.77", "192.0.2.77"},
		{IPPrefix{V4: 1, V6: 1}, "255.0.0.1", "128.0.0.0"},
		{IPPrefix{V4: 1, V6: 1}, "ffff::1", "8000::"},
		{IPPrefix{V4: 8, V6: 0}, "2001:db8::1", "2001:db8::1"}, // V6 out of range: unchanged
		{IPPrefix{V4: 33, V6: 48}, "192.0.2.77", "192.0.2.77"},
		{IPPrefix{V4: -1, V6: 129}, "2001:db8::1", "2001:db8::1"},
		{IPPrefix{}, "192.0.2.77", "192.0.2.77"}, // not set
		// Not IP addresses: unchanged.
		{p, "", ""},
		{p, "example.com", "example.com"},
		{p, "192.0.2.77:8080", "192.0.2.77:8080"},
		{p, "192.0.2.0/24", "192.0.2.0/24"},
		{p, " 192.0.2.77", " 192.0.2.77"},
		{p, "192.000.002.077", "192.000.002.077"},
		{p, "1.2.3", "1.2.3"},
	} {
		if got := tc.p.Apply(tc.value); got != tc.want {
			t.Errorf("%+v.Apply(%q) = %q, want %q", tc.p, tc.value, got, tc.want)
		}
	}
}

func TestIPPrefixApplyAllocs(t *testing.T) {
	p := IPPrefix{V4: 24, V6: 64}
	for value, want := range map[string]float64{
		"192.0.2.0":    0, // unchanged
		"not an IP":    0,
		"2001:db8::":   0,
		"192.0.2.77":   1, // the new string
		"2001:db8::77": 1,
	} {
		if got := testing.AllocsPerRun(100, func() { p.Apply(value) }); got != want {
			t.Errorf("Apply(%q) allocates %v times, want %v", value, got, want)
		}
	}
}

func TestIPPrefixSet(t *testing.T) {
	if (IPPrefix{}).Set() || !(IPPrefix{V4: 32, V6: 64}).Set() || !(IPPrefix{V6: 1}).Set() {
		t.Error("Set() is not true exactly when the IPPrefix is not zero")
	}
}

// FuzzIPPrefixApply checks that Apply never panics, that it changes only
// IP addresses, into a network address that Apply keeps as it is.
func FuzzIPPrefixApply(f *testing.F) {
	for _, s := range []string{"192.0.2.77", "2001:db8::1", "::ffff:1.2.3.4", "fe80::1%eth0", "x", ""} {
		f.Add(s, 24, 64)
	}
	f.Fuzz(func(t *testing.T, value string, v4, v6 int) {
		p := IPPrefix{V4: v4, V6: v6}
		got := p.Apply(value)
		if got == value {
			return
		}
		a, err := netip.ParseAddr(value)
		if err != nil {
			t.Fatalf("Apply(%q) = %q, changed a value that is not an IP address", value, got)
		}
		n, err := netip.ParseAddr(got)
		if err != nil || n.Zone() != "" || n.String() != got {
			t.Fatalf("Apply(%q) = %q, not an address in canonical form", value, got)
		}
		bits := v6
		if a.Unmap().Is4() {
			bits = v4
		}
		if want, _ := a.Unmap().WithZone("").Prefix(bits); want.Addr() != n {
			t.Fatalf("Apply(%q) = %q, want %v", value, got, want.Addr())
		}
		if again := p.Apply(got); again != got {
			t.Fatalf("Apply(Apply(%q)) = %q, want %q", value, again, got)
		}
	})
}

func TestIPPrefixCompile(t *testing.T) {
	data := `domain: d
descriptors:
  - key: a
    ip_prefix: {}
  - key: b
    ip_prefix: {v4: 24}
  - key: c
    ip_prefix: {v6: 48, v4: 16}
  - key: d
  - key: e
    ip_prefix: ~
`
	domains, err := Parse("f.yaml", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := Compile(domains)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]IPPrefix{
		"a": {32, 64}, "b": {24, 64}, "c": {16, 48}, "d": {}, "e": {},
	} {
		if got := Match(rules.Domain("d"), []entry{{key, "v"}}).IPPrefix; got != want {
			t.Errorf("rule %s: IPPrefix = %+v, want %+v", key, got, want)
		}
	}
	out, err := Marshal(domains)
	if err != nil {
		t.Fatal(err)
	}
	want := `domain: d
descriptors:
  - key: a
    ip_prefix: {}
  - key: b
    ip_prefix:
      v4: 24
  - key: c
    ip_prefix:
      v4: 16
      v6: 48
  - key: d
  - key: e
`
	if string(out) != want {
		t.Errorf("Marshal = \n%s\nwant\n%s", out, want)
	}

	// Trees built in code are checked too; a zero field is the default.
	_, err = Compile([]*Domain{{Domain: "d", Descriptors: []*Descriptor{
		{Key: "a", IPPrefix: &IPPrefix{V4: 0, V6: 200}},
	}}})
	if got, want := errorString(err), "ip_prefix v6 must be a prefix length, from 1 to 128, got 200"; got != want {
		t.Errorf("Compile = %q, want %q", got, want)
	}
}
