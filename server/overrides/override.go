package overrides

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/server/internal/engine"
)

// Bounds of one override, on top of the engine's on a request
// descriptor (engine.MaxDomain, engine.MaxEntries, engine.MaxEntryBytes
// for a key): an override past them is refused.
const (
	// MaxValueBytes is the longest entry value, in bytes. (A value over
	// engine.MaxEntryBytes counts by its digest, as a request's does.)
	MaxValueBytes = 4096
	// MaxLimits is the most limits an override has.
	MaxLimits = 16
	// MaxReasonBytes is the longest reason, in bytes.
	MaxReasonBytes = 1024
	// MaxBodyBytes is the largest JSON body the API reads.
	MaxBodyBytes = 64 << 10
)

// An Override replaces the limits of one request descriptor: see the
// package documentation. Its JSON is the API's and what the store keeps.
type Override struct {
	Domain  string  `json:"domain"`
	Entries []Entry `json:"entries"`
	// Limits are written as a rule file's rate_limits items are.
	Limits []Limit `json:"limits"`
	// ExpiresAt, when set, is when the override lapses.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// Reason says why the override was set; it is required.
	Reason string `json:"reason"`

	// Set by the Manager, ignored in what an operator sends: the
	// override's version (1 when first set, one more at each Set of the
	// same descriptor), who set it (the name of the token) and when.
	Version uint64    `json:"version"`
	SetBy   string    `json:"set_by"`
	SetAt   time.Time `json:"set_at"`
	// Unmatched, in a listing: no rule in force matches the override's
	// descriptor, so it applies to nothing (a rule change may make it
	// match). Not stored.
	Unmatched bool `json:"unmatched,omitempty"`
}

// An Entry is one key and value of a descriptor.
type Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// A Limit is one limit of an override, in a rule file's form: a Unit or a
// Window, RequestsPerUnit, and optionally an Algorithm (the daemon's
// default when empty), a Burst and a Name.
type Limit struct {
	RequestsPerUnit uint32 `json:"requests_per_unit"`
	Unit            string `json:"unit,omitempty"`
	Window          string `json:"window,omitempty"`
	Algorithm       string `json:"algorithm,omitempty"`
	Burst           uint32 `json:"burst,omitempty"`
	Name            string `json:"name,omitempty"`
}

// An InvalidError says why an override, or an API request, is refused.
type InvalidError struct{ msg string }

func (e *InvalidError) Error() string { return e.msg }

func invalid(format string, args ...any) error {
	return &InvalidError{msg: fmt.Sprintf(format, args...)}
}

// IsInvalid reports whether err is, or wraps, an *InvalidError.
func IsInvalid(err error) bool {
	_, ok := errors.AsType[*InvalidError](err)
	return ok
}

// checkDescriptor checks domain and entries as the engine checks a
// request descriptor, plus MaxValueBytes and UTF-8 (JSON carries no
// other strings).
func checkDescriptor(domain string, entries []Entry) error {
	if err := engine.CheckRequest(domain, 1); err != nil {
		return invalid("%v", err)
	}
	if !utf8.ValidString(domain) {
		return invalid("domain is not UTF-8")
	}
	if err := engine.CheckEntryCount(0, len(entries)); err != nil {
		return invalid("%v", err)
	}
	for j, e := range entries {
		switch {
		case e.Key == "":
			return invalid("entry %d has an empty key", j)
		case len(e.Key) > engine.MaxEntryBytes:
			return invalid("entry %d: key is %d bytes, over the maximum %d", j, len(e.Key), engine.MaxEntryBytes)
		case !utf8.ValidString(e.Key):
			return invalid("entry %d: key is not UTF-8", j)
		case len(e.Value) > MaxValueBytes:
			return invalid("entry %d: value is %d bytes, over the maximum %d", j, len(e.Value), MaxValueBytes)
		case !utf8.ValidString(e.Value):
			return invalid("entry %d: value is not UTF-8", j)
		}
	}
	return nil
}

// checkChange checks the descriptor and the optional reason of a
// Delete or a Reset.
func checkChange(domain string, entries []Entry, reason string) error {
	if err := checkDescriptor(domain, entries); err != nil {
		return err
	}
	return checkReason(reason)
}

// checkReason checks a reason's length and encoding.
func checkReason(reason string) error {
	switch {
	case len(reason) > MaxReasonBytes:
		return invalid("reason is %d bytes, over the maximum %d", len(reason), MaxReasonBytes)
	case !utf8.ValidString(reason):
		return invalid("reason is not UTF-8")
	}
	return nil
}

// Compile checks o as Set does and returns its limits compiled with
// opts (the daemon's default algorithm): every problem is an
// *InvalidError. now is the time an expiry must be after; the zero time
// checks no expiry.
func (o *Override) Compile(now time.Time, opts ...config.Option) ([]config.RuleLimit, error) {
	if err := checkDescriptor(o.Domain, o.Entries); err != nil {
		return nil, err
	}
	switch {
	case o.Reason == "":
		return nil, invalid("reason is required")
	case checkReason(o.Reason) != nil:
		return nil, checkReason(o.Reason)
	case len(o.Limits) == 0:
		return nil, invalid("limits is empty: an override needs at least one limit")
	case len(o.Limits) > MaxLimits:
		return nil, invalid("%d limits, over the maximum %d", len(o.Limits), MaxLimits)
	case o.ExpiresAt != nil && !now.IsZero() && !o.ExpiresAt.After(now):
		return nil, invalid("expires_at %s is not in the future", o.ExpiresAt.Format(time.RFC3339))
	}
	rls := make([]*config.RateLimit, len(o.Limits))
	for i, l := range o.Limits {
		rls[i] = &config.RateLimit{
			RequestsPerUnit: l.RequestsPerUnit, Unit: l.Unit, Window: l.Window,
			Algorithm: l.Algorithm, Burst: l.Burst, Name: l.Name,
		}
	}
	limits, err := config.CompileLimits(rls, opts...)
	if err != nil {
		return nil, invalid("limits: %v", oneLine(err))
	}
	return limits, nil
}

// oneLine joins the lines of errors.Join's message with "; ".
func oneLine(err error) string {
	return string(bytes.ReplaceAll([]byte(err.Error()), []byte("\n"), []byte("; ")))
}

// Key returns the key of o in the store and the engine's set: see
// engine.OverrideKey.
func (o *Override) Key() string { return key(o.Domain, o.Entries) }

// key returns the key of the override of domain and entries.
func key(domain string, entries []Entry) string {
	es := make([]engine.Entry, len(entries))
	for i, e := range entries {
		es[i] = engine.Entry{Key: e.Key, Value: e.Value}
	}
	return engine.OverrideKey(domain, es)
}

// Decode reads one JSON value of type T from r, as the API takes it: at
// most MaxBodyBytes of UTF-8, no unknown field, nothing after it. Every
// problem is an *InvalidError.
func Decode[T any](r io.Reader) (T, error) {
	v, err := decodeStrict[T](r, MaxBodyBytes)
	if err != nil {
		return v, invalid("body: %v", err)
	}
	return v, nil
}

// decodeStrict reads one JSON value of type T from r, of at most max
// bytes: the bytes must be UTF-8 (encoding/json would turn others into
// U+FFFD, and an override would name other values than the operator's),
// name no field T lacks, and hold nothing after the value. Its errors
// name neither a body nor a file: the callers say which.
func decodeStrict[T any](r io.Reader, max int) (T, error) {
	var v T
	data, err := io.ReadAll(io.LimitReader(r, int64(max)+1))
	switch {
	case err != nil:
		return v, fmt.Errorf("reading: %w", err)
	case len(data) > max:
		return v, fmt.Errorf("over the maximum %d bytes", max)
	case !utf8.Valid(data):
		return v, errors.New("not UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return v, err
	}
	if dec.More() {
		return v, errors.New("more than one JSON value")
	}
	return v, nil
}

// A File is the JSON of GET /v1/overrides: {"overrides": [...]}, which
// check-config and replay read back (ReadFile).
type File struct {
	Overrides []Override `json:"overrides"`
}
