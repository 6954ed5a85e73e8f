package certtest_test

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratelimitd/ratelimitd/internal/certtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestServerVerifiesForItsNames(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "test CA")
	srv := ca.Server(t, dir, "server", "localhost", "127.0.0.1")
	for _, name := range []string{"localhost", "127.0.0.1"} {
		_, err := srv.Cert.Verify(x509.VerifyOptions{
			DNSName:   name,
			Roots:     ca.Pool(),
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		})
		if err != nil {
			t.Errorf("Verify(%q) = %v, want nil", name, err)
		}
	}
	if _, err := srv.Cert.Verify(x509.VerifyOptions{DNSName: "example.com", Roots: ca.Pool()}); err == nil {
		t.Error(`Verify("example.com") = nil, want an error`)
	}
	other := certtest.NewCA(t, "other CA")
	if _, err := srv.Cert.Verify(x509.VerifyOptions{DNSName: "localhost", Roots: other.Pool()}); err == nil {
		t.Error("Verify with another CA's pool = nil, want an error")
	}
}

func TestClientSANKinds(t *testing.T) {
	ca := certtest.NewCA(t, "test CA")
	cli := ca.Client(t, t.TempDir(), "client",
		"spiffe://cluster.local/ns/a/sa/envoy", "10.1.2.3", "ops@example.com", "a.example.com")
	c := cli.Cert
	if len(c.URIs) != 1 || c.URIs[0].String() != "spiffe://cluster.local/ns/a/sa/envoy" {
		t.Errorf("URIs = %v, want [spiffe://cluster.local/ns/a/sa/envoy]", c.URIs)
	}
	if len(c.IPAddresses) != 1 || !c.IPAddresses[0].Equal(net.ParseIP("10.1.2.3")) {
		t.Errorf("IPAddresses = %v, want [10.1.2.3]", c.IPAddresses)
	}
	if len(c.EmailAddresses) != 1 || c.EmailAddresses[0] != "ops@example.com" {
		t.Errorf("EmailAddresses = %v, want [ops@example.com]", c.EmailAddresses)
	}
	if len(c.DNSNames) != 1 || c.DNSNames[0] != "a.example.com" {
		t.Errorf("DNSNames = %v, want [a.example.com]", c.DNSNames)
	}
	if c.Subject.CommonName != "client" {
		t.Errorf("CommonName = %q, want %q", c.Subject.CommonName, "client")
	}
	_, err := c.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		t.Errorf("Verify for client auth = %v, want nil", err)
	}
}

func TestFilesHoldTheKeyPair(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "test CA")
	kp := ca.Server(t, dir, "server", "localhost")
	pair, err := tls.LoadX509KeyPair(kp.CertFile, kp.KeyFile)
	if err != nil {
		t.Fatalf("LoadX509KeyPair(%s, %s) = %v", kp.CertFile, kp.KeyFile, err)
	}
	if !pair.Leaf.Equal(kp.Cert) {
		t.Error("the certificate file does not hold KeyPair.Cert")
	}
	fi, err := os.Stat(kp.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Errorf("key file mode = %v, want -rw-------", got)
	}
	caFile := ca.WriteCert(t, dir, "ca")
	data, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) || !pool.Equal(ca.Pool()) {
		t.Errorf("%s does not hold the CA certificate", caFile)
	}
}

func TestIssueKeepsDatesAndTemplate(t *testing.T) {
	ca := certtest.NewCA(t, "test CA")
	notAfter := time.Now().Add(90 * time.Minute).Truncate(time.Second)
	tmpl := &x509.Certificate{NotAfter: notAfter, DNSNames: make([]string, 0, 4)}
	a := ca.Issue(t, t.TempDir(), "a", tmpl, "a.example")
	b := ca.Issue(t, t.TempDir(), "b", tmpl, "b.example")
	if !a.Cert.NotAfter.Equal(notAfter) {
		t.Errorf("NotAfter = %v, want %v", a.Cert.NotAfter, notAfter)
	}
	if len(tmpl.DNSNames) != 0 || a.Cert.DNSNames[0] != "a.example" || b.Cert.DNSNames[0] != "b.example" {
		t.Errorf("Issue changed the template or mixed SANs: tmpl %v, a %v, b %v", tmpl.DNSNames, a.Cert.DNSNames, b.Cert.DNSNames)
	}
	if a.Cert.SerialNumber.Cmp(b.Cert.SerialNumber) == 0 {
		t.Errorf("two certificates share serial %v", a.Cert.SerialNumber)
	}
}

// TestMutualHandshake runs a real mutual TLS handshake over loopback with
// certtest's certificates and ClientTLS.
func TestMutualHandshake(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "test CA")
	srv := ca.Server(t, dir, "server", "localhost", "127.0.0.1")
	tests := []struct {
		name   string
		client *tls.Config
		ok     bool
	}{
		{"good client", ca.ClientTLS(ca.Client(t, dir, "client", "client.example")), true},
		{"no client certificate", ca.ClientTLS(nil), false},
		{"client of another CA", ca.ClientTLS(certtest.NewCA(t, "other").Client(t, dir, "other", "x.example")), false},
		{"server trusting another CA", certtest.NewCA(t, "other2").ClientTLS(ca.Client(t, dir, "c2")), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lis, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
				Certificates: []tls.Certificate{srv.TLS},
				ClientAuth:   tls.RequireAndVerifyClientCert,
				ClientCAs:    ca.Pool(),
			})
			if err != nil {
				t.Fatal(err)
			}
			defer lis.Close()
			served := make(chan error, 1)
			go func() {
				c, err := lis.Accept()
				if err != nil {
					served <- err
					return
				}
				defer c.Close()
				served <- c.(*tls.Conn).Handshake()
			}()
			// The client's handshake may succeed where the server's fails:
			// with TLS 1.3 the server checks the client's certificate last.
			c, clientErr := tls.Dial("tcp", lis.Addr().String(), tt.client)
			if clientErr == nil {
				c.Close()
			}
			serverErr := <-served
			if got := serverErr == nil; got != tt.ok {
				t.Errorf("server handshake error = %v (client: %v), want ok %v", serverErr, clientErr, tt.ok)
			}
		})
	}
}
