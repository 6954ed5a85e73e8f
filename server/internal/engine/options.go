package engine

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/server/hotkeys"
)

// DefaultNearLimitRatio is Options.NearLimitRatio when zero.
const DefaultNearLimitRatio = 0.8

// Options configures an Engine. The zero value means the defaults.
type Options struct {
	// Headers chooses the response headers; the zero value is HeadersIETF.
	Headers HeaderMode
	// LegacyHeaders names the fields of HeadersLegacy; the zero value
	// means RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset.
	LegacyHeaders LegacyHeaderNames
	// ShadowMode refuses nothing: every descriptor keeps its code, the
	// overall code is always OK, and only the hits that fit their limits
	// are counted.
	ShadowMode bool
	// Logger receives the engine's logs; nil discards them.
	Logger *slog.Logger
	// FailureMode is what the engine answers when the store cannot
	// decide; the zero value is FailAllow.
	FailureMode FailureMode
	// Tracer, when set, traces every store call within a traced request.
	Tracer trace.Tracer
	// NearLimitRatio is the share of a limit past which admitted hits
	// count as near the limit. Zero means DefaultNearLimitRatio.
	NearLimitRatio float64
	// Now is the clock of the decisions made without the store (bans),
	// of the hot keys and of the unknown domains; nil means time.Now.
	Now func() time.Time
	// HotKeys tracks, per domain, the counters most refused and those
	// nearest their limits; the zero value turns them off.
	HotKeys HotKeysOptions
	// UnknownDomains bounds the domains without rules that are counted
	// apart (see UnknownDomains). Zero means DefaultUnknownDomains.
	UnknownDomains int
	// Metrics receives the decision metrics; nil counts nothing.
	Metrics Metrics
	// StatKeys computes, for the rules whose metrics carry request
	// values, the reference's stat key of each request (RuleCount.StatKey),
	// for a Metrics that sends statsd.
	StatKeys bool
}

// FailureMode says how the engine answers when its store fails
// (unreachable, timed out, circuit breaker open).
type FailureMode uint8

const (
	// FailAllow answers OK, every descriptor {code: OK} with no limit:
	// traffic flows while the counters are away. /readyz stays ready, so
	// that a store blip does not drain every replica at once.
	FailAllow FailureMode = iota
	// FailDeny answers OVER_LIMIT on every descriptor a limit applies to,
	// so that Envoy refuses even with its default failure_mode_deny:
	// false. /readyz reports not ready while the store is down, unless
	// the server is ready without its store.
	FailDeny
	// FailError answers ErrStoreUnavailable and lets the client's own
	// failure policy decide. /readyz reports not ready while the store is
	// down, unless the server is ready without its store.
	FailError
)

// FailureModeNames are the flag values of the failure modes, in order.
var FailureModeNames = [...]string{FailAllow: "allow", FailDeny: "deny", FailError: "error"}

// String returns the flag value of m: "allow", "deny" or "error".
func (m FailureMode) String() string {
	if int(m) < len(FailureModeNames) {
		return FailureModeNames[m]
	}
	return fmt.Sprintf("FailureMode(%d)", m)
}

// MarshalText implements encoding.TextMarshaler.
func (m FailureMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (m *FailureMode) UnmarshalText(b []byte) error {
	v, err := ParseFailureMode(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// ParseFailureMode returns the FailureMode named s.
func ParseFailureMode(s string) (FailureMode, error) {
	for m, name := range FailureModeNames {
		if s == name {
			return FailureMode(m), nil
		}
	}
	return 0, fmt.Errorf("unknown failure mode %q (want allow, deny or error)", s)
}

// An Engine decides requests under the rules in force with a counter
// store. It knows no transport: each face decodes its messages into a
// Scratch's Request, calls Decide or Explain, and renders the Answer.
//
// An Engine is safe for concurrent use by multiple goroutines.
type Engine struct {
	store     backend.Store
	opts      Options
	log       *slog.Logger
	rules     atomic.Pointer[config.Rules]
	overrides atomic.Pointer[RuntimeOverrides] // the operators' (see overrides.go)
	metrics   Metrics
	nearRatio float64
	warnings  rate.Sometimes // throttles store failure warnings
	failures  atomic.Uint64  // requests answered by the failure mode
	now       func() time.Time
	unknown   *unknownDomains   // requests for domains without rules
	hot       *hotkeys.Tracker  // nil unless Options.HotKeys.Enabled
	digests   *hotkeys.Digester // of the hot keys' values; nil when hot is
	scratches sync.Pool         // for DecideRequest
}

// New returns an Engine deciding with store under rules, which may be
// nil until SetRules: every domain is then unknown.
func New(store backend.Store, rules *config.Rules, opts Options) *Engine {
	e := &Engine{
		store:     store,
		opts:      opts,
		log:       opts.Logger,
		metrics:   opts.Metrics,
		warnings:  rate.Sometimes{First: 1, Interval: 10 * time.Second},
		nearRatio: cmp.Or(opts.NearLimitRatio, DefaultNearLimitRatio),
		now:       opts.Now,
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.metrics == nil {
		e.metrics = nopMetrics{}
	}
	if e.now == nil {
		e.now = time.Now
	}
	e.scratches.New = func() any { return new(Scratch) }
	e.unknown = newUnknownDomains(opts.UnknownDomains, e.log, e.now, e.rules.Load)
	e.hot, e.digests = e.newHotKeys()
	e.rules.Store(rules)
	return e
}

// SetRules replaces the rules in force. Requests in flight finish under
// the rules they started with; readers never wait.
func (e *Engine) SetRules(r *config.Rules) { e.rules.Store(r) }

// Rules returns the rules in force, nil if none were set.
func (e *Engine) Rules() *config.Rules { return e.rules.Load() }

// Store returns the engine's counter store.
func (e *Engine) Store() backend.Store { return e.store }

// Now returns the time on the engine's clock (Options.Now).
func (e *Engine) Now() time.Time { return e.now() }

// FailureAnswers reports how many requests the engine answered by its
// FailureMode because the store failed.
func (e *Engine) FailureAnswers() uint64 { return e.failures.Load() }

// warnStore logs a store failure, at most once every 10 seconds.
func (e *Engine) warnStore(err error) {
	e.warnings.Do(func() {
		e.log.Warn("counter store failed", "failure_mode", e.opts.FailureMode.String(), "err", err)
	})
}

// A Decision is the engine's decision on a request, in the terms that
// compare two rule sets (see DecideRequest): the overall verdict and,
// per descriptor, the rule that matched and its code.
type Decision struct {
	// Over: the request must not proceed.
	Over bool
	// Descriptors are the descriptors' decisions, in request order.
	Descriptors []DescriptorDecision
}

// A DescriptorDecision is the decision on one descriptor.
type DescriptorDecision struct {
	// Rule is the rule that matched, nil if none did.
	Rule *config.Rule
	// Over is the descriptor's code: OVER_LIMIT.
	Over bool
}

// DecideRequest decides the request fill writes into an empty Request,
// as Decide does, and writes the decision into d (reusing its memory).
// It returns Decide's errors, and fill's.
func (e *Engine) DecideRequest(ctx context.Context, fill func(*Request) error, d *Decision) error {
	sc := e.scratches.Get().(*Scratch)
	defer func() {
		if !sc.Oversized() {
			sc.Reset()
			e.scratches.Put(sc)
		}
	}()
	d.Over = false
	d.Descriptors = d.Descriptors[:0]
	if err := fill(&sc.Req); err != nil {
		return err
	}
	if err := e.Decide(ctx, sc); err != nil {
		return err
	}
	d.Over = sc.Dec.Over
	for i, v := range sc.Dec.Statuses {
		d.Descriptors = append(d.Descriptors, DescriptorDecision{Rule: sc.descs[i].rule, Over: v.Over})
	}
	return nil
}
