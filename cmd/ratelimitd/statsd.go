package main

import (
	"context"
	"log/slog"

	gostats "github.com/lyft/gostats"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/cmd/ratelimitd/internal/statsd"
)

// startStatsd starts, with --statsd-addr, the exporter of
// envoyproxy/ratelimit's statsd series, and returns the store the server
// counts in (nil without it) and a function that stops it after a last
// flush. Besides the server's series it sends, as the reference does,
// the Go runtime's (ratelimit.go.*) and the local cache's
// (ratelimit.localcache.*).
func startStatsd(f *flags, log *slog.Logger, reg prometheus.Registerer, store backend.Store) (gostats.Store, func(), error) {
	if f.statsd.addr == "" {
		return nil, func() {}, nil
	}
	exp, err := statsd.New(statsd.Options{
		Addr:          f.statsd.addr,
		Network:       f.statsd.network,
		FlushInterval: f.statsd.interval,
		Tags:          f.statsd.tags,
		Logger:        log.With("component", "statsd"),
		Registerer:    reg,
	})
	if err != nil {
		return nil, nil, err
	}
	root := exp.Root()
	exp.Store().AddStatGenerator(gostats.NewRuntimeStats(root.Scope("go")))
	if c, ok := store.(backend.LocalCacheReporter); ok {
		exp.Store().AddStatGenerator(statsd.LocalCache(c, root.Scope("localcache")))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		exp.Run(ctx)
	}()
	return exp.Store(), func() { cancel(); <-done }, nil
}
