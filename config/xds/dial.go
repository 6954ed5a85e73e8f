package xds

import (
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
	conf, err := tlsconfig.Client(t.CAFile, t.CertFile, t.KeyFile, t.ServerName)
	if err != nil {
		return nil, fmt.Errorf("xds: %w", err)
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
