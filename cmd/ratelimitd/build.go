package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/tlsconfig"
	"github.com/ratelimitd/ratelimitd/server"
	"github.com/ratelimitd/ratelimitd/server/admin"
	"github.com/ratelimitd/ratelimitd/server/hotkeys"
	"github.com/ratelimitd/ratelimitd/server/overrides"
	"github.com/ratelimitd/ratelimitd/server/requestlog"
	"github.com/ratelimitd/ratelimitd/server/rlqs"
)

// built is the daemon wired from its flags by build: its store, rules
// source, servers and open listeners. Nothing runs yet; serve runs it, and
// close releases what build opened.
type built struct {
	f       *flags
	log     *slog.Logger
	srv     *server.Server
	rules   rulesSource
	grpc    *grpc.Server
	http    *http.Server
	httpTLS bool
	debug   *http.Server  // with --debug-addr
	admin   *http.Server  // with --admin-addr
	tokens  *admin.Tokens // --admin-token-file's

	grpcLis, httpLis, debugLis, adminLis net.Listener
	started                              []any // the attributes of the start's log line
	closers                              []func()
}

// build wires the daemon from f. On an error, already logged or naming
// what failed, it has released what it opened.
func build(ctx context.Context, f *flags, stderr io.Writer) (_ *built, err error) {
	b := &built{f: f, log: newLogger(f, stderr)}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	logCompat(b.log, f)
	opts := []config.Option{config.WithLimits(f.configLimits), config.WithDefaultAlgorithm(f.defaultAlgorithm)}
	var initial *config.Rules // nil with xDS: not ready until they arrive
	switch {
	case f.config != "":
		if initial, err = config.Load(f.config, opts...); err != nil {
			b.log.Error("invalid rules; not starting", "config", f.config, "err", err)
			return nil, exitError{1}
		}
	case !f.xds.waitForRules:
		if initial, err = config.Compile(nil, opts...); err != nil {
			return nil, fmt.Errorf("no rules: %w", err)
		}
	}
	// Listening first gives the RLQS replica its default name, from the
	// gRPC listener's address; connections wait in the backlog meanwhile.
	if err := b.listen(); err != nil {
		return nil, err
	}
	reg := newRegistry()
	if err := b.servers(ctx, initial, reg); err != nil {
		return nil, err
	}
	if err := b.rulesSource(initial, opts); err != nil {
		return nil, err
	}
	return b, nil
}

// newRegistry returns the metrics registry, with the process's and the
// build's series.
func newRegistry() *prometheus.Registry {
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
	return reg
}

// servers opens the TLS files, the store and tracing, and builds the
// decision server under rules (nil until xDS sends them) and the gRPC,
// HTTP and debug servers.
func (b *built) servers(ctx context.Context, rules *config.Rules, reg *prometheus.Registry) error {
	f, log := b.f, b.log
	grpcTLS, httpTLS, adminTLS, err := openTLS(f, log, reg)
	if err != nil {
		log.Error("cannot use the TLS files; not starting", "err", err)
		return exitError{1}
	}
	store, closeStore, err := openStore(f, log) //nolint:contextcheck // no I/O: the Redis store probes on its own context
	if err != nil {
		log.Error("cannot use --backend; not starting", "err", err)
		return exitError{1}
	}
	b.closers = append(b.closers, closeStore)
	if c, ok := store.(prometheus.Collector); ok {
		reg.MustRegister(c)
	}
	tp, stopTracing, err := startTracing(ctx, f.tracing)
	if err != nil {
		log.Error("cannot trace; not starting", "err", err)
		return exitError{1}
	}
	b.closers = append(b.closers, func() { stopTracing(log) })

	reqLog, err := openRequestLog(f, log, reg)
	if err != nil {
		log.Error("cannot open --request-log; not starting", "err", err)
		return exitError{1}
	}
	if reqLog != nil {
		b.closers = append(b.closers, reqLog.close)
	}
	var digestKey []byte // empty: random
	if f.hotKeys.digestKeyFile != "" {
		if digestKey, err = hotkeys.ReadDigestKey(f.hotKeys.digestKeyFile); err != nil {
			log.Error("cannot use --hotkeys-digest-key-file; not starting", "err", err)
			return exitError{1}
		}
	}
	stats, stopStatsd, err := startStatsd(f, log, reg, store) //nolint:contextcheck // the exporter runs until the closers stop it, after the drain, to send the last counts
	if err != nil {
		log.Error("cannot send statsd; not starting", "err", err)
		return exitError{1}
	}
	b.closers = append(b.closers, stopStatsd)
	tokens, err := admin.LoadTokens(f.adminTokenFile, reg, log.With("component", "admin-tokens"))
	if err != nil {
		log.Error("cannot use --admin-token-file; not starting", "err", err)
		return exitError{1}
	}
	b.tokens = tokens
	replica := cmp.Or(f.rlqsReplica, rlqs.DefaultReplica(b.grpcLis.Addr().String()))
	b.srv = server.New(store, rules, server.Options{
		Statsd:            stats,
		StatsdTags:        f.statsd.tags,
		RequestLog:        reqLog.get(),
		Headers:           f.headers,
		LegacyHeaders:     f.headerNames,
		ShadowMode:        f.shadowMode,
		FailureMode:       f.failureMode,
		ReadyWithoutStore: f.readyWithoutStore,
		Logger:            log.With("component", "server"),
		Registry:          reg,
		NearLimitRatio:    f.nearLimitRatio,
		TracerProvider:    tp,
		DisableJSON:       !f.httpJSON,
		RLQS:              f.rlqs,
		OperatorsOnAdmin:  f.adminAddr != "",
		RLQSReplica:       replica,
		RLQSSyncInterval:  f.rlqsSyncInterval,
		RLQSBounds:        f.rlqsBounds,
		HotKeys: server.HotKeysOptions{
			Enabled: f.hotKeys.enabled, K: f.hotKeys.k, Window: f.hotKeys.window,
			ShowValues: f.hotKeys.values == "show", Replica: replica, DigestKey: digestKey,
		},
		UnknownDomains: f.unknownDomains,
		Overrides: overrides.Options{
			Max:    f.maxOverrides,
			Logger: log.With("component", "overrides"),
			Config: []config.Option{config.WithDefaultAlgorithm(f.defaultAlgorithm)},
		},
		AdminTokens: tokens,
		// The reference's probes and tools call /healthcheck and /rlconfig.
		EnvoyproxyEndpoints: f.compat == compatEnvoyproxy,
		EnvoyproxyAnswers:   f.envoyproxyAnswers,
	})
	if f.tls.grpcClientCA != "" && f.httpJSON {
		log.Warn("POST /json on the HTTP listener decides without the gRPC listener's mutual TLS: set --http-json=false, or keep --http-addr private")
	}
	grpcOpts := append(b.srv.GRPCOptions(), f.grpcConn.limits().ServerOptions()...)
	if grpcTLS != nil {
		grpcOpts = append(grpcOpts, grpc.Creds(credentials.NewTLS(grpcTLS.Config())))
	}
	b.grpc = grpc.NewServer(grpcOpts...)
	b.srv.Register(b.grpc)
	b.httpServers(httpTLS, adminTLS)
	if f.debugAddr != "" {
		var rlconfig http.Handler // the reference serves it on its debug port
		if f.compat == compatEnvoyproxy {
			rlconfig = b.srv.RLConfig()
		}
		b.debug = f.httpConn.limits().Server(debugHandler(rlconfig))
	}
	b.started = append(b.started, "version", version(), "grpc_tls", tlsMode(grpcTLS != nil, f.tls.grpcClientCA != ""), "http_tls", httpTLS != nil, "admin_tls", tlsMode(httpTLS != nil && b.f.adminAddr != "", adminTLS != nil),
		"backend", redactBackend(f.backend), "failure_mode", f.failureMode.String(), "default_algorithm", f.defaultAlgorithm.String())
	if f.redis.perSecond != "" {
		b.started = append(b.started, "backend_per_second", redactBackend(f.redis.perSecond))
	}
	return nil
}

// requestLog is --request-log, reopened on SIGHUP.
type requestLog struct {
	l   *requestlog.Log
	hup chan os.Signal
	log *slog.Logger
}

// openRequestLog opens --request-log; nil without it.
func openRequestLog(f *flags, log *slog.Logger, reg *prometheus.Registry) (*requestLog, error) {
	if f.requestLog.path == "" {
		return nil, nil
	}
	r := &requestLog{hup: make(chan os.Signal, 1), log: log}
	signal.Notify(r.hup, syscall.SIGHUP)
	var err error
	opts := f.requestLog.options()
	opts.Reopen, opts.Registry, opts.Logger = r.hup, reg, log.With("component", "request-log")
	r.l, err = requestlog.Open(f.requestLog.path, opts)
	if err != nil {
		signal.Stop(r.hup)
		return nil, err
	}
	return r, nil
}

// get returns the log, nil if r is.
func (r *requestLog) get() *requestlog.Log {
	if r == nil {
		return nil
	}
	return r.l
}

// close writes what is left and closes the log: after the servers
// stopped, so that every request they decided is in it.
func (r *requestLog) close() {
	signal.Stop(r.hup)
	if err := r.l.Close(); err != nil {
		r.log.Error("closing the request log", "err", err)
	}
}

// httpServers builds the HTTP server, and with --admin-addr the admin
// server, which takes the operators' endpoints (see server.Handlers) off
// the HTTP one and serves them with the same TLS, if any, requiring
// client certificates with --admin-tls-client-ca (adminTLS). Whichever
// serves the operators' endpoints answers them only to the Host names of
// operatorHosts.
func (b *built) httpServers(httpTLS, adminTLS *tlsconfig.Reloader) {
	var public http.Handler
	if b.f.adminAddr != "" {
		var operators http.Handler
		public, operators = b.srv.Handlers()
		b.admin = b.f.httpConn.limits().Server(server.OperatorHosts(operators, b.operatorHosts(b.f.adminAddr)...))
	} else {
		public = server.OperatorHosts(b.srv.Handler(), b.operatorHosts(b.f.httpAddr)...)
	}
	b.http = b.f.httpConn.limits().Server(public)
	if httpTLS != nil {
		b.httpTLS = true
		for _, hs := range []*http.Server{b.http, b.admin} {
			if hs != nil {
				hs.TLSConfig = httpTLS.Config()
			}
		}
	}
	if adminTLS != nil { // --admin-tls-client-ca: the same certificate, and the operators' client certificates
		b.admin.TLSConfig = adminTLS.Config()
	}
}

// operatorHosts returns the Host names, besides IP addresses and
// localhost, that the operators' endpoints answer to when served on the
// listen address addr: its host, if a name, and --admin-hosts.
func (b *built) operatorHosts(addr string) []string {
	names := slices.Clone(b.f.adminHosts)
	if host, _, err := net.SplitHostPort(addr); err == nil && host != "" {
		names = append(names, host)
	}
	return names
}

// rulesSource builds the source of the rules after initial: the files of
// --config, or --xds-server.
func (b *built) rulesSource(initial *config.Rules, opts []config.Option) error {
	// Catch SIGHUP before announcing the start: its default action would
	// end the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	b.closers = append(b.closers, func() { signal.Stop(hup) })
	if b.f.xds.server != "" {
		log := b.log.With("component", "xds")
		o, err := xdsOptions(&b.f.xds, opts, b.srv, log)
		if err != nil {
			b.log.Error("cannot use --xds-server; not starting", "err", err)
			return exitError{1}
		}
		b.rules = xdsRules{opts: o, hup: hup, log: log}
		b.started = append(b.started, "xds_server", b.f.xds.server, "xds_node_id", b.f.xds.nodeID)
		return nil
	}
	b.rules = newFileRules(b.f.config, initial, b.f.configLimits, b.f.watchDebounce, opts, b.srv, b.log, hup)
	b.started = append(b.started, "config", b.f.config, "domains", len(initial.Domains()))
	return nil
}

// listen opens the listeners.
func (b *built) listen() error {
	var lis listeners
	b.closers = append(b.closers, func() { lis.close() }) // the listeners opened below
	var err error
	if b.grpcLis, err = lis.listen("gRPC", b.f.grpcAddr); err != nil {
		return err
	}
	if b.httpLis, err = lis.listen("HTTP", b.f.httpAddr); err != nil {
		return err
	}
	b.started = append(b.started, "grpc", b.grpcLis.Addr().String(), "http", b.httpLis.Addr().String())
	if b.f.adminAddr != "" {
		if b.adminLis, err = lis.listen("admin", b.f.adminAddr); err != nil {
			return err
		}
		b.started = append(b.started, "admin", b.adminLis.Addr().String())
	}
	if b.f.debugAddr != "" {
		if b.debugLis, err = lis.listen("debug", b.f.debugAddr); err != nil {
			return err
		}
		b.started = append(b.started, "debug", b.debugLis.Addr().String())
	}
	return nil
}

// close releases what build opened, the last first.
func (b *built) close() {
	for i := len(b.closers) - 1; i >= 0; i-- {
		b.closers[i]()
	}
	b.closers = nil
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
// password; and GET /rlconfig with rlconfig, if not nil.
func debugHandler(rlconfig http.Handler) http.Handler {
	mux := http.NewServeMux()
	if rlconfig != nil {
		mux.Handle("GET /rlconfig", rlconfig)
	}
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
