package hotkeys

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"sync"
)

// Bounds of a digest key (see ReadDigestKey).
const (
	// MinDigestKeyBytes is the shortest key a Digester takes: 128 bits.
	MinDigestKeyBytes = 16
	// MaxDigestKeyBytes bounds a key file: what is read of it past this is
	// refused, not hashed.
	MaxDigestKeyBytes = 4096
)

// DigestPrefix starts every digest a Digester returns.
const DigestPrefix = "hmac:"

// A Digester hides request values behind a keyed digest: DigestPrefix
// and the first 8 bytes, in hex, of the value's HMAC-SHA256 under its
// key. Without the key, a digest cannot be reversed by trying every
// value (every IPv4 address is only 2^32 tries of an unkeyed hash); with
// it, the digest of a value one knows can be found (Match).
//
// A Digester is safe for concurrent use. Its zero value is not usable:
// call NewDigester.
type Digester struct {
	key    []byte
	id     string    // KeyID's answer
	random bool      // the key was drawn by NewDigester
	macs   sync.Pool // of HMAC-SHA256 hashes under key: a new one costs its key schedule
}

// NewDigester returns a Digester under key, which should be at least
// MinDigestKeyBytes long (ReadDigestKey checks it); or when key is empty,
// under a random key of 32 bytes drawn now: its digests then differ from
// those of every other process.
func NewDigester(key []byte) *Digester {
	d := &Digester{key: bytes.Clone(key)}
	if len(key) == 0 {
		d.key = make([]byte, 32)
		rand.Read(d.key) // never fails: see crypto/rand.Read
		d.random = true
	}
	m := hmac.New(sha256.New, d.key)
	m.Write([]byte("ratelimitd hot keys digest key id"))
	d.id = hex.EncodeToString(m.Sum(nil)[:4])
	return d
}

// Random reports whether d's key was drawn at random by NewDigester.
func (d *Digester) Random() bool { return d.random }

// KeyID names d's key without telling it: the first 4 bytes, in hex, of
// the HMAC of a fixed text under it. Two processes show the same
// digests for the same values exactly when their key IDs are the same
// (but for a chance of 2^-32).
func (d *Digester) KeyID() string { return d.id }

// Digest returns the digest of p's value: DigestPrefix and 16 hex
// digits. A value counted by its SHA-256 (Part.Digest) is digested apart
// from a value whose bytes are the same, so that the two never show
// alike.
func (d *Digester) Digest(p Part) string {
	tag := byte('v')
	if p.Digest {
		tag = 'd'
	}
	m, _ := d.macs.Get().(hash.Hash)
	if m == nil {
		m = hmac.New(sha256.New, d.key)
	}
	m.Reset()
	m.Write([]byte{tag})
	io.WriteString(m, p.Value)
	var sum [sha256.Size]byte
	digest := DigestPrefix + hex.EncodeToString(m.Sum(sum[:0])[:8])
	d.macs.Put(m)
	return digest
}

// Match reports whether p is the part a request's value counts as:
// value itself, or its SHA-256 when the value was counted by its digest
// (a value over maxValueBytes, or one a client sent as value_sha256).
// maxValueBytes is the engine's bound past which a value counts by its
// digest.
func Match(p Part, value string, maxValueBytes int) bool {
	if !p.Digest {
		return len(value) <= maxValueBytes && p.Value == value
	}
	sum := sha256.Sum256([]byte(value))
	return p.Value == string(sum[:])
}

// ReadDigestKey reads a digest key from the file at path: its bytes, less
// one line ending at the end (so that `echo` and editors may write it),
// at least MinDigestKeyBytes and at most MaxDigestKeyBytes of them.
func ReadDigestKey(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("hotkeys: digest key: %w", err)
	}
	defer f.Close()
	key, err := io.ReadAll(io.LimitReader(f, MaxDigestKeyBytes+2)) // room for a line ending
	if err != nil {
		return nil, fmt.Errorf("hotkeys: digest key %s: %w", path, err)
	}
	key = bytes.TrimSuffix(key, []byte("\n"))
	key = bytes.TrimSuffix(key, []byte("\r"))
	switch {
	case len(key) > MaxDigestKeyBytes:
		return nil, fmt.Errorf("hotkeys: digest key %s is over %d bytes", path, MaxDigestKeyBytes)
	case len(key) < MinDigestKeyBytes:
		return nil, fmt.Errorf("hotkeys: digest key %s is %d bytes, want at least %d (head -c 32 /dev/urandom | base64 > %[1]s makes one)",
			path, len(key), MinDigestKeyBytes)
	}
	return key, nil
}
