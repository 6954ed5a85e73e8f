package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/backend/redis"
)

// openStore returns the counter store --backend names, a probe that
// checks that it answers (nil for the memory store, which always does;
// see server.Options.StoreProbe), and a function that releases it.
func openStore(f *flags, log *slog.Logger) (_ backend.Store, probe func(context.Context) error, release func(), _ error) {
	if f.backend == "memory" {
		s := memory.New(memory.Options{MaxKeys: f.memoryMaxKeys})
		return s, nil, func() { s.Close() }, nil
	}
	redis.SetLogger(log.With("component", "go-redis"))
	client, err := redis.NewClient(f.backend, redis.ClientOptions{
		PoolSize:     f.redis.poolSize,
		DialTimeout:  f.redis.dialTimeout,
		ReadTimeout:  f.redis.readTimeout,
		WriteTimeout: f.redis.writeTimeout,
		CAFile:       f.redis.tlsCA,
		CertFile:     f.redis.tlsCert,
		KeyFile:      f.redis.tlsKey,
	})
	if err != nil {
		return nil, nil, nil, err
	}
	cache := f.localCacheSize
	if !f.localCache {
		cache = -1
	}
	s, err := redis.New(client, redis.Options{ //nolint:contextcheck // New does no I/O; its breaker logs state changes with a Background ctx
		Prefix:           f.redis.keyPrefix,
		Timeout:          f.redis.timeout,
		LocalCache:       cache,
		BreakerFailures:  f.redis.breakerFailures,
		BreakerOpenDelay: f.redis.breakerOpen,
		Logger:           log.With("component", "redis"),
	})
	if err != nil {
		client.Close()
		return nil, nil, nil, err
	}
	// Redis may come later: the failure mode answers until it does, and
	// the server probes it with a PING until it first answers.
	probe = func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, f.redis.timeout+f.redis.dialTimeout)
		defer cancel()
		if err := client.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("redis %s: %w", redactBackend(f.backend), err)
		}
		return nil
	}
	return s, probe, func() { s.Close(); client.Close() }, nil
}

// redactBackend returns a --backend value fit to print: a URL with its
// passwords hidden by redis.Redact, and in place of anything else that may
// hold user information ("user:pass@host", the scheme forgotten), a
// placeholder.
func redactBackend(backend string) string {
	if strings.Contains(backend, "://") {
		return redis.Redact(backend)
	}
	if strings.ContainsAny(backend, "@?") {
		return "(hidden: not a URL, but it may hold a password)"
	}
	return backend
}
