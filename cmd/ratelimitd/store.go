package main

import (
	"log/slog"
	"strings"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/backend/redis"
)

// openStore returns the counter store --backend names, and a function
// that releases it. Redis may come later: the failure mode answers until
// it does, and the store probes it until it first answers (its state is
// "unreached" until then).
func openStore(f *flags, log *slog.Logger) (backend.Store, func(), error) {
	if f.backend == "memory" {
		s := memory.New(memory.Options{MaxKeys: f.memoryMaxKeys})
		return s, func() { s.Close() }, nil
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
		return nil, nil, err
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
		return nil, nil, err
	}
	return s, func() { s.Close(); client.Close() }, nil
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
