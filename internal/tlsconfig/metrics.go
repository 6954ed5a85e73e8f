package tlsconfig

import "github.com/prometheus/client_golang/prometheus"

// Collectors returns the metrics of r, labelled listener=listener: when its
// certificate expires (read at each scrape, after the files are read again
// if a second has passed), and the changed sets of files it took up and
// refused. They are for a prometheus.Registerer; each call returns new
// collectors, to be registered once per listener.
func (r *Reloader) Collectors(listener string) []prometheus.Collector {
	labels := prometheus.Labels{"listener": listener}
	return []prometheus.Collector{&collector{
		r: r,
		expiry: prometheus.NewDesc("ratelimitd_tls_certificate_expiry_timestamp_seconds",
			"When the listener's certificate expires, in seconds since the Unix epoch (the files are re-read first).", nil, labels),
		reloads: prometheus.NewDesc("ratelimitd_tls_reloads_total",
			"Certificate sets the listener took up after they changed on disk.", nil, labels),
		refused: prometheus.NewDesc("ratelimitd_tls_reload_errors_total",
			"Changed certificate sets the listener refused (the previous set stayed).", nil, labels),
	}}
}

// collector reports a Reloader's three series from one read of its state.
// They are one collector, not three functions, because a registry gathers
// collectors concurrently: the counters could otherwise be read before the
// expiry's read of the files took up (or refused) a change, and a scrape
// would show the new certificate beside the old counts.
type collector struct {
	r                        *Reloader
	expiry, reloads, refused *prometheus.Desc
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.expiry
	ch <- c.reloads
	ch <- c.refused
}

// Collect implements prometheus.Collector: the files are read again first
// (if a second has passed), then every series is read.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	notAfter := c.r.NotAfter()
	ch <- prometheus.MustNewConstMetric(c.expiry, prometheus.GaugeValue, float64(notAfter.Unix()))
	ch <- prometheus.MustNewConstMetric(c.reloads, prometheus.CounterValue, float64(c.r.Reloads()))
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(c.r.ReloadErrors()))
}
