package tlsconfig

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// checkInterval is how often, at most, a Reloader reads its files again.
const checkInterval = time.Second

// Options name the files a Reloader serves and how it serves them. CertFile
// and KeyFile are required; the zero value of every other field means its
// default.
type Options struct {
	// CertFile is the PEM file of the server's certificate, followed by any
	// intermediate certificates.
	CertFile string
	// KeyFile is the PEM file of the certificate's private key.
	KeyFile string
	// ClientCAFile, when set, is a PEM file of the CA certificates that
	// clients' certificates must chain to: every client must then present a
	// certificate (mutual TLS). When empty, clients present none.
	ClientCAFile string
	// AllowedSANs, when not empty, are subject alternative names of which a
	// client's certificate must carry at least one, written as the package
	// documentation says. They require ClientCAFile. They are not reloaded.
	AllowedSANs []string
	// Logger receives reloads, rejected files and refused client
	// certificates. nil discards them.
	Logger *slog.Logger
	// Now returns the current time, which decides when the files are read
	// again. nil means time.Now; tests pass a clock they step. Certificates'
	// validity is checked against the real time regardless.
	Now func() time.Time
}

// A Reloader serves TLS configurations built from the files in its Options,
// and rebuilds them when the files change, as the package documentation
// describes. A Reloader is safe for concurrent use by multiple goroutines.
// The zero value is not usable; call New.
type Reloader struct {
	o     Options
	sans  *sanSet // nil when Options.AllowedSANs is empty
	log   *slog.Logger
	now   func() time.Time
	start time.Time // now() in New, the origin of next

	next    atomic.Int64 // when the files may be read again, as a time.Duration since start
	cur     atomic.Pointer[served]
	reloads atomic.Uint64
	failed  atomic.Uint64

	mu   sync.Mutex // serializes reading the files
	seen files      // requires mu; the files as last read, usable or not

	refused rate.Sometimes // throttles the log of refused client certificates
}

// files are the contents of a Reloader's files. A file that could not be
// read is nil.
type files struct{ cert, key, ca []byte }

func (f files) equal(g files) bool {
	return bytes.Equal(f.cert, g.cert) && bytes.Equal(f.key, g.key) && bytes.Equal(f.ca, g.ca)
}

// served is a configuration and what it was built from. It is immutable.
type served struct {
	files  files
	config *tls.Config
	leaf   *x509.Certificate
}

// New reads and checks the files that o names, and returns a Reloader that
// serves them. The error names the file at fault, such as
// "tlsconfig: load client CA ca.pem: no PEM certificate found".
func New(o Options) (*Reloader, error) {
	if o.CertFile == "" || o.KeyFile == "" {
		return nil, errors.New("tlsconfig: a certificate file and a key file are required")
	}
	r := &Reloader{o: o, log: o.Logger, now: o.Now, refused: rate.Sometimes{Interval: 10 * time.Second}}
	if len(o.AllowedSANs) > 0 {
		if o.ClientCAFile == "" {
			return nil, errors.New("tlsconfig: allowed SANs require a client CA file")
		}
		var err error
		if r.sans, err = newSANSet(o.AllowedSANs); err != nil {
			return nil, err
		}
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.now == nil {
		r.now = time.Now
	}
	f, err := r.read()
	if err != nil {
		return nil, err
	}
	s, err := r.build(f)
	if err != nil {
		return nil, err
	}
	r.seen = f
	r.cur.Store(s)
	r.start = r.now()
	r.next.Store(int64(checkInterval))
	return r, nil
}

// Config returns a new server configuration for credentials.NewTLS or
// http.Server.TLSConfig. Its GetConfigForClient hands each handshake the
// configuration built from the files as last read, after reading them again
// if a second has passed since the last time.
func (r *Reloader) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.current().config, nil
		},
	}
}

// Reloads returns how many times the Reloader took changed files since New.
func (r *Reloader) Reloads() uint64 { return r.reloads.Load() }

// ReloadErrors returns how many changed sets of files the Reloader rejected
// since New, keeping the previous ones. A set that stays unusable counts
// once.
func (r *Reloader) ReloadErrors() uint64 { return r.failed.Load() }

// NotAfter returns when the served server certificate expires. Like a
// handshake, it first reads the files again if a second has passed since
// the last time, so an expiry gauge follows the files when no client
// connects.
func (r *Reloader) NotAfter() time.Time { return r.current().leaf.NotAfter }

// current returns the configuration to serve, reading the files again
// first if checkInterval has passed since the last time. One caller per
// interval reads them; the others serve the configuration in force.
func (r *Reloader) current() *served {
	now := int64(r.now().Sub(r.start))
	next := r.next.Load()
	if now >= next && r.next.CompareAndSwap(next, now+int64(checkInterval)) {
		r.reload()
	}
	return r.cur.Load()
}

// reload reads the files and, if they changed since the last read, serves
// them, or keeps the configuration in force if they are unusable.
func (r *Reloader) reload() {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, err := r.read()
	if f.equal(r.seen) {
		return
	}
	r.seen = f
	cur := r.cur.Load()
	if err == nil && f.equal(cur.files) {
		return // back to the files in force after a failed read
	}
	var s *served
	if err == nil {
		s, err = r.build(f)
	}
	if err != nil {
		r.failed.Add(1)
		r.log.Error("rejected changed TLS files; serving the previous ones", "err", err,
			"serial", fmt.Sprintf("%x", cur.leaf.SerialNumber), "not_after", cur.leaf.NotAfter)
		return
	}
	r.cur.Store(s)
	r.reloads.Add(1)
	r.log.Info("reloaded TLS files", "cert_file", r.o.CertFile,
		"serial", fmt.Sprintf("%x", s.leaf.SerialNumber), "not_after", s.leaf.NotAfter)
}

// read reads the files, leaving nil any that it could not read.
func (r *Reloader) read() (files, error) {
	var f files
	var errs []error
	readFile := func(what, path string) []byte {
		b, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, fmt.Errorf("tlsconfig: load %s: %w", what, err))
		}
		return b
	}
	f.cert = readFile("certificate", r.o.CertFile)
	f.key = readFile("key", r.o.KeyFile)
	if r.o.ClientCAFile != "" {
		f.ca = readFile("client CA", r.o.ClientCAFile)
	}
	return f, errors.Join(errs...)
}

// build parses f into a configuration to serve.
func (r *Reloader) build(f files) (*served, error) {
	if err := checkPEM(f.cert); err != nil {
		return nil, fmt.Errorf("tlsconfig: load certificate %s: %w", r.o.CertFile, err)
	}
	if err := checkPEM(f.key); err != nil {
		return nil, fmt.Errorf("tlsconfig: load key %s: %w", r.o.KeyFile, err)
	}
	cert, err := tls.X509KeyPair(f.cert, f.key)
	if err != nil {
		return nil, fmt.Errorf("tlsconfig: load certificate %s with key %s: %w", r.o.CertFile, r.o.KeyFile, err)
	}
	if cert.Leaf == nil { // GODEBUG=x509keypairleaf=0
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("tlsconfig: load certificate %s: %w", r.o.CertFile, err)
		}
	}
	c := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		// What net/http's server offers by default; credentials.NewTLS
		// would add h2 if it were missing.
		NextProtos: []string{"h2", "http/1.1"},
	}
	if r.o.ClientCAFile != "" {
		pool, err := parseCAs(f.ca)
		if err != nil {
			return nil, fmt.Errorf("tlsconfig: load client CA %s: %w", r.o.ClientCAFile, err)
		}
		c.ClientAuth = tls.RequireAndVerifyClientCert
		c.ClientCAs = pool
	}
	if r.sans != nil {
		c.VerifyConnection = r.verifySANs
	}
	return &served{files: f, config: c, leaf: cert.Leaf}, nil
}

// verifySANs refuses a client whose verified certificate carries none of
// the allowed SANs. crypto/tls calls it after verifying the chain.
func (r *Reloader) verifySANs(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tlsconfig: no client certificate")
	}
	c := cs.PeerCertificates[0]
	if r.sans.allows(c) {
		return nil
	}
	err := fmt.Errorf("tlsconfig: client certificate %q (serial %x) carries none of the allowed SANs; it has %s",
		c.Subject, c.SerialNumber, describeSANs(c))
	r.refused.Do(func() { r.log.Warn("refused a client certificate", "err", err) })
	return err
}

// describeSANs lists c's subject alternative names, for messages.
func describeSANs(c *x509.Certificate) string {
	var s []string
	s = append(s, c.DNSNames...)
	for _, u := range c.URIs {
		s = append(s, u.String())
	}
	for _, ip := range c.IPAddresses {
		s = append(s, ip.String())
	}
	s = append(s, c.EmailAddresses...)
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// PeerIdentity returns the name of the client that cs authenticated with
// a verified certificate, "" when there is none: its certificate's first
// URI SAN (a SPIFFE ID, as service meshes issue), else its first DNS
// name, email address or IP address, else its subject, each prefixed by
// its kind ("uri:", "dns:", "email:", "ip:", "subject:"). Every
// certificate issued to one workload gives the same name, renewals
// included, so that bounds kept per peer hold across its connections and
// certificate rotations.
func PeerIdentity(cs tls.ConnectionState) string {
	if len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 {
		return ""
	}
	c := cs.PeerCertificates[0]
	switch {
	case len(c.URIs) > 0:
		return "uri:" + c.URIs[0].String()
	case len(c.DNSNames) > 0:
		return "dns:" + c.DNSNames[0]
	case len(c.EmailAddresses) > 0:
		return "email:" + c.EmailAddresses[0]
	case len(c.IPAddresses) > 0:
		return "ip:" + c.IPAddresses[0].String()
	}
	return "subject:" + c.Subject.String()
}

// checkPEM returns an error if data ends in a PEM block that does not
// decode, as a file caught half-written does.
func checkPEM(data []byte) error {
	for {
		b, rest := pem.Decode(data)
		if b == nil {
			break
		}
		data = rest
	}
	if bytes.Contains(data, []byte("-----BEGIN")) {
		return errors.New("the last PEM block is incomplete or corrupt")
	}
	return nil
}

// Client returns the TLS settings of a client (of xDS, of Redis): TLS 1.2
// or later, the CAs of the PEM file ca (none: the system's), and the
// client certificate of the files cert and key (none: no certificate;
// one without the other is an error). serverName, when not empty, is the
// name the server's certificate must carry.
func Client(ca, cert, key, serverName string) (*tls.Config, error) {
	if (cert == "") != (key == "") {
		return nil, errors.New("a client certificate and its key go together")
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if ca != "" {
		pool, err := LoadCAs(ca)
		if err != nil {
			return nil, fmt.Errorf("CA file: %w", err)
		}
		c.RootCAs = pool
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("client certificate %s and key %s: %w", cert, key, err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// LoadCAs returns a pool of the CA certificates in the PEM file at path:
// the one loader of CA files, for the listeners (New) and the clients
// (xDS, Redis). It fails if the file cannot be read, a block is corrupt,
// a certificate does not parse, or there is none.
func LoadCAs(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool, err := parseCAs(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return pool, nil
}

// parseCAs returns a pool of the certificates in data's CERTIFICATE
// blocks, or an error if one does not parse or there are none.
func parseCAs(data []byte) (*x509.CertPool, error) {
	if err := checkPEM(data); err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	n := 0
	for {
		b, rest := pem.Decode(data)
		if b == nil {
			break
		}
		data = rest
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, err
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, errors.New("no PEM certificate found")
	}
	return pool, nil
}
