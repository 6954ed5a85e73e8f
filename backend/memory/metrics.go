package memory

import "github.com/prometheus/client_golang/prometheus"

var (
	keysDesc = prometheus.NewDesc("ratelimitd_memory_keys",
		"Counters the memory store holds.", nil, nil)
	evictionsDesc = prometheus.NewDesc("ratelimitd_memory_evictions_total",
		"Live counters the memory store evicted to stay within its maximum number of keys, from its admission window or its main region.", nil, nil)
	refusingEvictionsDesc = prometheus.NewDesc("ratelimitd_memory_refusing_evictions_total",
		"Evicted counters that were refusing: each let a client over its limit start again from zero.", nil, nil)
	declinedDesc = prometheus.NewDesc("ratelimitd_memory_declined_keys_total",
		"New keys the full memory store did not admit past its admission window, its counters being asked for as often or more: each starts again from zero on its next call.", nil, nil)
)

// Describe implements prometheus.Collector: a Store exports its number of
// keys, its evictions (and of them, those of refusing counters) and the
// new keys it declined (see Store.Declined).
func (s *Store) Describe(ch chan<- *prometheus.Desc) {
	ch <- keysDesc
	ch <- evictionsDesc
	ch <- refusingEvictionsDesc
	ch <- declinedDesc
}

// Collect implements prometheus.Collector.
func (s *Store) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(keysDesc, prometheus.GaugeValue, float64(s.Len()))
	ch <- prometheus.MustNewConstMetric(evictionsDesc, prometheus.CounterValue, float64(s.Evictions()))
	ch <- prometheus.MustNewConstMetric(refusingEvictionsDesc, prometheus.CounterValue, float64(s.RefusingEvictions()))
	ch <- prometheus.MustNewConstMetric(declinedDesc, prometheus.CounterValue, float64(s.Declined()))
}
