package rlqs

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/config"
)

// ruleLabels are the labels of a rule's metrics: its domain and key path,
// both "" for buckets that no rule matches (bucket values never appear).
type ruleLabels struct{ domain, rule string }

// labelsFor returns the labels of rule r of domain d.
func labelsFor(d *config.DomainRules, r *config.Rule) ruleLabels {
	if r == nil {
		return ruleLabels{domain: d.Name()}
	}
	return ruleLabels{domain: d.Name(), rule: r.Path}
}

// metrics are the service's Prometheus metrics, counted whether or not a
// registry exports them.
type metrics struct {
	streams                                  prometheus.Gauge
	ruleStreams, buckets, assignedRate, rate *prometheus.GaugeVec
	reports, exchanges, refused              *prometheus.CounterVec
	fallbacks, exchanged                     prometheus.Counter
}

// newMetrics returns the metrics, registered on reg unless it is nil.
func newMetrics(reg prometheus.Registerer) *metrics {
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"domain", "rule"})
	}
	m := &metrics{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratelimitd_rlqs_open_streams",
			Help: "RLQS streams open on this replica.",
		}),
		ruleStreams:  gauge("ratelimitd_rlqs_streams", "RLQS streams holding at least one bucket of each rule (rule \"\": buckets no rule matches)."),
		buckets:      gauge("ratelimitd_rlqs_buckets", "RLQS buckets held by the streams of this replica, by rule."),
		assignedRate: gauge("ratelimitd_rlqs_assigned_rate", "Requests per second assigned as token buckets to the streams of this replica, by rule."),
		rate:         gauge("ratelimitd_rlqs_limit_rate", "Requests per second each rule's tightest limit allows, per bucket."),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimitd_rlqs_reported_requests_total",
			Help: "Requests RLQS clients reported, by rule and result: allowed or denied by the client.",
		}, []string{"domain", "rule", "result"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimitd_rlqs_buckets_refused_total",
			Help: "Bucket reports refused, by the bound met: bucket_id (too many keys or bytes; no assignment); stream, connection, peer or service (the buckets held; --rlqs-max-buckets-*); tracker (the fair-share tracker's clients of one bucket, or its own bounds). A refused limited bucket gets --failure-mode's assignment.",
		}, []string{"bound"}),
		exchanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimitd_rlqs_store_exchanges_total",
			Help: "Exchanges of this replica's bucket entries with the store, through which replicas share the limits, by result: ok or error.",
		}, []string{"result"}),
		exchanged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimitd_rlqs_store_exchanged_buckets_total",
			Help: "Bucket entries this replica exchanged with the store: one per bucket whose demands moved, whose grant must be renewed, or that another replica's change concerns.",
		}),
		fallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimitd_rlqs_fallback_assignments_total",
			Help: "Assignments of limited buckets made as --failure-mode says, for no grant from the store was in force.",
		}),
	}
	for _, b := range bounds {
		m.refused.WithLabelValues(string(b)) // every series from the start, for rate() and alerts
	}
	if reg != nil {
		reg.MustRegister(m.streams, m.ruleStreams, m.buckets, m.assignedRate, m.rate, m.reports, m.refused, m.exchanges, m.exchanged, m.fallbacks)
	}
	return m
}

// bucketAdded counts a bucket of rule l, the stream's first if first.
func (m *metrics) bucketAdded(l ruleLabels, first bool) {
	m.buckets.WithLabelValues(l.domain, l.rule).Inc()
	if first {
		m.ruleStreams.WithLabelValues(l.domain, l.rule).Inc()
	}
}

// bucketRemoved undoes bucketAdded, with rate the bucket's assigned rate.
func (m *metrics) bucketRemoved(l ruleLabels, last bool, rate float64) {
	m.buckets.WithLabelValues(l.domain, l.rule).Dec()
	if last {
		m.ruleStreams.WithLabelValues(l.domain, l.rule).Dec()
	}
	if rate != 0 {
		m.assignedRate.WithLabelValues(l.domain, l.rule).Sub(rate)
	}
}

// assigned adds delta to rule l's assigned rate.
func (m *metrics) assigned(l ruleLabels, delta float64) {
	if delta != 0 {
		m.assignedRate.WithLabelValues(l.domain, l.rule).Add(delta)
	}
}

// limit records rule l's limit rate.
func (m *metrics) limit(l ruleLabels, rate float64) {
	m.rate.WithLabelValues(l.domain, l.rule).Set(rate)
}

// tally sums the usage of consecutive buckets of one rule in a report,
// so that the metrics count each run of them once, not each bucket: a
// report's buckets of one rule mostly come one after another.
type tally struct {
	m               *metrics
	l               ruleLabels
	allowed, denied uint64
	open            bool // l holds usage not counted yet
}

// add adds a bucket's usage of rule l.
func (t *tally) add(l ruleLabels, allowed, denied uint64) {
	if t.open && l != t.l {
		t.count()
	}
	t.l, t.open = l, true
	t.allowed += allowed
	t.denied += denied
}

// count counts the usage added since the last count in t.m.
func (t *tally) count() {
	if !t.open {
		return
	}
	t.m.reports.WithLabelValues(t.l.domain, t.l.rule, "allowed").Add(float64(t.allowed))
	t.m.reports.WithLabelValues(t.l.domain, t.l.rule, "denied").Add(float64(t.denied))
	t.allowed, t.denied, t.open = 0, 0, false
}

// refuse counts a bucket refused at bound b.
func (m *metrics) refuse(b bound) {
	m.refused.WithLabelValues(string(b)).Inc()
}

// exchange counts a store call exchanging buckets entries.
func (m *metrics) exchange(buckets int, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.exchanges.WithLabelValues(result).Inc()
	m.exchanged.Add(float64(buckets))
}
