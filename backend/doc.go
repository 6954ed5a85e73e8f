// Package backend is the contract between the decision engine and the
// stores that keep rate-limit counters, and the algorithms that run in
// them.
//
// # The contract
//
// A Store decides a call's Requests (one per limit of each descriptor)
// atomically and all or nothing: admitted hits never exceed a limit at any
// concurrency, and a refused call leaves no lasting consumption (but on
// ConsumeWhenOver requests). Refused and Consumes say which calls are
// refused and which requests consume; Decide is the reference definition
// of a call's decision on its counters' states, which every store must
// reproduce (the conformance suite, backend/backendtest, checks it against
// each store). A request may give hits back instead of taking them (Op
// GiveBack, Envoy's negative hits), or renew a Concurrency limit's lease
// (Op Renew): those apply first in a call, whatever its takes decide, and
// never refuse it. A Store reports a limit's excess in its Results, and
// returns an error only when it could not decide; ErrUnavailable marks a
// store that did not try (an open circuit breaker), ErrClosed one used
// after its Close.
//
// The algorithms (Algorithm, Limit, State) are defined here once, as pure
// functions of a counter's state and a clock, and the stores apply them:
// the memory store in Go, the Redis store in its Lua scripts, checked
// against the Go definition by differential tests.
//
// A ShareStore shares RLQS buckets' limits among replicas (see share.go).
//
// # Optional capabilities
//
// A store may do more than decide. The daemon and the server find these
// by type assertion, through the interfaces below, all of them here:
//
//   - StateReporter: its health, for /readyz and gRPC health.
//   - BreakerReporter: the circuit breaker of each node, for the
//     operators' page.
//   - LocalCacheReporter: its local cache of refusals' hits, misses and
//     size, for envoyproxy/ratelimit's statsd series.
//   - ShareStore: RLQS shares among replicas.
//   - OverrideStore: operators' runtime overrides, seen by every replica.
//   - Resetter: forget a descriptor's counters (an operator's reset).
//   - prometheus.Collector (from prometheus/client_golang): its own
//     metrics, registered by the daemon.
//
// The memory store (backend/memory) implements ShareStore,
// OverrideStore, Resetter and prometheus.Collector; the Redis store
// (backend/redis) implements all of them.
package backend

// A StateReporter is a store that reports its health: "ok", or a word for
// what is wrong ("open" for an open circuit breaker, "unreached" before it
// first answered). /readyz shows it, and reports not ready when it is not
// "ok" and the failure mode needs the store.
type StateReporter interface {
	State() string
}

// A BreakerReporter is a store that reports the circuit breaker of each
// node it calls: its name and its state ("closed", "half-open" or
// "open").
type BreakerReporter interface {
	Breakers(yield func(node, state string))
}

// A LocalCacheReporter is a store with a local cache of refusals. Counts
// are since the store was made: a request answered over its limit from
// the cache is a hit, any other request of a call looked up in the cache a
// miss; entries is how many results the cache holds now.
type LocalCacheReporter interface {
	LocalCacheHits() uint64
	LocalCacheMisses() uint64
	LocalCacheEntries() int64
}
