package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
)

// A Request is one decision to make, as the engine sees it whichever API
// carried it: the faces (Envoy's RLS over gRPC and /json, the native API)
// decode their messages into a Request, and the engine neither knows nor
// cares which one did. Keys and values are any bytes: Go strings hold
// bytes, and the engine never assumes they are UTF-8.
//
// A Request lives in a pooled Scratch; its strings may point into the
// message it was decoded from, which outlives the decision.
type Request struct {
	Domain  string
	Descs   []Descriptor
	Entries []Entry // every descriptor's entries, back to back
	Leases  []int64 // every descriptor's lease stamps, back to back
}

// A Descriptor is one request descriptor.
type Descriptor struct {
	Entries [2]int // its entries, Request.Entries[Entries[0]:Entries[1]]
	Hits    uint64 // resolved by the face: 0 checks without consuming
	// Limit is the request's own limit for this descriptor when HasLimit:
	// it replaces the configured ones, in a known domain only.
	Limit    Override
	HasLimit bool
	// Op is what the descriptor does to its counters: backend.Take, the
	// default; backend.GiveBack, which gives Hits back on every limit of
	// its rule (Envoy's is_negative_hits, the native give_back), or, with
	// a lease, frees that lease's slots (Release); backend.Renew, which
	// extends a lease.
	Op backend.Op
	// Lease, when HasLease, is a lease's stamps, Request.Leases[Lease[0]:
	// Lease[1]]: one per concurrency limit of the rule, in the rule's
	// order. A descriptor with a lease touches its concurrency limits
	// only: Release gives back the slots that Acquire took, not the hits
	// it counted on the rule's other limits.
	Lease    [2]int
	HasLease bool
}

// An Override is a limit a request gives for one of its descriptors,
// before the engine applies the matched rule's algorithm (see
// overrideLimit).
type Override struct {
	Requests uint64
	Window   time.Duration
}

// An Entry is one key and value of a request descriptor.
type Entry struct {
	Key, Value string
	// Digest means Value is the SHA-256 of a value over MaxEntryBytes,
	// sent in its place (the native API's value_sha256).
	Digest bool
}

// GetKey implements config.Entry.
func (e Entry) GetKey() string { return e.Key }

// GetValue implements config.Entry. A digest stands for a value the
// server never saw, so it matches only the rules that match any value:
// for config.Match it is "", which no exact rule holds (an empty value
// is a key-only rule) and only wildcards made of '*' alone match.
func (e Entry) GetValue() string {
	if e.Digest {
		return ""
	}
	return e.Value
}

// reset empties r, keeping its memory.
func (r *Request) reset() {
	clear(r.Entries) // drop references to the decoded message
	*r = Request{Descs: r.Descs[:0], Entries: r.Entries[:0], Leases: r.Leases[:0]}
}

// Add appends a descriptor of the entries added since from.
func (r *Request) Add(from int, hits uint64) *Descriptor {
	r.Descs = append(r.Descs, Descriptor{Entries: [2]int{from, len(r.Entries)}, Hits: hits})
	return &r.Descs[len(r.Descs)-1]
}

// LeaseOf returns d's lease stamps.
func (r *Request) LeaseOf(d *Descriptor) []int64 { return r.Leases[d.Lease[0]:d.Lease[1]] }

// EntriesOf returns d's entries.
func (r *Request) EntriesOf(d *Descriptor) []Entry { return r.Entries[d.Entries[0]:d.Entries[1]] }

// The engine's errors; each face maps them to its own codes.
var (
	// ErrStoreUnavailable: the counter store could not decide, and the
	// failure mode says to fail with an error. Callers learn nothing more:
	// the store's error, which may name internal addresses, is logged.
	ErrStoreUnavailable = errors.New("counter store unavailable")
	// ErrShuttingDown: the store is closed.
	ErrShuttingDown = errors.New("shutting down")
)

// An InvalidError is a request the engine refuses to decide, whatever its
// rules: gRPC's InvalidArgument, HTTP's 400.
type InvalidError struct{ msg string }

func (e *InvalidError) Error() string { return e.msg }

// Invalid returns an *InvalidError.
func Invalid(format string, args ...any) error {
	return &InvalidError{msg: fmt.Sprintf(format, args...)}
}

// IsInvalid reports whether err is a request the engine refused to
// decide, whatever its rules (an *InvalidError).
func IsInvalid(err error) bool {
	// errors.AsType, not errors.As: As's target would be moved to the heap
	// on every call, and every decision passes through here.
	_, ok := errors.AsType[*InvalidError](err)
	return ok
}
