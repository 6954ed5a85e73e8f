package redis

import "github.com/prometheus/client_golang/prometheus"

var (
	breakerDesc = prometheus.NewDesc("ratelimitd_backend_breaker_state",
		"State of each Redis node's circuit breaker: 1 for the state it is in (closed, half-open or open), 0 for the others.",
		[]string{"node", "state"}, nil)
	cacheHitsDesc = prometheus.NewDesc("ratelimitd_local_cache_hits_total",
		"Calls the local over-limit cache refused without asking Redis.", nil, nil)
	cacheSizeDesc = prometheus.NewDesc("ratelimitd_local_cache_entries",
		"Refusals the local over-limit cache remembers.", nil, nil)
	refundsDesc = prometheus.NewDesc("ratelimitd_backend_refunds_total",
		"Redis Cluster calls that gave back the hits an admitted slot took because another slot refused.", nil, nil)
	refundFailuresDesc = prometheus.NewDesc("ratelimitd_backend_refund_failures_total",
		"Redis Cluster refunds that failed: a refused call's hits on one slot that stay counted.", nil, nil)
)

// breakerStates are the values of the state label.
var breakerStates = [...]string{"closed", "half-open", "open"}

// Describe implements prometheus.Collector: a Store exports its breakers'
// states, its local cache's hits and size, and its Cluster refunds and their
// failures.
func (s *Store) Describe(ch chan<- *prometheus.Desc) {
	ch <- breakerDesc
	ch <- cacheHitsDesc
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
	var size int64
	if s.cache != nil {
		size = s.cache.size.Load()
	}
	ch <- prometheus.MustNewConstMetric(cacheHitsDesc, prometheus.CounterValue, float64(s.LocalCacheHits()))
	ch <- prometheus.MustNewConstMetric(cacheSizeDesc, prometheus.GaugeValue, float64(size))
	ch <- prometheus.MustNewConstMetric(refundsDesc, prometheus.CounterValue, float64(s.Refunds()))
	ch <- prometheus.MustNewConstMetric(refundFailuresDesc, prometheus.CounterValue, float64(s.RefundFailures()))
}
