// Package tlsconfig serves TLS, optionally mutual TLS, from PEM files that
// it reads again when they change, so certificates are rotated without a
// restart.
//
// A [Reloader] reads a server certificate, its key and optionally a client
// CA file. Its [Reloader.Config] goes to credentials.NewTLS for a gRPC
// server, or to http.Server.TLSConfig; it requires TLS 1.2 or later and
// offers the ALPN protocols h2 and http/1.1.
//
// # Reloading
//
// There is no goroutine and no file watch: during a handshake, at most once
// per second, the Reloader reads the three files and compares them with the
// ones it read last. It therefore follows in-place edits, atomic renames and
// the "..data" symlink swaps with which Kubernetes updates mounted Secrets
// and ConfigMaps. When the files changed, it builds a new configuration from
// them; if they are unusable (not PEM, a truncated PEM block, a key that does
// not match the certificate, a client CA file without certificates), it keeps
// serving the previous ones, logs the error and counts it in
// [Reloader.ReloadErrors], and tries again only once the files change again.
// A file caught half-written is rejected the same way and taken when
// complete. New handshakes get the new certificate and client CAs;
// established connections keep theirs.
//
// # Allowed SANs
//
// With a client CA file, Options.AllowedSANs may list subject alternative
// names; a client's verified certificate must then carry at least one of
// them. Entries are plain strings whose kind follows from their syntax,
// tried in this order:
//
//   - containing "://": a URI, compared exactly with the certificate's URI
//     SANs, e.g. spiffe://cluster.local/ns/a/sa/envoy;
//   - an IP address: an IP SAN, v4 or v6, e.g. 10.0.0.1 or fd00::1;
//   - containing "@": an email SAN, exact except that the domain after "@"
//     ignores case, e.g. ops@example.com;
//   - anything else: a DNS SAN, ignoring case and a trailing dot. A leading
//     "*." label matches exactly one label: "*.example.com" allows
//     a.example.com but neither example.com nor a.b.example.com. A wildcard
//     DNS name in a certificate only matches that same literal entry.
//
// [ParseSANs] reads such a list from a comma-separated flag value.
//
// # Metrics
//
// [Reloader.Collectors] exports, labelled by listener, when the served
// certificate expires and the changed sets of files taken up and refused,
// for a Prometheus registry.
//
// Usage:
//
//	r, err := tlsconfig.New(tlsconfig.Options{
//		CertFile:     "/etc/ratelimitd/tls/tls.crt",
//		KeyFile:      "/etc/ratelimitd/tls/tls.key",
//		ClientCAFile: "/etc/ratelimitd/tls/ca.crt",
//		AllowedSANs:  []string{"spiffe://cluster.local/ns/edge/sa/envoy"},
//		Logger:       log.With("component", "tls"),
//	})
//	if err != nil {
//		return err
//	}
//	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(r.Config())))
package tlsconfig
