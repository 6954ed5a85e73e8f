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
	// DefaultRefusalCache is how long, at most, a refusal is remembered by
	// default.
	DefaultRefusalCache = time.Second
	// DefaultRefusalCacheSize is how many refusals are remembered at most
	// by default.
	DefaultRefusalCacheSize = 10000
)

// An Option configures a Client.
type Option func(*options)

type options struct {
	failClosed  bool
	timeout     time.Duration
	refusalAge  time.Duration
	refusalSize int
	now         func() time.Time
	logger      *slog.Logger // nil: slog.Default() when logging
	hook        func(context.Context, Observation)
}

var defaults = options{
	timeout:     DefaultTimeout,
	refusalAge:  DefaultRefusalCache,
	refusalSize: DefaultRefusalCacheSize,
	now:         time.Now,
}

// WithFailClosed makes the Client refuse (Decision.Allowed false) when
// ratelimitd fails, instead of allowing. Decision.Err still reports the
// failure.
func WithFailClosed() Option {
	return func(o *options) { o.failClosed = true }
}

// WithTimeout sets the budget of one ShouldRateLimit call: if ratelimitd
// has not answered within d, the call gives up and the failure policy
// decides. The budget only shortens the caller's context, never extends
// it. d <= 0 sets no budget: the call lasts as long as ctx allows. The
// default is DefaultTimeout.
func WithTimeout(d time.Duration) Option {
	return func(o *options) { o.timeout = d }
}

// WithRefusalCache sets how long, at most, the Client refuses by itself a
// request that ratelimitd refused: min(retry-after, maxAge). maxAge <= 0
// turns the refusal memory off. The default is DefaultRefusalCache.
func WithRefusalCache(maxAge time.Duration) Option {
	return func(o *options) { o.refusalAge = maxAge }
}

// WithRefusalCacheSize sets how many distinct refused requests the Client
// remembers at most; when full, it forgets the expired ones, else an
// arbitrary one. n <= 0 turns the refusal memory off. The default is
// DefaultRefusalCacheSize.
func WithRefusalCacheSize(n int) Option {
	return func(o *options) { o.refusalSize = n }
}

// WithClock makes the Client read the time from now, for its refusal
// memory (when a remembered refusal expires, and how far its durations
// have counted down), instead of time.Now: for tests that drive a manual
// clock, such as one shared with an in-process ratelimitd. Durations
// reported to WithDecisionHook are measured on the real clock.
func WithClock(now func() time.Time) Option {
	return func(o *options) { o.now = now }
}

// WithLogger sets the logger of the Client's warnings: when ratelimitd
// does not implement the native API (see ShouldRateLimit), it logs one
// error, once per Client. nil, the default, logs to slog.Default() as it
// is when the warning is logged.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
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
	return func(o *options) { o.hook = hook }
}
