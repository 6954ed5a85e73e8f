package overrides

import "github.com/prometheus/client_golang/prometheus"

// metrics are the overrides' Prometheus metrics (see docs/operations.md).
type metrics struct {
	inForce      prometheus.Gauge
	skipped      prometheus.Gauge
	stale        prometheus.Gauge
	syncFailures prometheus.Counter
	changes      *prometheus.CounterVec
	refusals     *prometheus.CounterVec
}

// Refusal reasons, the "reason" label of
// ratelimitd_override_refusals_total.
const (
	refusedInvalid = "invalid"
	refusedFull    = "full"
)

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		inForce: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratelimitd_overrides",
			Help: "Runtime overrides in force on this replica.",
		}),
		skipped: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratelimitd_overrides_skipped",
			Help: "Stored runtime overrides this replica does not apply: unreadable, or past its --max-overrides.",
		}),
		stale: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratelimitd_overrides_stale",
			Help: "1 while this replica cannot read the overrides from the store and keeps the last ones it saw, else 0.",
		}),
		syncFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimitd_overrides_sync_failures_total",
			Help: "Reads of the runtime overrides from the store that failed.",
		}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimitd_override_changes_total",
			Help: "Runtime override changes made through this replica, by operation: set, delete, reset (of counters), expire.",
		}, []string{"op"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimitd_override_refusals_total",
			Help: "Runtime override changes refused, by reason: invalid (bad input), full (--max-overrides reached).",
		}, []string{"reason"}),
	}
	for _, op := range []string{opSet, opDelete, opReset, opExpire} {
		m.changes.WithLabelValues(op)
	}
	m.refusals.WithLabelValues(refusedInvalid)
	m.refusals.WithLabelValues(refusedFull)
	if reg != nil {
		reg.MustRegister(m.inForce, m.skipped, m.stale, m.syncFailures, m.changes, m.refusals)
	}
	return m
}
