package certtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// A CA is a self-signed certificate authority that issues certificates.
// Its methods are safe for concurrent use; a CA must not be copied or
// modified after NewCA returns it.
type CA struct {
	// Cert is the CA's certificate.
	Cert *x509.Certificate
	// CertPEM is Cert, PEM-encoded.
	CertPEM []byte

	key crypto.Signer
}

// A KeyPair is a certificate issued by a CA, with its private key, as
// values and as the PEM files written for it.
type KeyPair struct {
	// CertFile and KeyFile are the paths of the PEM files, dir/name.pem and
	// dir/name-key.pem.
	CertFile, KeyFile string
	// Cert is the issued certificate.
	Cert *x509.Certificate
	// CertPEM and KeyPEM are the contents of CertFile and KeyFile (the key
	// as PKCS #8), for tests that write them elsewhere.
	CertPEM, KeyPEM []byte
	// TLS is the certificate and key, ready for tls.Config.Certificates.
	TLS tls.Certificate
}

// NewCA returns a new self-signed CA whose subject common name is name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatalf("certtest: create CA %q: %v", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("certtest: parse CA %q: %v", name, err)
	}
	return &CA{Cert: cert, CertPEM: pemBlock("CERTIFICATE", der), key: key}
}

// WriteCert writes the CA's certificate to dir/name.pem and returns that
// path, e.g. for a server's client CA file.
func (ca *CA) WriteCert(t testing.TB, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name+".pem")
	writeFile(t, path, ca.CertPEM, 0o644)
	return path
}

// Pool returns a new pool holding only the CA's certificate.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Server issues a certificate for TLS servers (extended key usage
// serverAuth) with subject common name name and the subject alternative
// names sans, writes it to dir as a KeyPair does, and returns it. For a
// server on loopback, pass "localhost" and "127.0.0.1".
func (ca *CA) Server(t testing.TB, dir, name string, sans ...string) *KeyPair {
	t.Helper()
	tmpl := &x509.Certificate{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	return ca.Issue(t, dir, name, tmpl, sans...)
}

// Client issues a certificate for TLS clients (extended key usage
// clientAuth) with subject common name name and the subject alternative
// names sans, writes it to dir as a KeyPair does, and returns it.
func (ca *CA) Client(t testing.TB, dir, name string, sans ...string) *KeyPair {
	t.Helper()
	tmpl := &x509.Certificate{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	return ca.Issue(t, dir, name, tmpl, sans...)
}

// Issue issues a certificate from tmpl, which Issue copies and completes:
// it sets the serial number, the subject common name to name, the key usage
// to digital signature, NotBefore and NotAfter when they are zero, and adds
// sans to the subject alternative names. It writes the certificate to
// dir/name.pem and its key to dir/name-key.pem, and returns them. Use it for
// what Server and Client do not offer, such as other validity dates.
func (ca *CA) Issue(t testing.TB, dir, name string, tmpl *x509.Certificate, sans ...string) *KeyPair {
	t.Helper()
	c := *tmpl
	// Clip the SAN slices so that appending to them never writes to tmpl's.
	c.DNSNames, c.EmailAddresses = slices.Clip(c.DNSNames), slices.Clip(c.EmailAddresses)
	c.IPAddresses, c.URIs = slices.Clip(c.IPAddresses), slices.Clip(c.URIs)
	c.SerialNumber = serial(t)
	c.Subject.CommonName = name
	c.KeyUsage = x509.KeyUsageDigitalSignature
	now := time.Now()
	if c.NotBefore.IsZero() {
		c.NotBefore = now.Add(-time.Hour)
	}
	if c.NotAfter.IsZero() {
		c.NotAfter = now.Add(24 * time.Hour)
	}
	for _, s := range sans {
		addSAN(t, &c, s)
	}
	key := newKey(t)
	der, err := x509.CreateCertificate(rand.Reader, &c, ca.Cert, key.Public(), ca.key)
	if err != nil {
		t.Fatalf("certtest: issue %q: %v", name, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("certtest: marshal key of %q: %v", name, err)
	}
	kp := &KeyPair{
		CertFile: filepath.Join(dir, name+".pem"),
		KeyFile:  filepath.Join(dir, name+"-key.pem"),
		CertPEM:  pemBlock("CERTIFICATE", der),
		KeyPEM:   pemBlock("PRIVATE KEY", keyDER),
	}
	if kp.TLS, err = tls.X509KeyPair(kp.CertPEM, kp.KeyPEM); err != nil {
		t.Fatalf("certtest: key pair of %q: %v", name, err)
	}
	if kp.Cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatalf("certtest: parse %q: %v", name, err)
	}
	writeFile(t, kp.CertFile, kp.CertPEM, 0o644)
	writeFile(t, kp.KeyFile, kp.KeyPEM, 0o600)
	return kp
}

// ClientTLS returns a new client configuration that trusts only the CA and,
// when client is not nil, presents client's certificate. It leaves
// ServerName empty, so gRPC and tls.Dial take it from the address dialed.
func (ca *CA) ClientTLS(client *KeyPair) *tls.Config {
	c := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
	if client != nil {
		c.Certificates = []tls.Certificate{client.TLS}
	}
	return c
}

// addSAN adds s to c's subject alternative names, of the kind its syntax
// says.
func addSAN(t testing.TB, c *x509.Certificate, s string) {
	t.Helper()
	switch {
	case strings.Contains(s, "://"):
		u, err := url.Parse(s)
		if err != nil {
			t.Fatalf("certtest: URI SAN %q: %v", s, err)
		}
		c.URIs = append(c.URIs, u)
	case net.ParseIP(s) != nil:
		c.IPAddresses = append(c.IPAddresses, net.ParseIP(s))
	case strings.Contains(s, "@"):
		c.EmailAddresses = append(c.EmailAddresses, s)
	default:
		c.DNSNames = append(c.DNSNames, s)
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("certtest: generate key: %v", err)
	}
	return key
}

// serial returns a random 128-bit serial number.
func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		t.Fatalf("certtest: serial number: %v", err)
	}
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func writeFile(t testing.TB, path string, data []byte, perm os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, perm); err != nil {
		t.Fatalf("certtest: %v", err)
	}
}
