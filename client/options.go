package client

import (
	"context"
	"log/slog"
	"time"
)

// Defaults of the options.
const (
	// DefaultTimeout is the default budget of one ShouldRateLimit call.
	DefaultTimeout = 50 * time.Millisecond
	// DefaultConnectTimeout is how long, by default, calls wait for a
	// connection attempt (see WithConnectTimeout).
	DefaultConnectTimeout = time.Second
	// DefaultRefusalCache is how long, at most, a refusal is remembered by
	// default.
	DefaultRefusalCache = time.Second
	// DefaultRefusalCacheSize is how many refusals are remembered at most
	// by default.
	DefaultRefusalCacheSize = 10000
)

// An Option configures a Client (New). WithFailClosed, WithLogger and
// WithClock configure a Quota too: they are SharedOptions.
type Option interface {
	applyClient(o *options)
}

// A QuotaOption configures a Quota (NewQuota): WithReportingInterval,
// WithMaxBuckets, and the SharedOptions.
type QuotaOption interface {
	applyQuota(c *quotaConfig)
}

// A SharedOption configures a Client and a Quota alike: it is an Option
// and a QuotaOption.
type SharedOption interface {
	Option
	QuotaOption
}

// clientOption is an Option of a Client only.
type clientOption func(*options)

func (f clientOption) applyClient(o *options) { f(o) }

// quotaOption is a QuotaOption of a Quota only.
type quotaOption func(*quotaConfig)

func (f quotaOption) applyQuota(c *quotaConfig) { f(c) }

// sharedOption is a SharedOption: the same setting for either.
type sharedOption struct {
	client func(*options)
	quota  func(*quotaConfig)
}

func (s sharedOption) applyClient(o *options)    { s.client(o) }
func (s sharedOption) applyQuota(c *quotaConfig) { s.quota(c) }

type options struct {
	failClosed     bool
	timeout        time.Duration
	connectTimeout time.Duration
	refusalAge     time.Duration
	refusalSize    int
	now            func() time.Time
	logger         *slog.Logger // nil: slog.Default() when logging
	hook           func(context.Context, Observation)
	autoRenew      bool
}

var defaults = options{
	timeout:        DefaultTimeout,
	connectTimeout: DefaultConnectTimeout,
	refusalAge:     DefaultRefusalCache,
	refusalSize:    DefaultRefusalCacheSize,
	now:            time.Now,
}

// WithFailClosed makes the failure policy refuse instead of allowing (the
// default, as Envoy does). A Client then refuses (Decision.Allowed false)
// when ratelimitd fails; Decision.Err still reports the failure. A Quota
// refuses the calls of buckets without an assignment in force (which
// refuses the calls of a new bucket until ratelimitd's first answer, a
// round trip later: it suits buckets that are few and long-lived).
func WithFailClosed() SharedOption {
	return sharedOption{
		client: func(o *options) { o.failClosed = true },
		quota:  func(c *quotaConfig) { c.failClosed = true },
	}
}

// WithTimeout sets the budget of one ShouldRateLimit call: if ratelimitd
// has not answered within d, the call gives up and the failure policy
// decides. The budget starts when the call stops waiting for the
// connection (see WithConnectTimeout). It only shortens the caller's
// context, never extends it. d <= 0 sets no budget: the call
// lasts as long as ctx allows. The default is DefaultTimeout.
func WithTimeout(d time.Duration) Option {
	return clientOption(func(o *options) { o.timeout = d })
}

// WithConnectTimeout sets the connect budget: how long, at most, calls
// wait for the connection to connect before their own budget (see
// WithTimeout) starts, so that a handshake (a new connection's, or a
// reconnection's once the connection went idle: after ratelimitd
// restarted, or gRPC's idle timeout) is not paid from a call's budget
// and does not turn the first calls into decisions of the failure policy.
//
// New starts connecting an idle connection. A call that finds the
// connection idle or connecting waits until it is ready, then is sent,
// with its budget. The connect budget is counted from the start of the
// connection attempt, as the Client sees it (at New, or at the first
// call that found the connection not ready after it was ready), not per
// call: calls wait at most until d after that start, together, and once
// it is spent no call waits until the connection has been ready again,
// so that a server that accepts but never answers (a hung host) delays
// calls by d once, not every call. Calls never wait while the connection
// is in TRANSIENT_FAILURE (ratelimitd refused or failed the handshake;
// gRPC then retries with backoff): the failure policy decides at once. A
// call waits at most d plus its own budget, and never longer than ctx
// allows (when ctx ends first, ShouldRateLimit returns its error).
//
// The Client needs to see the connection's state: conn must be a
// *grpc.ClientConn, or have its methods GetState, WaitForStateChange and
// Connect. Another grpc.ClientConnInterface is used as it is: calls do
// not wait, and a handshake comes out of the first calls' budgets.
//
// d <= 0 makes calls never wait (New still starts connecting). The
// default is DefaultConnectTimeout.
func WithConnectTimeout(d time.Duration) Option {
	return clientOption(func(o *options) { o.connectTimeout = d })
}

// WithRefusalCache sets how long, at most, the Client refuses by itself a
// request that ratelimitd refused: min(retry-after, maxAge). maxAge <= 0
// turns the refusal memory off. The default is DefaultRefusalCache.
func WithRefusalCache(maxAge time.Duration) Option {
	return clientOption(func(o *options) { o.refusalAge = maxAge })
}

// WithRefusalCacheSize sets how many distinct refused requests the Client
// remembers at most; when full, it forgets the expired ones, else an
// arbitrary one. n <= 0 turns the refusal memory off. The default is
// DefaultRefusalCacheSize.
func WithRefusalCacheSize(n int) Option {
	return clientOption(func(o *options) { o.refusalSize = n })
}

// WithClock makes the Client or the Quota read the time from now instead
// of time.Now: for tests that drive a manual clock, such as one shared
// with an in-process ratelimitd. A Client reads it for its refusal memory
// (when a remembered refusal expires, and how far its durations have
// counted down); durations reported to WithDecisionHook are measured on
// the real clock. A Quota reads it for its token buckets and its
// assignments' times to live, and runs no coarse clock of its own; it
// still reports every reporting interval of real time. nil keeps
// time.Now.
func WithClock(now func() time.Time) SharedOption {
	return sharedOption{
		client: func(o *options) {
			if now != nil {
				o.now = now
			}
		},
		quota: func(c *quotaConfig) { c.now = now },
	}
}

// WithLogger sets the logger of warnings. A Client logs one error, once,
// when ratelimitd does not implement the native API (see
// ShouldRateLimit); a Quota logs the failures of its reporting stream.
// nil, the default, logs to slog.Default() (a Client's, as it is when the
// warning is logged).
func WithLogger(l *slog.Logger) SharedOption {
	return sharedOption{
		client: func(o *options) { o.logger = l },
		quota:  func(c *quotaConfig) { c.logger = l },
	}
}

// WithAutoRenew makes Acquire keep each lease it holds alive until its
// release (see Lease.KeepAlive), in a goroutine that ends with the
// release: for work, such as long streams under WithConcurrency, that may
// outlive its limit's window. Without it, a slot frees itself when its
// lease expires, even while the work goes on. With it, a slot is held as
// long as the work (and the process) lives: a release that is never
// called leaks it. A lease lost all the same (ratelimitd away past its
// expiry) is logged at Warn. AcquireLease's leases are the caller's to
// keep.
func WithAutoRenew() Option {
	return clientOption(func(o *options) { o.autoRenew = true })
}

// WithDecisionHook makes the Client call hook after every ShouldRateLimit
// call, whoever decided (ratelimitd, the refusal memory, or the failure
// policy), and for calls that fail (a malformed request, ctx ended): to
// count decisions, failures and fail-open answers in metrics, or log
// them. hook runs synchronously on the caller's goroutine, with the
// caller's ctx, before ShouldRateLimit returns: it must be quick, and
// safe for concurrent use. Observation.Descriptors is the caller's slice:
// hook must neither modify nor keep it.
func WithDecisionHook(hook func(ctx context.Context, o Observation)) Option {
	return clientOption(func(o *options) { o.hook = hook })
}
