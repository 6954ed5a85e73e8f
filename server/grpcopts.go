package server

import (
	"math"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// The defaults of GRPCConnLimits, which the daemon's --grpc-* connection
// flags take.
const (
	// Envoy opens another connection when one reaches the limit; a
	// decision takes about a millisecond, so 1000 RPCs in flight on one
	// connection is some 1M decisions a second.
	DefaultGRPCMaxConcurrentStreams = 1000
	// grpc-go clients ping at most every 10 s; half that leaves room for
	// timers firing late. Faster pingers get GOAWAY ENHANCE_YOUR_CALM.
	DefaultGRPCKeepaliveMinTime = 5 * time.Second
	// Envoy's connection_keepalive, when set, pings idle connections too.
	DefaultGRPCKeepalivePermitWithoutStream = true
	// Below the 350 s after which some cloud load balancers drop an idle
	// flow silently: a GOAWAY is cleaner.
	DefaultGRPCMaxConnectionIdle = 5 * time.Minute
	// So that clients spread over replicas added since; gRPC adds ±10%
	// jitter so that connections do not all end at once.
	DefaultGRPCMaxConnectionAge = 30 * time.Minute
	// Decisions take milliseconds; the grace bounds a connection's
	// long-lived streams (health Watch), which the client opens again.
	DefaultGRPCMaxConnectionAgeGrace = 30 * time.Second
	// A client silent this long is pinged, to find peers that vanished
	// without closing (a node lost, a NAT entry dropped).
	DefaultGRPCKeepaliveTime = time.Minute
	// gRPC's own default: how long a ping may go unanswered.
	DefaultGRPCKeepaliveTimeout = 20 * time.Second
)

// GRPCConnLimits bound what one client connection to the gRPC server may
// hold and how long, and find peers gone without closing. A zero duration
// means no limit, except for KeepaliveMinTime and KeepaliveTimeout, which
// must be positive (gRPC would take 0 as its own default).
type GRPCConnLimits struct {
	// MaxConcurrentStreams bounds the RPCs in flight on one connection;
	// past it, the next waits. 0: no limit.
	MaxConcurrentStreams uint32
	// KeepaliveMinTime is the shortest interval between a client's
	// keepalive pings: a client pinging faster gets GOAWAY
	// ENHANCE_YOUR_CALM.
	KeepaliveMinTime time.Duration
	// KeepalivePermitWithoutStream accepts pings on connections with no
	// RPC in flight.
	KeepalivePermitWithoutStream bool
	// MaxConnectionIdle closes (GOAWAY) a connection without an RPC for
	// this long.
	MaxConnectionIdle time.Duration
	// MaxConnectionAge closes (GOAWAY) a connection this old, ±10%; its
	// RPCs in flight may go on for MaxConnectionAgeGrace.
	MaxConnectionAge, MaxConnectionAgeGrace time.Duration
	// KeepaliveTime pings a client silent for this long; KeepaliveTimeout
	// closes a connection whose ping, or sent data, goes unacknowledged
	// this long.
	KeepaliveTime, KeepaliveTimeout time.Duration
}

// DefaultGRPCConnLimits returns the limits of the Default constants.
func DefaultGRPCConnLimits() GRPCConnLimits {
	return GRPCConnLimits{
		MaxConcurrentStreams:         DefaultGRPCMaxConcurrentStreams,
		KeepaliveMinTime:             DefaultGRPCKeepaliveMinTime,
		KeepalivePermitWithoutStream: DefaultGRPCKeepalivePermitWithoutStream,
		MaxConnectionIdle:            DefaultGRPCMaxConnectionIdle,
		MaxConnectionAge:             DefaultGRPCMaxConnectionAge,
		MaxConnectionAgeGrace:        DefaultGRPCMaxConnectionAgeGrace,
		KeepaliveTime:                DefaultGRPCKeepaliveTime,
		KeepaliveTimeout:             DefaultGRPCKeepaliveTimeout,
	}
}

// ServerOptions returns the grpc.ServerOptions that enforce l, to append
// to Server.GRPCOptions's.
func (l GRPCConnLimits) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(l.MaxConcurrentStreams), // 0: gRPC's no limit
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             l.KeepaliveMinTime,
			PermitWithoutStream: l.KeepalivePermitWithoutStream,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle:     orNever(l.MaxConnectionIdle),
			MaxConnectionAge:      orNever(l.MaxConnectionAge),
			MaxConnectionAgeGrace: orNever(l.MaxConnectionAgeGrace),
			Time:                  orNever(l.KeepaliveTime),
			Timeout:               l.KeepaliveTimeout,
		}),
	}
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
