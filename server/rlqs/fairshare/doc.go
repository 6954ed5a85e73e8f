// Package fairshare is the fair-share core of the Rate Limit Quota
// Service (package rlqs, its only user): it divides a rate limit among
// the clients that share it, max-min fair by the demand each reports, and
// across the replicas that share a store. Allocate and Tracker do no I/O
// and read no clock: callers pass the time.
//
// [Allocate] is the algorithm, water-filling over the clients' demands plus
// [Headroom]; [Tracker] turns usage reports, per bucket and client, into
// demands and answers each client's share, forgetting clients that stop
// reporting; [Pool] is the one handle the stream service holds: a Tracker
// whose limits are shared with the other replicas of the service through
// a backend.ShareStore (when it has one), with grants that never add up
// past a limit. The Pool never calls back into its user: the buckets its
// exchanges moved are taken with [Pool.TakeMoved] when [Pool.Moved]
// signals.
//
// Usage:
//
//	t := fairshare.NewTracker(fairshare.Options{TTL: 30 * time.Second})
//	t.Report("domain/key=value", "envoy-1", allowed, denied, now)
//	rate, ok := t.Share("domain/key=value", "envoy-1", 100, now) // of 100 requests per second
package fairshare
