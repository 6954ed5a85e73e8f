package admin

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"
)

// Bounds of the token file (--admin-token-file).
const (
	// MaxTokenFileBytes is the largest token file read.
	MaxTokenFileBytes = 1 << 20
	// MaxTokens is the most tokens a file holds.
	MaxTokens = 10_000
	// MinTokenBytes is the shortest token accepted: a short one could
	// be guessed.
	MinTokenBytes = 16
)

// TokenFlag names the flag of the token file in messages.
const TokenFlag = "--admin-token-file"

// Tokens are the bearer tokens that the operators' write endpoints (the
// overrides API) take, read from a file: one token per line, or
// name:token to name it in the audit log (else it is named "line N");
// blank lines and lines starting with '#' are skipped. Watch reloads the
// file when it changes. A nil *Tokens holds no token: reading is open,
// writing refused (see Authorize).
//
// Tokens is safe for concurrent use by multiple goroutines.
type Tokens struct {
	path     string
	set      atomic.Pointer[[]token]
	loaded   [sha256.Size]byte // the digest of the file in force; Watch's alone after LoadTokens
	log      *slog.Logger
	failures *prometheus.CounterVec
}

// A token is one token of the file: its name and its SHA-256, which a
// candidate's is compared to in constant time (comparing digests keeps
// the tokens' lengths from showing either).
type token struct {
	name string
	sum  [sha256.Size]byte
}

// LoadTokens reads the token file at path; reg, when not nil, receives
// ratelimitd_admin_auth_failures_total.
func LoadTokens(path string, reg prometheus.Registerer, log *slog.Logger) (*Tokens, error) {
	t := &Tokens{path: path, log: log}
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	t.failures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimitd_admin_auth_failures_total",
		Help: "Requests to the operators' authenticated endpoints refused, by reason: missing (no bearer token), wrong, no_tokens (no --admin-token-file).",
	}, []string{"reason"})
	for _, r := range []string{authMissing, authWrong, authNoTokens} {
		t.failures.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(t.failures)
	}
	if path == "" {
		return t, nil
	}
	if _, err := t.reload(); err != nil {
		return nil, err
	}
	return t, nil
}

// reload reads the file and, when it changed since the last load, puts
// its tokens in force; changed says whether it did.
func (t *Tokens) reload() (changed bool, err error) {
	data, err := readTokenFile(t.path)
	if err != nil {
		return false, fmt.Errorf("%s: %w", TokenFlag, err)
	}
	sum := sha256.Sum256(data)
	if sum == t.loaded && t.set.Load() != nil {
		return false, nil
	}
	set, err := parseTokens(t.path, data)
	if err != nil {
		return false, fmt.Errorf("%s: %w", TokenFlag, err)
	}
	t.set.Store(&set)
	t.loaded = sum
	return true, nil
}

// readTokenFile reads a token file, at most MaxTokenFileBytes+1 bytes.
func readTokenFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, MaxTokenFileBytes+1))
}

// parseTokens parses the token file named path.
func parseTokens(path string, data []byte) ([]token, error) {
	var set []token
	err := eachToken(path, data, func(name, tok string) bool {
		set = append(set, token{name: name, sum: sha256.Sum256([]byte(tok))})
		return true
	})
	return set, err
}

// eachToken checks the token file named path, whose content is data
// (its errors name the file, not the flag),
// and calls yield with each token and its name, in file order, until
// yield returns false. A file over the bounds, with a bad line, or
// with no token is an error.
func eachToken(path string, data []byte, yield func(name, tok string) bool) error {
	if len(data) > MaxTokenFileBytes {
		return fmt.Errorf("%s is over the maximum %d bytes", path, MaxTokenFileBytes)
	}
	count := 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, MaxTokenFileBytes)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, tok, named := strings.Cut(line, ":")
		name, tok = strings.TrimSpace(name), strings.TrimSpace(tok) // "name: token" too, as Authorize trims
		if !named {
			name, tok = "line "+strconv.Itoa(n), line
		}
		switch {
		case named && name == "":
			return fmt.Errorf("%s:%d: the token's name before ':' is empty", path, n)
		case len(tok) < MinTokenBytes:
			return fmt.Errorf("%s:%d: the token is %d bytes, under the minimum %d", path, n, len(tok), MinTokenBytes)
		case count == MaxTokens:
			return fmt.Errorf("%s holds over the maximum %d tokens", path, MaxTokens)
		}
		count++
		if !yield(name, tok) {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if count == 0 {
		return fmt.Errorf("%s holds no token", path)
	}
	return nil
}

// FirstToken returns the first token of the token file at path, its
// lines read and checked up to it as LoadTokens reads them: what a
// client of the overrides API (ratelimitd overrides --token-file) sends.
func FirstToken(path string) (string, error) {
	data, err := readTokenFile(path)
	if err != nil {
		return "", err
	}
	var first string
	err = eachToken(path, data, func(_, tok string) bool {
		first = tok
		return false
	})
	return first, err
}

// Reasons of ratelimitd_admin_auth_failures_total.
const (
	authMissing  = "missing"
	authWrong    = "wrong"
	authNoTokens = "no_tokens"
)

// The errors of Authorize.
var (
	// ErrNoTokens: no token file, so that nothing may write.
	ErrNoTokens = errors.New("this server has no " + TokenFlag + ": the overrides API is read-only")
	// ErrUnauthorized: the request has no bearer token, or a wrong one.
	ErrUnauthorized = errors.New("a valid Authorization: Bearer token is required")
)

// Authorize checks authorization, the value of a request's
// Authorization header (or gRPC metadata), for a request that writes
// (write) or reads. It returns the token's name, or ErrNoTokens for a
// write without a token file, or ErrUnauthorized for a missing or wrong
// token; with no token file, reads need none (and are by "anonymous").
func (t *Tokens) Authorize(authorization string, write bool) (string, error) {
	var set []token
	if t != nil {
		if p := t.set.Load(); p != nil {
			set = *p
		}
	}
	if len(set) == 0 {
		if write {
			t.fail(authNoTokens)
			return "", ErrNoTokens
		}
		return "anonymous", nil
	}
	scheme, given, ok := strings.Cut(authorization, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(given) == "" {
		t.fail(authMissing)
		return "", ErrUnauthorized
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(given)))
	name, found := "", 0
	for _, tok := range set { // every token, found or not: no early exit
		eq := subtle.ConstantTimeCompare(sum[:], tok.sum[:])
		if eq == 1 && found == 0 {
			name = tok.name
		}
		found |= eq
	}
	if found == 0 {
		t.fail(authWrong)
		return "", ErrUnauthorized
	}
	return name, nil
}

func (t *Tokens) fail(reason string) {
	if t != nil && t.failures != nil {
		t.failures.WithLabelValues(reason).Inc()
	}
}

// Watch reloads the token file whenever its directory changes (an edit,
// an atomic rename, a Kubernetes Secret's symlink swap), and every poll
// in case no event comes, until ctx is done; it returns nil then. A file
// that cannot be read or holds no valid token is logged, and the tokens
// in force stay. Without a file it returns at once.
func (t *Tokens) Watch(ctx context.Context, poll time.Duration) error {
	if t == nil || t.path == "" {
		return nil
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("%s: watch: %w", TokenFlag, err)
	}
	defer fw.Close()
	if err := fw.Add(filepath.Dir(t.path)); err != nil {
		t.log.Warn("cannot watch the token file's directory; polling it", "path", t.path, "err", err)
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	var lastErr string // the last failed load's, logged once
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-fw.Events:
		case err := <-fw.Errors:
			t.log.Warn("token file watch", "err", err)
		case <-tick.C:
		}
		// A change since the load in force is what counts: comparing with
		// the file as this loop first read it would miss a change made
		// between the load and the watch.
		changed, err := t.reload()
		switch {
		case err != nil && err.Error() != lastErr:
			lastErr = err.Error()
			t.log.Error("cannot reload the token file; keeping the tokens in force", "err", err)
		case changed:
			lastErr = ""
			t.log.Info("token file reloaded", "path", t.path, "tokens", len(*t.set.Load()))
		}
	}
}
