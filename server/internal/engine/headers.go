package engine

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// HeaderMode chooses the rate-limit headers ratelimitd asks callers to send.
type HeaderMode int

const (
	// HeadersIETF sends draft-ietf-httpapi-ratelimit-headers-10's
	// RateLimit-Policy and RateLimit fields (Structured Fields lists, one
	// item per enforced limited descriptor) and, when refused, Retry-After.
	HeadersIETF HeaderMode = iota
	// HeadersLegacy sends RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset of the tightest descriptor, as envoyproxy/ratelimit
	// does.
	HeadersLegacy
	// HeadersOff sends no headers.
	HeadersOff
)

var headerModes = [...]string{HeadersIETF: "ietf", HeadersLegacy: "legacy", HeadersOff: "off"}

// String returns the flag value of m: "ietf", "legacy" or "off".
func (m HeaderMode) String() string {
	if int(m) < len(headerModes) {
		return headerModes[m]
	}
	return fmt.Sprintf("HeaderMode(%d)", m)
}

// ParseHeaderMode returns the HeaderMode named s.
func ParseHeaderMode(s string) (HeaderMode, error) {
	for m, name := range headerModes {
		if s == name {
			return HeaderMode(m), nil
		}
	}
	return 0, fmt.Errorf("unknown response headers mode %q (want ietf, legacy or off)", s)
}

// appendHeaders renders sc.Dec's headers per the server's HeaderMode.
func (e *Engine) appendHeaders(sc *Scratch) {
	dec := &sc.Dec
	switch e.opts.Headers {
	case HeadersIETF:
		policy := sc.buf[:0]
		for _, v := range dec.Statuses {
			if !v.Limited || v.Shadow {
				continue
			}
			policy = appendItem(policy, v.Name)
			policy = append(policy, ";q="...)
			policy = strconv.AppendUint(policy, v.Limit.Requests, 10)
			policy = append(policy, ";w="...)
			policy = strconv.AppendInt(policy, seconds(v.Limit.Window), 10)
		}
		if len(policy) == 0 {
			return
		}
		dec.Headers = append(dec.Headers, Header{"RateLimit-Policy", string(policy)})
		state := policy[:0]
		for _, v := range dec.Statuses {
			if !v.Limited || v.Shadow {
				continue
			}
			state = appendItem(state, v.Name)
			state = append(state, ";r="...)
			state = strconv.AppendUint(state, v.Remaining, 10)
			state = append(state, ";t="...)
			state = strconv.AppendInt(state, seconds(v.Reset), 10)
		}
		dec.Headers = append(dec.Headers, Header{"RateLimit", string(state)})
		sc.buf = state
		if dec.Over {
			var retry time.Duration
			for _, v := range dec.Statuses {
				if v.Over && !v.Shadow {
					retry = max(retry, v.Retry)
				}
			}
			dec.Headers = append(dec.Headers, Header{"Retry-After", strconv.FormatInt(max(seconds(retry), 1), 10)})
		}
	case HeadersLegacy:
		tight := -1
		for i, v := range dec.Statuses {
			if !v.Limited || v.Shadow {
				continue
			}
			if v.Over {
				tight = i
				break
			}
			if tight < 0 || v.Remaining < dec.Statuses[tight].Remaining {
				tight = i
			}
		}
		if tight < 0 {
			return
		}
		v, names := dec.Statuses[tight], e.opts.LegacyHeaders.withDefaults()
		dec.Headers = append(dec.Headers,
			Header{names.Limit, strconv.FormatUint(v.Limit.Requests, 10)},
			Header{names.Remaining, strconv.FormatUint(v.Remaining, 10)},
			Header{names.Reset, strconv.FormatInt(seconds(v.Reset), 10)},
		)
	}
}

// LegacyHeaderNames names the three fields HeadersLegacy sends: the
// limit, the hits remaining and the seconds until the window resets. An
// empty name means its default: RateLimit-Limit, RateLimit-Remaining,
// RateLimit-Reset. Names are sent as given (Envoy lower-cases them on
// HTTP/2); New does not check them: take them from
// ParseLegacyHeaderNames, or check them with Validate.
type LegacyHeaderNames struct{ Limit, Remaining, Reset string }

// defaultLegacyHeaderNames are the names of the zero LegacyHeaderNames.
var defaultLegacyHeaderNames = LegacyHeaderNames{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}

// withDefaults returns n with its empty names replaced by the defaults.
func (n LegacyHeaderNames) withDefaults() LegacyHeaderNames {
	d := defaultLegacyHeaderNames
	return LegacyHeaderNames{cmp.Or(n.Limit, d.Limit), cmp.Or(n.Remaining, d.Remaining), cmp.Or(n.Reset, d.Reset)}
}

// ParseLegacyHeaderNames parses "limit,remaining,reset": three HTTP field
// names, comma-separated, each an RFC 9110 token, no two the same in any
// case. An empty s means the defaults.
func ParseLegacyHeaderNames(s string) (LegacyHeaderNames, error) {
	if s == "" {
		return LegacyHeaderNames{}, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) != 3 {
		return LegacyHeaderNames{}, fmt.Errorf("legacy header names %q: want three names, limit,remaining,reset", s)
	}
	n := LegacyHeaderNames{strings.TrimSpace(parts[0]), strings.TrimSpace(parts[1]), strings.TrimSpace(parts[2])}
	if n.Limit == "" || n.Remaining == "" || n.Reset == "" {
		return LegacyHeaderNames{}, fmt.Errorf("legacy header names %q: a name is empty", s)
	}
	if err := n.Validate(); err != nil {
		return LegacyHeaderNames{}, err
	}
	return n, nil
}

// Validate reports a name of n that is not an HTTP field name (an RFC
// 9110 token), or two of n's names, defaults filled in, that are the same
// in any case.
func (n LegacyHeaderNames) Validate() error {
	for _, name := range []string{n.Limit, n.Remaining, n.Reset} {
		if name != "" && !isToken(name) {
			return fmt.Errorf("legacy header name %q is not an HTTP field name (letters, digits and !#$%%&'*+-.^_`|~)", name)
		}
	}
	f := n.withDefaults()
	if strings.EqualFold(f.Limit, f.Remaining) || strings.EqualFold(f.Limit, f.Reset) || strings.EqualFold(f.Remaining, f.Reset) {
		return fmt.Errorf("legacy header names %s: two are the same", f)
	}
	return nil
}

// isToken reports whether s is an RFC 9110 token (section 5.6.2).
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return s != ""
}

// String returns n as ParseLegacyHeaderNames reads it, defaults filled in.
func (n LegacyHeaderNames) String() string {
	f := n.withDefaults()
	return f.Limit + "," + f.Remaining + "," + f.Reset
}

// MarshalText implements encoding.TextMarshaler.
func (n LegacyHeaderNames) MarshalText() ([]byte, error) { return []byte(n.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler, for flags.
func (n *LegacyHeaderNames) UnmarshalText(b []byte) error {
	v, err := ParseLegacyHeaderNames(string(b))
	if err != nil {
		return err
	}
	*n = v
	return nil
}

// appendItem appends a list separator if needed, then name as a
// Structured Fields String (RFC 9651 §3.3.3): quotes and backslashes
// escaped, and any byte a String cannot hold replaced with '?'.
func appendItem(b []byte, name string) []byte {
	if len(b) > 0 {
		b = append(b, ", "...)
	}
	b = append(b, '"')
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// seconds returns d in whole seconds, rounded up.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d-1)/time.Second) + 1 // d+time.Second-1 would overflow near the largest Duration
}

// MarshalText implements encoding.TextMarshaler.
func (m HeaderMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler, for flags.
func (m *HeaderMode) UnmarshalText(b []byte) error {
	v, err := ParseHeaderMode(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}
