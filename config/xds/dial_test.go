package xds_test

import (
	"crypto/tls"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/config/xds"
	"github.com/ratelimitd/ratelimitd/internal/certtest"
)

// TestTLSCredentialsFromFiles: TLS's files give a client that the
// management server accepts under mutual TLS, checking the server's name;
// a name the server's certificate lacks is refused.
func TestTLSCredentialsFromFiles(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "xds-ca")
	srvCert := ca.Server(t, dir, "xds", "xds.test")
	cliCert := ca.Client(t, dir, "ratelimitd")
	m := startServer(t, "127.0.0.1:0", grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{srvCert.TLS},
		ClientCAs:    ca.Pool(),
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	})))
	m.set(t, "1", domain("a", "k", 7))
	files := xds.TLS{CAFile: ca.WriteCert(t, dir, "ca"), CertFile: cliCert.CertFile, KeyFile: cliCert.KeyFile, ServerName: "xds.test"}
	creds, err := files.Credentials()
	if err != nil {
		t.Fatal(err)
	}
	updates := make(chan *config.Rules, 4)
	c, err := xds.New(xds.Options{Target: m.addr, Credentials: creds, NodeID: nodeID, OnRules: func(r *config.Rules) { updates <- r }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if r := nextRules(t, updates); requests(r, "a", "k") != 7 {
		t.Fatalf("rules over TLS from files: a %d, want 7", requests(r, "a", "k"))
	}

	// Another server name: the handshake fails, and no rules come.
	files.ServerName = "other.test"
	if creds, err = files.Credentials(); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	wrong, err := xds.New(xds.Options{Target: m.addr, Credentials: creds, NodeID: nodeID, Logger: slog.New(rec),
		MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	rec.waitFor(t, "xds: stream ended, reconnecting", 1)
	if wrong.Ready() {
		t.Error("ready with a server certificate that lacks the server name")
	}
}

func TestTLSCredentialsErrors(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "xds-ca")
	cli := ca.Client(t, dir, "ratelimitd")
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		tls  xds.TLS
		want string
	}{
		{xds.TLS{CertFile: cli.CertFile}, "go together"},
		{xds.TLS{KeyFile: cli.KeyFile}, "go together"},
		{xds.TLS{CAFile: filepath.Join(dir, "missing.pem")}, "missing.pem"},
		{xds.TLS{CAFile: garbage}, "garbage.pem"},
		{xds.TLS{CertFile: cli.CertFile, KeyFile: garbage}, "garbage.pem"},
	} {
		if _, err := tt.tls.Credentials(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v.Credentials() = %v, want an error naming %q", tt.tls, err, tt.want)
		}
	}
	if _, err := (xds.TLS{}).Credentials(); err != nil {
		t.Errorf("the system's CAs: %v", err)
	}
}

func TestParseNodeMetadata(t *testing.T) {
	st, err := xds.ParseNodeMetadata(`{"zone": "z", "n": 2}`)
	if err != nil || st.GetFields()["zone"].GetStringValue() != "z" || st.GetFields()["n"].GetNumberValue() != 2 {
		t.Errorf("ParseNodeMetadata(object) = %v, %v", st, err)
	}
	if st, err := xds.ParseNodeMetadata(""); st != nil || err != nil {
		t.Errorf(`ParseNodeMetadata("") = %v, %v; want nil, nil`, st, err)
	}
	for _, bad := range []string{"[1]", `"z"`, "{", "zone=z"} {
		if _, err := xds.ParseNodeMetadata(bad); err == nil || !strings.Contains(err.Error(), "JSON object") {
			t.Errorf("ParseNodeMetadata(%q) = %v, want an error asking for a JSON object", bad, err)
		}
	}
}
