// Package redis is ratelimitd's shared counter store: counters in Redis
// (standalone, Sentinel or Cluster), so that many replicas of ratelimitd
// decide on one set of counters.
//
// Every call runs one Lua script (take.lua, a port of backend.Decide and
// backend.State; script.go holds its protocol) over all of its keys: one
// round trip, decided atomically inside Redis, on Redis's own clock
// (TIME), so replicas with skewed clocks agree. On Redis 7.0 and later the
// script is a function library called with FCALL, before that a script
// run with EVALSHA. On standalone Redis and Sentinel, the calls that
// arrive while a script run is on the wire are decided together by the
// next one (batch.go), but for heavy calls, which run alone. On Redis
// Cluster the keys of one descriptor share a hash tag (Request.Tag); a
// call whose descriptors live in several slots runs one script per slot,
// all in one pipeline, and gives back what the admitted slots took when
// another slot refuses (cluster.go). Give-backs and renews apply in every
// slot's script and are never given back: only takes are refunded.
//
// A Concurrency limit's leases are a sliding log's list with a stamp per
// lease (take.lua); a take's or renew's lease comes back in the script's
// reply (the general path's results carry it; the lean path for window
// takes keeps its smaller replies).
//
// The store is also a backend.ShareStore, through which the replicas of
// the Rate Limit Quota Service divide each bucket's limit: one hash per
// bucket, exchanged by another script (share.lua; see share.go), one
// script run per bucket of a call, all in one pipeline.
//
// Keys carry a layout version (see script.go), so that replicas of a
// release with another layout, sharing one Redis during an upgrade, never
// misread these counters.
//
// Circuit breakers, one per Redis node, count only the store's own
// failures, and the store probes a node whose breaker is open
// (breaker.go). Redis must be MinVersion or later; clients of NewClient
// check it on first contact with each node.
//
// Usage:
//
//	client, err := redis.NewClient("redis://localhost:6379", redis.ClientOptions{})
//	store, err := redis.New(client, redis.Options{})
//	defer store.Close()
//	err = store.Take(ctx, reqs, res)
package redis
