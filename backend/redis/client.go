package redis

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/ratelimitd/ratelimitd/internal/tlsconfig"
)

// DefaultIOTimeout is the dial, read and write timeout of a client that
// NewClient makes, unless set.
const DefaultIOTimeout = 50 * time.Millisecond

// ClientOptions are the settings of the client NewClient makes that its
// URL does not carry. The zero value means the defaults.
type ClientOptions struct {
	// PoolSize is the number of connections per Redis node. Zero means
	// 10 per CPU, go-redis's default.
	PoolSize int
	// DialTimeout, ReadTimeout and WriteTimeout bound each network step.
	// Zero means DefaultIOTimeout; a URL parameter (dial_timeout=...) wins.
	DialTimeout, ReadTimeout, WriteTimeout time.Duration
	// CAFile, CertFile and KeyFile are PEM files for rediss:// URLs: the
	// CA that signs the server's certificate (else the system's), and a
	// client certificate for mutual TLS.
	CAFile, CertFile, KeyFile string
	// Dialer, when set, opens the client's connections instead of
	// go-redis's dialer, which also does TLS: for tests that slow or break
	// connections.
	Dialer func(ctx context.Context, network, addr string) (net.Conn, error)
}

// NewClient returns a go-redis client for a URL of one of these forms:
//
//	redis://[user:pass@]host:port[/db]                       one Redis
//	rediss://[user:pass@]host:port[/db]                      one Redis, over TLS
//	redis-cluster://h1:p1?addr=h2:p2&addr=h3:p3              Redis Cluster (rediss-cluster:// for TLS)
//	redis-sentinel://s1:26379?addr=s2:26379&master_name=NAME a Sentinel group (rediss-sentinel:// for TLS)
//	unix://[user:pass@]/path/to/redis.sock[?db=N]            one Redis, on its unix socket
//
// Query parameters set go-redis options, as goredis.ParseURL,
// ParseClusterURL and ParseFailoverURL define them.
//
// Scripts are not idempotent, so the client never retries a command
// (MaxRetries -1, and on Cluster MaxRedirects -1 unless the URL sets
// max_redirects): a retry after a timeout could count hits twice. It
// dials once per attempt (DialerRetries 1) and honours context deadlines
// (ContextTimeoutEnabled).
//
// Every new connection first checks the node's Redis version (INFO
// server): on a node older than Redis 5.0, which cannot run the store's
// script, the connection fails with an error naming the node and its
// version. NewClient itself does no I/O: Redis may come up later.
func NewClient(rawURL string, o ClientOptions) (goredis.UniversalClient, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, fmt.Errorf("redis URL %q: want scheme://host:port", Redact(rawURL))
	}
	base, kind, _ := strings.Cut(scheme, "-")
	if base != "redis" && base != "rediss" && base != "unix" || kind != "" && (base == "unix" || kind != "cluster" && kind != "sentinel") {
		return nil, fmt.Errorf("redis URL %q: unknown scheme %q (want redis, rediss, redis-cluster, redis-sentinel or unix)", Redact(rawURL), scheme)
	}
	plain := base + "://" + rest
	tlsConf, err := o.tls()
	if err != nil {
		return nil, err
	}
	if tlsConf != nil && base != "rediss" {
		return nil, fmt.Errorf("redis URL %q: TLS files are set but the URL is not rediss://", Redact(rawURL))
	}
	switch kind {
	case "": // one Redis: redis, rediss or unix, which goredis.ParseURL reads alike
		opt, err := goredis.ParseURL(plain)
		if err != nil {
			return nil, fmt.Errorf("redis URL %q: %w", Redact(rawURL), urlError(rawURL, err))
		}
		o.settle(fields{&opt.PoolSize, &opt.MaxRetries, &opt.DialerRetries, &opt.DialTimeout, &opt.ReadTimeout,
			&opt.WriteTimeout, &opt.PoolTimeout, &opt.DialerRetryTimeout, &opt.ContextTimeoutEnabled, &opt.TLSConfig, &opt.Dialer}, tlsConf, false)
		opt.OnConnect = checkVersion(opt.Addr, true)
		return goredis.NewClient(opt), nil
	case "cluster":
		opt, err := goredis.ParseClusterURL(plain)
		if err != nil {
			return nil, fmt.Errorf("redis URL %q: %w", Redact(rawURL), urlError(rawURL, err))
		}
		o.settle(fields{&opt.PoolSize, &opt.MaxRetries, &opt.DialerRetries, &opt.DialTimeout, &opt.ReadTimeout,
			&opt.WriteTimeout, &opt.PoolTimeout, &opt.DialerRetryTimeout, &opt.ContextTimeoutEnabled, &opt.TLSConfig, &opt.Dialer}, tlsConf, true)
		// A Cluster client re-sends a command after a timeout or a
		// dropped connection as a redirect; a script must run once.
		if !strings.Contains(rest, "max_redirects=") {
			opt.MaxRedirects = -1
		}
		// Each node's client checks its own node.
		opt.NewClient = func(node *goredis.Options) *goredis.Client {
			node.OnConnect = checkVersion(node.Addr, true)
			return goredis.NewClient(node)
		}
		return goredis.NewClusterClient(opt), nil
	default:
		opt, err := goredis.ParseFailoverURL(plain)
		if err != nil {
			return nil, fmt.Errorf("redis URL %q: %w", Redact(rawURL), urlError(rawURL, err))
		}
		if opt.MasterName == "" {
			return nil, fmt.Errorf("redis URL %q: a sentinel URL needs master_name=NAME", Redact(rawURL))
		}
		o.settle(fields{&opt.PoolSize, &opt.MaxRetries, &opt.DialerRetries, &opt.DialTimeout, &opt.ReadTimeout,
			&opt.WriteTimeout, &opt.PoolTimeout, &opt.DialerRetryTimeout, &opt.ContextTimeoutEnabled, &opt.TLSConfig, &opt.Dialer}, tlsConf, true)
		// The master moves: name it by its group (the Sentinels' own
		// connections are not checked, see checkVersion).
		opt.OnConnect = checkVersion("master "+opt.MasterName, false)
		return goredis.NewFailoverClient(opt), nil
	}
}

// fields points at the settings that go-redis's Options, ClusterOptions
// and FailoverOptions share and NewClient sets alike.
type fields struct {
	pool, retries, dialRetries               *int
	dial, read, write, poolWait, dialBackoff *time.Duration
	contextTimeout                           *bool
	tls                                      **tls.Config
	dialer                                   *func(ctx context.Context, network, addr string) (net.Conn, error)
}

// settle sets what the URL left at zero, the TLS files and the Dialer. With
// manyHosts (Cluster, Sentinel), TLS checks each node's own host name,
// not the one of the address in the URL.
func (o ClientOptions) settle(f fields, files *tls.Config, manyHosts bool) {
	if *f.pool == 0 {
		*f.pool = cmp.Or(o.PoolSize, 10*runtime.GOMAXPROCS(0))
	}
	for _, d := range []struct {
		field *time.Duration
		v     time.Duration
	}{{f.dial, o.DialTimeout}, {f.read, o.ReadTimeout}, {f.write, o.WriteTimeout}} {
		if *d.field == 0 {
			*d.field = cmp.Or(d.v, DefaultIOTimeout)
		}
	}
	if *f.poolWait == 0 {
		*f.poolWait = *f.read // waiting for a free connection takes no longer than a read
	}
	if *f.retries == 0 {
		*f.retries = -1
	}
	// One dial attempt, unless the URL asks for more: go-redis's default
	// (5 attempts 100 ms apart) would hold every call on a refused
	// connection until its deadline; the circuit breaker, not the dialer,
	// handles a Redis that is down.
	if *f.dialRetries == 0 {
		*f.dialRetries, *f.dialBackoff = 1, time.Millisecond
	}
	*f.contextTimeout = true
	if *f.tls != nil && files != nil {
		(*f.tls).RootCAs, (*f.tls).Certificates = files.RootCAs, files.Certificates
	}
	if *f.tls != nil && manyHosts {
		(*f.tls).ServerName = ""
	}
	if o.Dialer != nil {
		*f.dialer = o.Dialer
	}
}

// tls returns the TLS settings of the CA, certificate and key files, or
// nil if none is set.
func (o ClientOptions) tls() (*tls.Config, error) {
	if o.CAFile == "" && o.CertFile == "" && o.KeyFile == "" {
		return nil, nil
	}
	c, err := tlsconfig.Client(o.CAFile, o.CertFile, o.KeyFile, "")
	if err != nil {
		return nil, fmt.Errorf("redis TLS: %w", err)
	}
	return c, nil
}

// urlError returns err, from parsing rawURL, for a message: the parser's
// reason without the URL it repeats, or, when rawURL holds a password,
// only that it does not parse. The parser's reasons quote what they could
// not read, which may be part of the password: "invalid port \":hun\"
// after host" for redis://:hun/ter2@host.
func urlError(rawURL string, err error) error {
	if Redact(rawURL) != rawURL {
		return errors.New("not a valid URL (the reason is not shown, as it may quote the password: check the URL's escapes, host and port)")
	}
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}

// Redact hides the passwords of a Redis URL, for messages: the one in its
// user information and the values of query parameters whose names
// contain "password" (go-redis's sentinel_password, for one). It works on
// URLs that do not parse too.
func Redact(rawURL string) string {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		// Not a URL ("redis:/:pass@host"): hide everything from the first
		// ":" to the last "@", where a password would be.
		if at := strings.LastIndex(rawURL, "@"); at >= 0 {
			if colon := strings.Index(rawURL[:at], ":"); colon >= 0 {
				return rawURL[:colon] + ":xxxxx" + rawURL[at:]
			}
		}
		return rawURL
	}
	// The user information ends at the last "@": a password may hold "?"
	// or "/" (unescaped, the URL does not parse, and it is logged then).
	// An "@" in the query makes this hide too much, never too little.
	userinfo := ""
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		userinfo, rest = rest[:at+1], rest[at+1:]
		if user, _, ok := strings.Cut(userinfo, ":"); ok {
			userinfo = user + ":xxxxx@"
		}
	}
	rest, query, hasQuery := strings.Cut(rest, "?")
	rest = userinfo + rest
	if hasQuery {
		params := strings.Split(query, "&")
		for i, p := range params {
			if name, _, ok := strings.Cut(p, "="); ok && strings.Contains(strings.ToLower(name), "password") {
				params[i] = name + "=xxxxx"
			}
		}
		rest += "?" + strings.Join(params, "&")
	}
	return scheme + "://" + rest
}

// SetLogger sends go-redis's own messages (Sentinel switches, pool
// trouble) to log at info level, instead of the standard logger, at most
// one every 10 seconds: during an outage go-redis repeats itself at every
// dial. It sets a process-wide logger: call it once, from main.
func SetLogger(log *slog.Logger) {
	goredis.SetLogger(&slogPrinter{log: log, every: rate.Sometimes{First: 1, Interval: 10 * time.Second}})
}

type slogPrinter struct {
	log        *slog.Logger
	every      rate.Sometimes
	suppressed atomic.Int64 // messages dropped since the last one logged
}

func (p *slogPrinter) Printf(ctx context.Context, format string, v ...any) {
	logged := false
	p.every.Do(func() {
		logged = true
		p.log.InfoContext(ctx, fmt.Sprintf(format, v...), "suppressed", p.suppressed.Swap(0))
	})
	if !logged {
		p.suppressed.Add(1)
	}
}
