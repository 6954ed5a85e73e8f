package main

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/internal/tlsconfig"
)

// openTLS loads the listeners' certificates, nil for a listener without
// TLS, and exports their expiry and reloads as metrics labelled by
// listener.
func openTLS(f *flags, log *slog.Logger, reg prometheus.Registerer) (grpcTLS, httpTLS *tlsconfig.Reloader, err error) {
	open := func(listener string, o tlsconfig.Options) (*tlsconfig.Reloader, error) {
		if o.CertFile == "" {
			return nil, nil
		}
		o.Logger = log.With("component", "tls", "listener", listener)
		r, err := tlsconfig.New(o)
		if err != nil {
			return nil, err
		}
		registerTLS(reg, listener, r)
		return r, nil
	}
	grpcTLS, err = open("grpc", tlsconfig.Options{
		CertFile:     f.tls.grpcCert,
		KeyFile:      f.tls.grpcKey,
		ClientCAFile: f.tls.grpcClientCA,
		AllowedSANs:  f.tls.grpcAllowedSANs,
	})
	if err != nil {
		return nil, nil, err
	}
	httpTLS, err = open("http", tlsconfig.Options{CertFile: f.tls.httpCert, KeyFile: f.tls.httpKey})
	if err != nil {
		return nil, nil, err
	}
	return grpcTLS, httpTLS, nil
}

func registerTLS(reg prometheus.Registerer, listener string, r *tlsconfig.Reloader) {
	labels := prometheus.Labels{"listener": listener}
	reg.MustRegister(
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
	)
}

// tlsMode names a listener's TLS for the start-up log line.
func tlsMode(tls, mutual bool) string {
	switch {
	case mutual:
		return "mtls"
	case tls:
		return "tls"
	}
	return "off"
}
