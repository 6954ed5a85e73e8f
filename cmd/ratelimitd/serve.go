package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/server"
)

// serve runs the daemon until ctx is done, then drains and stops.
func serve(ctx context.Context, f *flags, stderr io.Writer) error {
	log := newLogger(f, stderr)
	rules, err := config.Load(f.config, config.WithLimits(f.configLimits))
	if err != nil {
		log.Error("invalid rules; not starting", "config", f.config, "err", err)
		return exitError{1}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "ratelimitd_build_info",
			Help:        "Always 1; the labels name the running build.",
			ConstLabels: prometheus.Labels{"version": version(), "goversion": runtime.Version()},
		}, func() float64 { return 1 }),
	)
	grpcTLS, httpTLS, err := openTLS(f, log, reg)
	if err != nil {
		log.Error("cannot use the TLS files; not starting", "err", err)
		return exitError{1}
	}
	store, closeStore, err := openStore(ctx, f, log)
	if err != nil {
		log.Error("cannot use --backend; not starting", "err", err)
		return exitError{1}
	}
	defer closeStore()
	if c, ok := store.(prometheus.Collector); ok {
		reg.MustRegister(c)
	}
	tp, stopTracing, err := startTracing(ctx, f.tracing)
	if err != nil {
		log.Error("cannot trace; not starting", "err", err)
		return exitError{1}
	}
	defer stopTracing(log)

	srv := server.New(store, rules, server.Options{
		Headers:        f.headers,
		ShadowMode:     f.shadowMode,
		FailureMode:    f.failureMode,
		Logger:         log.With("component", "server"),
		Registry:       reg,
		NearLimitRatio: f.nearLimitRatio,
		TracerProvider: tp,
		DisableJSON:    !f.httpJSON,
	})
	if f.tls.grpcClientCA != "" && f.httpJSON {
		log.Warn("POST /json on the HTTP listener decides without the gRPC listener's mutual TLS: set --http-json=false, or keep --http-addr private")
	}
	grpcOpts := append(srv.GRPCOptions(), f.grpcConn.options()...)
	if grpcTLS != nil {
		grpcOpts = append(grpcOpts, grpc.Creds(credentials.NewTLS(grpcTLS.Config())))
	}
	g := grpc.NewServer(grpcOpts...)
	srv.Register(g)
	hs := httpServer(srv.Handler(), f.httpConn)
	if httpTLS != nil {
		hs.TLSConfig = httpTLS.Config()
	}
	var ds *http.Server // /debug/pprof, with --debug-addr
	if f.debugAddr != "" {
		ds = httpServer(debugHandler(), f.httpConn)
	}

	var lis listeners
	defer lis.close()
	grpcLis, err := lis.listen("gRPC", f.grpcAddr)
	if err != nil {
		return err
	}
	httpLis, err := lis.listen("HTTP", f.httpAddr)
	if err != nil {
		return err
	}
	var debugLis net.Listener
	if ds != nil {
		if debugLis, err = lis.listen("debug", f.debugAddr); err != nil {
			return err
		}
	}

	watcher := config.NewWatcher(f.config, config.WatchOptions{
		Limits: f.configLimits,
		OnLoad: func(r *config.Rules) {
			srv.SetRules(r)
			log.Info("rules reloaded", "config", f.config, "domains", len(r.Domains()), "files", len(r.Files()))
		},
		OnError: srv.RejectRules,
		OnWatchError: func(err error) {
			log.Warn("watching the rules; polling goes on", "err", err)
		},
	})

	// Catch SIGHUP before announcing the start: its default action would
	// end the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	started := []any{"version", version(), "grpc", grpcLis.Addr().String(), "http", httpLis.Addr().String(),
		"grpc_tls", tlsMode(grpcTLS != nil, f.tls.grpcClientCA != ""), "http_tls", httpTLS != nil,
		"config", f.config, "domains", len(rules.Domains()), "backend", redactBackend(f.backend), "failure_mode", f.failureMode.String()}
	if debugLis != nil {
		started = append(started, "debug", debugLis.Addr().String())
	}
	log.Info("ratelimitd started", started...)

	group, gctx := errgroup.WithContext(ctx)
	group.Go(func() error {
		// A signal right after the start may stop g before it serves.
		if err := g.Serve(grpcLis); !errors.Is(err, grpc.ErrServerStopped) {
			return err
		}
		return nil
	})
	group.Go(func() error {
		serve := func() error { return hs.Serve(httpLis) }
		if httpTLS != nil {
			serve = func() error { return hs.ServeTLS(httpLis, "", "") }
		}
		if err := serve(); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	if ds != nil {
		group.Go(func() error {
			if err := ds.Serve(debugLis); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
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
		log.Info("shutting down", "delay", f.shutdownDelay, "timeout", f.shutdownTimeout)
		srv.Shutdown()
		// Keep serving while load balancers see NOT_SERVING and 503
		// and take this replica out.
		time.Sleep(f.shutdownDelay)
		srv.EndHealthWatches()
		if ds != nil {
			_ = ds.Close() // a profile being taken is not worth waiting for
		}
		// gRPC and HTTP (/json, a scrape) drain together, within
		// --shutdown-timeout; what is left then is closed, which is no
		// failure of the process.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(gctx), f.shutdownTimeout)
		defer cancel()
		httpDrained := make(chan error, 1)
		go func() { httpDrained <- hs.Shutdown(dctx) }()
		stopped := make(chan struct{})
		go func() { g.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-dctx.Done():
			log.Warn("drain timed out; closing remaining connections")
			g.Stop()
			<-stopped
		}
		if err := <-httpDrained; err != nil {
			_ = hs.Close()
		}
		return nil
	})
	err = group.Wait()
	if ctx.Err() != nil && err == nil {
		log.Info("stopped")
		return nil
	}
	return err
}

// listeners opens the daemon's listeners and closes them all if one
// fails.
type listeners []net.Listener

func (l *listeners) listen(name, addr string) (net.Listener, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s listener: %w", name, err)
	}
	*l = append(*l, lis)
	return lis, nil
}

// close closes the listeners; the servers' own Close and Stop close them
// too, and a second Close does no harm.
func (l listeners) close() {
	for _, lis := range l {
		lis.Close()
	}
}

// debugHandler serves net/http/pprof's profiles under /debug/pprof/,
// all but /debug/pprof/cmdline: the command line may carry --backend's
// password.
func debugHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", http.NotFound)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

func newLogger(f *flags, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: f.logLevel}
	if f.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// checkConfig validates the rules at PATH, the last of args, under the
// bounds of the --config-max-* flags among them (or their environment
// variables), and exits non-zero on error.
func checkConfig(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ratelimitd check-config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var limits config.Limits
	configLimitFlags(fs, &limits)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ratelimitd check-config [--config-max-* flags] PATH")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitError{0}
		}
		return exitError{2}
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return exitError{2}
	}
	if err := setFromEnv(fs, getenv); err != nil {
		fmt.Fprintln(stderr, "ratelimitd:", err)
		return exitError{2}
	}
	path := fs.Arg(0)
	rules, err := config.Load(path, config.WithLimits(limits))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitError{1}
	}
	fmt.Fprintf(stdout, "%s: ok (%s in %s)\n", path, count(len(rules.Domains()), "domain"), count(len(rules.Files()), "file"))
	return nil
}

// count returns "1 thing" or "n things".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
