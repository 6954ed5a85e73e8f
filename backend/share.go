package backend

import (
	"context"
	"time"
)

// A ShareStore lets the replicas of the Rate Limit Quota Service divide
// each bucket's limit among all the clients that report on it, whichever
// replica they report to. Each replica holds, per bucket, one entry in the
// store: the rate it has been granted for its own clients, and the demands
// of those clients, in requests per second. The memory store serves one
// replica (its entries live in the process); Redis serves many.
//
// Implementations must be safe for concurrent use, and must grant each
// request atomically: the grants in force on a bucket never add up to more
// than its limit, however many replicas exchange at once.
type ShareStore interface {
	// ExchangeShares publishes each request's entry and writes one
	// ShareResult per ShareRequest into res (len(res) == len(reqs)). For
	// each bucket, atomically: the other replicas' entries past their time
	// to live are dropped; the request is granted
	// min(Want, max(0, Limit - the sum of the other entries' grants));
	// its entry (the grant, its Demands, its expiry) replaces the one it
	// had; and the other entries' demands are returned. Requests on one
	// bucket within a call are applied in order.
	//
	// A non-nil error means the store could not exchange (unreachable,
	// timed out, closed, the caller's context ended, or len(res) !=
	// len(reqs)): res is then undefined, and the replica should keep to
	// the grants it holds until they expire. The call may nonetheless
	// have been applied, in whole or in part: a shared store may have
	// written some or all of its entries before it failed (a Redis that
	// answers after the store's timeout, one Cluster node of several
	// failing).
	//
	// A request that changes its replica's entry (adds or removes it,
	// changes its grant or demands, or makes it expire sooner) notifies
	// the other replicas with an entry in force on the bucket: see
	// WatchShares.
	ExchangeShares(ctx context.Context, reqs []ShareRequest, res []ShareResult) error

	// WatchShares calls changed with a bucket's name when another
	// replica's exchange changed its entry on a bucket on which replica
	// holds an entry in force, so that replica may exchange that bucket
	// again to learn what changed, rather than exchange every bucket it
	// holds to find out; and with "" whenever notifications may have been
	// missed (once watching starts, and after the store was out of reach):
	// any bucket may then have changed. It returns when ctx ends (with
	// nil), or, with an error, when the store cannot notify at all.
	//
	// Notifications are best effort: they may come late or twice, and
	// some may be lost (a connection to the store dropped while one was
	// sent); a replica must still exchange its entries before they
	// expire. changed is called from one goroutine at a time and must not
	// block: it should only note the bucket.
	WatchShares(ctx context.Context, replica string, changed func(bucket string)) error
}

// A ShareRequest is one replica's entry on one bucket.
type ShareRequest struct {
	// Bucket names the bucket; a store may hash it but must not confuse
	// two buckets. Redis Cluster keeps each bucket on the node of its slot.
	Bucket string
	// Replica names the replica; it must be unique among the replicas
	// sharing the store.
	Replica string
	// Limit is the bucket's limit, in requests per second.
	Limit float64
	// Want is the rate the replica asks for its clients (at most Limit).
	Want float64
	// Demands are the replica's clients' demands, in requests per second;
	// +Inf stands for a client whose demand is not known yet. The store
	// keeps the slice's values, not the slice.
	Demands []float64
	// TTL is how long the entry stands: as long as the assignments made
	// from its grant may be in force at the clients. A zero (or
	// negative) TTL removes the replica's entry (it holds no client on
	// the bucket any more) and grants nothing; the others' demands are
	// still returned. An entry stands while the store's clock reads
	// before its expiry, the exchange's time plus TTL.
	TTL time.Duration
}

// A ShareResult is a store's answer to one ShareRequest.
type ShareResult struct {
	// Granted is the rate granted to the replica, from 0 to Want.
	Granted float64
	// Others holds the demands of the other replicas' clients whose
	// entries are in force, in no particular order. It is appended to
	// the slice passed in res, so that a caller may reuse it.
	Others []float64
	// OthersExpire is how long, from the exchange, until the first of the
	// other replicas' entries in force expires (on the store's clock),
	// zero when there is none: the replica may then ask for more, with no
	// one to tell it (the other replica may be gone).
	OthersExpire time.Duration
}
