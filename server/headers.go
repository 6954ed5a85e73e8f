package server

import (
	"fmt"
	"strconv"
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

// appendHeaders renders sc.dec's headers per the server's HeaderMode.
func (s *Server) appendHeaders(sc *scratch) {
	dec := &sc.dec
	switch s.opts.Headers {
	case HeadersIETF:
		policy := sc.buf[:0]
		for _, v := range dec.statuses {
			if !v.limited || v.shadow {
				continue
			}
			policy = appendItem(policy, v.name)
			policy = append(policy, ";q="...)
			policy = strconv.AppendUint(policy, v.limit.Requests, 10)
			policy = append(policy, ";w="...)
			policy = strconv.AppendInt(policy, seconds(v.limit.Window), 10)
		}
		if len(policy) == 0 {
			return
		}
		dec.headers = append(dec.headers, header{"RateLimit-Policy", string(policy)})
		state := policy[:0]
		for _, v := range dec.statuses {
			if !v.limited || v.shadow {
				continue
			}
			state = appendItem(state, v.name)
			state = append(state, ";r="...)
			state = strconv.AppendUint(state, v.remaining, 10)
			state = append(state, ";t="...)
			state = strconv.AppendInt(state, seconds(v.reset), 10)
		}
		dec.headers = append(dec.headers, header{"RateLimit", string(state)})
		sc.buf = state
		if dec.over {
			var retry time.Duration
			for _, v := range dec.statuses {
				if v.over && !v.shadow {
					retry = max(retry, v.retry)
				}
			}
			dec.headers = append(dec.headers, header{"Retry-After", strconv.FormatInt(max(seconds(retry), 1), 10)})
		}
	case HeadersLegacy:
		tight := -1
		for i, v := range dec.statuses {
			if !v.limited || v.shadow {
				continue
			}
			if v.over {
				tight = i
				break
			}
			if tight < 0 || v.remaining < dec.statuses[tight].remaining {
				tight = i
			}
		}
		if tight < 0 {
			return
		}
		v := dec.statuses[tight]
		dec.headers = append(dec.headers,
			header{"RateLimit-Limit", strconv.FormatUint(v.limit.Requests, 10)},
			header{"RateLimit-Remaining", strconv.FormatUint(v.remaining, 10)},
			header{"RateLimit-Reset", strconv.FormatInt(seconds(v.reset), 10)},
		)
	}
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
