package memory

import "github.com/prometheus/client_golang/prometheus"

var (
	keysDesc = prometheus.NewDesc("ratelimitd_memory_keys",
		"Counters the memory store holds.", nil, nil)
	evictionsDesc = prometheus.NewDesc("ratelimitd_memory_evictions_total",
		"Live counters the memory store evicted to stay within its maximum number of keys.", nil, nil)
)

// Describe implements prometheus.Collector: a Store exports its number of
// keys and its evictions.
func (s *Store) Describe(ch chan<- *prometheus.Desc) {
	ch <- keysDesc
	ch <- evictionsDesc
}

// Collect implements prometheus.Collector.
func (s *Store) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(keysDesc, prometheus.GaugeValue, float64(s.Len()))
	ch <- prometheus.MustNewConstMetric(evictionsDesc, prometheus.CounterValue, float64(s.Evictions()))
}
