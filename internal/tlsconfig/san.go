package tlsconfig

import (
	"crypto/x509"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
)

// ParseSANs splits a comma-separated list of subject alternative names,
// such as a flag's value, into the entries of Options.AllowedSANs. It trims
// spaces around entries and drops empty ones, so "" gives nil. It returns an
// error naming the first entry that is not a DNS name, URI, IP address or
// email address as the package documentation describes.
func ParseSANs(s string) ([]string, error) {
	var sans []string
	for e := range strings.SplitSeq(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if _, err := newSANSet([]string{e}); err != nil {
			return nil, err
		}
		sans = append(sans, e)
	}
	return sans, nil
}

// sanSet is a compiled allow-list of subject alternative names. It is
// immutable once built.
type sanSet struct {
	dns       map[string]bool     // lower-case names, no trailing dot
	wildcards map[string]bool     // lower-case parents of "*." entries: "example.com" for "*.example.com"
	uris      map[string]bool     // URIs as url.URL.String gives them
	ips       map[netip.Addr]bool // unmapped addresses
	emails    map[string]bool     // local part as written, "@", lower-case domain
}

// newSANSet compiles entries, inferring each one's kind: "://" makes a URI,
// an IP address an IP, "@" an email address, and anything else a DNS name.
func newSANSet(entries []string) (*sanSet, error) {
	s := &sanSet{
		dns:       map[string]bool{},
		wildcards: map[string]bool{},
		uris:      map[string]bool{},
		ips:       map[netip.Addr]bool{},
		emails:    map[string]bool{},
	}
	for _, e := range entries {
		if err := s.add(e); err != nil {
			return nil, fmt.Errorf("tlsconfig: allowed SAN %q: %w", e, err)
		}
	}
	return s, nil
}

func (s *sanSet) add(e string) error {
	if e == "" || strings.ContainsFunc(e, func(r rune) bool { return r <= ' ' || r == ',' }) {
		return fmt.Errorf("empty, or holds a space or comma")
	}
	if strings.Contains(e, "://") {
		u, err := url.Parse(e)
		if err != nil {
			return err
		}
		s.uris[u.String()] = true
		return nil
	}
	if ip, err := netip.ParseAddr(e); err == nil {
		if ip.Zone() != "" {
			return fmt.Errorf("an IP address with a zone never appears in a certificate")
		}
		s.ips[ip.Unmap()] = true
		return nil
	}
	if local, domain, ok := strings.Cut(e, "@"); ok {
		if local == "" || domain == "" || strings.Contains(domain, "@") {
			return fmt.Errorf("not an email address (local@domain)")
		}
		s.emails[local+"@"+strings.ToLower(domain)] = true
		return nil
	}
	name := normalizeDNS(e)
	parent, wild := strings.CutPrefix(name, "*.")
	if !validDNS(parent) {
		return fmt.Errorf(`not a DNS name, "*." wildcard, URI (with "://"), IP address or email address`)
	}
	if wild {
		s.wildcards[parent] = true
	} else {
		s.dns[name] = true
	}
	return nil
}

// validDNS reports whether name is dot-separated non-empty labels of
// letters, digits, '-' and '_'.
func validDNS(name string) bool {
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || strings.ContainsFunc(label, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_')
		}) {
			return false
		}
	}
	return true
}

// normalizeDNS lower-cases name and drops one trailing dot.
func normalizeDNS(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, "."))
}

// allows reports whether c carries at least one of the set's names. A
// certificate's own wildcard DNS names are compared literally, never
// expanded.
func (s *sanSet) allows(c *x509.Certificate) bool {
	for _, n := range c.DNSNames {
		n = normalizeDNS(n)
		if s.dns[n] {
			return true
		}
		if label, parent, ok := strings.Cut(n, "."); ok && label != "" && s.wildcards[parent] {
			return true
		}
	}
	for _, u := range c.URIs {
		if s.uris[u.String()] {
			return true
		}
	}
	for _, b := range c.IPAddresses {
		if ip, ok := netip.AddrFromSlice(b); ok && s.ips[ip.Unmap()] {
			return true
		}
	}
	for _, m := range c.EmailAddresses {
		if local, domain, ok := strings.Cut(m, "@"); ok && s.emails[local+"@"+strings.ToLower(domain)] {
			return true
		}
	}
	return false
}
