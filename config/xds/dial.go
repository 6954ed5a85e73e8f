package xds

import (
	"crypto/tls"
	"errors"
	"fmt"

	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimitd/ratelimitd/internal/tlsconfig"
)

// TLS names the files of a TLS connection to the management server, as an
// operator gives them. The zero value trusts the system's CAs and presents
// no client certificate.
type TLS struct {
	// CAFile is a PEM file of the CAs that sign the server's certificate;
	// "" trusts the system's.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate (and chain) and
	// its key, for mutual TLS: both or neither.
	CertFile, KeyFile string
	// ServerName is the name the server's certificate must carry; ""
	// means the host of Options.Target.
	ServerName string
}

// Credentials reads t's files, once, and returns the transport credentials
// for Options.Credentials: TLS 1.2 or later. The error names the file at
// fault.
func (t TLS) Credentials() (credentials.TransportCredentials, error) {
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, errors.New("xds: a client certificate and its key go together")
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pool, err := tlsconfig.LoadCAs(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("xds: CA file: %w", err)
		}
		conf.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("xds: client certificate %s and key %s: %w", t.CertFile, t.KeyFile, err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	return credentials.NewTLS(conf), nil
}

// ParseNodeMetadata parses a JSON object, such as {"zone": "a"}, into
// Options.NodeMetadata. An empty string is no metadata: nil.
func ParseNodeMetadata(js string) (*structpb.Struct, error) {
	if js == "" {
		return nil, nil
	}
	var st structpb.Struct
	if err := protojson.Unmarshal([]byte(js), &st); err != nil {
		return nil, fmt.Errorf("want a JSON object: %w", err)
	}
	return &st, nil
}
