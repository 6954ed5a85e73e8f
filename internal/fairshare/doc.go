// Package fairshare divides a rate limit among the clients that share it,
// max-min fair by the demand each reports: the allocation that Rate Limit
// Quota Service assignments are made from. It does no I/O and reads no
// clock: callers pass the time.
//
// [Allocate] is the algorithm, water-filling over the clients' demands plus
// [Headroom]; [Tracker] turns usage reports, per bucket and client, into
// demands and answers each client's share, forgetting clients that stop
// reporting.
//
// Usage:
//
//	t := fairshare.NewTracker(fairshare.Options{TTL: 30 * time.Second})
//	t.Report("domain/key=value", "envoy-1", allowed, denied, now)
//	rate, ok := t.Share("domain/key=value", "envoy-1", 100, now) // of 100 requests per second
package fairshare
