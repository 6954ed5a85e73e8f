package backend

import (
	"context"
	"errors"
)

// An OverrideStore keeps operators' runtime overrides where every replica
// of the daemon sees them: an optional capability of a Store (the memory
// store keeps them in the process, the Redis store in Redis, so that they
// outlive the daemons). Records are opaque bytes to the store; the server
// encodes and validates them.
type OverrideStore interface {
	// PutOverride stores rec under id, replacing the record of that id if
	// any. It fails with ErrTooManyOverrides, storing nothing, when the
	// store holds max records already and none under id. It returns the
	// set's version after the change.
	PutOverride(ctx context.Context, id string, rec []byte, max int) (version uint64, err error)
	// DeleteOverride removes id's record; found is false when there was
	// none (and nothing changed). It returns the set's version after it.
	DeleteOverride(ctx context.Context, id string) (found bool, version uint64, err error)
	// Overrides returns every record by id and the set's version. When the
	// version is still since, it returns nil records and since without
	// reading them, so that replicas can poll cheaply. Every change makes
	// a version that no earlier state of the set had.
	Overrides(ctx context.Context, since uint64) (recs map[string][]byte, version uint64, err error)
}

// ErrTooManyOverrides is the error of an OverrideStore that holds as many
// records as it may.
var ErrTooManyOverrides = errors.New("backend: too many overrides")

// A Resetter forgets counters: an optional capability of a Store.
type Resetter interface {
	// Reset makes each request's counter fresh, as if it had never
	// counted: every window, log entry, bucket or lease of it. A request
	// names its counter by Key, Tag and Limit; its other fields are
	// ignored.
	Reset(ctx context.Context, reqs []Request) error
}
