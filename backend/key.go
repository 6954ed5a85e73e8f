package backend

import (
	"strconv"
	"time"
)

// Counter keys identify a counter by the request's domain, every entry's key
// and value, the algorithm and the window, so that changing a limit's count
// keeps its counter and changing its window or algorithm starts a fresh one.
//
// Each part is length-prefixed ("6:domain3:key5:value"), so no choice of
// values makes two different descriptors share a key, whatever bytes they
// hold; the suffix "|algorithm|window in µs" follows the parts. A value
// counted by its digest is a part of its own form ("32#" and the digest's
// bytes, see AppendKeyDigest), which no value's part can spell.
//
// Usage:
//
//	b = backend.AppendKeyPart(b, domain)
//	for _, e := range entries {
//		b = backend.AppendKeyPart(b, e.Key)
//		b = backend.AppendKeyPart(b, e.Value)
//	}
//	b = backend.AppendKeySuffix(b, limit)

// AppendKeyPart appends s, length-prefixed, to the counter key b.
func AppendKeyPart(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}

// AppendKeyDigest appends sum, the digest that stands for a value (such
// as the SHA-256 of a long one), to the counter key b. Its length prefix
// ends in '#' where AppendKeyPart's ends in ':', so a digest never shares
// a key with a value, whatever bytes the value holds.
func AppendKeyDigest[S ~string | ~[]byte](b []byte, sum S) []byte {
	b = strconv.AppendInt(b, int64(len(sum)), 10)
	b = append(b, '#')
	return append(b, sum...)
}

// AppendKeySuffix ends the counter key b with l's algorithm and window.
func AppendKeySuffix(b []byte, l Limit) []byte {
	b = append(b, '|')
	b = append(b, l.Algorithm.String()...)
	b = append(b, '|')
	return strconv.AppendInt(b, int64(l.Window/time.Microsecond), 10)
}
