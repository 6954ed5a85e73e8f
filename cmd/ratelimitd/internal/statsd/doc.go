// Package statsd exports ratelimitd's statsd stats exactly as
// envoyproxy/ratelimit does: the same names, the same tag serialization and
// the same line format, so that dashboards and alerts built on the
// reference's statsd output keep working.
//
// The aggregation is github.com/lyft/gostats, the reference's own library:
// counters are latched at each flush and sent as their change since the
// last flush (never when it is zero), gauges are sent with their value at
// every flush, and timers with each value recorded. Tags given in Options
// (the reference's EXTRA_TAGS) and on scopes are serialized by gostats into
// the name, sorted by key: "ratelimit.x.__a=b.__foo=bar:1|c".
//
// LocalCache gives the reference's gauges of a store's local cache.
//
// What is ours is the sink that sends the lines (see sink.go): it writes
// only while the Exporter flushes, on the flushing goroutine, through a
// bounded buffer, and starts no goroutine of its own.
//
// Usage:
//
//	e, err := statsd.New(statsd.Options{Addr: "statsd:8125", FlushInterval: 10 * time.Second})
//	if err != nil { ... }
//	hits := e.Root().Scope("service").NewCounter("total_hits")
//	go e.Run(ctx) // flushes until ctx is done, then once more
//	hits.Inc()
package statsd
