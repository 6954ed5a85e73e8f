package config

import "net/netip"

// Defaults of a descriptor's ip_prefix fields.
const (
	// DefaultIPPrefixV4 is the prefix length of IPv4 addresses when
	// ip_prefix does not give v4: each address counts on its own.
	DefaultIPPrefixV4 = 32
	// DefaultIPPrefixV6 is the prefix length of IPv6 addresses when
	// ip_prefix does not give v6: a /64, the usual size of one site's
	// network, from which one client can take any number of addresses.
	DefaultIPPrefixV6 = 64
)

// IPPrefix is how many leading bits of an IP address a request value is
// counted by, for IPv4 (V4, from 1 to 32) and IPv6 (V6, from 1 to 128)
// addresses. On a Rule, the zero value means not set. In the syntax tree
// (Descriptor.IPPrefix, YAML ip_prefix: {v4: 24, v6: 56}), a zero field
// means its default, DefaultIPPrefixV4 or DefaultIPPrefixV6.
type IPPrefix struct {
	V4 int `yaml:"v4,omitempty"`
	V6 int `yaml:"v6,omitempty"`
}

// Set reports whether p is set, that is, not the zero IPPrefix.
func (p IPPrefix) Set() bool { return p != IPPrefix{} }

// Apply returns the network of value under p, in canonical text form
// ("192.0.2.0", "2001:db8:1:2::"), if value is an IP address: IPv4
// addresses keep their first V4 bits and IPv6 addresses their first V6
// bits, the others set to zero; an IPv4-mapped IPv6 address
// ("::ffff:192.0.2.7") counts as the IPv4 address it maps, and an IPv6
// zone ("%eth0") is dropped. Any other value comes back unchanged, as
// does every address of a family whose field is outside its range (0
// included, so the zero IPPrefix changes nothing). Apply allocates only
// for a value that it changes.
func (p IPPrefix) Apply(value string) string {
	if !p.Set() || !ipLike(value) {
		return value
	}
	a, err := netip.ParseAddr(value)
	if err != nil {
		return value
	}
	a = a.Unmap()
	bits := p.V6
	if a.Is4() {
		bits = p.V4
	}
	if bits < 1 || bits > a.BitLen() {
		return value
	}
	net, err := a.WithZone("").Prefix(bits)
	if err != nil {
		return value // not reached: bits is in range
	}
	var buf [64]byte // more than the 39 bytes of the longest IPv6 address
	b := net.Addr().AppendTo(buf[:0])
	if string(b) == value {
		return value
	}
	return string(b)
}

// ipLike reports whether s may be an IP address: up to a zone ('%'), only
// hexadecimal digits, '.' and ':', with at least one '.' or ':'. It spares
// netip.ParseAddr, which allocates its error, most values that are not.
func ipLike(s string) bool {
	sep := false
	for i := 0; i < len(s) && s[i] != '%'; i++ {
		switch c := s[i]; {
		case c == '.' || c == ':':
			sep = true
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f', 'A' <= c && c <= 'F':
		default:
			return false
		}
	}
	return sep
}

// maxBits returns the longest prefix of the field ("v4" or "v6") of
// ip_prefix.
func maxBits(field string) int {
	if field == "v4" {
		return 32
	}
	return 128
}
