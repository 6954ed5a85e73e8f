package engine

import (
	"context"
	"errors"
	"math"
	"os"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/config"
)

// Metrics receives what the engine counts as it decides. The engine
// works out every figure (which counter, how many hits, near the limit or
// not); an implementation only adds them to its series. Package server
// implements it with Prometheus and envoyproxy/ratelimit's statsd names,
// which the engine must not import: both bring net/http with them.
//
// Its methods are called on the hot path, from many goroutines at once.
type Metrics interface {
	// StoreTook records how long the counter store took to decide.
	StoreTook(d time.Duration)
	// StoreFailed records a store failure that was not the caller's, of
	// kind (see storeErrorKind), answered by mode.
	StoreFailed(kind string, mode FailureMode)
	// Rule records the hits of one descriptor on its rule.
	Rule(domain string, c RuleCount)
	// GlobalShadowMode records a request that the daemon's shadow mode
	// let through, over a limit that is not itself in shadow mode.
	GlobalShadowMode()
}

// A RuleCount is what one descriptor adds to its rule's counters.
type RuleCount struct {
	Rule *config.Rule
	// MetricPath, when not empty, is the rule label of a rule whose
	// metrics carry request values (detailed_metric, value_to_metric),
	// and StatKey its reference stat key (with Options.StatKeys); the
	// counters of the others are resolved once per rule.
	MetricPath, StatKey string
	Hits                uint64
	// Over: the hits were over the limit (Shadow: and let through by a
	// shadow mode; Cached: refused by the store's local cache). Else they
	// were within it, Near of them past the near-limit ratio in an
	// admitted call.
	Over, Shadow, Cached bool
	Near                 uint64
	// Unlimited: the rule is unlimited; the reference counts none.
	Unlimited bool
	// Op: Hits were taken (backend.Take), given back (backend.GiveBack,
	// and then they are not counted as asked, nor Over) or a lease was
	// renewed (backend.Renew, no hits).
	Op backend.Op
}

// nopMetrics counts nothing: an engine without Options.Metrics.
type nopMetrics struct{}

func (nopMetrics) StoreTook(time.Duration)         {}
func (nopMetrics) StoreFailed(string, FailureMode) {}
func (nopMetrics) Rule(string, RuleCount)          {}
func (nopMetrics) GlobalShadowMode()               {}

// storeErrorKind names the kind of a store error, the "kind" label of
// ratelimitd_backend_errors_total: breaker_open (not tried), timeout or
// error.
func storeErrorKind(err error) string {
	switch {
	case errors.Is(err, backend.ErrUnavailable):
		return "breaker_open"
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	}
	return "error"
}

// countRule adds ds's hits to its rule's counters, given its verdict v
// in a call that refused is the overall verdict of: over the limit (and
// then in shadow mode or not), or within it and, if the call was
// admitted, perhaps near it. Descriptors that matched no rule are not
// counted, so that request values never become labels unasked.
func (e *Engine) countRule(domain string, ds *desc, v Verdict, refused bool) {
	if ds.rule == nil || (!v.Limited && !ds.unlimited()) {
		return
	}
	c := RuleCount{
		Rule: ds.rule, MetricPath: ds.metricPath, StatKey: ds.statKey,
		Hits: ds.hits, Over: v.OverLimit, Shadow: v.OverLimit && v.Shadow, Cached: v.OverLimit && v.Cached,
		Unlimited: ds.unlimited(),
		Op:        ds.op,
	}
	if !v.OverLimit && !refused && ds.op == backend.Take {
		c.Near = e.nearLimit(ds.hits, v.Limit, v.Remaining)
	}
	e.metrics.Rule(domain, c)
}

// nearLimit returns how many of hits, admitted under l with remaining
// left, took the counter past the near-limit threshold: the hits above
// NearLimitRatio of the limit's capacity.
func (e *Engine) nearLimit(hits uint64, l backend.Limit, remaining uint64) uint64 {
	capacity := l.Capacity()
	if hits == 0 || capacity == 0 || remaining > capacity {
		return 0
	}
	used := capacity - remaining
	threshold := uint64(math.Floor(e.nearRatio * float64(capacity)))
	if used <= threshold {
		return 0
	}
	return min(hits, used-threshold)
}

// metricPath returns the rule label of a request that matched rule with
// entries, when its metrics carry request values: with detailed_metric,
// every entry as key=value; with value_to_metric on a level, that level's
// value from the request. It returns "" for the usual label, rule.Path.
func metricPath(rule *config.Rule, entries []Entry) string {
	values := rule.DetailedMetric
	for _, lv := range rule.Levels {
		values = values || lv.ValueToMetric
	}
	if !values {
		return ""
	}
	var b strings.Builder
	for j, e := range entries {
		if j > 0 {
			b.WriteByte('.')
		}
		b.WriteString(Printable(e.Key))
		switch {
		case rule.DetailedMetric || (j < len(rule.Levels) && rule.Levels[j].ValueToMetric):
			b.WriteByte('=')
			b.WriteString(LabelValue(e))
		case j < len(rule.Levels) && rule.Levels[j].Value != "":
			b.WriteByte('=')
			b.WriteString(rule.Levels[j].Value)
		}
	}
	return b.String()
}

// StatKey returns the key of rule's stats in domain as the reference
// names it, for a request with entries: the domain, then per level
// "key", or "key_value" for a rule with a value (its pattern, for a
// wildcard). With detailed_metric, every level is "key_value" with the
// request's value, but a share_threshold level keeps its pattern; with
// value_to_metric on a level, that level carries the request's value.
// entries may be nil when the rule's stats carry no request value.
func StatKey(domain string, rule *config.Rule, entries []Entry) string {
	var b strings.Builder
	b.WriteString(domain)
	for j, lv := range rule.Levels {
		b.WriteByte('.')
		b.WriteString(lv.Key)
		var value string
		switch {
		case j >= len(entries):
			value = lv.Value
		case lv.ShareThreshold && lv.Wildcard:
			value = lv.Value
		case rule.DetailedMetric:
			b.WriteByte('_') // even for an empty value, as the reference
			b.WriteString(LabelValue(entries[j]))
			continue
		case lv.ValueToMetric:
			value = LabelValue(entries[j])
		default:
			value = lv.Value
		}
		if value != "" {
			b.WriteByte('_')
			b.WriteString(value)
		}
	}
	return b.String()
}
