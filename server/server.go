package server

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	gostats "github.com/lyft/gostats"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/config"
	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/server/admin"
	"github.com/ratelimitd/ratelimitd/server/internal/engine"
	"github.com/ratelimitd/ratelimitd/server/overrides"
	"github.com/ratelimitd/ratelimitd/server/requestlog"
	"github.com/ratelimitd/ratelimitd/server/rlqs"
)

// MaxRecvMsgSize is the largest request the gRPC server accepts (see
// GRPCOptions), and the largest body /json accepts.
const MaxRecvMsgSize = 1 << 20

// Options configures a Server. The zero value means the defaults.
type Options struct {
	// Headers chooses the response headers; the zero value is HeadersIETF.
	Headers HeaderMode
	// LegacyHeaders names the fields of HeadersLegacy; the zero value
	// means RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset.
	LegacyHeaders LegacyHeaderNames
	// ShadowMode makes the server refuse nothing: every descriptor keeps
	// its code, the overall code is always OK, and only the hits that fit
	// their limits are counted.
	ShadowMode bool
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// FailureMode is what the server answers when the store cannot
	// decide; the zero value is FailAllow.
	FailureMode FailureMode
	// ReadyWithoutStore keeps the server ready while its store is down,
	// whatever FailureMode says, as envoyproxy/ratelimit stays healthy
	// through a Redis outage: a replica can then start, and stay in its
	// load balancer, while the store is away. /readyz's body still names
	// the store's state.
	ReadyWithoutStore bool
	// Registry, when set, receives the server's metrics (see metrics.go
	// and docs/operations.md), and Handler serves everything registered
	// on it at /metrics. Nil: no /metrics.
	Registry *prometheus.Registry
	// DisableJSON leaves POST /json out of Handler, for deployments where
	// only gRPC callers, authenticated by mutual TLS, may spend quota.
	DisableJSON bool
	// OperatorsOnAdmin says that the operators' endpoints are served on a
	// listener of their own (Handlers' admin handler, --admin-addr), away
	// from callers: the native Explain RPC, on the callers' gRPC port, then
	// answers PermissionDenied.
	OperatorsOnAdmin bool
	// RLQS serves Envoy's Rate Limit Quota Service (package rlqs) beside
	// the RLS APIs. When the store is a backend.ShareStore (memory and
	// Redis are), each bucket's limit is shared through it among the
	// clients of every replica using the store; while it grants nothing,
	// limited buckets get what FailureMode says (allow: ALLOW_ALL, deny:
	// DENY_ALL, error: no assignment).
	RLQS bool
	// RLQSReplica names this replica among those sharing the store; empty
	// means a random name. It must be unique: two replicas under one name
	// would take each other's grants for their own.
	RLQSReplica string
	// RLQSSyncInterval is how often the replica looks for RLQS buckets to
	// exchange with the store (those that changed, or whose entries are
	// about to lapse); zero means a second.
	RLQSSyncInterval time.Duration
	// RLQSBounds limits the RLQS buckets held per stream, per connection,
	// per authenticated peer and in all; zero fields mean the defaults.
	RLQSBounds rlqs.Bounds
	// TracerProvider, when set, traces every RPC (otelgrpc, honouring the
	// caller's trace context) and every store call within one. Nil: no
	// tracing.
	TracerProvider trace.TracerProvider
	// NearLimitRatio is the share of a limit past which admitted hits
	// count as near the limit (ratelimitd_rule_near_limit_total). Zero
	// means DefaultNearLimitRatio.
	NearLimitRatio float64
	// EnvoyproxyEndpoints adds envoyproxy/ratelimit's GET /healthcheck and
	// GET /rlconfig to Handler, for deployments that probe and inspect the
	// reference's way (see RLConfig).
	EnvoyproxyEndpoints bool
	// Statsd, when not nil, receives envoyproxy/ratelimit's statsd series
	// beside the Prometheus metrics (see statsd.go), under the scopes
	// "ratelimit" and "ratelimit_server", each with StatsdTags, as the
	// reference names them.
	Statsd     gostats.Store
	StatsdTags map[string]string
	// EnvoyproxyAnswers answers Envoy's RateLimitService (and /json) as
	// envoyproxy/ratelimit does, for its users' tests and Envoy's draft-03
	// X-RateLimit-Limit header: a status's current_limit.name is the
	// rule's name and empty when it has none (not the key path),
	// duration_until_reset is in whole seconds, rounded up, and a refusal's
	// dynamic metadata does not name the rule that refused (DecidedByKey), nor an
	// admitted one the leases it took (LeasesKey).
	EnvoyproxyAnswers bool
	// Now is the clock of the decisions the server makes without its
	// store (bans), and of the hot keys; nil means time.Now.
	Now func() time.Time
	// RequestLog, when set, receives a sample of the requests every face
	// decodes (see package requestlog), stamped with Now.
	RequestLog *requestlog.Log
	// HotKeys tracks, per domain, the counters most refused and those
	// nearest their limits, served at GET /hotkeys; the zero value turns
	// them off.
	HotKeys HotKeysOptions
	// UnknownDomains bounds the domains without rules that get a label of
	// their own in ratelimitd_unknown_domain_requests_total, and a log
	// line each (see package engine); the requests for the others are
	// counted together. Zero means DefaultUnknownDomains.
	UnknownDomains int
	// Overrides configures the operators' runtime overrides (package
	// overrides), kept in the store when it is a backend.OverrideStore
	// (memory and Redis are): the API under /v1/ on the operators'
	// listener and the OverridesService. Its Logger and Registry default
	// to the server's, its Now to Now.
	Overrides overrides.Options
	// AdminTokens are the bearer tokens the overrides API takes; nil
	// (no --admin-token-file): reads need none, and writes are refused.
	AdminTokens *admin.Tokens
}

// The engine's types and defaults, under the names the command and
// Options use.
type (
	// FailureMode says how the server answers when its store fails
	// (unreachable, timed out, circuit breaker open): see engine.FailureMode.
	FailureMode = engine.FailureMode
	// HeaderMode chooses the response headers: see engine.HeaderMode.
	HeaderMode = engine.HeaderMode
	// LegacyHeaderNames names the fields of HeadersLegacy: see
	// engine.LegacyHeaderNames.
	LegacyHeaderNames = engine.LegacyHeaderNames
	// HotKeysOptions configures the hot keys: see engine.HotKeysOptions.
	HotKeysOptions = engine.HotKeysOptions
)

// The failure modes and header modes: see package engine.
const (
	FailAllow     = engine.FailAllow
	FailDeny      = engine.FailDeny
	FailError     = engine.FailError
	HeadersIETF   = engine.HeadersIETF
	HeadersLegacy = engine.HeadersLegacy
	HeadersOff    = engine.HeadersOff

	// DefaultNearLimitRatio is Options.NearLimitRatio when zero.
	DefaultNearLimitRatio = engine.DefaultNearLimitRatio
	// DefaultUnknownDomains is Options.UnknownDomains when zero.
	DefaultUnknownDomains = engine.DefaultUnknownDomains

	// RateSeconds is how many seconds of per-rule rates the server keeps
	// for the page at /ui/ (see package admin).
	RateSeconds = admin.RateSeconds
)

// ParseFailureMode returns the FailureMode named s.
func ParseFailureMode(s string) (FailureMode, error) { return engine.ParseFailureMode(s) }

// ParseHeaderMode returns the HeaderMode named s.
func ParseHeaderMode(s string) (HeaderMode, error) { return engine.ParseHeaderMode(s) }

// ParseLegacyHeaderNames parses "limit,remaining,reset".
func ParseLegacyHeaderNames(s string) (LegacyHeaderNames, error) {
	return engine.ParseLegacyHeaderNames(s)
}

// Server decides rate limits for Envoy's RateLimitService and ratelimitd's
// native API over one engine, and serves gRPC health and the HTTP /json,
// /healthz and /readyz endpoints.
//
// Server is safe for concurrent use by multiple goroutines.
type Server struct {
	eng    *engine.Engine // decides; the faces below decode into it
	store  backend.Store
	opts   Options
	log    *slog.Logger
	health *health.Server

	metrics   *metrics
	grpcProm  *grpcprom.ServerMetrics // nil without Options.Registry
	stopping  atomic.Bool
	stopOnce  sync.Once
	stopped   chan struct{} // closed by EndHealthWatches
	scratches sync.Pool
	now       func() time.Time
	rlqs      *rlqs.Service // nil unless Options.RLQS
	admin     *admin.Admin  // the operators' pages
	overrides *overrides.Manager
	// healthNames are the service names grpc.health.v1 answers for:
	// healthServices, and RLQS's when served.
	healthNames []string
	// decidedBy caches the refusals' decided_by values under the rules
	// in force; SetRules replaces it. nil until rules are set.
	decidedBy atomic.Pointer[decidedByCache]
}

// New returns a Server deciding with store under rules. rules may be nil
// until SetRules is called: the server then answers every domain as
// unknown, /readyz reports not ready and gRPC health NOT_SERVING.
func New(store backend.Store, rules *config.Rules, opts Options) *Server {
	s := &Server{
		store:   store,
		opts:    opts,
		log:     opts.Logger,
		health:  health.NewServer(),
		stopped: make(chan struct{}),
	}
	var reg prometheus.Registerer // nil unless a Registry is set
	if opts.Registry != nil {
		reg = opts.Registry
		s.grpcProm = grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramBuckets(latencyBuckets)))
		reg.MustRegister(s.grpcProm)
	}
	s.metrics = newMetrics(reg, opts.Statsd, opts.StatsdTags)
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.now = opts.Now
	if s.now == nil {
		s.now = time.Now
	}
	eo := engine.Options{
		Headers: opts.Headers, LegacyHeaders: opts.LegacyHeaders, ShadowMode: opts.ShadowMode,
		Logger: s.log, FailureMode: opts.FailureMode, NearLimitRatio: opts.NearLimitRatio,
		Now: opts.Now, HotKeys: opts.HotKeys, UnknownDomains: opts.UnknownDomains,
		Metrics: s.metrics, StatKeys: opts.Statsd != nil,
	}
	if opts.TracerProvider != nil {
		eo.Tracer = opts.TracerProvider.Tracer("github.com/ratelimitd/ratelimitd/server")
	}
	s.eng = engine.New(store, nil, eo)
	if reg != nil {
		reg.MustRegister(unknownCollector{s.eng})
	}
	s.scratches.New = func() any { return new(scratch) }
	s.healthNames = healthServices
	if opts.RLQS {
		ro := rlqs.Options{
			Replica: opts.RLQSReplica, SyncInterval: opts.RLQSSyncInterval, Bounds: opts.RLQSBounds,
			Fallback:   rlqsFallback(opts.FailureMode),
			ShadowMode: opts.ShadowMode, Registry: reg, Logger: s.log.With("api", "rlqs"), Now: opts.Now,
			UnknownDomain: s.eng.ObserveUnknown, // a report for a domain without rules counts as one request
		}
		if ss, ok := store.(backend.ShareStore); ok {
			ro.Store = ss
		}
		s.rlqs = rlqs.New(rules, ro)
		s.healthNames = append(slices.Clone(healthServices), rlqsv3.RateLimitQuotaService_ServiceDesc.ServiceName)
	}
	oo := opts.Overrides
	if oo.Logger == nil {
		oo.Logger = s.log.With("component", "overrides")
	}
	if oo.Registry == nil && reg != nil {
		oo.Registry = reg
	}
	if oo.Now == nil {
		oo.Now = opts.Now
	}
	ovStore, _ := store.(backend.OverrideStore)
	s.overrides = overrides.New(ovStore, s.eng, oo)
	ao := admin.Options{
		Overrides: s.overrides, Tokens: opts.AdminTokens,
		Ready: s.ready, FailureMode: opts.FailureMode, ReadyWithoutStore: opts.ReadyWithoutStore,
		ShadowMode: opts.ShadowMode, HotKeysShowValues: opts.HotKeys.ShowValues, HotKeysReplica: opts.HotKeys.Replica,
		RuleCounts: s.metrics.ruleCounts, Explain: s.explainEnvoy,
		ReadRequest: readRateLimitRequest, HTTPStatus: httpCode,
	}
	if s.rlqs != nil {
		ao.Replica = opts.RLQSReplica
	}
	s.admin = admin.New(s.eng, ao)
	if rules != nil {
		s.SetRules(rules)
	} else {
		// grpc-go's health server starts with "" SERVING.
		for _, name := range s.healthNames {
			s.health.SetServingStatus(name, healthpb.HealthCheckResponse_NOT_SERVING)
		}
	}
	return s
}

// rlqsFallback returns the RLQS assignment of m: what a limited bucket
// gets while the store grants no share of it.
func rlqsFallback(m FailureMode) rlqs.Fallback {
	switch m {
	case FailDeny:
		return rlqs.FallbackDenyAll
	case FailError:
		return rlqs.FallbackNone
	}
	return rlqs.FallbackAllowAll
}

// SetRules replaces the rules in force. Requests in flight finish under
// the rules they started with; readers never wait.
func (s *Server) SetRules(r *config.Rules) {
	s.eng.SetRules(r)
	s.decidedBy.Store(&decidedByCache{rules: r})
	s.metrics.loaded()
	if s.rlqs != nil {
		s.rlqs.SetRules(r)
	}
	if !s.stopping.Load() {
		for _, name := range s.healthNames {
			s.health.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
		}
	}
}

// healthServices are the service names grpc.health.v1 answers for (and
// RLQS's when it is served): the server as a whole (""), each RLS API, and
// "ratelimit", the name
// envoyproxy/ratelimit's health service answers to, which its Helm charts
// and Envoy clusters' health checks ask for.
var healthServices = []string{
	"",
	rlsv3.RateLimitService_ServiceDesc.ServiceName,
	ratelimitv1.RateLimitService_ServiceDesc.ServiceName,
	"ratelimit",
}

// RejectRules records that a new rule set failed to load (err says why):
// the rules in force stay, the server logs err, and the metrics count the
// error.
func (s *Server) RejectRules(err error) {
	s.log.Error("invalid rules; keeping the previous ones", "err", err)
	s.CountRejectedRules()
}

// CountRejectedRules is RejectRules for a loader that logs its refusals
// itself: the metrics count the error, and nothing is logged twice.
func (s *Server) CountRejectedRules() { s.metrics.rejected() }

// Rules returns the rules in force, nil if none were set.
func (s *Server) Rules() *config.Rules { return s.eng.Rules() }

// GRPCOptions returns the options a grpc.Server serving s should have,
// and must have for Register: the codec that takes Envoy's requests as
// bytes (see envoyWire); requests limited to MaxRecvMsgSize; a handler panic (a bug) answered as
// Internal and logged with its stack, instead of ending the process; the
// grpc_server_* metrics with Options.Registry, and tracing with
// Options.TracerProvider.
func (s *Server) GRPCOptions() []grpc.ServerOption {
	rec := recovery.WithRecoveryHandler(func(p any) error {
		s.log.Error("bug: gRPC handler panicked", "panic", p, "stack", string(debug.Stack()))
		return status.Error(codes.Internal, "internal error")
	})
	unary := []grpc.UnaryServerInterceptor{recovery.UnaryServerInterceptor(rec)}
	stream := []grpc.StreamServerInterceptor{recovery.StreamServerInterceptor(rec)}
	if s.grpcProm != nil { // outside recovery, so that it counts panics as Internal
		unary = append([]grpc.UnaryServerInterceptor{s.grpcProm.UnaryServerInterceptor()}, unary...)
		stream = append([]grpc.StreamServerInterceptor{s.grpcProm.StreamServerInterceptor()}, stream...)
	}
	opts := []grpc.ServerOption{
		grpc.ForceServerCodecV2(newCodec()), // Envoy's requests are decoded as bytes: see envoyWire
		grpc.NumStreamWorkers(streamWorkers()),
		grpc.MaxRecvMsgSize(MaxRecvMsgSize),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
	}
	if s.opts.TracerProvider != nil {
		opts = append(opts, grpc.StatsHandler(otelgrpc.NewServerHandler(
			otelgrpc.WithTracerProvider(s.opts.TracerProvider),
			otelgrpc.WithMeterProvider(noop.NewMeterProvider()), // metrics come from Prometheus
			otelgrpc.WithPropagators(propagation.TraceContext{}),
		)))
	}
	return opts
}

// streamWorkers is how many goroutines serve gRPC streams, 32 per CPU up
// to 1024. Without them grpc-go starts a goroutine per RPC, whose stack
// then grows through the interceptors and handler at every call; the
// load benchmark measured 2.4 µs of CPU per decision (7%) for that. When
// every worker is busy, grpc-go starts a goroutine as before.
func streamWorkers() uint32 { return uint32(min(32*runtime.GOMAXPROCS(0), 1024)) }

// Register registers Envoy's RateLimitService, with Options.RLQS its
// RateLimitQuotaService (see package rlqs), the native RateLimitService
// and OverridesService (see overridesgrpc.go), gRPC health and server
// reflection on g, and with Options.Registry starts g's grpc_server_*
// series at zero. g must have been built with GRPCOptions, whose codec
// Envoy's service needs.
func (s *Server) Register(g *grpc.Server) {
	g.RegisterService(&envoyServiceDesc, s)
	ratelimitv1.RegisterRateLimitServiceServer(g, s.Native())
	s.registerOverrides(g)
	if s.rlqs != nil {
		s.rlqs.Register(g)
	}
	healthpb.RegisterHealthServer(g, healthService{Server: s.health, stopped: s.stopped})
	reflection.Register(g)
	if s.grpcProm != nil {
		s.grpcProm.InitializeMetrics(g)
	}
}

// Envoy returns the server's envoy.service.ratelimit.v3.RateLimitService.
// A refusal's dynamic metadata is the answer's own, but the decided_by
// value in it is shared with other answers (see DecidedByKey): an
// in-process caller may add keys to the metadata, and must not modify
// that value.
func (s *Server) Envoy() rlsv3.RateLimitServiceServer { return envoyService{s: s} }

// Native returns the server's ratelimit.v1.RateLimitService.
func (s *Server) Native() ratelimitv1.RateLimitServiceServer { return nativeService{s: s} }

// Shutdown reports NOT_SERVING on gRPC health and not ready on /readyz, so
// that load balancers stop sending new requests; requests keep being
// answered until the caller stops its listeners. Health Watch streams
// stay open, reporting NOT_SERVING, until EndHealthWatches: a client
// whose stream ends reconnects at once, and would spin until then.
func (s *Server) Shutdown() {
	s.stopping.Store(true)
	s.health.Shutdown()
}

// EndHealthWatches ends every gRPC health Watch stream, and those opened
// later at once, after a last NOT_SERVING; and every RLQS stream, with
// Unavailable, so that its client moves to another replica.
// grpc.Server.GracefulStop waits for every stream, and these last as long
// as their clients want: call EndHealthWatches after Shutdown, right
// before GracefulStop.
func (s *Server) EndHealthWatches() {
	s.stopOnce.Do(func() { close(s.stopped) })
	if s.rlqs != nil {
		s.rlqs.EndStreams() // they too last as long as their clients want
	}
}

// FailureAnswers reports how many requests the server answered by its
// FailureMode because the store failed.
func (s *Server) FailureAnswers() uint64 { return s.eng.FailureAnswers() }

// ready reports whether the server has rules, is not shutting down and,
// unless it fails open or is ready without its store, has a healthy
// store, one that has answered once; and the store's state.
func (s *Server) ready() (bool, string) {
	state := "ok"
	if r, ok := s.store.(backend.StateReporter); ok {
		state = r.State()
	}
	storeNeeded := s.opts.FailureMode != FailAllow && !s.opts.ReadyWithoutStore
	ready := s.eng.Rules() != nil && !s.stopping.Load() && (!storeNeeded || state == "ok")
	return ready, state
}

// A scratch is a request's working memory on its way through a face and
// the engine: the engine's, and what Envoy's faces decode first.
type scratch struct {
	engine.Scratch
	envoy    []envoyDesc // Envoy's descriptors, while an Envoy face decodes
	leaseBuf []int64     // a descriptor's lease stamps, while an answer is built
	idBuf    []byte      // a lease id, while an answer is built
}

func (s *Server) getScratch() *scratch { return s.scratches.Get().(*scratch) }

func (s *Server) putScratch(sc *scratch) {
	// Do not pool the memory of a huge request.
	if sc.Oversized() {
		return
	}
	sc.reset()
	s.scratches.Put(sc)
}

// reset empties sc for the next request, keeping its memory.
func (sc *scratch) reset() {
	sc.Reset()
	sc.envoy = sc.envoy[:0]
}

// SampleRates samples the rule counters once a second into the rates
// the page at /ui/ draws, until ctx is done. Without it, the page shows
// no rates. It returns nil.
func (s *Server) SampleRates(ctx context.Context) error { return s.admin.SampleRates(ctx) }

// RunOverrides keeps the runtime overrides in force in step with the
// store's until ctx is done (see overrides.Manager.Run); it returns nil.
func (s *Server) RunOverrides(ctx context.Context) error { return s.overrides.Run(ctx) }

// Overrides returns the server's runtime overrides.
func (s *Server) Overrides() *overrides.Manager { return s.overrides }

// explainEnvoy explains a decoded Envoy request: POST /explain's answer
// (see package admin).
func (s *Server) explainEnvoy(ctx context.Context, req *rlsv3.RateLimitRequest) (*engine.Explanation, error) {
	sc := s.getScratch()
	defer s.putScratch(sc)
	if err := envoyFromProto(sc, req); err != nil {
		return nil, err
	}
	return s.eng.Explain(ctx, &sc.Scratch)
}

// grpcError maps an engine error to a gRPC status error.
func grpcError(err error) error {
	if err == nil {
		return nil
	}
	// errors.AsType, not errors.As: As's target would be moved to the heap
	// on every call, and every decision passes through here.
	if inv, ok := errors.AsType[*engine.InvalidError](err); ok {
		return status.Error(codes.InvalidArgument, inv.Error())
	}
	switch {
	case errors.Is(err, engine.ErrStoreUnavailable), errors.Is(err, engine.ErrShuttingDown):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Internal, "internal error")
}
