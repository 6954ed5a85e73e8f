package admin

import (
	"strings"
	"testing"
)

// FuzzParseTokens: any file content parses or is refused, never panics,
// and every token parsed authorizes under its name.
func FuzzParseTokens(f *testing.F) {
	f.Add([]byte("# ops\nalice:0123456789abcdef0123\n\n0123456789abcdefXYZ\n"))
	f.Add([]byte(":x\nshort\n"))
	f.Add([]byte("a:b:0123456789abcdef\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		set, err := parseTokens("tokens", data)
		if err != nil {
			return
		}
		tokens := &Tokens{}
		tokens.set.Store(&set)
		for line := range strings.Lines(string(data)) {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			name, tok, named := strings.Cut(line, ":")
			name, tok = strings.TrimSpace(name), strings.TrimSpace(tok)
			if !named {
				tok = line
			}
			got, err := tokens.Authorize("Bearer "+tok, true)
			if err != nil || (named && got != name && !duplicate(set, got)) {
				t.Fatalf("token of line %q: Authorize = %q, %v", line, got, err)
			}
		}
	})
}

// duplicate reports whether name's token is also another's: Authorize
// then names the first.
func duplicate(set []token, name string) bool {
	for i, a := range set {
		for _, b := range set[i+1:] {
			if a.sum == b.sum && (a.name == name || b.name == name) {
				return true
			}
		}
	}
	return false
}
