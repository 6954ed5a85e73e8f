package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/config/xds"
	"github.com/ratelimitd/ratelimitd/server"
)

// A rulesSource keeps the server's rules up to date while run runs, until
// ctx ends.
type rulesSource interface {
	run(ctx context.Context) error
}

// fileRules reloads the rules of --config when its files change or on
// SIGHUP.
type fileRules struct {
	initial *config.Rules
	watcher *config.Watcher
	hup     <-chan os.Signal
	log     *slog.Logger
}

// newFileRules returns the source of the rules of path, loaded within
// limits and with opts after settling for debounce (0: the default),
// initial already in force in srv; hup receives SIGHUP.
func newFileRules(path string, initial *config.Rules, limits config.Limits, debounce time.Duration, opts []config.Option, srv *server.Server, log *slog.Logger, hup <-chan os.Signal) *fileRules {
	watcher := config.NewWatcher(path, config.WatchOptions{
		Limits:   limits,
		Debounce: debounce,
		Options:  opts,
		OnLoad: func(r *config.Rules) {
			srv.SetRules(r)
			log.Info("rules reloaded", "config", path, "domains", len(r.Domains()), "files", len(r.Files()))
		},
		OnError: srv.RejectRules,
		OnWatchError: func(err error) {
			log.Warn("watching the rules; polling goes on", "err", err)
		},
	})
	return &fileRules{initial: initial, watcher: watcher, hup: hup, log: log}
}

func (s *fileRules) run(ctx context.Context) error {
	group, gctx := errgroup.WithContext(ctx)
	group.Go(func() error { return s.watcher.Run(gctx, s.initial) })
	group.Go(func() error {
		onHUP(gctx, s.hup, func() {
			s.log.Info("SIGHUP: reloading rules")
			s.watcher.Reload()
		})
		return nil
	})
	return group.Wait()
}

// onHUP calls f on each signal from hup until ctx ends.
func onHUP(ctx context.Context, hup <-chan os.Signal, f func()) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			f()
		}
	}
}

// xdsRules takes the rules from an xDS management server: the client's
// options hand each accepted set to the server. SIGHUP has nothing to
// reload.
type xdsRules struct {
	opts xds.Options
	hup  <-chan os.Signal
	log  *slog.Logger
}

func (s xdsRules) run(ctx context.Context) error {
	c, err := xds.New(s.opts) //nolint:contextcheck // the client runs until Close, deferred below, not until a context ends
	if err != nil {
		return fmt.Errorf("--xds-server: %w", err)
	}
	defer c.Close() //nolint:errcheck // only the connection's close, with nothing left to lose
	onHUP(ctx, s.hup, func() { s.log.Info("SIGHUP: the rules come from --xds-server; nothing to reload") })
	return nil
}
