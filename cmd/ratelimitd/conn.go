package main

import (
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/ratelimitd/ratelimitd/server"
)

// The defaults of the flags that bound what one HTTP client connection
// may hold (the gRPC ones are server.DefaultGRPC...). The flags' help and
// docs/operations.md say why each is what it is.
const (
	// A decision request is a few hundred bytes: a client that needs 10 s
	// to send one is stalled or hostile.
	defaultHTTPReadTimeout = 10 * time.Second
	// From the end of the headers to the last byte of the answer: ample
	// for a decision, a probe or a scrape.
	defaultHTTPWriteTimeout = 30 * time.Second
	// Above Go's http.Transport's 90 s, so that a client usually closes
	// an idle connection first and never sends on one being closed.
	defaultHTTPIdleTimeout = 2 * time.Minute
	// Above Envoy's default limit on request headers (60 KiB), so that
	// whatever Envoy forwards fits.
	defaultHTTPMaxHeaderBytes = 64 << 10

	// httpReadHeaderTimeout bounds the headers when --http-read-timeout
	// is 0: no connection may hold a listener with a header forever.
	httpReadHeaderTimeout = 10 * time.Second
)

// httpConnFlags bound the HTTP and debug listeners' connections.
type httpConnFlags struct {
	readTimeout, writeTimeout, idleTimeout time.Duration
	maxHeaderBytes                         int
}

// grpcConnFlags bound the gRPC listener's connections.
type grpcConnFlags struct {
	maxConcurrentStreams            uint
	keepaliveMinTime                time.Duration
	keepalivePermitWithoutStream    bool
	maxConnectionIdle               time.Duration
	maxConnectionAge, ageGrace      time.Duration
	keepaliveTime, keepaliveTimeout time.Duration
}

// check returns what is wrong with the bounds, or nil.
func (b httpConnFlags) check() error {
	if b.readTimeout < 0 || b.writeTimeout < 0 || b.idleTimeout < 0 || b.maxHeaderBytes < 0 {
		return fmt.Errorf("--http-read-timeout, --http-write-timeout, --http-idle-timeout and --http-max-header-bytes must not be negative")
	}
	return nil
}

// check returns what is wrong with the bounds, or nil.
func (b grpcConnFlags) check() error {
	switch {
	case b.maxConcurrentStreams > math.MaxUint32:
		return fmt.Errorf("--grpc-max-concurrent-streams %d: want at most %d", b.maxConcurrentStreams, uint32(math.MaxUint32))
	case b.keepaliveMinTime <= 0 || b.keepaliveTimeout <= 0:
		return fmt.Errorf("--grpc-keepalive-min-time and --grpc-keepalive-timeout must be positive")
	case b.maxConnectionIdle < 0 || b.maxConnectionAge < 0 || b.ageGrace < 0 || b.keepaliveTime < 0:
		return fmt.Errorf("--grpc-max-connection-idle, --grpc-max-connection-age, --grpc-max-connection-age-grace and --grpc-keepalive-time must not be negative")
	}
	return nil
}

// httpServer returns a server of h bounded by b. On the debug listener
// too: net/http/pprof extends the write deadline by the ?seconds= a
// profile or trace asks for.
func httpServer(h http.Handler, b httpConnFlags) *http.Server {
	s := &http.Server{
		Handler:        h,
		ReadTimeout:    b.readTimeout, // headers and body: net/http uses it for the headers too
		WriteTimeout:   b.writeTimeout,
		IdleTimeout:    b.idleTimeout, // 0: net/http uses ReadTimeout
		MaxHeaderBytes: b.maxHeaderBytes,
	}
	if b.readTimeout == 0 {
		s.ReadHeaderTimeout = httpReadHeaderTimeout
	}
	return s
}

// limits returns the bounds of b, checked, for server.GRPCConnLimits.
func (b grpcConnFlags) limits() server.GRPCConnLimits {
	return server.GRPCConnLimits{
		MaxConcurrentStreams:         uint32(b.maxConcurrentStreams), // check bounds it
		KeepaliveMinTime:             b.keepaliveMinTime,
		KeepalivePermitWithoutStream: b.keepalivePermitWithoutStream,
		MaxConnectionIdle:            b.maxConnectionIdle,
		MaxConnectionAge:             b.maxConnectionAge,
		MaxConnectionAgeGrace:        b.ageGrace,
		KeepaliveTime:                b.keepaliveTime,
		KeepaliveTimeout:             b.keepaliveTimeout,
	}
}
