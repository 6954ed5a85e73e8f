package redis

import "github.com/prometheus/client_golang/prometheus"

var (
	breakerDesc = prometheus.NewDesc("ratelimitd_backend_breaker_state",
		"State of each Redis node's circuit breaker (the per-second Redis's nodes named per-second/...): 1 for the state it is in (closed, half-open or open), 0 for the others.",
		[]string{"node", "state"}, nil)
	cacheHitsDesc = prometheus.NewDesc("ratelimitd_local_cache_hits_total",
		"Requests (one limit of one descriptor) the local over-limit cache answered over their limit without asking Redis.", nil, nil)
	cacheMissesDesc = prometheus.NewDesc("ratelimitd_local_cache_misses_total",
		"Requests the local over-limit cache did not answer over their limit: those of calls that went to Redis, and those within their limit in a refusal the cache answered.", nil, nil)
	cacheSizeDesc = prometheus.NewDesc("ratelimitd_local_cache_entries",
		"Counters' results the local over-limit cache remembers.", nil, nil)
	refundsDesc = prometheus.NewDesc("ratelimitd_backend_refunds_total",
		"Calls that gave back the hits an admitted part (a Redis Cluster slot, or one of the main and per-second Redis) took because another part refused.", nil, nil)
	refundFailuresDesc = prometheus.NewDesc("ratelimitd_backend_refund_failures_total",
		"Refunds that failed: a refused call's hits on one part (a Redis Cluster slot, or one of the main and per-second Redis) that stay counted.", nil, nil)
)

// breakerStates are the values of the state label.
var breakerStates = [...]string{"closed", "half-open", "open"}

// Describe implements prometheus.Collector: a Store exports its breakers'
// states (its PerSecond store's too), its local cache's hits, misses and
// size, and its refunds and their failures (its PerSecond store's
// included).
func (s *Store) Describe(ch chan<- *prometheus.Desc) {
	ch <- breakerDesc
	ch <- cacheHitsDesc
	ch <- cacheMissesDesc
	ch <- cacheSizeDesc
	ch <- refundsDesc
	ch <- refundFailuresDesc
}

// Collect implements prometheus.Collector.
func (s *Store) Collect(ch chan<- prometheus.Metric) {
	s.Breakers(func(node, state string) {
		for _, st := range breakerStates {
			v := 0.0
			if st == state {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(breakerDesc, prometheus.GaugeValue, v, node, st)
		}
	})
	ch <- prometheus.MustNewConstMetric(cacheHitsDesc, prometheus.CounterValue, float64(s.LocalCacheHits()))
	ch <- prometheus.MustNewConstMetric(cacheMissesDesc, prometheus.CounterValue, float64(s.LocalCacheMisses()))
	ch <- prometheus.MustNewConstMetric(cacheSizeDesc, prometheus.GaugeValue, float64(s.LocalCacheEntries()))
	ch <- prometheus.MustNewConstMetric(refundsDesc, prometheus.CounterValue, float64(s.Refunds()))
	ch <- prometheus.MustNewConstMetric(refundFailuresDesc, prometheus.CounterValue, float64(s.RefundFailures()))
}
