package main

import (
	"fmt"
	"math"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// The defaults of the flags that bound what one client connection may
// hold. The flags' help and docs/operations.md say why each is what it is.
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

	// Envoy opens another connection when one reaches the limit; a
	// decision takes about a millisecond, so 1000 RPCs in flight on one
	// connection is some 1M decisions a second.
	defaultGRPCMaxConcurrentStreams = 1000
	// grpc-go clients ping at most every 10 s; half that leaves room for
	// timers firing late. Faster pingers get GOAWAY ENHANCE_YOUR_CALM.
	defaultGRPCKeepaliveMinTime = 5 * time.Second
	// Envoy's connection_keepalive, when set, pings idle connections too.
	defaultGRPCKeepalivePermitWithoutStream = true
	// Below the 350 s after which some cloud load balancers drop an idle
	// flow silently: a GOAWAY is cleaner.
	defaultGRPCMaxConnectionIdle = 5 * time.Minute
	// So that clients spread over replicas added since; gRPC adds ±10%
	// jitter so that connections do not all end at once.
	defaultGRPCMaxConnectionAge = 30 * time.Minute
	// Decisions take milliseconds; the grace bounds a connection's
	// long-lived streams (health Watch), which the client opens again.
	defaultGRPCMaxConnectionAgeGrace = 30 * time.Second
	// A client silent this long is pinged, to find peers that vanished
	// without closing (a node lost, a NAT entry dropped).
	defaultGRPCKeepaliveTime = time.Minute
	// gRPC's own default: how long a ping may go unanswered.
	defaultGRPCKeepaliveTimeout = 20 * time.Second

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

// never is how gRPC spells "no limit" for a duration: 0 there means its
// own default.
const never = time.Duration(math.MaxInt64)

// orNever returns d, or never for 0.
func orNever(d time.Duration) time.Duration {
	if d == 0 {
		return never
	}
	return d
}

// options returns the gRPC server options that bound a connection, to
// append to the server package's.
func (b grpcConnFlags) options() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(uint32(b.maxConcurrentStreams)), // 0: no limit; check bounds it
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             b.keepaliveMinTime,
			PermitWithoutStream: b.keepalivePermitWithoutStream,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle:     orNever(b.maxConnectionIdle),
			MaxConnectionAge:      orNever(b.maxConnectionAge),
			MaxConnectionAgeGrace: orNever(b.ageGrace),
			Time:                  orNever(b.keepaliveTime),
			Timeout:               b.keepaliveTimeout,
		}),
	}
}
