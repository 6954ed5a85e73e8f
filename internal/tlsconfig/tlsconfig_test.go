package tlsconfig_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/ratelimitd/ratelimitd/internal/certtest"
	"github.com/ratelimitd/ratelimitd/internal/tlsconfig"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The names of the files in a volume, as in a Kubernetes TLS Secret.
const (
	certName = "tls.crt"
	keyName  = "tls.key"
	caName   = "ca.crt"
)

// clock is a manual clock for Options.Now, safe for concurrent use.
type clock struct{ elapsed atomic.Int64 }

var clockBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (c *clock) Now() time.Time { return clockBase.Add(time.Duration(c.elapsed.Load())) }

// tick moves the clock past the interval after which a Reloader reads its
// files again.
func (c *clock) tick() { c.elapsed.Add(int64(time.Second)) }

// logBuffer collects a slog text log; it is safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// A volume is a directory whose TLS files a test replaces in one of the
// ways files change on disk. The paths of the files never change.
type volume struct {
	dir   string
	write func(t *testing.T, dir string, files map[string][]byte)
}

func (v volume) path(name string) string { return filepath.Join(v.dir, name) }

// styles are the ways files are replaced: edited in place, renamed over, or
// swapped by Kubernetes, which mounts a Secret as name -> ..data/name,
// ..data -> ..TIMESTAMP/, and replaces ..data by a rename.
var styles = []struct {
	name  string
	write func(t *testing.T, dir string, files map[string][]byte)
}{
	{"in place", func(t *testing.T, dir string, files map[string][]byte) {
		for name, data := range files {
			// os.WriteFile truncates and writes the same inode.
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}},
	{"atomic rename", func(t *testing.T, dir string, files map[string][]byte) {
		for name, data := range files {
			tmp := filepath.Join(dir, "."+name+".tmp")
			if err := os.WriteFile(tmp, data, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}},
	{"kubernetes ..data swap", func(t *testing.T, dir string, files map[string][]byte) {
		// Kubernetes writes every file of the new version, so keep the
		// ones not being replaced.
		old, _ := os.Readlink(filepath.Join(dir, "..data"))
		ts, err := os.MkdirTemp(dir, "..2026_01_01_") //nolint:usetesting // Kubernetes's ..timestamp directory inside dir, not a fresh temp dir
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{certName, keyName, caName} {
			data, ok := files[name]
			if !ok && old != "" {
				data, _ = os.ReadFile(filepath.Join(dir, old, name))
			}
			if data == nil {
				continue
			}
			if err := os.WriteFile(filepath.Join(ts, name), data, 0o600); err != nil {
				t.Fatal(err)
			}
			link := filepath.Join(dir, name)
			if _, err := os.Lstat(link); errors.Is(err, os.ErrNotExist) {
				if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
					t.Fatal(err)
				}
			}
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		if old != "" {
			if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
				t.Fatal(err)
			}
		}
	}},
}

func newVolume(t *testing.T, write func(*testing.T, string, map[string][]byte)) volume {
	return volume{dir: t.TempDir(), write: write}
}

// put writes files into v.
func (v volume) put(t *testing.T, files map[string][]byte) {
	t.Helper()
	v.write(t, v.dir, files)
}

// pair returns kp as the files of a volume.
func pair(kp *certtest.KeyPair) map[string][]byte {
	return map[string][]byte{certName: kp.CertPEM, keyName: kp.KeyPEM}
}

// serveGRPC serves the gRPC health service over TLS from r on a loopback
// port until the test ends, and returns the address.
func serveGRPC(t *testing.T, r *tlsconfig.Reloader) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(r.Config())))
	healthpb.RegisterHealthServer(g, health.NewServer())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Serve(lis)
	}()
	t.Cleanup(func() {
		g.Stop()
		<-done
	})
	return lis.Addr().String()
}

// dial returns a gRPC connection to addr with TLS config c, closed when the
// test ends.
func dial(t *testing.T, addr string, c *tls.Config) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(c)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// check calls the health service over conn and returns the serial number
// of the server certificate of the connection that carried the call.
func check(t *testing.T, conn *grpc.ClientConn) (*big.Int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var p peer.Peer
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p)); err != nil {
		return nil, err
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		t.Fatalf("peer AuthInfo = %T, want credentials.TLSInfo", p.AuthInfo)
	}
	return info.State.PeerCertificates[0].SerialNumber, nil
}

// checkNew calls the health service over a new gRPC connection to addr
// with TLS config c.
func checkNew(t *testing.T, addr string, c *tls.Config) error {
	t.Helper()
	_, err := check(t, dial(t, addr, c))
	return err
}

// servedSerial makes a new TLS connection to addr with config c and returns
// the serial number of the certificate the server presented.
func servedSerial(t *testing.T, addr string, c *tls.Config) *big.Int {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, c)
	if err != nil {
		t.Fatalf("tls.Dial(%s) = %v", addr, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}

func newReloader(t *testing.T, o tlsconfig.Options) *tlsconfig.Reloader {
	t.Helper()
	r, err := tlsconfig.New(o)
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	return r
}

func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "test CA")
	srv := ca.Server(t, dir, "server", "localhost", "127.0.0.1")
	r := newReloader(t, tlsconfig.Options{CertFile: srv.CertFile, KeyFile: srv.KeyFile})
	addr := serveGRPC(t, r)

	tls11 := ca.ClientTLS(nil)
	tls11.MinVersion, tls11.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	tests := []struct {
		name   string
		client *tls.Config
		ok     bool
	}{
		{"client trusting the CA", ca.ClientTLS(nil), true},
		{"client trusting another CA", certtest.NewCA(t, "other CA").ClientTLS(nil), false},
		{"client offering only TLS 1.1", tls11, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkNew(t, addr, tt.client)
			if got := err == nil; got != tt.ok {
				t.Errorf("Check = %v, want ok %v", err, tt.ok)
			}
		})
	}
	if got, want := r.NotAfter(), srv.Cert.NotAfter; !got.Equal(want) {
		t.Errorf("NotAfter() = %v, want %v", got, want)
	}
}

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "test CA")
	other := certtest.NewCA(t, "other CA")
	srv := ca.Server(t, dir, "server", "localhost", "127.0.0.1")
	r := newReloader(t, tlsconfig.Options{
		CertFile:     srv.CertFile,
		KeyFile:      srv.KeyFile,
		ClientCAFile: ca.WriteCert(t, dir, "ca"),
	})
	addr := serveGRPC(t, r)

	tests := []struct {
		name   string
		client *certtest.KeyPair
		ok     bool
	}{
		{"no client certificate", nil, false},
		{"certificate of another CA", other.Client(t, dir, "stranger", "client.example"), false},
		{"server certificate as client certificate", ca.Server(t, dir, "server2", "client.example"), false},
		{"good client certificate", ca.Client(t, dir, "client", "client.example"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkNew(t, addr, ca.ClientTLS(tt.client))
			if got := err == nil; got != tt.ok {
				t.Errorf("Check = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

func TestAllowedSANs(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "test CA")
	srv := ca.Server(t, dir, "server", "localhost", "127.0.0.1")
	r := newReloader(t, tlsconfig.Options{
		CertFile:     srv.CertFile,
		KeyFile:      srv.KeyFile,
		ClientCAFile: ca.WriteCert(t, dir, "ca"),
		AllowedSANs: []string{
			"spiffe://cluster.local/ns/a/sa/envoy",
			"*.clients.example",
			"exact.example",
			"10.1.2.3",
			"fd00::7",
			"ops@example.com",
		},
	})
	addr := serveGRPC(t, r)

	tests := []struct {
		sans []string
		ok   bool
	}{
		{[]string{"spiffe://cluster.local/ns/a/sa/envoy"}, true},
		{[]string{"spiffe://cluster.local/ns/b/sa/envoy"}, false},
		{[]string{"spiffe://cluster.local/ns/a/sa/envoy/x"}, false},
		{[]string{"exact.example"}, true},
		{[]string{"EXACT.Example"}, true},
		{[]string{"sub.exact.example"}, false},
		{[]string{"a.clients.example"}, true},
		{[]string{"a.b.clients.example"}, false},
		{[]string{"clients.example"}, false},
		{[]string{"10.1.2.3"}, true},
		{[]string{"10.1.2.4"}, false},
		{[]string{"fd00::7"}, true},
		{[]string{"ops@example.com"}, true},
		{[]string{"ops@EXAMPLE.com"}, true},
		{[]string{"dev@example.com"}, false},
		{[]string{"other.example", "spiffe://other/x", "a.clients.example"}, true},
		{nil, false},
	}
	for i, tt := range tests {
		t.Run(strings.Join(tt.sans, ","), func(t *testing.T) {
			cli := ca.Client(t, dir, "client"+strings.Repeat("_", i), tt.sans...)
			err := checkNew(t, addr, ca.ClientTLS(cli))
			if got := err == nil; got != tt.ok {
				t.Errorf("Check with SANs %q = %v, want ok %v", tt.sans, err, tt.ok)
			}
		})
	}
}

// TestRefusedSANIsLogged checks that the server says why it refused a
// client whose certificate is valid.
func TestRefusedSANIsLogged(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "test CA")
	srv := ca.Server(t, dir, "server", "localhost", "127.0.0.1")
	var log logBuffer
	r := newReloader(t, tlsconfig.Options{
		CertFile:     srv.CertFile,
		KeyFile:      srv.KeyFile,
		ClientCAFile: ca.WriteCert(t, dir, "ca"),
		AllowedSANs:  []string{"spiffe://cluster.local/ns/a/sa/envoy"},
		Logger:       log.logger(),
	})
	addr := serveGRPC(t, r)
	cli := ca.Client(t, dir, "intruder", "spiffe://cluster.local/ns/b/sa/intruder")
	if err := checkNew(t, addr, ca.ClientTLS(cli)); err == nil {
		t.Fatal("Check with a SAN not allowed = nil, want an error")
	}
	got := log.String()
	for _, want := range []string{"refused a client certificate", "none of the allowed SANs", "spiffe://cluster.local/ns/b/sa/intruder", "CN=intruder"} {
		if !strings.Contains(got, want) {
			t.Errorf("log lacks %q:\n%s", want, got)
		}
	}
}

// TestHTTP checks that an http.Server given Config serves HTTP/2 and
// HTTP/1.1.
func TestHTTP(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "test CA")
	srv := ca.Server(t, dir, "server", "localhost", "127.0.0.1")
	r := newReloader(t, tlsconfig.Options{CertFile: srv.CertFile, KeyFile: srv.KeyFile})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {}),
		TLSConfig:         r.Config(),
		ReadHeaderTimeout: 10 * time.Second,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = hs.ServeTLS(lis, "", "")
	}()
	t.Cleanup(func() {
		hs.Close()
		<-done
	})
	for _, major := range []int{1, 2} {
		tr := &http.Transport{TLSClientConfig: ca.ClientTLS(nil)}
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetHTTP1(major == 1)
		tr.Protocols.SetHTTP2(major == 2)
		resp, err := (&http.Client{Transport: tr}).Get("https://" + lis.Addr().String() + "/")
		if err != nil {
			t.Fatalf("GET over HTTP/%d: %v", major, err)
		}
		resp.Body.Close()
		tr.CloseIdleConnections()
		if resp.ProtoMajor != major {
			t.Errorf("response protocol = %s, want HTTP/%d", resp.Proto, major)
		}
	}
}

func TestReloadServerCertificate(t *testing.T) {
	for _, style := range styles {
		t.Run(style.name, func(t *testing.T) {
			scratch := t.TempDir()
			caA := certtest.NewCA(t, "CA A")
			caB := certtest.NewCA(t, "CA B")
			old := caA.Server(t, scratch, "old", "localhost", "127.0.0.1")
			// Another CA, and another expiry, so NotAfter must change.
			nw := caB.Issue(t, scratch, "new", &x509.Certificate{
				ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
				NotAfter:    time.Now().Add(48 * time.Hour),
			}, "localhost", "127.0.0.1")
			client := caA.ClientTLS(nil)
			client.RootCAs.AddCert(caB.Cert)

			v := newVolume(t, style.write)
			v.put(t, pair(old))
			var clk clock
			r := newReloader(t, tlsconfig.Options{CertFile: v.path(certName), KeyFile: v.path(keyName), Now: clk.Now})
			addr := serveGRPC(t, r)
			conn := dial(t, addr, client)
			if serial, err := check(t, conn); err != nil || serial.Cmp(old.Cert.SerialNumber) != 0 {
				t.Fatalf("Check = serial %x, %v; want serial %x, nil", serial, err, old.Cert.SerialNumber)
			}

			v.put(t, pair(nw))
			if got, want := servedSerial(t, addr, client), old.Cert.SerialNumber; got.Cmp(want) != 0 {
				t.Errorf("within the first second: served serial %x, want the old %x", got, want)
			}
			clk.tick()
			if got, want := servedSerial(t, addr, client), nw.Cert.SerialNumber; got.Cmp(want) != 0 {
				t.Errorf("after the swap: served serial %x, want the new %x", got, want)
			}
			if err := checkNew(t, addr, caB.ClientTLS(nil)); err != nil {
				t.Errorf("Check from a new connection trusting only the new CA = %v", err)
			}
			// The connection made before the swap goes on with the old
			// certificate.
			if serial, err := check(t, conn); err != nil || serial.Cmp(old.Cert.SerialNumber) != 0 {
				t.Errorf("Check on the old connection = serial %x, %v; want serial %x, nil", serial, err, old.Cert.SerialNumber)
			}
			if got, want := r.NotAfter(), nw.Cert.NotAfter; !got.Equal(want) {
				t.Errorf("NotAfter() = %v, want %v", got, want)
			}
			if r.Reloads() != 1 || r.ReloadErrors() != 0 {
				t.Errorf("Reloads(), ReloadErrors() = %d, %d; want 1, 0", r.Reloads(), r.ReloadErrors())
			}
		})
	}
}

func TestReloadClientCA(t *testing.T) {
	for _, style := range styles {
		t.Run(style.name, func(t *testing.T) {
			scratch := t.TempDir()
			serverCA := certtest.NewCA(t, "server CA")
			caA := certtest.NewCA(t, "client CA A")
			caB := certtest.NewCA(t, "client CA B")
			srv := serverCA.Server(t, scratch, "server", "localhost", "127.0.0.1")
			clientA := serverCA.ClientTLS(caA.Client(t, scratch, "a", "a.example"))
			clientB := serverCA.ClientTLS(caB.Client(t, scratch, "b", "b.example"))

			v := newVolume(t, style.write)
			files := pair(srv)
			files[caName] = caA.CertPEM
			v.put(t, files)
			var clk clock
			r := newReloader(t, tlsconfig.Options{
				CertFile:     v.path(certName),
				KeyFile:      v.path(keyName),
				ClientCAFile: v.path(caName),
				Now:          clk.Now,
			})
			addr := serveGRPC(t, r)
			if err := checkNew(t, addr, clientA); err != nil {
				t.Fatalf("client of CA A before the swap: Check = %v, want nil", err)
			}
			if err := checkNew(t, addr, clientB); err == nil {
				t.Fatal("client of CA B before the swap: Check = nil, want an error")
			}

			v.put(t, map[string][]byte{caName: caB.CertPEM})
			clk.tick()
			if err := checkNew(t, addr, clientB); err != nil {
				t.Errorf("client of CA B after the swap: Check = %v, want nil", err)
			}
			if err := checkNew(t, addr, clientA); err == nil {
				t.Error("client of CA A after the swap: Check = nil, want an error")
			}
			if r.Reloads() != 1 || r.ReloadErrors() != 0 {
				t.Errorf("Reloads(), ReloadErrors() = %d, %d; want 1, 0", r.Reloads(), r.ReloadErrors())
			}
		})
	}
}

// TestResumptionAfterClientCASwap checks that a client whose CA was
// dropped cannot come back by resuming a TLS session from before the swap.
func TestResumptionAfterClientCASwap(t *testing.T) {
	scratch := t.TempDir()
	ca := certtest.NewCA(t, "server CA")
	caA := certtest.NewCA(t, "client CA A")
	caB := certtest.NewCA(t, "client CA B")
	v := newVolume(t, styles[1].write)
	files := pair(ca.Server(t, scratch, "server", "localhost", "127.0.0.1"))
	files[caName] = caA.CertPEM
	v.put(t, files)
	var clk clock
	r := newReloader(t, tlsconfig.Options{
		CertFile:     v.path(certName),
		KeyFile:      v.path(keyName),
		ClientCAFile: v.path(caName),
		Now:          clk.Now,
	})
	addr := serveGRPC(t, r)
	client := ca.ClientTLS(caA.Client(t, scratch, "a", "a.example"))
	client.ClientSessionCache = tls.NewLRUClientSessionCache(4)

	resumed := func() (bool, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		var p peer.Peer
		_, err := healthpb.NewHealthClient(dial(t, addr, client)).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p))
		if err != nil {
			return false, err
		}
		return p.AuthInfo.(credentials.TLSInfo).State.DidResume, nil
	}
	if _, err := resumed(); err != nil {
		t.Fatalf("first Check = %v", err)
	}
	if ok, err := resumed(); err != nil || !ok {
		t.Fatalf("second Check = resumed %v, %v; want a resumed session", ok, err)
	}
	v.put(t, map[string][]byte{caName: caB.CertPEM})
	clk.tick()
	if ok, err := resumed(); err == nil {
		t.Errorf("Check after dropping the client's CA = resumed %v, nil; want an error", ok)
	}
}

func TestBadFilesKeepThePreviousOnes(t *testing.T) {
	scratch := t.TempDir()
	ca := certtest.NewCA(t, "test CA")
	old := ca.Server(t, scratch, "old", "localhost", "127.0.0.1")
	nw := ca.Server(t, scratch, "new", "localhost", "127.0.0.1")
	other := certtest.NewCA(t, "other CA")
	tests := []struct {
		name    string
		files   map[string][]byte
		wantLog string // in the log of the rejection
	}{
		{"garbage certificate", map[string][]byte{certName: []byte("garbage")}, certName},
		{"truncated certificate", map[string][]byte{certName: nw.CertPEM[:len(nw.CertPEM)/2]}, certName},
		// Half a chain or half a CA bundle would parse without the check
		// for a truncated last block, dropping a certificate.
		{"truncated chain", map[string][]byte{certName: slices.Concat(nw.CertPEM, ca.CertPEM[:len(ca.CertPEM)/2]), keyName: nw.KeyPEM}, "incomplete or corrupt"},
		{"truncated client CA bundle", map[string][]byte{caName: slices.Concat(ca.CertPEM, other.CertPEM[:len(other.CertPEM)/2])}, "incomplete or corrupt"},
		{"key of another certificate", map[string][]byte{certName: nw.CertPEM}, "private key does not match public key"},
		{"empty key", map[string][]byte{keyName: nil}, keyName},
		{"garbage client CA", map[string][]byte{caName: []byte("garbage")}, "no PEM certificate found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := newVolume(t, styles[0].write)
			files := pair(old)
			files[caName] = ca.CertPEM
			v.put(t, files)
			var clk clock
			var log logBuffer
			r := newReloader(t, tlsconfig.Options{
				CertFile:     v.path(certName),
				KeyFile:      v.path(keyName),
				ClientCAFile: v.path(caName),
				Logger:       log.logger(),
				Now:          clk.Now,
			})
			addr := serveGRPC(t, r)
			client := ca.ClientTLS(ca.Client(t, scratch, "client"))

			v.put(t, tt.files)
			clk.tick()
			if got, want := servedSerial(t, addr, client), old.Cert.SerialNumber; got.Cmp(want) != 0 {
				t.Errorf("served serial %x, want the previous %x", got, want)
			}
			if err := checkNew(t, addr, client); err != nil {
				t.Errorf("Check = %v, want the previous files in force", err)
			}
			if got := log.String(); !strings.Contains(got, "rejected changed TLS files") || !strings.Contains(got, tt.wantLog) {
				t.Errorf("log lacks the rejection or %q:\n%s", tt.wantLog, got)
			}
			clk.tick() // the same bad files again: not counted again
			servedSerial(t, addr, client)
			if r.Reloads() != 0 || r.ReloadErrors() != 1 {
				t.Errorf("Reloads(), ReloadErrors() = %d, %d; want 0, 1", r.Reloads(), r.ReloadErrors())
			}

			// Good files are then taken.
			files = pair(nw)
			files[caName] = ca.CertPEM
			v.put(t, files)
			clk.tick()
			if got, want := servedSerial(t, addr, client), nw.Cert.SerialNumber; got.Cmp(want) != 0 {
				t.Errorf("after good files: served serial %x, want %x", got, want)
			}
			if r.Reloads() != 1 || r.ReloadErrors() != 1 {
				t.Errorf("after good files: Reloads(), ReloadErrors() = %d, %d; want 1, 1", r.Reloads(), r.ReloadErrors())
			}
		})
	}
}

// TestMissingFileThenBack checks that a file that disappears counts as one
// error and that its return, unchanged, is no reload.
func TestMissingFileThenBack(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "test CA")
	srv := ca.Server(t, dir, "server", "localhost", "127.0.0.1")
	var clk clock
	r := newReloader(t, tlsconfig.Options{CertFile: srv.CertFile, KeyFile: srv.KeyFile, Now: clk.Now})
	if err := os.Rename(srv.KeyFile, srv.KeyFile+".away"); err != nil {
		t.Fatal(err)
	}
	clk.tick()
	if got, want := r.NotAfter(), srv.Cert.NotAfter; !got.Equal(want) {
		t.Errorf("NotAfter() = %v, want %v", got, want)
	}
	clk.tick()
	r.NotAfter()
	if r.Reloads() != 0 || r.ReloadErrors() != 1 {
		t.Errorf("key missing: Reloads(), ReloadErrors() = %d, %d; want 0, 1", r.Reloads(), r.ReloadErrors())
	}
	if err := os.Rename(srv.KeyFile+".away", srv.KeyFile); err != nil {
		t.Fatal(err)
	}
	clk.tick()
	r.NotAfter()
	if r.Reloads() != 0 || r.ReloadErrors() != 1 {
		t.Errorf("key back: Reloads(), ReloadErrors() = %d, %d; want 0, 1", r.Reloads(), r.ReloadErrors())
	}
}

// TestConcurrentHandshakesDuringReloads runs handshakes from several
// goroutines while the files change, for the race detector, and checks
// that every handshake got one of the certificates.
func TestConcurrentHandshakesDuringReloads(t *testing.T) {
	scratch := t.TempDir()
	ca := certtest.NewCA(t, "test CA")
	certs := []*certtest.KeyPair{
		ca.Server(t, scratch, "a", "localhost", "127.0.0.1"),
		ca.Server(t, scratch, "b", "localhost", "127.0.0.1"),
	}
	v := newVolume(t, styles[1].write)
	v.put(t, pair(certs[0]))
	var clk clock
	r := newReloader(t, tlsconfig.Options{CertFile: v.path(certName), KeyFile: v.path(keyName), Now: clk.Now})
	addr := serveGRPC(t, r)

	const workers, dials, swaps = 4, 10, 6
	var wg sync.WaitGroup
	errs := make(chan error, workers*dials)
	for range workers {
		wg.Go(func() {
			for range dials {
				conn, err := tls.Dial("tcp", addr, ca.ClientTLS(nil))
				if err != nil {
					errs <- err
					continue
				}
				serial := conn.ConnectionState().PeerCertificates[0].SerialNumber
				conn.Close()
				if serial.Cmp(certs[0].Cert.SerialNumber) != 0 && serial.Cmp(certs[1].Cert.SerialNumber) != 0 {
					errs <- errors.New("served a certificate of neither file set")
				}
			}
		})
	}
	for i := range swaps {
		v.put(t, pair(certs[(i+1)%2]))
		clk.tick()
		r.NotAfter()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got, want := servedSerial(t, addr, ca.ClientTLS(nil)), certs[swaps%2].Cert.SerialNumber; got.Cmp(want) != 0 {
		t.Errorf("served serial %x, want the last written %x", got, want)
	}
	if r.Reloads() != swaps || r.ReloadErrors() != 0 {
		t.Errorf("Reloads(), ReloadErrors() = %d, %d; want %d, 0", r.Reloads(), r.ReloadErrors(), swaps)
	}
}

func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "test CA")
	srv := ca.Server(t, dir, "server", "localhost")
	other := ca.Server(t, dir, "other", "localhost")
	caFile := ca.WriteCert(t, dir, "ca")
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	tests := []struct {
		name string
		o    tlsconfig.Options
		want string // in the error
	}{
		{"no files", tlsconfig.Options{}, "tlsconfig: a certificate file and a key file are required"},
		{"missing certificate", tlsconfig.Options{CertFile: missing, KeyFile: srv.KeyFile}, "tlsconfig: load certificate: open " + missing},
		{"missing key", tlsconfig.Options{CertFile: srv.CertFile, KeyFile: missing}, "tlsconfig: load key: open " + missing},
		{"garbage certificate", tlsconfig.Options{CertFile: garbage, KeyFile: srv.KeyFile}, "tlsconfig: load certificate " + garbage + " with key"},
		{"key of another certificate", tlsconfig.Options{CertFile: srv.CertFile, KeyFile: other.KeyFile}, "private key does not match public key"},
		{"missing client CA", tlsconfig.Options{CertFile: srv.CertFile, KeyFile: srv.KeyFile, ClientCAFile: missing}, "tlsconfig: load client CA: open " + missing},
		{"garbage client CA", tlsconfig.Options{CertFile: srv.CertFile, KeyFile: srv.KeyFile, ClientCAFile: garbage}, "tlsconfig: load client CA " + garbage + ": no PEM certificate found"},
		{"client CA is a key", tlsconfig.Options{CertFile: srv.CertFile, KeyFile: srv.KeyFile, ClientCAFile: srv.KeyFile}, "no PEM certificate found"},
		{"SANs without client CA", tlsconfig.Options{CertFile: srv.CertFile, KeyFile: srv.KeyFile, AllowedSANs: []string{"a.example"}}, "tlsconfig: allowed SANs require a client CA file"},
		{"bad SAN", tlsconfig.Options{CertFile: srv.CertFile, KeyFile: srv.KeyFile, ClientCAFile: caFile, AllowedSANs: []string{"a.*.example"}}, `tlsconfig: allowed SAN "a.*.example"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := tlsconfig.New(tt.o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New = %v, %v; want an error containing %q", r, err, tt.want)
			}
		})
	}
}

func TestParseSANs(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{"", nil, false},
		{" , ,", nil, false},
		{"a.example", []string{"a.example"}, false},
		{"spiffe://cluster.local/ns/a/sa/envoy, *.example.com ,10.0.0.1,fd00::1,ops@example.com,",
			[]string{"spiffe://cluster.local/ns/a/sa/envoy", "*.example.com", "10.0.0.1", "fd00::1", "ops@example.com"}, false},
		{"example.com.", []string{"example.com."}, false},
		{"a.*.example", nil, true},
		{"*", nil, true},
		{"*example.com", nil, true},
		{"a..example", nil, true},
		{"a b.example", nil, true},
		{"urn:x:y", nil, true},
		{"@example.com", nil, true},
		{"ops@", nil, true},
		{"a@b@c", nil, true},
		{"fe80::1%eth0", nil, true},
		{"://nohost", nil, true},
	}
	for _, tt := range tests {
		got, err := tlsconfig.ParseSANs(tt.in)
		if (err != nil) != tt.wantErr || strings.Join(got, "|") != strings.Join(tt.want, "|") || (got == nil) != (tt.want == nil) {
			t.Errorf("ParseSANs(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestPeerIdentity: a verified client certificate is named by its first
// SAN, URI first, else by its subject; an unverified one has no name.
func TestPeerIdentity(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "test CA")
	for _, tc := range []struct{ name, san, want string }{
		{"workload", "spiffe://example.org/ns/a/sa/b", "uri:spiffe://example.org/ns/a/sa/b"},
		{"envoy", "envoy.example.org", "dns:envoy.example.org"},
		{"ops", "ops@example.org", "email:ops@example.org"},
		{"addr", "192.0.2.7", "ip:192.0.2.7"},
		{"plain", "", "subject:CN=plain"},
	} {
		var sans []string
		if tc.san != "" {
			sans = append(sans, tc.san)
		}
		kp := ca.Client(t, dir, tc.name, sans...)
		cs := tls.ConnectionState{PeerCertificates: []*x509.Certificate{kp.Cert}}
		if got := tlsconfig.PeerIdentity(cs); got != "" {
			t.Errorf("%s, unverified: PeerIdentity = %q, want none", tc.name, got)
		}
		cs.VerifiedChains = [][]*x509.Certificate{{kp.Cert, ca.Cert}}
		if got := tlsconfig.PeerIdentity(cs); got != tc.want {
			t.Errorf("%s: PeerIdentity = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestLoadCAs: a CA file gives a pool that verifies what the CA issued;
// a missing file, one without a certificate, or a corrupt one is an error
// that names the file.
func TestLoadCAs(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "ca")
	srv := ca.Server(t, dir, "server", "localhost")
	pool, err := tlsconfig.LoadCAs(ca.WriteCert(t, dir, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "localhost"}); err != nil {
		t.Errorf("the pool does not verify the CA's certificate: %v", err)
	}
	empty := filepath.Join(dir, "empty.pem")
	corrupt := filepath.Join(dir, "corrupt.pem")
	if err := os.WriteFile(empty, []byte("no PEM here\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(corrupt, append(append([]byte{}, ca.CertPEM...), "-----BEGIN CERTIFICATE-----\nnot base64\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(dir, "missing.pem"), empty, corrupt} {
		if _, err := tlsconfig.LoadCAs(path); err == nil || !strings.Contains(err.Error(), filepath.Base(path)) {
			t.Errorf("LoadCAs(%s) = %v, want an error naming the file", filepath.Base(path), err)
		}
	}
}
