package overrides

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/server/internal/engine"
)

// Defaults of Options.
const (
	// DefaultMax is Options.Max when zero: the most overrides a daemon
	// stores and applies.
	DefaultMax = 100_000
	// DefaultInterval is Options.Interval when zero: how often the sync
	// loop polls the store, well within the second in which every
	// replica must apply a change.
	DefaultInterval = 250 * time.Millisecond
)

// The Manager's errors, besides *InvalidError; each API face maps them.
var (
	// ErrNotFound: no override for that descriptor, or no rule matches
	// the descriptor to reset.
	ErrNotFound = errors.New("not found")
	// ErrFull: the store holds Options.Max overrides already.
	ErrFull = errors.New("overrides: too many overrides")
	// ErrUnsupported: the store keeps no overrides, or resets no
	// counters.
	ErrUnsupported = errors.New("overrides: the counter store does not support this")
)

// Options configure a Manager. The zero value means the defaults.
type Options struct {
	// Max is the most overrides stored; zero means DefaultMax. The sync
	// loop applies at most Max of the stored ones too.
	Max int
	// Interval is how often Run polls the store; zero means
	// DefaultInterval.
	Interval time.Duration
	// Now is the clock of expiries and of SetAt; nil means time.Now.
	Now func() time.Time
	// Config are the options limits are compiled with, as the rule
	// files' are (config.WithDefaultAlgorithm).
	Config []config.Option
	// Logger receives the audit log (one line per change) and the sync
	// loop's warnings; nil discards them.
	Logger *slog.Logger
	// Registry, when set, receives the metrics.
	Registry prometheus.Registerer
}

// A Manager changes the overrides in a store and keeps the engine's set
// in force in step with the store's. It is safe for concurrent use by
// multiple goroutines.
type Manager struct {
	store   backend.OverrideStore // nil: the store keeps no overrides
	eng     *engine.Engine
	opts    Options
	log     *slog.Logger
	metrics *metrics

	syncMu     sync.Mutex                         // serialises syncs; guards the two fields below
	inForce    map[string]*engine.RuntimeOverride // the set in force, by key
	nextExpiry time.Time                          // the earliest expiry in force, zero if none
	// state is the last sync's outcome, which State reads without
	// waiting for a sync in progress (a probe of /readyz must not wait on
	// a store that hangs).
	state atomic.Pointer[syncState]
}

// New returns a Manager of the overrides in store (nil when the counter
// store keeps none: every change then fails with ErrUnsupported), applied
// to eng's decisions.
func New(store backend.OverrideStore, eng *engine.Engine, opts Options) *Manager {
	opts.Max = cmp.Or(opts.Max, DefaultMax)
	opts.Interval = cmp.Or(opts.Interval, DefaultInterval)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	m := &Manager{store: store, eng: eng, opts: opts, log: opts.Logger, metrics: newMetrics(opts.Registry)}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	m.state.Store(&syncState{})
	return m
}

// A syncState is what the last sync found.
type syncState struct {
	synced  bool      // a sync has read the store once
	version uint64    // the store's version of the set in force
	count   int       // overrides in force
	failed  error     // the last sync's error, nil if it read the store
	since   time.Time // when syncs began failing
}

// Max returns the most overrides the Manager stores.
func (m *Manager) Max() int { return m.opts.Max }

// Operations, the "op" label of ratelimitd_override_changes_total and the
// audit log's.
const (
	opSet    = "set"
	opDelete = "delete"
	opReset  = "reset"
	opExpire = "expire"
)

// Set stores o, replacing the override of its descriptor if any, on
// behalf of by (a token's name), and applies it on this replica before it
// returns; the others apply it at their next poll. It returns the
// override stored, with its Version, SetBy and SetAt. A bad o is an
// *InvalidError, and changes nothing.
func (m *Manager) Set(ctx context.Context, o Override, by string) (Override, error) {
	if m.store == nil {
		return Override{}, ErrUnsupported
	}
	now := m.opts.Now()
	if _, err := o.Compile(now, m.opts.Config...); err != nil {
		m.metrics.refusals.WithLabelValues(refusedInvalid).Inc()
		return Override{}, err
	}
	k := key(o.Domain, o.Entries)
	o.Version = 1
	if prev := m.current(k); prev != nil {
		o.Version = prev.Version + 1
	}
	o.SetBy, o.SetAt, o.Unmatched = by, now.UTC().Truncate(time.Millisecond), false
	if o.ExpiresAt != nil {
		t := o.ExpiresAt.UTC()
		o.ExpiresAt = &t
	}
	rec, err := json.Marshal(&o)
	if err != nil {
		return Override{}, fmt.Errorf("overrides: encode: %w", err)
	}
	setVersion, err := m.store.PutOverride(ctx, k, rec, m.opts.Max)
	switch {
	case errors.Is(err, backend.ErrTooManyOverrides):
		m.metrics.refusals.WithLabelValues(refusedFull).Inc()
		m.log.Warn("override refused: --max-overrides reached", "by", by, "domain", o.Domain, "max", m.opts.Max)
		return Override{}, fmt.Errorf("%w: the store holds %d already (--max-overrides)", ErrFull, m.opts.Max)
	case err != nil:
		return Override{}, fmt.Errorf("overrides: store: %w", err)
	}
	m.audit(opSet, by, o.Domain, o.Entries, o.Reason, "version", o.Version, "set_version", setVersion,
		"limits", limitsAttr(o.Limits), "expires_at", expiresAttr(o.ExpiresAt))
	m.syncNow(ctx)
	return o, nil
}

// Delete removes the override of domain and entries on behalf of by,
// and applies that on this replica before it returns. It returns
// ErrNotFound when there is none.
func (m *Manager) Delete(ctx context.Context, domain string, entries []Entry, reason, by string) error {
	if m.store == nil {
		return ErrUnsupported
	}
	if err := checkChange(domain, entries, reason); err != nil {
		m.metrics.refusals.WithLabelValues(refusedInvalid).Inc()
		return err
	}
	var version uint64
	if prev := m.current(key(domain, entries)); prev != nil {
		version = prev.Version
	}
	found, setVersion, err := m.store.DeleteOverride(ctx, key(domain, entries))
	switch {
	case err != nil:
		return fmt.Errorf("overrides: store: %w", err)
	case !found:
		return fmt.Errorf("no override of that descriptor: %w", ErrNotFound)
	}
	m.audit(opDelete, by, domain, entries, reason, "version", version, "set_version", setVersion)
	m.syncNow(ctx)
	return nil
}

// Reset makes the counters of the descriptor of domain and entries fresh
// on every limit of the rule that matches it, and of its override if
// any, on behalf of by. It returns how many counters it reset, and
// ErrNotFound when no rule matches the descriptor (or the rule is
// unlimited, and counts nothing).
func (m *Manager) Reset(ctx context.Context, domain string, entries []Entry, reason, by string) (int, error) {
	rs, ok := m.eng.Store().(backend.Resetter)
	if !ok {
		return 0, ErrUnsupported
	}
	if err := checkChange(domain, entries, reason); err != nil {
		m.metrics.refusals.WithLabelValues(refusedInvalid).Inc()
		return 0, err
	}
	es := make([]engine.Entry, len(entries))
	for i, e := range entries {
		es[i] = engine.Entry{Key: e.Key, Value: e.Value}
	}
	reqs, err := m.eng.ResetRequests(domain, es)
	switch {
	case err != nil:
		return 0, invalid("%v", err)
	case len(reqs) == 0:
		return 0, fmt.Errorf("no rule with limits matches the descriptor: %w", ErrNotFound)
	}
	if err := rs.Reset(ctx, reqs); err != nil {
		return 0, fmt.Errorf("overrides: store: %w", err)
	}
	m.audit(opReset, by, domain, entries, reason, "counters", len(reqs))
	return len(reqs), nil
}

// List returns the stored overrides of domain ("" for every domain), in
// the store's present state, sorted by domain then entries, each marked
// Unmatched when no rule in force matches it. The expired ones are left
// out.
func (m *Manager) List(ctx context.Context, domain string) ([]Override, error) {
	if m.store == nil {
		return []Override{}, nil
	}
	recs, _, err := m.store.Overrides(ctx, 0)
	if err != nil {
		return nil, fmt.Errorf("overrides: store: %w", err)
	}
	now := m.opts.Now()
	rules := m.eng.Rules()
	list := make([]Override, 0, len(recs))
	for k, rec := range recs {
		var o Override
		if err := json.Unmarshal(rec, &o); err != nil {
			m.log.Warn("skipping an unreadable override record", "key", engine.Printable(k), "err", err)
			continue
		}
		if (domain != "" && o.Domain != domain) || expired(o.ExpiresAt, now) {
			continue
		}
		o.Unmatched = !Matches(rules, o.Domain, o.Entries)
		list = append(list, o)
	}
	slices.SortFunc(list, compareOverrides)
	return list, nil
}

// Matches reports whether a rule of rules matches the descriptor of
// domain and entries, so that an override of it applies.
func Matches(rules *config.Rules, domain string, entries []Entry) bool {
	d := rules.Domain(domain)
	if d == nil {
		return false
	}
	es := make([]engine.Entry, len(entries))
	for i, e := range entries {
		es[i] = engine.Entry{Key: e.Key, Value: e.Value}
	}
	return config.Match(d, es) != nil
}

// compareOverrides orders overrides by domain, then entries.
func compareOverrides(a, b Override) int {
	if c := cmp.Compare(a.Domain, b.Domain); c != 0 {
		return c
	}
	return slices.CompareFunc(a.Entries, b.Entries, func(x, y Entry) int {
		return cmp.Or(cmp.Compare(x.Key, y.Key), cmp.Compare(x.Value, y.Value))
	})
}

// expired reports whether an override expiring at t has at now.
func expired(t *time.Time, now time.Time) bool { return t != nil && !now.Before(*t) }

// audit logs one change, once, and counts it.
func (m *Manager) audit(op, by, domain string, entries []Entry, reason string, attrs ...any) {
	m.metrics.changes.WithLabelValues(op).Inc()
	base := []any{"op", op, "by", by, "domain", domain, "entries", entriesAttr(entries), "reason", reason}
	m.log.Info("override "+op, append(base, attrs...)...)
}

// entriesAttr renders entries for the log: key=value, comma-separated.
func entriesAttr(entries []Entry) string {
	b := make([]byte, 0, 64)
	for i, e := range entries {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, e.Key...)
		b = append(b, '=')
		b = append(b, e.Value...)
	}
	return string(b)
}

// limitsAttr renders limits for the log as their JSON.
func limitsAttr(limits []Limit) string {
	b, err := json.Marshal(limits)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// expiresAttr renders an expiry for the log: RFC 3339, or "never".
func expiresAttr(t *time.Time) string {
	if t == nil {
		return "never"
	}
	return t.Format(time.RFC3339)
}
