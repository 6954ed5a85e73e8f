package server

import (
	"errors"
	"fmt"
	"time"
)

// A request is one decision to make, as the engine sees it whichever API
// carried it: the faces (Envoy's RLS over gRPC and /json, the native API)
// decode their messages into a request, and the engine neither knows nor
// cares which one did. Keys and values are any bytes: Go strings hold
// bytes, and the engine never assumes they are UTF-8.
//
// A request lives in a pooled scratch; its strings may point into the
// message it was decoded from, which outlives the decision.
type request struct {
	domain  string
	descs   []descriptor
	entries []entry // every descriptor's entries, back to back
}

// A descriptor is one request descriptor.
type descriptor struct {
	entries [2]int // its entries, request.entries[entries[0]:entries[1]]
	hits    uint64 // resolved by the face: 0 checks without consuming
	// limit is the request's own limit for this descriptor when hasLimit:
	// it replaces the configured ones, in a known domain only.
	limit    override
	hasLimit bool
}

// An override is a limit a request gives for one of its descriptors,
// before the engine applies the matched rule's algorithm (see
// overrideLimit).
type override struct {
	requests uint64
	window   time.Duration
}

// An entry is one key and value of a request descriptor.
type entry struct {
	key, value string
	// digest means value is the SHA-256 of a value over maxEntryBytes,
	// sent in its place (the native API's value_sha256).
	digest bool
}

// GetKey implements config.Entry.
func (e entry) GetKey() string { return e.key }

// GetValue implements config.Entry. A digest stands for a value the
// server never saw, so it matches only the rules that match any value:
// for config.Match it is "", which no exact rule holds (an empty value
// is a key-only rule) and only wildcards made of '*' alone match.
func (e entry) GetValue() string {
	if e.digest {
		return ""
	}
	return e.value
}

// reset empties r, keeping its memory.
func (r *request) reset() {
	clear(r.entries) // drop references to the decoded message
	*r = request{descs: r.descs[:0], entries: r.entries[:0]}
}

// add appends a descriptor of the entries added since from.
func (r *request) add(from int, hits uint64) *descriptor {
	r.descs = append(r.descs, descriptor{entries: [2]int{from, len(r.entries)}, hits: hits})
	return &r.descs[len(r.descs)-1]
}

// entriesOf returns d's entries.
func (r *request) entriesOf(d *descriptor) []entry { return r.entries[d.entries[0]:d.entries[1]] }

// The engine's errors; each face maps them to its own codes.
var (
	// errStoreUnavailable: the counter store could not decide, and the
	// failure mode says to fail with an error. Callers learn nothing more:
	// the store's error, which may name internal addresses, is logged.
	errStoreUnavailable = errors.New("counter store unavailable")
	// errShuttingDown: the store is closed.
	errShuttingDown = errors.New("shutting down")
)

// An invalidError is a request the engine refuses to decide, whatever its
// rules: gRPC's InvalidArgument, HTTP's 400.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }

// invalid returns an *invalidError.
func invalid(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}
