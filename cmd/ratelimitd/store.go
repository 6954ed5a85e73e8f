package main

import (
	"context"
	"log/slog"
	"net/url"
	"strings"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/backend/redis"
)

// openStore returns the counter store --backend names, and a function
// that releases it.
func openStore(ctx context.Context, f *flags, log *slog.Logger) (backend.Store, func(), error) {
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
		return nil, nil, secretError{err, f.backend}
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
		return nil, nil, secretError{err, f.backend}
	}
	// Redis may come later: the failure mode answers until it does.
	pctx, cancel := context.WithTimeout(ctx, f.redis.timeout+f.redis.dialTimeout)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		log.Warn("Redis is not usable yet (down, or too old: see err); the failure mode answers until it is",
			"backend", redactBackend(f.backend), "failure_mode", f.failureMode.String(), "err", secretError{err, f.backend})
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

// secretError is an error about the --backend URL whose message may quote
// parts of it: it prints with the URL's passwords hidden.
type secretError struct {
	err     error
	backend string
}

func (e secretError) Error() string { return hideSecrets(e.err.Error(), e.backend) }

func (e secretError) Unwrap() error { return e.err }

// hideSecrets returns msg without the passwords of the Redis URL backend:
// the user information's and the values of query parameters named
// *password*, whole, and each piece of them between '/', '?' and '#' (a
// URL parser cuts a password there and may quote a part: `invalid port
// ":hunter" after host` for ":hunter/two@host"). Pieces shorter than
// minSecretPiece stay, so as not to garble the message's own words.
func hideSecrets(msg, backend string) string {
	_, rest, ok := strings.Cut(backend, "://")
	if !ok {
		return msg
	}
	var secrets []string
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		if _, pass, ok := strings.Cut(rest[:at], ":"); ok {
			secrets = append(secrets, pass)
			if p, err := url.PathUnescape(pass); err == nil {
				secrets = append(secrets, p)
			}
		}
	}
	if _, query, ok := strings.Cut(rest, "?"); ok {
		for p := range strings.SplitSeq(query, "&") {
			if name, value, ok := strings.Cut(p, "="); ok && strings.Contains(strings.ToLower(name), "password") {
				secrets = append(secrets, value)
				if v, err := url.QueryUnescape(value); err == nil {
					secrets = append(secrets, v)
				}
			}
		}
	}
	for _, secret := range secrets {
		if secret == "" {
			continue
		}
		msg = strings.ReplaceAll(msg, secret, "xxxxx")
		for piece := range strings.FieldsFuncSeq(secret, func(r rune) bool { return r == '/' || r == '?' || r == '#' }) {
			if len(piece) >= minSecretPiece {
				msg = strings.ReplaceAll(msg, piece, "xxxxx")
			}
		}
	}
	return msg
}

// minSecretPiece is the shortest piece of a password hideSecrets hides
// on its own.
const minSecretPiece = 4
