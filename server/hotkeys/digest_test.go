package hotkeys

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestDigest: a digest is keyed: the same value shows alike under one
// key and differently under another, never as its SHA-256, and a value
// counted by its digest apart from a value of the same bytes.
func TestDigest(t *testing.T) {
	a := NewDigester([]byte("0123456789abcdef"))
	b := NewDigester([]byte("0123456789abcdeF"))
	v := Part{Value: "203.0.113.9"}
	sum := sha256.Sum256([]byte(v.Value))
	unkeyed := hex.EncodeToString(sum[:8])
	got := a.Digest(v)
	switch {
	case !strings.HasPrefix(got, DigestPrefix) || len(got) != len(DigestPrefix)+16:
		t.Errorf("Digest = %q, want %s and 16 hex digits", got, DigestPrefix)
	case got != a.Digest(Part{Value: "203.0.113.9"}):
		t.Errorf("Digest is not stable")
	case got == b.Digest(v):
		t.Errorf("two keys give the same digest %s", got)
	case strings.Contains(got, unkeyed):
		t.Errorf("Digest = %s, the unkeyed SHA-256", got)
	case got == a.Digest(Part{Value: v.Value, Digest: true}):
		t.Errorf("a digest part shows as the value of the same bytes")
	}
	if a.Random() || a.KeyID() == b.KeyID() || a.KeyID() != NewDigester([]byte("0123456789abcdef")).KeyID() {
		t.Errorf("random %v, key IDs %s, %s: want a key's ID its own", a.Random(), a.KeyID(), b.KeyID())
	}
	r1, r2 := NewDigester(nil), NewDigester([]byte{})
	if !r1.Random() || !r2.Random() || r1.Digest(v) == r2.Digest(v) || r1.KeyID() == r2.KeyID() {
		t.Errorf("without a key: random %v, %v, digests %s, %s; want random keys of their own", r1.Random(), r2.Random(), r1.Digest(v), r2.Digest(v))
	}
}

// TestMatch: a value matches the part it counts as: itself, or its
// SHA-256 in a digest part (sent as value_sha256, or over the bound).
func TestMatch(t *testing.T) {
	sum := sha256.Sum256([]byte("k-123"))
	for _, c := range []struct {
		p     Part
		value string
		want  bool
	}{
		{Part{Value: "k-123"}, "k-123", true},
		{Part{Value: "k-123"}, "k-124", false},
		{Part{Value: string(sum[:]), Digest: true}, "k-123", true},
		{Part{Value: string(sum[:]), Digest: true}, "k-124", false},
		{Part{Value: "k-123"}, "k-123" + strings.Repeat("x", 8), false},
		{Part{Value: "k-123"}, "k-", false},
	} {
		if got := Match(c.p, c.value, 8); got != c.want {
			t.Errorf("Match(%+v, %q) = %v, want %v", c.p, c.value, got, c.want)
		}
	}
	long := strings.Repeat("x", 9) // over the bound of 8: never a value part
	if Match(Part{Value: long}, long, 8) {
		t.Errorf("a value over the bound matches a value part")
	}
}

// TestReadDigestKey: a key file's bytes, less one line ending; too short,
// too long or missing is an error that names the file.
func TestReadDigestKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name, data, want, err string
	}{
		{"plain", "0123456789abcdef", "0123456789abcdef", ""},
		{"newline", "0123456789abcdef\n", "0123456789abcdef", ""},
		{"crlf", "0123456789abcdef\r\n", "0123456789abcdef", ""},
		{"two-newlines", "0123456789abcdef\n\n", "0123456789abcdef\n", ""},
		{"short", "0123456789abcde\n", "", "is 15 bytes, want at least 16"},
		{"empty", "", "", "is 0 bytes"},
		{"max", strings.Repeat("k", MaxDigestKeyBytes) + "\n", strings.Repeat("k", MaxDigestKeyBytes), ""},
		{"long", strings.Repeat("k", MaxDigestKeyBytes+1), "", "over 4096 bytes"},
		{"huge", strings.Repeat("k", 1<<20), "", "over 4096 bytes"},
	} {
		p := write(c.name, c.data)
		got, err := ReadDigestKey(p)
		switch {
		case c.err == "" && (err != nil || string(got) != c.want):
			t.Errorf("%s: ReadDigestKey = %q, %v; want %q", c.name, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), p)):
			t.Errorf("%s: ReadDigestKey error %v, want one naming %s with %q", c.name, err, p, c.err)
		}
	}
	if _, err := ReadDigestKey(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("a missing file: %v", err)
	}
}

// TestDigestConcurrent: digests made at once, by goroutines sharing the
// Digester's hashes, are those made one by one.
func TestDigestConcurrent(t *testing.T) {
	d := NewDigester(nil)
	want := make([]string, 64)
	for i := range want {
		want[i] = d.Digest(Part{Value: fmt.Sprint("10.0.0.", i)})
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 10 {
				for i, w := range want {
					if got := d.Digest(Part{Value: fmt.Sprint("10.0.0.", i)}); got != w {
						t.Errorf("Digest(10.0.0.%d) = %s at once, %s alone", i, got, w)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkDigest measures one value's digest, as GET /hotkeys makes one
// per value shown.
func BenchmarkDigest(b *testing.B) {
	d := NewDigester(nil)
	p := Part{Value: "203.0.113.9"}
	b.ReportAllocs()
	for b.Loop() {
		d.Digest(p)
	}
}
