package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// syntaxError reports err, an error of the YAML parser on data.
//
// go.yaml.in/yaml/v3 often names the wrong line: when the parser knows
// the block it was in, it gives the line where that block starts, and
// for the parser's own errors (not the scanner's) counts it from 0. An
// indentation slip at line 6 is then "line 2: did not find expected key".
// So the line at fault is found again, by the parser itself: it is the
// last line of the shortest prefix of data, in whole lines, that fails
// with the same message (see faultLine). The error then names that line,
// its first column, and the block the line sits in, or how its
// indentation differs from its siblings'. When no such line can be
// found, the parser's own place stands.
func (d *decoder) syntaxError(data []byte, err error) {
	var p pos
	var msg string
	p.line, msg = yamlMessage(err)
	lines := splitLines(data)
	if n, ok := faultLine(data, lines, msg); ok {
		indent := indentOf(lines[n-1].text)
		p = pos{line: n, col: indent + 1}
		msg += blockHint(lines, n)
	}
	d.errorf(p, "yaml: %s", msg)
}

// A line is one line of a file: its text, without its line break, and the
// offset just past its break.
type line struct {
	text []byte
	end  int
}

// splitLines splits data into lines where the YAML scanner counts them:
// at CR LF, CR, LF, NEL, LS and PS. A last line without a break ends at
// len(data).
func splitLines(data []byte) []line {
	var lines []line
	start := 0
	for i := 0; i < len(data); {
		n := 0 // the break's length at i
		switch {
		case data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n':
			n = 2
		case data[i] == '\r' || data[i] == '\n':
			n = 1
		case bytes.HasPrefix(data[i:], []byte("\u0085")), bytes.HasPrefix(data[i:], []byte("\u2028")), bytes.HasPrefix(data[i:], []byte("\u2029")):
			_, n = utf8.DecodeRune(data[i:])
		}
		if n == 0 {
			i++
			continue
		}
		lines = append(lines, line{text: data[start:i], end: i + n})
		i += n
		start = i
	}
	if start < len(data) {
		lines = append(lines, line{text: data[start:], end: len(data)})
	}
	return lines
}

// faultLine returns the 1-based number n of the line at fault for the
// parser's message msg on data: the first n lines fail to parse with msg,
// the first n-1 do not. A binary search finds it in about log2(lines)
// parses; ok is false when no such line can be looked for (an input the
// parser does not read as text, or whose whole fails otherwise). (The
// search keeps fails(hi) and, for lo > 1, not fails(lo-1): where it stops,
// line lo fails and the line before does not.)
func faultLine(data []byte, lines []line, msg string) (n int, ok bool) {
	if len(lines) == 0 || bytes.IndexByte(data, 0) >= 0 { // NULs: UTF-16, or binary
		return 0, false
	}
	fails := func(n int) bool { return n > 0 && parseFailure(data[:lines[n-1].end]) == msg }
	if !fails(len(lines)) {
		return 0, false
	}
	lo, hi := 1, len(lines) // fails(hi); the answer is in [lo, hi]
	for lo < hi {
		mid := lo + (hi-lo)/2
		if fails(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, true
}

// parseFailure returns the message, without its "yaml: " and "line N: ",
// of the first error of parsing every document of data, "" if none.
func parseFailure(data []byte) string {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node // aliases are not expanded: no alias bomb goes off
		err := dec.Decode(&doc)
		switch {
		case errors.Is(err, io.EOF):
			return ""
		case err != nil:
			_, msg := yamlMessage(err)
			return msg
		}
	}
}

// yamlMessage splits an error of the YAML parser into the line it names
// (0 for none) and its message, without "yaml: " and "line N: ".
func yamlMessage(err error) (line int, msg string) {
	msg = strings.TrimPrefix(err.Error(), "yaml: ")
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = msg[len(m[0]):]
	}
	return line, msg
}

// indentOf returns how many spaces start text.
func indentOf(text []byte) int {
	return len(text) - len(bytes.TrimLeft(text, " "))
}

// content reports whether text is more than blanks and a comment.
func content(text []byte) bool {
	t := bytes.TrimLeft(text, " \t")
	return len(t) > 0 && t[0] != '#'
}

// blockHint says where line n (1-based) of lines sits: in the block
// opened by the nearest line above it indented less, and, when the lines
// of that block above n are indented otherwise than n, by how much each
// is. It returns "" for a line at the top level.
func blockHint(lines []line, n int) string {
	indent := indentOf(lines[n-1].text)
	parent := -1 // 0-based
	for i := n - 2; i >= 0; i-- {
		if content(lines[i].text) && indentOf(lines[i].text) < indent {
			parent = i
			break
		}
	}
	if parent < 0 {
		return ""
	}
	siblings := -1 // the least indentation of the block's lines between parent and n
	for i := parent + 1; i < n-1; i++ {
		if t := lines[i].text; content(t) && (siblings < 0 || indentOf(t) < siblings) {
			siblings = indentOf(t)
		}
	}
	if siblings < 0 {
		siblings = itemIndent(lines[parent].text) // "- key: a": its mapping's entries line up with key
	}
	where := fmt.Sprintf("%s (line %d)", quoteLine(lines[parent].text), parent+1)
	if siblings > 0 && siblings != indent {
		return fmt.Sprintf(": line %d is indented by %d, the entries of %s by %d", n, indent, where, siblings)
	}
	return ", in " + where
}

// itemIndent returns the column, from 0, of the content of a sequence
// item with content on its line ("  - key: a": 4), or -1.
func itemIndent(text []byte) int {
	i := indentOf(text)
	rest := text[i:]
	if len(rest) < 2 || rest[0] != '-' || rest[1] != ' ' {
		return -1
	}
	after := bytes.TrimLeft(rest[1:], " ")
	if !content(after) {
		return -1
	}
	return len(text) - len(after)
}

// quoteLine returns text, without its indentation, quoted, and cut short
// past 40 bytes.
func quoteLine(text []byte) string {
	t := string(bytes.TrimSpace(text))
	if len(t) > 40 {
		t = strings.ToValidUTF8(t[:40], "") + "…"
	}
	return strconv.Quote(t)
}
