package tlsconfig

import "github.com/prometheus/client_golang/prometheus"

// Collectors returns the metrics of r, labelled listener=listener: when its
// certificate expires (read at each scrape, after the files are read again
// if a second has passed), and the changed sets of files it took up and
// refused. They are for a prometheus.Registerer; each call returns new
// collectors, to be registered once per listener.
func (r *Reloader) Collectors(listener string) []prometheus.Collector {
	labels := prometheus.Labels{"listener": listener}
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "ratelimitd_tls_certificate_expiry_timestamp_seconds",
			Help:        "When the listener's certificate expires, in seconds since the Unix epoch (the files are re-read first).",
			ConstLabels: labels,
		}, func() float64 { return float64(r.NotAfter().Unix()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "ratelimitd_tls_reloads_total",
			Help:        "Certificate sets the listener took up after they changed on disk.",
			ConstLabels: labels,
		}, func() float64 { return float64(r.Reloads()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "ratelimitd_tls_reload_errors_total",
			Help:        "Changed certificate sets the listener refused (the previous set stayed).",
			ConstLabels: labels,
		}, func() float64 { return float64(r.ReloadErrors()) }),
	}
}
