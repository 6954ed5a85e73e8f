package main

import (
	"cmp"
	"fmt"
	"log/slog"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/backend/redis"
)

// openStore returns the counter store --backend names, and a function
// that releases it. Redis may come later: the failure mode answers until
// it does, and the store probes it until it first answers (its state is
// "unreached" until then). With --backend-per-second, the counters of
// one-second limits are kept in a second Redis, which shares the TLS
// files and the key prefix, and whose state counts as much.
func openStore(f *flags, log *slog.Logger) (backend.Store, func(), error) {
	if f.backend == "memory" {
		s := memory.New(memory.Options{MaxKeys: f.memoryMaxKeys})
		return s, func() { s.Close() }, nil
	}
	redis.SetLogger(log.With("component", "go-redis"))
	var perSecond *redis.Store
	closeClients := func() {}
	if f.redis.perSecond != "" {
		client, err := f.redis.client(f.redis.perSecond, cmp.Or(f.redis.perSecondPool, f.redis.poolSize))
		if err != nil {
			return nil, nil, fmt.Errorf("--backend-per-second: %w", err)
		}
		closeClients = func() { client.Close() }
		perSecond, err = redis.New(client, f.redis.options(cmp.Or(f.redis.perSecondTimeout, f.redis.timeout), -1, //nolint:contextcheck // New does no I/O; its breaker logs state changes with a Background ctx
			log.With("component", "redis", "store", "per-second")))
		if err != nil {
			client.Close()
			return nil, nil, fmt.Errorf("--backend-per-second: %w", err)
		}
	}
	client, err := f.redis.client(f.backend, f.redis.poolSize)
	if err == nil {
		cache := f.localCacheSize
		if !f.localCache {
			cache = -1
		}
		opts := f.redis.options(f.redis.timeout, cache, log.With("component", "redis"))
		opts.PerSecond = perSecond
		var s *redis.Store
		s, err = redis.New(client, opts) //nolint:contextcheck // New does no I/O; its breaker logs state changes with a Background ctx
		if err == nil {
			// s closes perSecond.
			return s, func() { s.Close(); client.Close(); closeClients() }, nil
		}
		client.Close()
	}
	if perSecond != nil {
		perSecond.Close()
	}
	closeClients()
	return nil, nil, err
}

// client returns a client to the Redis at url, with pool connections per
// node (0: go-redis's default).
func (r *redisFlags) client(url string, pool int) (goredis.UniversalClient, error) {
	return redis.NewClient(url, redis.ClientOptions{
		PoolSize:     pool,
		DialTimeout:  r.dialTimeout,
		ReadTimeout:  r.readTimeout,
		WriteTimeout: r.writeTimeout,
		CAFile:       r.tlsCA,
		CertFile:     r.tlsCert,
		KeyFile:      r.tlsKey,
	})
}

// options returns the options of a Redis store with timeout and cache
// (see redis.Options.LocalCache), logging to log.
func (r *redisFlags) options(timeout time.Duration, cache int, log *slog.Logger) redis.Options {
	return redis.Options{
		Prefix:           r.keyPrefix,
		Timeout:          timeout,
		LocalCache:       cache,
		BreakerFailures:  r.breakerFailures,
		BreakerOpenDelay: r.breakerOpen,
		Logger:           log,
	}
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
