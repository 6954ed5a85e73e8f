package server

import (
	"sync"
	"sync/atomic"
	"time"

	gostats "github.com/lyft/gostats"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/server/internal/engine"
)

// An api is the face a decision came through, the "api" label.
type api uint8

const (
	apiEnvoy  api = iota // envoy.service.ratelimit.v3 over gRPC
	apiNative            // ratelimit.v1 over gRPC
	apiJSON              // POST /json
	numAPIs
)

var apiNames = [numAPIs]string{apiEnvoy: "envoy", apiNative: "native", apiJSON: "json"}

// Decision outcomes, the "code" label of ratelimitd_decisions_total.
const (
	codeOK = iota
	codeOverLimit
	codeError
	numCodes
)

var codeNames = [numCodes]string{codeOK: "ok", codeOverLimit: "over_limit", codeError: "error"}

// metrics are the server's Prometheus metrics. They are counted whether or
// not Options.Registry exports them.
type metrics struct {
	ruleHits, ruleOver, ruleNear, ruleWithin, ruleShadow *prometheus.CounterVec
	ruleOverCache, ruleGivenBack                         *prometheus.CounterVec

	// ref, when not nil, counts in envoyproxy/ratelimit's statsd names
	// too (Options.Statsd).
	ref *serviceStats

	decisions      [numAPIs][numCodes]prometheus.Counter
	duration       [numAPIs]prometheus.Observer
	storeDuration  prometheus.Histogram
	storeErrors    *prometheus.CounterVec
	failureAnswers *prometheus.CounterVec
	configLoads    *prometheus.CounterVec
	configOK       prometheus.Gauge
	configTime     prometheus.Gauge

	// rules caches each rule's counters, by *config.Rule; SetRules
	// replaces it, so that the rules of old rule sets can be collected.
	rules atomic.Pointer[sync.Map]
}

// ruleCounters are one rule's counters, resolved once, and the domain
// they are labelled with.
type ruleCounters struct {
	hits, over, near, within, shadow, overCache prometheus.Counter
	givenBack                                   prometheus.Counter
	domain                                      string
	ref                                         *refStats // nil without Options.Statsd
}

// Buckets of the decision latency histograms, in seconds: from the memory
// store's tens of microseconds to Redis timeouts.
var latencyBuckets = []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}

func newMetrics(reg prometheus.Registerer, statsd gostats.Store, tags map[string]string) *metrics {
	rule := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"domain", "rule"})
	}
	m := &metrics{
		ruleHits:   rule("ratelimitd_rule_hits_total", "Hits asked of each rule (hits_addend summed), labelled by domain and rule key path."),
		ruleOver:   rule("ratelimitd_rule_over_limit_total", "Hits over each rule's limit, shadow-mode rules included."),
		ruleNear:   rule("ratelimitd_rule_near_limit_total", "Admitted hits that took a rule's counter past the near-limit ratio of its limit."),
		ruleWithin: rule("ratelimitd_rule_within_limit_total", "Hits within each rule's limit."),
		ruleShadow: rule("ratelimitd_rule_shadow_mode_total", "Hits over a limit that shadow mode (the rule's or the daemon's) let through."),
		ruleOverCache: rule("ratelimitd_rule_over_limit_with_local_cache_total",
			"Hits over each rule's limit that the Redis store's local cache refused without asking Redis (also in ratelimitd_rule_over_limit_total)."),
		ruleGivenBack: rule("ratelimitd_rule_given_back_total",
			"Hits given back to each rule's limits (Envoy's is_negative_hits, the native give_back, released concurrency slots); not in ratelimitd_rule_hits_total."),
		storeDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ratelimitd_backend_duration_seconds",
			Help:    "Time the counter store took to decide a request's counters.",
			Buckets: latencyBuckets,
		}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimitd_backend_errors_total",
			Help: "Requests the counter store could not decide, by kind: timeout, breaker_open (not tried) or error.",
		}, []string{"kind"}),
		failureAnswers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimitd_failure_mode_answers_total",
			Help: "Requests answered by --failure-mode (allow, deny or error) because the counter store failed.",
		}, []string{"mode"}),
		configLoads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimitd_config_loads_total",
			Help: "Rule set loads, by result: success, or error (the previous rules stayed in force).",
		}, []string{"result"}),
		configOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratelimitd_config_last_load_successful",
			Help: "Whether the last rule set load succeeded (1) or failed (0).",
		}),
		configTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratelimitd_config_last_load_success_timestamp_seconds",
			Help: "When the rules in force were loaded, in seconds since the Unix epoch.",
		}),
	}
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimitd_decisions_total",
		Help: "Requests decided, by api (envoy, native or json) and code: ok, over_limit, or error (no decision).",
	}, []string{"api", "code"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ratelimitd_decision_duration_seconds",
		Help:    "Time to decide a request, from its arrival in the handler to its answer, by api.",
		Buckets: latencyBuckets,
	}, []string{"api"})
	for a := range numAPIs {
		for c := range numCodes {
			m.decisions[a][c] = decisions.WithLabelValues(apiNames[a], codeNames[c])
		}
		m.duration[a] = duration.WithLabelValues(apiNames[a])
	}
	for _, mode := range engine.FailureModeNames {
		m.failureAnswers.WithLabelValues(mode)
	}
	for _, kind := range []string{"timeout", "breaker_open", "error"} {
		m.storeErrors.WithLabelValues(kind)
	}
	for _, result := range []string{"success", "error"} {
		m.configLoads.WithLabelValues(result)
	}
	m.rules.Store(new(sync.Map))
	if statsd != nil {
		m.ref = newServiceStats(statsd.ScopeWithTags("ratelimit", tags), statsd.ScopeWithTags("ratelimit_server", tags))
	}
	if reg != nil {
		reg.MustRegister(m.ruleHits, m.ruleOver, m.ruleNear, m.ruleWithin, m.ruleShadow, m.ruleOverCache, m.ruleGivenBack,
			decisions, duration, m.storeDuration, m.storeErrors, m.failureAnswers,
			m.configLoads, m.configOK, m.configTime)
	}
	return m
}

// loaded records a rule set put in force.
func (m *metrics) loaded() {
	m.rules.Store(new(sync.Map))
	m.configLoads.WithLabelValues("success").Inc()
	m.configOK.Set(1)
	m.configTime.SetToCurrentTime()
	if m.ref != nil {
		m.ref.configLoadSuccess.Inc()
	}
}

// rejected records a rule set that failed to load.
func (m *metrics) rejected() {
	m.configLoads.WithLabelValues("error").Inc()
	m.configOK.Set(0)
	if m.ref != nil {
		m.ref.configError.Inc()
	}
}

// decided records a decision that started at start.
func (m *metrics) decided(a api, start time.Time, over bool, err error) {
	m.duration[a].Observe(time.Since(start).Seconds())
	code := codeOK
	switch {
	case err != nil:
		code = codeError
	case over:
		code = codeOverLimit
	}
	m.decisions[a][code].Inc()
}

// envoyCall records, in the reference's statsd names, a call of Envoy's
// ShouldRateLimit over gRPC that ended with err: the reference counts
// each in ratelimit_server.ShouldRateLimit.total_requests, and a request
// it refuses as malformed in service.call.should_rate_limit.service_error.
func (m *metrics) envoyCall(err error) {
	if m.ref == nil {
		return
	}
	m.ref.totalRequests.Inc()
	if engine.IsInvalid(err) {
		m.ref.serviceError.Inc()
	}
}

// metrics is the engine's engine.Metrics.
var _ engine.Metrics = (*metrics)(nil)

// StoreTook implements engine.Metrics.
func (m *metrics) StoreTook(d time.Duration) { m.storeDuration.Observe(d.Seconds()) }

// GlobalShadowMode implements engine.Metrics: only the reference's
// statsd names count it.
func (m *metrics) GlobalShadowMode() {
	if m.ref != nil {
		m.ref.globalShadowMode.Inc()
	}
}

// StoreFailed implements engine.Metrics: a store error that was not the
// caller's, answered by mode.
func (m *metrics) StoreFailed(kind string, mode engine.FailureMode) {
	m.storeErrors.WithLabelValues(kind).Inc()
	if m.ref != nil {
		m.ref.redisError.Inc()
	}
	m.failureAnswers.WithLabelValues(mode.String()).Inc()
}

// counters returns the counters of c's rule in domain: resolved once per
// rule, or per request for rules whose metrics carry request values
// (detailed_metric, value_to_metric).
func (m *metrics) counters(domain string, c *engine.RuleCount) *ruleCounters {
	if c.MetricPath != "" {
		return m.resolve(domain, c.MetricPath, c.StatKey)
	}
	rules := m.rules.Load()
	if rc, ok := rules.Load(c.Rule); ok {
		return rc.(*ruleCounters)
	}
	var key string
	if m.ref != nil {
		key = engine.StatKey(domain, c.Rule, nil)
	}
	rc, _ := rules.LoadOrStore(c.Rule, m.resolve(domain, c.Rule.Path, key))
	return rc.(*ruleCounters)
}

// resolve returns the counters labelled domain and rule, and with
// Options.Statsd those of the reference's stat key too.
func (m *metrics) resolve(domain, rule, statKey string) *ruleCounters {
	c := &ruleCounters{
		domain:    domain,
		hits:      m.ruleHits.WithLabelValues(domain, rule),
		over:      m.ruleOver.WithLabelValues(domain, rule),
		near:      m.ruleNear.WithLabelValues(domain, rule),
		within:    m.ruleWithin.WithLabelValues(domain, rule),
		shadow:    m.ruleShadow.WithLabelValues(domain, rule),
		overCache: m.ruleOverCache.WithLabelValues(domain, rule),
		givenBack: m.ruleGivenBack.WithLabelValues(domain, rule),
	}
	if m.ref != nil {
		c.ref = newRefStats(m.ref.rateLimit, statKey)
	}
	return c
}

// Rule implements engine.Metrics: it adds one descriptor's hits to its
// rule's counters, as the engine worked them out.
func (m *metrics) Rule(domain string, rc engine.RuleCount) {
	c := m.counters(domain, &rc)
	hits := float64(rc.Hits)
	switch rc.Op {
	case backend.GiveBack:
		c.givenBack.Add(hits)
		return
	case backend.Renew:
		return // no hits: a lease's slots were counted when taken
	}
	c.hits.Add(hits)
	switch {
	case rc.Over:
		c.over.Add(hits)
		if rc.Shadow {
			c.shadow.Add(hits)
		}
		if rc.Cached {
			c.overCache.Add(hits)
		}
	default:
		c.within.Add(hits)
		if rc.Near > 0 {
			c.near.Add(float64(rc.Near))
		}
	}
	if r := c.ref; r != nil && !rc.Unlimited { // the reference counts no unlimited rule
		r.hits.Add(rc.Hits)
		switch {
		case rc.Over:
			r.over.Add(rc.Hits)
			if rc.Shadow {
				r.shadow.Add(rc.Hits)
			}
			if rc.Cached {
				r.overCache.Add(rc.Hits)
			}
		default:
			r.within.Add(rc.Hits)
			r.near.Add(rc.Near)
		}
	}
}

// unknownCollector collects the unknown domains' metrics from the
// engine's table when scraped: a domain's series goes with its place.
type unknownCollector struct{ eng *engine.Engine }

// The descriptions of the unknown domains' metrics.
var (
	unknownRequestsDesc = prometheus.NewDesc("ratelimitd_unknown_domain_requests_total",
		"Requests for a domain that has no rules, answered OK with nothing limited, by domain: the first --unknown-domains-max domains seen (see ratelimitd_unknown_domain_requests_untracked_total).",
		[]string{"domain"}, nil)
	unknownUntrackedDesc = prometheus.NewDesc("ratelimitd_unknown_domain_requests_untracked_total",
		"Requests for a domain that has no rules and no label of its own in ratelimitd_unknown_domain_requests_total, --unknown-domains-max being reached.",
		nil, nil)
)

// Describe implements prometheus.Collector.
func (unknownCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- unknownRequestsDesc
	ch <- unknownUntrackedDesc
}

// Collect implements prometheus.Collector: a series per domain in the
// table (two names that print alike share one, their counts summed), and
// the domains past the bound together.
func (u unknownCollector) Collect(ch chan<- prometheus.Metric) {
	byLabel := make(map[string]uint64)
	untracked := u.eng.UnknownCounts(func(domain string, n uint64) { byLabel[engine.Printable(domain)] += n })
	for label, n := range byLabel {
		ch <- prometheus.MustNewConstMetric(unknownRequestsDesc, prometheus.CounterValue, float64(n), label)
	}
	ch <- prometheus.MustNewConstMetric(unknownUntrackedDesc, prometheus.CounterValue, float64(untracked))
}

// ruleCounts calls f with the counts of every rule hit since the rules
// were loaded, for the rates of the operators' page (admin.Options).
func (m *metrics) ruleCounts(f func(domain, rule string, within, over, shadow uint64)) {
	m.rules.Load().Range(func(k, v any) bool {
		rule, c := k.(*config.Rule), v.(*ruleCounters)
		f(c.domain, rule.Path, counterValue(c.within), counterValue(c.over), counterValue(c.shadow))
		return true
	})
}

// counterValue returns the value of c.
func counterValue(c prometheus.Counter) uint64 {
	var d dto.Metric
	if c.Write(&d) != nil {
		return 0
	}
	return uint64(d.GetCounter().GetValue())
}
