package main

import (
	"fmt"
	"math"
	"time"

	"github.com/ratelimitd/ratelimitd/server"
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

// limits returns the bounds of b, checked, for server.HTTPConnLimits.
func (b httpConnFlags) limits() server.HTTPConnLimits {
	return server.HTTPConnLimits{ReadTimeout: b.readTimeout, WriteTimeout: b.writeTimeout, IdleTimeout: b.idleTimeout, MaxHeaderBytes: b.maxHeaderBytes}
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
