package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/ratelimitd/ratelimitd/backend/redis"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/server"
)

// serve runs the daemon until ctx is done, then drains and stops.
func serve(ctx context.Context, f *flags, stderr io.Writer) error {
	log := newLogger(f, stderr)
	rules, err := config.Load(f.config)
	if err != nil {
		log.Error("invalid rules; not starting", "config", f.config, "err", err)
		return exitError{1}
	}
	store, closeStore, err := openStore(ctx, f, log)
	if err != nil {
		log.Error("cannot use --backend; not starting", "err", err)
		return exitError{1}
	}
	defer closeStore()

	srv := server.New(store, rules, server.Options{
		Headers:     f.headers,
		ShadowMode:  f.shadowMode,
		FailureMode: f.failureMode,
		Logger:      log.With("component", "server"),
	})
	grpcLis, err := net.Listen("tcp", f.grpcAddr)
	if err != nil {
		return fmt.Errorf("gRPC listener: %w", err)
	}
	httpLis, err := net.Listen("tcp", f.httpAddr)
	if err != nil {
		grpcLis.Close()
		return fmt.Errorf("HTTP listener: %w", err)
	}
	g := grpc.NewServer(srv.GRPCOptions()...)
	srv.Register(g)
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}

	watcher := config.NewWatcher(f.config, config.WatchOptions{
		OnLoad: func(r *config.Rules) {
			srv.SetRules(r)
			log.Info("rules reloaded", "config", f.config, "domains", len(r.Domains()), "files", len(r.Files()))
		},
		OnError: func(err error) {
			log.Error("invalid rules; keeping the previous ones", "config", f.config, "err", err)
		},
	})

	// Catch SIGHUP before announcing the start: its default action would
	// end the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	log.Info("ratelimitd started", "version", version(), "grpc", grpcLis.Addr().String(), "http", httpLis.Addr().String(),
		"config", f.config, "domains", len(rules.Domains()), "backend", redis.Redact(f.backend), "failure_mode", f.failureMode.String())

	group, gctx := errgroup.WithContext(ctx)
	group.Go(func() error { return g.Serve(grpcLis) })
	group.Go(func() error {
		if err := hs.Serve(httpLis); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	group.Go(func() error { return watcher.Run(gctx, rules) })
	group.Go(func() error {
		for {
			select {
			case <-gctx.Done():
				return nil
			case <-hup:
				log.Info("SIGHUP: reloading rules")
				watcher.Reload()
			}
		}
	})
	group.Go(func() error {
		<-gctx.Done()
		log.Info("shutting down", "timeout", f.shutdownTimeout)
		srv.Shutdown()
		stopped := make(chan struct{})
		go func() { g.GracefulStop(); close(stopped) }()
		timer := time.NewTimer(f.shutdownTimeout)
		defer timer.Stop()
		select {
		case <-stopped:
		case <-timer.C:
			log.Warn("drain timed out; closing remaining connections")
			g.Stop()
			<-stopped
		}
		hctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return hs.Shutdown(hctx)
	})
	err = group.Wait()
	if ctx.Err() != nil && err == nil {
		log.Info("stopped")
		return nil
	}
	return err
}

func newLogger(f *flags, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: f.logLevel}
	if f.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// checkConfig validates the rules at args[0] and exits non-zero on error.
func checkConfig(args []string, stdout, stderr io.Writer) error {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: ratelimitd check-config PATH")
		return exitError{2}
	}
	rules, err := config.Load(args[0])
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitError{1}
	}
	fmt.Fprintf(stdout, "%s: ok (%s in %s)\n", args[0], count(len(rules.Domains()), "domain"), count(len(rules.Files()), "file"))
	return nil
}

// count returns "1 thing" or "n things".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
