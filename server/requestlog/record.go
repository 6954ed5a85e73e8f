// Package requestlog writes and reads ratelimitd's request log: a sample
// of the requests the server decides, one JSON object per line, which
// `ratelimitd replay` plays against two rule sets.
//
// A line is
//
//	{"time": "2026-11-24T05:52:51.123456789Z", "request": {...}}
//
// where time is when the request was decided (RFC 3339 in UTC, with nine
// digits of nanoseconds, so that lines sort by time as text) and
// request is the body POST /json takes for it: the protojson form of an
// envoy.service.ratelimit.v3.RateLimitRequest, whichever API carried the
// request (native requests are converted). Every descriptor carries its
// own hits_addend when it is not 1, so that the line says exactly what
// was asked.
//
// Some requests say what no /json body can:
//
//   - a key or value that is not plain text (see plain): not UTF-8, which
//     protojson refuses in a string, or holding a control byte, or so many
//     quotes and backslashes that their escapes would make it longer than
//     its base64. The request shows it as "hex:" and the hex of its first
//     16 bytes (and "..." when it has more), and the line adds an entry to
//     "bytes" holding the real key and value in base64:
//     {"descriptor": 0, "entry": 1, "key": "<base64>", "value": "<base64>"};
//     a domain that is not plain text is shown the same way, its bytes in
//     "domain_base64". So a line is never much longer than the bytes its
//     request carried: base64 takes 4 bytes for 3, where JSON's escape of
//     a control byte took 6 for 1;
//   - a value sent as its SHA-256 digest (the native API's value_sha256).
//     The request shows "sha256:" and the digest in hex, and "bytes" holds
//     {"descriptor": 0, "entry": 1, "value_sha256": "<base64>"};
//   - a limit override whose window is not a whole number of seconds (the
//     native API's window). The descriptor has no "limit"; "limits" holds
//     {"descriptor": 0, "requests": 10, "window": "1.5s"}.
//
// Readers apply "bytes" and "limits" over "request"; a reader that ignores
// them still gets a valid /json body.
//
// A record whose line would be longer than the log's bound
// (Options.MaxRecord) is written as a marker instead, which says when the
// request was decided and how large it was:
//
//	{"time": "...", "omitted": {"bytes": 1411402, "descriptors": 64}}
package requestlog

import (
	"encoding/base64"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// A Record is one logged request as the decision engine saw it.
type Record struct {
	// Time is when the request was decided.
	Time time.Time
	// Domain is the request's domain.
	Domain string
	// Descriptors are the request's descriptors.
	Descriptors []Descriptor
}

// A Descriptor is one request descriptor.
type Descriptor struct {
	// Entries are its keys and values, which may be any bytes.
	Entries []Entry
	// Hits is what the descriptor asks to consume: 0 checks without
	// consuming.
	Hits uint64
	// Limit is the request's own limit for the descriptor, when HasLimit.
	Limit    Limit
	HasLimit bool
	// GiveBack: the descriptor gives Hits back (is_negative_hits, the
	// native give_back or Release; a Release's lease is not kept, so a
	// replay frees the newest slots instead of that lease's).
	GiveBack bool
}

// An Entry is one key and value.
type Entry struct {
	Key, Value string
	// Digest means Value is the SHA-256 digest of a value, sent in its
	// place.
	Digest bool
}

// A Limit is a limit override: Requests per Window.
type Limit struct {
	Requests uint64
	Window   time.Duration
}

// Size returns about how many bytes r holds: its strings, and its
// descriptors and entries. The request log bounds the bytes waiting for
// its writer by it.
func (r *Record) Size() int {
	const descriptorSize, entrySize = 64, 40 // the structs' sizes on 64-bit
	n := len(r.Domain) + len(r.Descriptors)*descriptorSize
	for i := range r.Descriptors {
		for _, e := range r.Descriptors[i].Entries {
			n += entrySize + len(e.Key) + len(e.Value)
		}
	}
	return n
}

// timeFormat is RFC 3339 in UTC with all nine digits of the nanoseconds,
// so that the lines of a log sort by time as text.
const timeFormat = "2006-01-02T15:04:05.000000000Z07:00"

// envoyUnit returns the longest Envoy unit that divides w, and the
// multiplier; false when w is no whole number of seconds.
func envoyUnit(w time.Duration) (string, uint64, bool) {
	for _, u := range overrideUnits {
		d := u.Window
		if w >= d && w%d == 0 && uint64(w/d) <= math.MaxUint32 {
			return u.EnvoyName, uint64(w / d), true
		}
	}
	return "", 0, false
}

// AppendLine appends r's line, with its newline, to b.
func AppendLine(b []byte, r *Record) []byte {
	b = append(b, `{"time":"`...)
	b = r.Time.UTC().AppendFormat(b, timeFormat)
	b = append(b, `","request":{"domain":`...)
	b = appendString(b, r.Domain)
	b = append(b, `,"descriptors":[`...)
	var binary, windows bool
	for i := range r.Descriptors {
		d := &r.Descriptors[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"entries":[`...)
		for j, e := range d.Entries {
			if j > 0 {
				b = append(b, ',')
			}
			binary = binary || needsBytes(e)
			b = append(b, `{"key":`...)
			b = appendString(b, e.Key)
			b = append(b, `,"value":`...)
			if e.Digest {
				b = appendHex(append(b, `"sha256:`...), e.Value)
				b = append(b, '"')
			} else {
				b = appendString(b, e.Value)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
		if d.HasLimit {
			if unit, mult, ok := envoyUnit(d.Limit.Window); ok && d.Limit.Requests <= math.MaxUint32 {
				b = append(b, `,"limit":{"requestsPerUnit":`...)
				b = strconv.AppendUint(b, d.Limit.Requests, 10)
				b = append(b, `,"unit":"`...)
				b = append(b, unit...)
				b = append(b, '"')
				if mult != 1 {
					b = append(b, `,"unitMultiplier":`...)
					b = strconv.AppendUint(b, mult, 10)
				}
				b = append(b, '}')
			} else {
				windows = true
			}
		}
		if d.Hits != 1 {
			b = append(b, `,"hitsAddend":"`...)
			b = strconv.AppendUint(b, d.Hits, 10)
			b = append(b, '"')
		}
		if d.GiveBack {
			b = append(b, `,"isNegativeHits":true`...)
		}
		b = append(b, '}')
	}
	b = append(b, "]}"...)
	if !plain(r.Domain) {
		b = append(b, `,"domain_base64":"`...)
		b = base64.StdEncoding.AppendEncode(b, []byte(r.Domain))
		b = append(b, '"')
	}
	if binary {
		b = appendBytes(b, r)
	}
	if windows {
		b = appendWindows(b, r)
	}
	return append(b, "}\n"...)
}

// needsBytes reports whether e needs an entry in "bytes".
func needsBytes(e Entry) bool {
	return e.Digest || !plain(e.Key) || !plain(e.Value)
}

// plain reports whether s is written in a line as itself, in a JSON
// string: it is UTF-8, has no control byte (below 0x20, or 0x7f), and its
// quotes and backslashes, escaped, leave it no longer than its base64.
// Any other string goes in base64, so that no string takes more than 4
// bytes of the line for 3 of its own.
func plain(s string) bool {
	escapes := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c == 0x7f:
			return false
		case c == '"' || c == '\\':
			escapes++
		}
	}
	return (escapes == 0 || len(s)+escapes <= base64.StdEncoding.EncodedLen(len(s))) && utf8.ValidString(s)
}

// appendBytes appends the "bytes" field of r.
func appendBytes(b []byte, r *Record) []byte {
	b = append(b, `,"bytes":[`...)
	first := true
	for i := range r.Descriptors {
		for j, e := range r.Descriptors[i].Entries {
			if !needsBytes(e) {
				continue
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = append(b, `{"descriptor":`...)
			b = strconv.AppendInt(b, int64(i), 10)
			b = append(b, `,"entry":`...)
			b = strconv.AppendInt(b, int64(j), 10)
			if !plain(e.Key) {
				b = appendBase64(b, "key", e.Key)
			}
			switch {
			case e.Digest:
				b = appendBase64(b, "value_sha256", e.Value)
			case !plain(e.Value):
				b = appendBase64(b, "value", e.Value)
			}
			b = append(b, '}')
		}
	}
	return append(b, ']')
}

// appendBase64 appends the JSON member ,"name":"<v in base64>".
func appendBase64(b []byte, name, v string) []byte {
	b = append(append(append(b, `,"`...), name...), `":"`...)
	b = base64.StdEncoding.AppendEncode(b, []byte(v))
	return append(b, '"')
}

// appendWindows appends the "limits" field of r: the overrides that
// Envoy's units cannot say.
func appendWindows(b []byte, r *Record) []byte {
	b = append(b, `,"limits":[`...)
	first := true
	for i := range r.Descriptors {
		d := &r.Descriptors[i]
		if !d.HasLimit {
			continue
		}
		if _, _, ok := envoyUnit(d.Limit.Window); ok && d.Limit.Requests <= math.MaxUint32 {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, `{"descriptor":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `,"requests":`...)
		b = strconv.AppendUint(b, d.Limit.Requests, 10)
		b = append(b, `,"window":"`...)
		b = append(b, d.Limit.Window.String()...)
		b = append(b, `"}`...)
	}
	return append(b, ']')
}

const hexDigits = "0123456789abcdef"

// shownBytes is how many bytes of a string that is not plain text a
// line's request shows, in hex: enough to tell most values apart, few
// enough that the line stays short (its bytes are in "bytes").
const shownBytes = 16

// appendString appends s as a JSON string: s itself when it is plain (see
// plain), with its quotes and backslashes escaped, else its printable
// form: "hex:" and the hex of its first shownBytes bytes, and "..." when
// it has more.
func appendString(b []byte, s string) []byte {
	if !plain(s) {
		b = appendHex(append(b, `"hex:`...), s[:min(len(s), shownBytes)])
		if len(s) > shownBytes {
			b = append(b, "..."...)
		}
		return append(b, '"')
	}
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', c)
			start = i + 1
		}
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendHex appends s's bytes in hex.
func appendHex(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		b = append(b, hexDigits[s[i]>>4], hexDigits[s[i]&0xf])
	}
	return b
}
