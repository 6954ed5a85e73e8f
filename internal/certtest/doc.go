// Package certtest issues throwaway certificates for tests: a CA, server
// certificates and client certificates, written as PEM files into a
// directory (usually t.TempDir()), plus client *tls.Config values that trust
// a CA and may present a client certificate.
//
// Keys are ECDSA P-256. Certificates are valid from an hour ago until 24
// hours from now unless [CA.Issue] is given other dates. Every certificate
// gets a fresh random serial number, so tests can tell two apart by
// SerialNumber.
//
// Subject alternative names are plain strings whose kind is inferred, as
// in package tlsconfig: one containing "://" is a URI, one that parses as
// an IP address is an IP, one containing "@" is an email address, and any
// other is a DNS name.
//
// The functions that take a testing.TB call t.Fatal on failure, so call them
// from the test's own goroutine.
//
// Usage:
//
//	dir := t.TempDir()
//	ca := certtest.NewCA(t, "test CA")
//	srv := ca.Server(t, dir, "server", "localhost", "127.0.0.1")
//	caFile := ca.WriteCert(t, dir, "ca")
//	cli := ca.Client(t, dir, "client", "spiffe://cluster.local/ns/a/sa/envoy")
//	// serve with srv.CertFile, srv.KeyFile and caFile, then dial with:
//	conf := ca.ClientTLS(cli) // trusts ca, presents cli; ca.ClientTLS(nil) presents nothing
package certtest
