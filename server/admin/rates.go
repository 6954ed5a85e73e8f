package admin

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/ratelimitd/ratelimitd/config"
)

// RateSeconds is how many seconds of per-rule rates the server keeps for
// the page at /ui/: the last five minutes, one value a second.
const RateSeconds = 300

// maxRateRules bounds the rules whose rates are kept: past it, a rule
// that starts to get traffic is not charted until another one has had
// none for RateSeconds. Memory is at most maxRateRules series of
// 2×RateSeconds uint32, about 2.4 MB.
const maxRateRules = 1000

// A rateKey names a rule, as the rule metrics label it.
type rateKey struct{ domain, rule string }

// rateCounts are a rule's hits admitted and refused, cumulative or over
// one second.
type rateCounts struct{ admitted, refused uint64 }

// rateSeries are one rule's hits per second over the last RateSeconds,
// slot t%RateSeconds holding second t.
type rateSeries struct {
	admitted, refused [RateSeconds]uint32
	sum               uint64 // of every slot of both arrays
}

// rates keeps, for each rule with traffic in the last RateSeconds, the
// hits it admitted and refused each second. Admin.SampleRates fills it
// from the rule counters (ratelimitd_rule_*), which the decisions update
// anyway: keeping it costs the decision path nothing.
type rates struct {
	mu     sync.Mutex
	end    int64 // the Unix second of the newest slot; 0 before the first sample
	held   int   // seconds sampled, up to RateSeconds
	last   map[rateKey]rateCounts
	series map[rateKey]*rateSeries
	// uncharted counts the rules with traffic that maxRateRules left
	// out at the last sample.
	uncharted int
	// inForce caches the rules that rules are for.
	inForce    map[rateKey]bool
	inForceFor *config.Rules
}

// Sample records the rule counters' growth since the last sample as
// the hits of the second now falls in. It reads the counters of the rules
// hit since the rules were loaded, which the metrics hold by rule (see
// Options.RuleCounts): not the series of rules whose metrics carry request
// values (detailed_metric, value_to_metric), whose number has no bound.
func (a *Admin) Sample(now time.Time) {
	current := map[rateKey]rateCounts{}
	a.opts.RuleCounts(func(domain, rule string, within, over, shadow uint64) {
		// admitted: within the limit, or over it and let through by
		// shadow mode; refused: over it otherwise.
		current[rateKey{domain, rule}] = rateCounts{admitted: within + shadow, refused: growth(over, shadow)}
	})
	a.rates.sample(now.Unix(), current, a.eng.Rules())
}

// sample records current, the cumulative counts of rules, as the hits of
// second now: their growth since the last sample that had them. Only the
// rules in force are kept. The first sample only sets the base.
func (r *rates) sample(now int64, current map[rateKey]rateCounts, rules *config.Rules) {
	r.mu.Lock()
	defer r.mu.Unlock()
	inForce := r.rulesInForce(rules)
	first := r.end == 0
	r.advance(now)
	r.uncharted = 0
	for k, c := range current {
		if !inForce[k] || first {
			continue
		}
		was := r.last[k]
		d := rateCounts{admitted: growth(c.admitted, was.admitted), refused: growth(c.refused, was.refused)}
		ser := r.series[k]
		if ser == nil {
			if d == (rateCounts{}) {
				continue
			}
			if len(r.series) >= maxRateRules {
				r.uncharted++
				continue
			}
			ser = new(rateSeries)
			r.series[k] = ser
		}
		slot := r.end % RateSeconds
		ser.admitted[slot] = addClamped(ser.admitted[slot], d.admitted)
		ser.refused[slot] = addClamped(ser.refused[slot], d.refused)
		ser.sum += d.admitted + d.refused
	}
	for k, ser := range r.series {
		if !inForce[k] || ser.sum == 0 {
			delete(r.series, k)
		}
	}
	// A rule not hit since a reload is not in current: its last counts
	// stay, so that its next ones are measured from them.
	for k, c := range current {
		if inForce[k] {
			r.last[k] = c
		}
	}
	for k := range r.last {
		if !inForce[k] {
			delete(r.last, k)
		}
	}
}

// advance moves the newest slot to second now, emptying the slots of
// the seconds it passes. A now at or before the newest slot (two ticks
// in one second, the clock set back) adds to the newest slot.
func (r *rates) advance(now int64) {
	if r.series == nil {
		r.series, r.last = map[rateKey]*rateSeries{}, map[rateKey]rateCounts{}
	}
	if r.end == 0 {
		r.end, r.held = now, 1
		return
	}
	if now <= r.end {
		return
	}
	steps := min(now-r.end, RateSeconds)
	for i := int64(1); i <= steps; i++ {
		slot := (r.end + i) % RateSeconds
		for _, ser := range r.series {
			ser.sum -= uint64(ser.admitted[slot]) + uint64(ser.refused[slot])
			ser.admitted[slot], ser.refused[slot] = 0, 0
		}
	}
	r.held = int(min(int64(r.held)+now-r.end, RateSeconds))
	r.end = now
}

// rulesInForce returns the rules of rules as the metrics name them,
// computed once per rule set.
func (r *rates) rulesInForce(rules *config.Rules) map[rateKey]bool {
	if rules == r.inForceFor && r.inForce != nil {
		return r.inForce
	}
	in := map[rateKey]bool{}
	for _, d := range rules.Domains() {
		for rule := range rules.Domain(d.Domain).All() {
			in[rateKey{d.Domain, rule.Path}] = true
		}
	}
	r.inForce, r.inForceFor = in, rules
	return in
}

// growth returns a-b, or 0 if b > a (a counter cannot go back; a series
// deleted and made again can).
func growth(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

// addClamped returns a+d, at most math.MaxUint32.
func addClamped(a uint32, d uint64) uint32 {
	return uint32(min(uint64(a)+d, math.MaxUint32))
}

// rateView is the JSON of GET /ui/api/rates.
type rateView struct {
	// End is the Unix second of the last value of every series, Seconds
	// their length: the values are those of seconds End-Seconds+1 to End.
	End     int64 `json:"end"`
	Seconds int   `json:"seconds"`
	// Span is how many seconds the server keeps, RateSeconds: a chart
	// spans them, Seconds of them filled.
	Span int `json:"span"`
	// Rules are the rules with traffic over those seconds, the busiest
	// first, at most the limit asked for.
	Rules []ruleRates `json:"rules"`
	// More counts the rules with traffic left out by the limit asked for;
	// Uncharted those with traffic that the server keeps no rates of
	// (more than maxRateRules rules had traffic).
	More      int `json:"more"`
	Uncharted int `json:"uncharted"`
}

// ruleRates are one rule's hits admitted and refused each second, the
// oldest first.
type ruleRates struct {
	Domain   string   `json:"domain"`
	Rule     string   `json:"rule"`
	Admitted []uint32 `json:"admitted"`
	Refused  []uint32 `json:"refused"`
}

// view returns the rates of at most limit rules, the busiest first.
func (r *rates) view(limit int) rateView {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := rateView{End: r.end, Seconds: r.held, Span: RateSeconds, Rules: []ruleRates{}, Uncharted: r.uncharted}
	keys := make([]rateKey, 0, len(r.series))
	for k := range r.series {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b rateKey) int {
		return cmp.Or(cmp.Compare(r.series[b].sum, r.series[a].sum), cmp.Compare(a.domain, b.domain), cmp.Compare(a.rule, b.rule))
	})
	if len(keys) > limit {
		v.More = len(keys) - limit
		keys = keys[:limit]
	}
	for _, k := range keys {
		ser := r.series[k]
		rr := ruleRates{Domain: k.domain, Rule: k.rule, Admitted: make([]uint32, r.held), Refused: make([]uint32, r.held)}
		for i := range r.held {
			slot := (r.end - int64(r.held-1-i)) % RateSeconds
			rr.Admitted[i], rr.Refused[i] = ser.admitted[slot], ser.refused[slot]
		}
		v.Rules = append(v.Rules, rr)
	}
	return v
}
