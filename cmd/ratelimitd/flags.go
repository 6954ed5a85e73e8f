package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/backend/redis"
	"github.com/ratelimitd/ratelimitd/cmd/ratelimitd/internal/compat"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/tlsconfig"
	"github.com/ratelimitd/ratelimitd/server"
	"github.com/ratelimitd/ratelimitd/server/hotkeys"
	"github.com/ratelimitd/ratelimitd/server/overrides"
	"github.com/ratelimitd/ratelimitd/server/requestlog"
	"github.com/ratelimitd/ratelimitd/server/rlqs"
	"github.com/ratelimitd/ratelimitd/server/rlqs/fairshare"
)

// mainVersion is set at build time: -ldflags "-X main.mainVersion=v1.2.3".
var mainVersion string

func version() string {
	if mainVersion != "" {
		return mainVersion
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// flags are the daemon's settings, read once from the command line and
// the environment.
type flags struct {
	config            string
	configLimits      config.Limits
	defaultAlgorithm  backend.Algorithm
	xds               xdsFlags
	compat            string
	compatResult      *compat.Result // with --compat envoyproxy
	grpcAddr          string
	httpAddr          string
	backend           string
	headers           server.HeaderMode
	headerNames       server.LegacyHeaderNames
	shadowMode        bool
	memoryMaxKeys     int
	failureMode       server.FailureMode
	readyWithoutStore bool
	localCache        bool
	localCacheSize    int
	redis             redisFlags
	shutdownTimeout   time.Duration
	shutdownDelay     time.Duration
	nearLimitRatio    float64
	debugAddr         string
	adminAddr         string
	adminHosts        []string
	adminTokenFile    string
	maxOverrides      int
	httpJSON          bool
	rlqs              bool
	rlqsReplica       string
	rlqsSyncInterval  time.Duration
	rlqsBounds        rlqs.Bounds
	hotKeys           hotKeysFlags
	unknownDomains    int
	tracing           tracingFlags
	tls               tlsFlags
	httpConn          httpConnFlags
	grpcConn          grpcConnFlags
	logLevel          slog.Level
	logFormat         string
	version           bool
	requestLog        requestLogFlags
	statsd            statsdFlags
	envoyproxyAnswers bool
	// watchDebounce is how long the watch of --config waits for the
	// files to settle; no flag sets it: 0 is config's default, and tests
	// that make many changes shorten it.
	watchDebounce time.Duration
}

// statsdFlags are the settings of the statsd exporter (--statsd-addr).
type statsdFlags struct {
	addr     string // host:port; "" turns statsd off
	network  string // tcp or udp
	interval time.Duration
	tags     map[string]string
}

// requestLogFlags are the settings of --request-log.
type requestLogFlags struct {
	path       string
	sample     float64
	maxSize    int // MiB
	maxBackups int
	maxRecord  int // bytes
}

// options returns the request log's options of r.
func (r *requestLogFlags) options() requestlog.Options {
	return requestlog.Options{Sample: r.sample, MaxSize: r.maxSize, MaxBackups: r.maxBackups, MaxRecord: r.maxRecord}
}

// redisFlags are the settings of a Redis --backend.
type redisFlags struct {
	keyPrefix                string
	timeout                  time.Duration
	poolSize                 int
	dialTimeout, readTimeout time.Duration
	writeTimeout             time.Duration
	tlsCA, tlsCert, tlsKey   string
	breakerFailures          int
	breakerOpen              time.Duration
	// perSecond is the URL of the Redis that keeps one-second limits'
	// counters (--backend-per-second), empty for none; its pool size and
	// timeout, zero for --redis-pool-size's and --redis-timeout's.
	perSecond        string
	perSecondPool    int
	perSecondTimeout time.Duration
}

// xdsFlags are the settings of rules over xDS (--xds-server).
type xdsFlags struct {
	server                 string
	nodeID, nodeCluster    string
	nodeMetadata           string // a JSON object
	headers                string // k=v,k=v
	insecureHeaders        bool
	tls                    bool
	tlsCA, tlsCert, tlsKey string
	tlsServerName          string
	retryInterval          time.Duration
	// waitForRules keeps the daemon not ready until the first rules
	// arrive; without it, it is ready at once with no rules.
	waitForRules bool
}

// tlsFlags are the listeners' TLS settings.
type tlsFlags struct {
	grpcCert, grpcKey, grpcClientCA string
	grpcAllowedSANs                 []string
	httpCert, httpKey               string
	adminClientCA                   string // requires mutual TLS on --admin-addr
}

// hotKeysFlags are the settings of GET /hotkeys.
type hotKeysFlags struct {
	enabled bool
	k       int
	window  time.Duration
	values  string // "digest" or "show"
	// digestKeyFile holds the digests' key, read at start; empty: a
	// random key per process.
	digestKeyFile string
}

// tracingFlags are the OpenTelemetry tracing settings.
type tracingFlags struct {
	endpoint    string // OTLP/gRPC collector; "" turns tracing off
	insecure    bool
	sampleRatio float64
}

// Defaults of the daemon's own flags; the others come from the packages'
// Default... constants.
const (
	defaultGRPCAddr         = "127.0.0.1:8081"
	defaultHTTPAddr         = "127.0.0.1:8080"
	defaultShutdownTimeout  = 10 * time.Second
	defaultTraceSampleRatio = 0.01
	// defaultStatsdFlushInterval is envoyproxy/ratelimit's STATS_FLUSH_INTERVAL default.
	defaultStatsdFlushInterval = 10 * time.Second
)

// parseKeyValues reads a flag of key=value items, comma-separated
// (--statsd-tags, --xds-headers): blank items are skipped, and keys and
// values trimmed of spaces.
func parseKeyValues(v string) (map[string]string, error) {
	m := map[string]string{}
	for item := range strings.SplitSeq(v, ",") {
		if strings.TrimSpace(item) == "" {
			continue
		}
		k, val, ok := strings.Cut(item, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not k=v", item)
		}
		m[k] = strings.TrimSpace(val)
	}
	return m, nil
}

// maxUnknownDomains bounds --unknown-domains-max: each domain is a series
// of /metrics.
const maxUnknownDomains = 10_000

// envPrefix prefixes the environment variable of every flag.
const envPrefix = "RATELIMITD_"

// envName returns the environment variable of the flag name.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// parseFlags reads args, then the environment for every flag args did
// not set, then, with --compat, the other service's variables for every
// flag still unset. It returns an exitError(2) after printing why on bad
// input.
func parseFlags(args []string, lookup lookupEnv, stderr io.Writer) (*flags, error) {
	f := &flags{}
	fs := flag.NewFlagSet("ratelimitd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	defineFlags(fs, f)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage:\n  ratelimitd --config PATH [flags]\n  ratelimitd --xds-server HOST:PORT --xds-node-id ID [flags]\n  ratelimitd check-config [--config-max-* flags] PATH\n  ratelimitd replay --old RULES --new RULES [--json] LOG\n\n")
		fmt.Fprintf(stderr, "Every flag may also be set as %s<FLAG> (upper case, '-' as '_').\n\nFlags:\n", envPrefix)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, exitError{0}
		}
		return nil, exitError{2}
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ratelimitd: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return nil, exitError{2}
	}
	set, err := setFromEnv(fs, lookup)
	if err == nil {
		err = applyCompat(fs, f, set, lookup)
	}
	if err != nil {
		fmt.Fprintln(stderr, "ratelimitd:", err)
		return nil, exitError{2}
	}
	if f.version {
		return f, nil
	}
	if err := f.check(); err != nil {
		fmt.Fprintln(stderr, "ratelimitd:", err)
		return nil, exitError{2}
	}
	return f, nil
}

// defineFlags defines every flag of the daemon on fs, to be read into f.
func defineFlags(fs *flag.FlagSet, f *flags) {
	fs.StringVar(&f.config, "config", "", "rules: a YAML `file`, or a directory of *.yaml and *.yml files; watched for changes (or --xds-server)")
	configLimitFlags(fs, &f.configLimits)
	defaultAlgorithmFlag(fs, &f.defaultAlgorithm)
	xdsFlagsOn(fs, &f.xds)
	fs.StringVar(&f.compat, "compat", "", "read the environment of another rate limit service: envoyproxy (envoyproxy/ratelimit's variables, under the flags and "+envPrefix+"* ones)")
	fs.StringVar(&f.grpcAddr, "grpc-addr", defaultGRPCAddr, "gRPC listen `address` (Envoy RLS v3, ratelimit.v1, health, reflection)")
	fs.StringVar(&f.httpAddr, "http-addr", defaultHTTPAddr, "HTTP listen `address` (/healthz, /readyz, POST /json; and without --admin-addr /metrics, /config, /ui/)")
	fs.StringVar(&f.backend, "backend", "memory", "counter store: memory, or a Redis `URL`: redis://[user:pass@]host:port[/db], rediss://... (TLS),\n"+
		"redis-cluster://h1:p1?addr=h2:p2&addr=h3:p3, redis-sentinel://s1:26379?addr=s2:26379&master_name=NAME,\n"+
		"unix:///path/to/redis.sock[?db=N]")
	fs.TextVar(&f.failureMode, "failure-mode", server.FailAllow, "answer when the counter store fails: allow (OK, no limit), deny (OVER_LIMIT) or error (Unavailable)")
	fs.BoolVar(&f.readyWithoutStore, "ready-without-store", false, "stay ready (/readyz, /healthcheck) while the counter store is down, whatever --failure-mode says")
	fs.BoolVar(&f.localCache, "local-cache", true, "remember refusals of the Redis store until their retry_after, and refuse the same calls without Redis")
	fs.StringVar(&f.redis.perSecond, "backend-per-second", "", "Redis `URL` (as --backend's) that keeps the counters of one-second limits, apart from --backend's Redis (empty: none)")
	fs.IntVar(&f.redis.perSecondPool, "redis-per-second-pool-size", 0, "--backend-per-second connections per node (0: as --redis-pool-size)")
	fs.DurationVar(&f.redis.perSecondTimeout, "redis-per-second-timeout", 0, "longest a decision waits for --backend-per-second's Redis (0: as --redis-timeout)")
	fs.IntVar(&f.localCacheSize, "local-cache-size", redis.DefaultLocalCache, "most counters the local cache remembers")
	fs.StringVar(&f.redis.keyPrefix, "redis-key-prefix", redis.DefaultPrefix, "prefix of every Redis key")
	fs.DurationVar(&f.redis.timeout, "redis-timeout", redis.DefaultTimeout, "longest a decision waits for Redis (then the failure mode answers)")
	fs.IntVar(&f.redis.poolSize, "redis-pool-size", 0, "Redis connections per node (0: 10 per CPU)")
	fs.DurationVar(&f.redis.dialTimeout, "redis-dial-timeout", redis.DefaultIOTimeout, "Redis connect timeout")
	fs.DurationVar(&f.redis.readTimeout, "redis-read-timeout", redis.DefaultIOTimeout, "Redis read timeout")
	fs.DurationVar(&f.redis.writeTimeout, "redis-write-timeout", redis.DefaultIOTimeout, "Redis write timeout")
	fs.StringVar(&f.redis.tlsCA, "redis-tls-ca", "", "PEM `file` of the CA that signs Redis's certificate (rediss://; default: the system's)")
	fs.StringVar(&f.redis.tlsCert, "redis-tls-cert", "", "PEM `file` of a client certificate for Redis (mutual TLS)")
	fs.StringVar(&f.redis.tlsKey, "redis-tls-key", "", "PEM `file` of the client certificate's key")
	fs.IntVar(&f.redis.breakerFailures, "redis-breaker-failures", redis.DefaultBreakerFailures, "consecutive Redis failures that open the circuit breaker")
	fs.DurationVar(&f.redis.breakerOpen, "redis-breaker-open", redis.DefaultBreakerOpenDelay, "how long an open breaker answers by the failure mode before it probes Redis")
	fs.TextVar(&f.headers, "response-headers", server.HeadersIETF, "response headers: ietf (RateLimit-Policy, RateLimit), legacy (RateLimit-Limit/-Remaining/-Reset) or off")
	fs.Func("response-header-names", "`names` of the legacy headers, comma-separated limit,remaining,reset (default RateLimit-Limit,RateLimit-Remaining,RateLimit-Reset)", func(v string) (err error) {
		f.headerNames, err = server.ParseLegacyHeaderNames(v)
		return err
	})
	fs.BoolVar(&f.shadowMode, "shadow-mode", false, "refuse nothing: report decisions, count only what fits")
	fs.IntVar(&f.memoryMaxKeys, "memory-max-keys", memory.DefaultMaxKeys, "most counters the memory store keeps (about 160 bytes each); a new key then enters a small admission window, and keeps its counter past it only if asked for more often than the one it would replace (refusing ones go last)")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", defaultShutdownTimeout, "how long to drain in-flight requests on SIGTERM")
	fs.DurationVar(&f.shutdownDelay, "shutdown-delay", 0, "on SIGTERM, how long to keep serving while reporting not ready, so that load balancers stop sending first")
	fs.StringVar(&f.tls.grpcCert, "grpc-tls-cert", "", "PEM `file` of the gRPC listener's certificate (and chain): serve TLS; reloaded when it changes")
	fs.StringVar(&f.tls.grpcKey, "grpc-tls-key", "", "PEM `file` of the gRPC certificate's key")
	fs.StringVar(&f.tls.grpcClientCA, "grpc-tls-client-ca", "", "PEM `file` of the CAs that sign client certificates: require mutual TLS on gRPC")
	fs.Func("grpc-tls-allowed-sans", "comma-separated `SANs` a client certificate must carry one of: DNS names (*.example.com matches one label), URIs (spiffe://...), IPs or emails", func(v string) (err error) {
		f.tls.grpcAllowedSANs, err = tlsconfig.ParseSANs(v)
		return err
	})
	fs.StringVar(&f.tls.httpCert, "http-tls-cert", "", "PEM `file` of the HTTP listener's certificate: serve HTTPS; reloaded when it changes")
	fs.StringVar(&f.tls.httpKey, "http-tls-key", "", "PEM `file` of the HTTP certificate's key")
	fs.StringVar(&f.tls.adminClientCA, "admin-tls-client-ca", "", "PEM `file` of the CAs that sign operators' client certificates: require mutual TLS on --admin-addr\n"+
		"(served with --http-tls-cert's certificate); reloaded when it changes")
	fs.DurationVar(&f.httpConn.readTimeout, "http-read-timeout", server.DefaultHTTPReadTimeout, "longest the HTTP and debug listeners wait for a whole request, headers and body (0: no limit, but 10s for the headers);\n"+
		"a decision is a few hundred bytes, so a slower client is stalled or hostile")
	fs.DurationVar(&f.httpConn.writeTimeout, "http-write-timeout", server.DefaultHTTPWriteTimeout, "longest an HTTP request may take from the end of its headers to the end of its answer (0: no limit);\n"+
		"on --debug-addr, profiles and traces get their ?seconds= on top")
	fs.DurationVar(&f.httpConn.idleTimeout, "http-idle-timeout", server.DefaultHTTPIdleTimeout, "how long an HTTP keep-alive connection may wait for its next request (0: --http-read-timeout);\n"+
		"above Go clients' 90s, so that clients close idle connections first")
	fs.IntVar(&f.httpConn.maxHeaderBytes, "http-max-header-bytes", server.DefaultHTTPMaxHeaderBytes, "largest HTTP request header, in bytes (0: Go's 1 MiB); room for Envoy's 60 KiB")
	fs.UintVar(&f.grpcConn.maxConcurrentStreams, "grpc-max-concurrent-streams", server.DefaultGRPCMaxConcurrentStreams, "most RPCs in flight on one gRPC connection (0: no limit); Envoy opens another connection past it")
	fs.DurationVar(&f.grpcConn.keepaliveMinTime, "grpc-keepalive-min-time", server.DefaultGRPCKeepaliveMinTime, "shortest interval between a client's keepalive pings: a client pinging faster gets GOAWAY ENHANCE_YOUR_CALM;\n"+
		"grpc-go clients ping no more often than every 10s; do not set Envoy's connection_keepalive interval below it")
	fs.BoolVar(&f.grpcConn.keepalivePermitWithoutStream, "grpc-keepalive-permit-without-stream", server.DefaultGRPCKeepalivePermitWithoutStream, "accept keepalive pings on gRPC connections with no RPC in flight (Envoy's connection_keepalive sends them)")
	fs.DurationVar(&f.grpcConn.maxConnectionIdle, "grpc-max-connection-idle", server.DefaultGRPCMaxConnectionIdle, "close (GOAWAY) a gRPC connection without an RPC for this long (0: never); the client reconnects when it next calls")
	fs.DurationVar(&f.grpcConn.maxConnectionAge, "grpc-max-connection-age", server.DefaultGRPCMaxConnectionAge, "close (GOAWAY) a gRPC connection this old, ±10% (0: never), so that clients spread over replicas added since")
	fs.DurationVar(&f.grpcConn.ageGrace, "grpc-max-connection-age-grace", server.DefaultGRPCMaxConnectionAgeGrace, "how long RPCs in flight may go on after --grpc-max-connection-age (0: no limit); health Watch streams end then, and clients watch again")
	fs.DurationVar(&f.grpcConn.keepaliveTime, "grpc-keepalive-time", server.DefaultGRPCKeepaliveTime, "ping a gRPC client silent for this long, to find peers gone without closing (0: never)")
	fs.DurationVar(&f.grpcConn.keepaliveTimeout, "grpc-keepalive-timeout", server.DefaultGRPCKeepaliveTimeout, "close a gRPC connection whose ping, or sent data, goes unacknowledged this long")
	fs.Float64Var(&f.nearLimitRatio, "near-limit-ratio", server.DefaultNearLimitRatio, "share of a limit past which admitted hits count as near the limit (ratelimitd_rule_near_limit_total)")
	fs.BoolVar(&f.rlqs, "rlqs", true, "serve Envoy's Rate Limit Quota Service on the gRPC port; each bucket's limit is shared, through the store, among the clients of every replica on it")
	fs.StringVar(&f.rlqsReplica, "rlqs-replica", "", "this replica's `name` among those sharing RLQS limits through the store; unique per process (default: the host name, the gRPC listener's address and a random part)")
	fs.DurationVar(&f.rlqsSyncInterval, "rlqs-sync-interval", fairshare.DefaultSyncInterval, "how often each replica looks for RLQS buckets to exchange with the store: those whose demands moved, that another replica's change concerns, or whose entry is about to lapse")
	fs.IntVar(&f.rlqsBounds.Total, "rlqs-max-buckets", rlqs.DefaultMaxBuckets, "most RLQS buckets this replica holds for all its streams together (a bucket no rule matches is answered, never held);\n"+
		"past a bound a limited bucket gets --failure-mode's assignment, counted in ratelimitd_rlqs_buckets_refused_total")
	fs.IntVar(&f.rlqsBounds.PerStream, "rlqs-max-buckets-per-stream", rlqs.DefaultMaxBucketsPerStream, "most RLQS buckets one stream holds")
	fs.IntVar(&f.rlqsBounds.PerConnection, "rlqs-max-buckets-per-connection", rlqs.DefaultMaxBucketsPerConnection, "most RLQS buckets the streams of one gRPC connection hold together, those of its ended streams included until their assignments expire")
	fs.IntVar(&f.rlqsBounds.PerPeer, "rlqs-max-buckets-per-peer", rlqs.DefaultMaxBucketsPerPeer, "most RLQS buckets the streams of one authenticated peer (its client certificate's URI, DNS, email or IP SAN, or subject, under mTLS) hold over all its connections")
	fs.IntVar(&f.rlqsBounds.StreamsPerBucket, "rlqs-max-streams-per-bucket", rlqs.DefaultMaxStreamsPerBucket, "most streams of one gRPC connection, and of one authenticated peer, that hold the same RLQS bucket (each is a client the limit is divided among)")
	fs.BoolVar(&f.hotKeys.enabled, "hotkeys", true, "track, per domain, the counters most refused and those nearest their limits, served at GET /hotkeys")
	fs.IntVar(&f.hotKeys.k, "hotkeys-k", hotkeys.DefaultK, "how many counters each hot keys list of a domain holds")
	fs.DurationVar(&f.hotKeys.window, "hotkeys-window", hotkeys.DefaultWindow, "how far back the hot keys look: refusals over the last one to two windows, the highest share of a limit used within one")
	fs.StringVar(&f.hotKeys.values, "hotkeys-values", "digest", "request values in GET /hotkeys: digest (hmac: and 16 hex digits of a keyed digest; values may be personal data) or show;\n"+
		"GET /hotkeys?value=V finds a value")
	fs.StringVar(&f.hotKeys.digestKeyFile, "hotkeys-digest-key-file", "", "`file` of the key of the /hotkeys digests (16 to 4096 bytes), read at start: replicas given the same key show the same digests;\n"+
		"empty: a random key per process")
	fs.IntVar(&f.unknownDomains, "unknown-domains-max", server.DefaultUnknownDomains, "most domains without rules counted each under its own label of ratelimitd_unknown_domain_requests_total, and logged each;\n"+
		"the requests for the others are counted together in ratelimitd_unknown_domain_requests_untracked_total")
	fs.BoolVar(&f.httpJSON, "http-json", true, "serve POST /json on --http-addr (decisions over HTTP, without the gRPC listener's mutual TLS)")
	fs.StringVar(&f.adminAddr, "admin-addr", "", "listen `address` of the operators' endpoints (/ui/, /config, /metrics, /rlqs, /hotkeys, /explain), which then leave --http-addr;\n"+
		"empty: they stay on --http-addr. Keep it private")
	fs.Func("admin-hosts", "comma-separated host `names` the operators' endpoints answer to besides IP addresses, localhost and the host of their listen address\n"+
		"(any other Host gets 421, against DNS rebinding): the names an ingress or a scrape uses", func(v string) (err error) {
		f.adminHosts, err = parseHostNames(v)
		return err
	})
	fs.StringVar(&f.adminTokenFile, "admin-token-file", "", "`file` of the bearer tokens of the runtime overrides API (/v1/overrides, /v1/reset, OverridesService): one per line, or name:token;\n"+
		"reloaded when it changes. Empty: the API is read-only")
	fs.IntVar(&f.maxOverrides, "max-overrides", overrides.DefaultMax, "most runtime overrides stored and applied; a set past it answers 409 and counts in ratelimitd_override_refusals_total{reason=\"full\"}")
	fs.StringVar(&f.debugAddr, "debug-addr", "", "listen `address` for /debug/pprof (off when empty; keep it private)")
	fs.StringVar(&f.tracing.endpoint, "otlp-endpoint", "", "OpenTelemetry collector `host:port` (OTLP/gRPC) to send traces of ShouldRateLimit and store calls to; off when empty.\n"+
		"The exporter's OTEL_EXPORTER_OTLP_* variables (headers, certificates) apply too")
	fs.BoolVar(&f.tracing.insecure, "otlp-insecure", false, "send traces to --otlp-endpoint without TLS")
	fs.Float64Var(&f.tracing.sampleRatio, "trace-sample-ratio", defaultTraceSampleRatio, "share of requests without a parent span to trace (a parent's sampling decision is followed)")
	fs.StringVar(&f.statsd.addr, "statsd-addr", "", "send envoyproxy/ratelimit's statsd series (ratelimit.service.rate_limit.DOMAIN.KEY.total_hits, ...) to this statsd `host:port`,\n"+
		"beside /metrics, for dashboards built on the reference's; off when empty")
	fs.StringVar(&f.statsd.network, "statsd-network", "tcp", "how to reach --statsd-addr: tcp or udp")
	fs.DurationVar(&f.statsd.interval, "statsd-flush-interval", defaultStatsdFlushInterval, "how often the statsd series are sent")
	fs.Func("statsd-tags", "comma-separated `key=value` tags of every statsd series, as the reference's EXTRA_TAGS (serialized into the names as .__key=value)", func(v string) error {
		tags, err := parseKeyValues(v)
		f.statsd.tags = tags
		return err
	})
	fs.BoolVar(&f.envoyproxyAnswers, "envoyproxy-answers", false, "answer Envoy's RateLimitService as envoyproxy/ratelimit does: current_limit.name only when the rule names its limit,\n"+
		"duration_until_reset in whole seconds, no decided_by nor ratelimitd_leases in the dynamic metadata (set by --compat envoyproxy)")
	fs.TextVar(&f.logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fs.BoolVar(&f.version, "version", false, "print the version and exit")
	fs.StringVar(&f.requestLog.path, "request-log", "", "append a sample of the decided requests to this `file`, a JSON line each (their /json body and time) for `ratelimitd replay`;\n"+
		"rotated at --request-log-max-size, and reopened on SIGHUP for rotation from outside; off when empty")
	fs.Float64Var(&f.requestLog.sample, "request-log-sample", 1, "share of requests --request-log writes, 0 to 1")
	fs.IntVar(&f.requestLog.maxSize, "request-log-max-size", requestlog.DefaultMaxSize, "`MiB` past which --request-log is renamed aside (NAME-TIME-size.log) and a new file opened;\n"+
		"0: no bound, for rotation from outside (SIGHUP)")
	fs.IntVar(&f.requestLog.maxBackups, "request-log-max-backups", requestlog.DefaultMaxBackups, "how many files rotated at --request-log-max-size are kept, the newest (at least 1)")
	fs.IntVar(&f.requestLog.maxRecord, "request-log-max-record", requestlog.DefaultMaxRecord, "longest line of --request-log, in bytes (at most "+strconv.Itoa(requestlog.MaxLine)+", what replay reads):\n"+
		"a longer record is written as a marker with its size, and counted")
}

// check returns what is wrong with f, nil if nothing.
func (f *flags) check() error {
	if f.statsd.addr != "" {
		if f.statsd.network != "tcp" && f.statsd.network != "udp" {
			return fmt.Errorf("--statsd-network %q: want tcp or udp", f.statsd.network)
		}
		if f.statsd.interval <= 0 {
			return fmt.Errorf("--statsd-flush-interval %v: must be positive", f.statsd.interval)
		}
	}
	if f.rlqsSyncInterval <= 0 {
		return fmt.Errorf("--rlqs-sync-interval %v: must be positive", f.rlqsSyncInterval)
	}
	for _, b := range []struct {
		name string
		v    int
	}{
		{"rlqs-max-buckets", f.rlqsBounds.Total}, {"rlqs-max-buckets-per-stream", f.rlqsBounds.PerStream},
		{"rlqs-max-buckets-per-connection", f.rlqsBounds.PerConnection}, {"rlqs-max-buckets-per-peer", f.rlqsBounds.PerPeer},
		{"rlqs-max-streams-per-bucket", f.rlqsBounds.StreamsPerBucket}, {"max-overrides", f.maxOverrides},
	} {
		if b.v < 1 {
			return fmt.Errorf("--%s %d: want at least 1", b.name, b.v)
		}
	}
	if err := f.checkRules(); err != nil {
		return err
	}
	switch {
	case f.logFormat != "text" && f.logFormat != "json":
		return fmt.Errorf("--log-format %q: want text or json", f.logFormat)
	case f.memoryMaxKeys <= 0:
		return fmt.Errorf("--memory-max-keys %d: want at least 1", f.memoryMaxKeys)
	case f.backend != "memory" && !redis.IsURL(f.backend):
		return fmt.Errorf("--backend %q: want memory or a redis://, rediss://, redis-cluster://, redis-sentinel:// or unix:// URL", redactBackend(f.backend))
	case f.redis.perSecond != "" && f.backend == "memory":
		return errors.New("--backend-per-second needs a Redis --backend: the memory store keeps every counter itself")
	case f.redis.perSecond != "" && !redis.IsURL(f.redis.perSecond):
		return fmt.Errorf("--backend-per-second %q: want a redis://, rediss://, redis-cluster://, redis-sentinel:// or unix:// URL", redactBackend(f.redis.perSecond))
	case f.redis.perSecondPool < 0 || f.redis.perSecondTimeout < 0:
		return errors.New("--redis-per-second-pool-size and --redis-per-second-timeout must not be negative")
	case f.localCacheSize <= 0:
		return fmt.Errorf("--local-cache-size %d: want at least 1", f.localCacheSize)
	case f.redis.timeout <= 0 || f.redis.dialTimeout <= 0 || f.redis.readTimeout <= 0 || f.redis.writeTimeout <= 0:
		return errors.New("the --redis-*-timeout flags must be positive")
	case !(f.nearLimitRatio > 0 && f.nearLimitRatio <= 1):
		return fmt.Errorf("--near-limit-ratio %v: want more than 0 and at most 1", f.nearLimitRatio)
	case !(f.tracing.sampleRatio >= 0 && f.tracing.sampleRatio <= 1):
		return fmt.Errorf("--trace-sample-ratio %v: want 0 to 1", f.tracing.sampleRatio)
	case f.shutdownDelay < 0 || f.shutdownTimeout < 0:
		return errors.New("--shutdown-delay and --shutdown-timeout must not be negative")
	case f.redis.breakerFailures <= 0 || f.redis.breakerOpen <= 0:
		return errors.New("--redis-breaker-failures and --redis-breaker-open must be positive")
	case f.hotKeys.k < 1 || f.hotKeys.k > hotkeys.MaxK:
		return fmt.Errorf("--hotkeys-k %d: want 1 to %d", f.hotKeys.k, hotkeys.MaxK)
	case f.hotKeys.window < time.Second:
		return fmt.Errorf("--hotkeys-window %v: want at least 1s", f.hotKeys.window)
	case f.hotKeys.values != "digest" && f.hotKeys.values != "show":
		return fmt.Errorf("--hotkeys-values %q: want digest or show", f.hotKeys.values)
	case f.unknownDomains < 1 || f.unknownDomains > maxUnknownDomains:
		return fmt.Errorf("--unknown-domains-max %d: want 1 to %d", f.unknownDomains, maxUnknownDomains)
	case f.tls.adminClientCA != "" && f.adminAddr == "":
		return errors.New("--admin-tls-client-ca needs --admin-addr: the operators' endpoints share --http-addr otherwise")
	}
	return errors.Join(f.tls.check(), f.httpConn.check(), f.grpcConn.check(), f.requestLog.options().Check())
}

// checkRules checks that f names one source of rules, and that an xDS
// source is complete.
func (f *flags) checkRules() error {
	switch {
	case f.config != "" && f.xds.server != "":
		return errors.New("--config and --xds-server exclude each other: rules come from one source")
	case f.config == "" && f.xds.server == "":
		return fmt.Errorf("no rules: set --config or --xds-server (or %s, %s)", envName("config"), envName("xds-server"))
	case f.xds.server != "":
		return f.xds.check()
	}
	return nil
}

// check returns what is wrong with the listeners' TLS flags.
func (t *tlsFlags) check() error {
	switch {
	case (t.grpcCert == "") != (t.grpcKey == ""):
		return errors.New("--grpc-tls-cert and --grpc-tls-key go together")
	case (t.httpCert == "") != (t.httpKey == ""):
		return errors.New("--http-tls-cert and --http-tls-key go together")
	case t.grpcClientCA != "" && t.grpcCert == "":
		return errors.New("--grpc-tls-client-ca needs --grpc-tls-cert and --grpc-tls-key")
	case len(t.grpcAllowedSANs) > 0 && t.grpcClientCA == "":
		return errors.New("--grpc-tls-allowed-sans needs --grpc-tls-client-ca")
	case t.adminClientCA != "" && t.httpCert == "":
		return errors.New("--admin-tls-client-ca needs --http-tls-cert and --http-tls-key")
	}
	return nil
}

// defaultAlgorithmFlag defines on fs --default-algorithm, read into a.
func defaultAlgorithmFlag(fs *flag.FlagSet, a *backend.Algorithm) {
	*a = config.DefaultAlgorithm
	fs.Func("default-algorithm", "`algorithm` of the rate limits that name none: sliding_window, fixed_window (envoyproxy/ratelimit's), sliding_log, token_bucket or gcra; not concurrency (default "+config.DefaultAlgorithm.String()+")", func(v string) (err error) {
		*a, err = backend.ParseAlgorithm(v)
		if err == nil && *a == backend.Concurrency {
			// A default counts the limits that name no algorithm,
			// written as rates: none of them means a lease.
			return errors.New("concurrency cannot be the default: name it on the limits that hold slots")
		}
		return err
	})
}

// setFromEnv sets every flag of fs that the command line did not set
// from its environment variable, if not empty. It returns the names of
// the flags set either way.
func setFromEnv(fs *flag.FlagSet, lookup lookupEnv) (map[string]bool, error) {
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	var bad error
	fs.VisitAll(func(fl *flag.Flag) {
		if set[fl.Name] || bad != nil {
			return
		}
		if v, _ := lookup(envName(fl.Name)); v != "" {
			set[fl.Name] = true
			if err := fl.Value.Set(v); err != nil {
				bad = fmt.Errorf("%s=%q: %w", envName(fl.Name), v, err)
			}
		}
	})
	return set, bad
}

// configLimitFlags defines on fs the flags of the bounds on rule files
// that a large rule set may need raised; the others keep their defaults.
// The daemon and check-config share them, so that both accept the same
// files.
func configLimitFlags(fs *flag.FlagSet, l *config.Limits) {
	fs.Int64Var(&l.MaxBytes, "config-max-bytes", config.DefaultMaxBytes, "most bytes of rule files read, all files of --config together")
	fs.Int64Var(&l.MaxExpandedBytes, "config-max-expanded-bytes", config.DefaultMaxExpandedBytes, "most bytes of the rule files with YAML aliases expanded (each node its text plus one byte), all files together")
	fs.IntVar(&l.MaxRules, "config-max-rules", config.DefaultMaxRules, "most rules (descriptors, every level) of one domain")
	fs.IntVar(&l.MaxFiles, "config-max-files", config.DefaultMaxFiles, "most rule files (*.yaml, *.yml) in a --config directory")
}

// parseHostNames parses --admin-hosts: host names, comma-separated, each
// without scheme, path or space (a port is allowed and ignored).
func parseHostNames(v string) ([]string, error) {
	var names []string
	for n := range strings.SplitSeq(v, ",") {
		n = strings.TrimSpace(n)
		switch {
		case n == "":
			continue
		case strings.ContainsAny(n, "/ \t@?#"):
			return nil, fmt.Errorf("--admin-hosts: %q is not a host name", n)
		}
		names = append(names, n)
	}
	return names, nil
}
