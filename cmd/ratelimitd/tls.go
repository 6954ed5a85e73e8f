package main

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/internal/tlsconfig"
)

// openTLS loads the listeners' certificates, nil for a listener without
// TLS, and registers their metrics (see tlsconfig.Reloader.Collectors)
// labelled by listener. The admin listener serves the HTTP listener's
// certificate: adminTLS is nil but with --admin-tls-client-ca, when it
// is the same certificate requiring the operators' client certificates.
func openTLS(f *flags, log *slog.Logger, reg prometheus.Registerer) (grpcTLS, httpTLS, adminTLS *tlsconfig.Reloader, err error) {
	open := func(listener string, o tlsconfig.Options) (*tlsconfig.Reloader, error) {
		if o.CertFile == "" {
			return nil, nil
		}
		o.Logger = log.With("component", "tls", "listener", listener)
		r, err := tlsconfig.New(o)
		if err != nil {
			return nil, err
		}
		reg.MustRegister(r.Collectors(listener)...)
		return r, nil
	}
	grpcTLS, err = open("grpc", tlsconfig.Options{
		CertFile:     f.tls.grpcCert,
		KeyFile:      f.tls.grpcKey,
		ClientCAFile: f.tls.grpcClientCA,
		AllowedSANs:  f.tls.grpcAllowedSANs,
	})
	if err != nil {
		return nil, nil, nil, err
	}
	httpTLS, err = open("http", tlsconfig.Options{CertFile: f.tls.httpCert, KeyFile: f.tls.httpKey})
	if err != nil {
		return nil, nil, nil, err
	}
	if f.tls.adminClientCA != "" {
		adminTLS, err = open("admin", tlsconfig.Options{CertFile: f.tls.httpCert, KeyFile: f.tls.httpKey, ClientCAFile: f.tls.adminClientCA})
		if err != nil {
			return nil, nil, nil, err
		}
	}
	return grpcTLS, httpTLS, adminTLS, nil
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
