// Package fairshare divides a rate limit among the clients that share it,
// max-min fair by the demand each reports: the allocation that Rate Limit
// Quota Service assignments are made from. Allocate and Tracker do no
// I/O and read no clock: callers pass the time.
//
// [Allocate] is the algorithm, water-filling over the clients' demands plus
// [Headroom]; [Tracker] turns usage reports, per bucket and client, into
// demands and answers each client's share, forgetting clients that stop
// reporting; [Pool] is a Tracker whose limits are shared with the other
// replicas of the service through a backend.ShareStore, with grants that
// never add up past a limit.
//
// Usage:
//
//	t := fairshare.NewTracker(fairshare.Options{TTL: 30 * time.Second})
//	t.Report("domain/key=value", "envoy-1", allowed, denied, now)
//	rate, ok := t.Share("domain/key=value", "envoy-1", 100, now) // of 100 requests per second
package fairshare
