package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"

	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/config/xds"
	"github.com/ratelimitd/ratelimitd/server"
)

// xdsFlagsOn defines on fs the flags of rules over xDS, read into x.
func xdsFlagsOn(fs *flag.FlagSet, x *xdsFlags) {
	fs.StringVar(&x.server, "xds-server", "", "rules from this xDS management server (`host:port`, ADS, State of the World, RateLimitConfig resources) instead of --config")
	fs.StringVar(&x.nodeID, "xds-node-id", "", "node `id` sent to --xds-server, which picks the rules by it (required with --xds-server)")
	fs.StringVar(&x.nodeCluster, "xds-node-cluster", "", "node `cluster` sent to --xds-server")
	fs.StringVar(&x.nodeMetadata, "xds-node-metadata", "", "node metadata sent to --xds-server: a JSON `object`")
	fs.StringVar(&x.headers, "xds-headers", "", "gRPC metadata sent to --xds-server, such as a token: comma-separated `k=v` pairs; needs TLS or --xds-insecure-headers")
	fs.BoolVar(&x.insecureHeaders, "xds-insecure-headers", false, "send --xds-headers without TLS, readable by anyone on the path")
	fs.BoolVar(&x.tls, "xds-tls", false, "connect to --xds-server over TLS, trusting the system's CAs (any other --xds-tls-* flag implies it)")
	fs.StringVar(&x.tlsCA, "xds-tls-ca", "", "PEM `file` of the CAs that sign --xds-server's certificate (default: the system's)")
	fs.StringVar(&x.tlsCert, "xds-tls-cert", "", "PEM `file` of a client certificate for --xds-server (mutual TLS)")
	fs.StringVar(&x.tlsKey, "xds-tls-key", "", "PEM `file` of the client certificate's key")
	fs.StringVar(&x.tlsServerName, "xds-tls-server-name", "", "`name` --xds-server's certificate must carry (default: the host of --xds-server)")
	fs.BoolVar(&x.waitForRules, "xds-wait-for-rules", true, "report not ready until the first rules arrive from --xds-server; false: ready at once, answering OK (no rule) until they arrive")
	fs.DurationVar(&x.retryInterval, "xds-retry-interval", xds.DefaultMinBackoff, "first wait before connecting to --xds-server again; doubles on each failure, up to "+xds.DefaultMaxBackoff.String()+" or itself if longer")
}

// useTLS reports whether x asks for TLS to the management server.
func (x *xdsFlags) useTLS() bool {
	return x.tls || x.tlsCA != "" || x.tlsCert != "" || x.tlsKey != "" || x.tlsServerName != ""
}

// check returns what is wrong with x, given --xds-server.
func (x *xdsFlags) check() error {
	if x.nodeID == "" {
		return errors.New("--xds-server needs --xds-node-id: the management server picks the rules by it")
	}
	if (x.tlsCert == "") != (x.tlsKey == "") {
		return errors.New("--xds-tls-cert and --xds-tls-key go together")
	}
	if x.retryInterval <= 0 {
		return fmt.Errorf("--xds-retry-interval %v: want a positive duration", x.retryInterval)
	}
	if _, err := x.metadata(); err != nil {
		return err
	}
	headers, err := x.headerMap()
	if err != nil {
		return err
	}
	if len(headers) > 0 && !x.useTLS() && !x.insecureHeaders {
		return errors.New("--xds-headers would go out without TLS: set --xds-tls (or another --xds-tls-* flag), or --xds-insecure-headers to accept it")
	}
	return nil
}

// metadata returns --xds-node-metadata as a Struct, nil when empty.
func (x *xdsFlags) metadata() (*structpb.Struct, error) {
	st, err := xds.ParseNodeMetadata(x.nodeMetadata)
	if err != nil {
		return nil, fmt.Errorf("--xds-node-metadata: %w", err)
	}
	return st, nil
}

// headerMap returns --xds-headers as a map (gRPC sends the keys in lower
// case).
func (x *xdsFlags) headerMap() (map[string]string, error) {
	if x.headers == "" {
		return nil, nil
	}
	kv, err := parseKeyValues(x.headers)
	if err != nil {
		return nil, fmt.Errorf("--xds-headers: %w", err)
	}
	return kv, nil
}

// credentials returns the transport credentials x asks for, nil for
// plaintext.
func (x *xdsFlags) credentials() (credentials.TransportCredentials, error) {
	if !x.useTLS() {
		return nil, nil
	}
	return xds.TLS{CAFile: x.tlsCA, CertFile: x.tlsCert, KeyFile: x.tlsKey, ServerName: x.tlsServerName}.Credentials()
}

// xdsOptions returns the options of an xDS client that hands the rules it
// accepts to srv and counts those it refuses as srv counts refused file
// reloads.
func xdsOptions(x *xdsFlags, opts []config.Option, srv *server.Server, log *slog.Logger) (xds.Options, error) {
	creds, err := x.credentials()
	if err != nil {
		return xds.Options{}, err
	}
	meta, err := x.metadata()
	if err != nil {
		return xds.Options{}, err
	}
	headers, err := x.headerMap()
	if err != nil {
		return xds.Options{}, err
	}
	return xds.Options{
		Target:          x.server,
		Credentials:     creds,
		InsecureHeaders: x.insecureHeaders,
		Headers:         headers,
		NodeID:          x.nodeID,
		NodeCluster:     x.nodeCluster,
		NodeMetadata:    meta,
		ConfigOptions:   opts,
		// The client logs each set, accepted or refused, with its version.
		OnRules:    srv.SetRules,
		OnReject:   func(string, error) { srv.CountRejectedRules() },
		Logger:     log,
		MinBackoff: x.retryInterval, // doubling up to DefaultMaxBackoff, or itself if longer
	}, nil
}
