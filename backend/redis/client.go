package redis

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"runtime"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
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
}

// NewClient returns a go-redis client for a URL of one of these forms:
//
//	redis://[user:pass@]host:port[/db]                       one Redis
//	rediss://[user:pass@]host:port[/db]                      one Redis, over TLS
//	redis-cluster://h1:p1?addr=h2:p2&addr=h3:p3              Redis Cluster (rediss-cluster:// for TLS)
//	redis-sentinel://s1:26379?addr=s2:26379&master_name=NAME a Sentinel group (rediss-sentinel:// for TLS)
//
// Query parameters set go-redis options, as goredis.ParseURL,
// ParseClusterURL and ParseFailoverURL define them.
//
// Scripts are not idempotent, so the client never retries a command
// (MaxRetries -1, and on Cluster MaxRedirects -1 unless the URL sets
// max_redirects): a retry after a timeout could count hits twice. It
// dials once per attempt (DialerRetries 1) and honours context deadlines
// (ContextTimeoutEnabled).
func NewClient(rawURL string, o ClientOptions) (goredis.UniversalClient, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, fmt.Errorf("redis URL %q: want scheme://host:port", redact(rawURL))
	}
	base, kind, _ := strings.Cut(scheme, "-")
	if base != "redis" && base != "rediss" || kind != "" && kind != "cluster" && kind != "sentinel" {
		return nil, fmt.Errorf("redis URL %q: unknown scheme %q (want redis, rediss, redis-cluster or redis-sentinel)", redact(rawURL), scheme)
	}
	plain := base + "://" + rest
	tlsConf, err := o.tls()
	if err != nil {
		return nil, err
	}
	if tlsConf != nil && base != "rediss" {
		return nil, fmt.Errorf("redis URL %q: TLS files are set but the URL is not rediss://", redact(rawURL))
	}
	switch kind {
	case "":
		opt, err := goredis.ParseURL(plain)
		if err != nil {
			return nil, fmt.Errorf("redis URL %q: %v", redact(rawURL), unwrapURLError(err))
		}
		o.apply(&opt.PoolSize, &opt.DialTimeout, &opt.ReadTimeout, &opt.WriteTimeout, &opt.PoolTimeout, &opt.MaxRetries)
		opt.DialerRetries, opt.DialerRetryTimeout = dialRetries(opt.DialerRetries, opt.DialerRetryTimeout)
		opt.ContextTimeoutEnabled = true
		opt.TLSConfig = mergeTLS(opt.TLSConfig, tlsConf)
		return goredis.NewClient(opt), nil
	case "cluster":
		opt, err := goredis.ParseClusterURL(plain)
		if err != nil {
			return nil, fmt.Errorf("redis URL %q: %v", redact(rawURL), unwrapURLError(err))
		}
		o.apply(&opt.PoolSize, &opt.DialTimeout, &opt.ReadTimeout, &opt.WriteTimeout, &opt.PoolTimeout, &opt.MaxRetries)
		opt.DialerRetries, opt.DialerRetryTimeout = dialRetries(opt.DialerRetries, opt.DialerRetryTimeout)
		opt.ContextTimeoutEnabled = true
		opt.TLSConfig = mergeTLS(opt.TLSConfig, tlsConf)
		if opt.TLSConfig != nil {
			opt.TLSConfig.ServerName = "" // each node's own host name, not the seed's
		}
		// A Cluster client re-sends a command after a timeout or a
		// dropped connection as a redirect; a script must run once.
		if !strings.Contains(rest, "max_redirects=") {
			opt.MaxRedirects = -1
		}
		return goredis.NewClusterClient(opt), nil
	default:
		opt, err := goredis.ParseFailoverURL(plain)
		if err != nil {
			return nil, fmt.Errorf("redis URL %q: %v", redact(rawURL), unwrapURLError(err))
		}
		if opt.MasterName == "" {
			return nil, fmt.Errorf("redis URL %q: a sentinel URL needs master_name=NAME", redact(rawURL))
		}
		o.apply(&opt.PoolSize, &opt.DialTimeout, &opt.ReadTimeout, &opt.WriteTimeout, &opt.PoolTimeout, &opt.MaxRetries)
		opt.DialerRetries, opt.DialerRetryTimeout = dialRetries(opt.DialerRetries, opt.DialerRetryTimeout)
		opt.ContextTimeoutEnabled = true
		opt.TLSConfig = mergeTLS(opt.TLSConfig, tlsConf)
		if opt.TLSConfig != nil {
			opt.TLSConfig.ServerName = "" // the master's own host name, not the sentinel's
		}
		return goredis.NewFailoverClient(opt), nil
	}
}

// apply sets what the URL left at zero.
func (o ClientOptions) apply(pool *int, dial, read, write, poolWait *time.Duration, retries *int) {
	if *pool == 0 {
		*pool = cmp(o.PoolSize, 10*runtime.GOMAXPROCS(0))
	}
	for _, d := range []struct {
		field *time.Duration
		v     time.Duration
	}{{dial, o.DialTimeout}, {read, o.ReadTimeout}, {write, o.WriteTimeout}} {
		if *d.field == 0 {
			*d.field = cmp(d.v, DefaultIOTimeout)
		}
	}
	if *poolWait == 0 {
		*poolWait = *read // waiting for a free connection takes no longer than a read
	}
	if *retries == 0 {
		*retries = -1
	}
}

// dialRetries returns the dial retries to use: one attempt, unless the URL
// asked for more. go-redis's default (5 attempts 100 ms apart) would hold
// every call on a refused connection until its deadline; the circuit
// breaker, not the dialer, handles a Redis that is down.
func dialRetries(n int, backoff time.Duration) (int, time.Duration) {
	if n == 0 {
		return 1, time.Millisecond
	}
	return n, backoff
}

// tls returns the TLS settings of the CA, certificate and key files, or
// nil if none is set.
func (o ClientOptions) tls() (*tls.Config, error) {
	if o.CAFile == "" && o.CertFile == "" && o.KeyFile == "" {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("redis TLS CA: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redis TLS CA %s: no PEM certificate found", o.CAFile)
		}
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, fmt.Errorf("redis TLS: a client certificate needs both a cert and a key file")
	}
	if o.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("redis TLS client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// mergeTLS adds files' CA and certificate to the URL's TLS settings; it
// keeps plain connections plain.
func mergeTLS(url, files *tls.Config) *tls.Config {
	if url == nil || files == nil {
		return url
	}
	url.RootCAs, url.Certificates = files.RootCAs, files.Certificates
	return url
}

// unwrapURLError drops the URL that a url.Error quotes, password and all.
func unwrapURLError(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}

// redact hides a URL's password in messages.
func redact(rawURL string) string {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return rawURL
	}
	userinfo, host, ok := strings.Cut(rest, "@")
	if !ok {
		return rawURL
	}
	if user, _, ok := strings.Cut(userinfo, ":"); ok {
		return scheme + "://" + user + ":xxxxx@" + host
	}
	return rawURL
}

// SetLogger sends go-redis's own messages (Sentinel switches, pool
// trouble) to log at info level, instead of the standard logger.
// It sets a process-wide logger: call it once, from main.
func SetLogger(log *slog.Logger) { goredis.SetLogger(slogPrinter{log}) }

type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Printf(ctx context.Context, format string, v ...any) {
	p.log.InfoContext(ctx, fmt.Sprintf(format, v...))
}
