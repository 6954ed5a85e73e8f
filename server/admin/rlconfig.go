package admin

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/envoyunit"
)

// RLConfig returns the handler of envoyproxy/ratelimit's /rlconfig, which
// it serves on its debug port: the rules in force as plain text, one line
// per rule with a limit, or unlimited, domains in name order, such as
//
//	gateway.tenant=acme.path=/v1/*: 3 per minute fixed_window name=search shadow_mode
//
// that is, the domain and the rule's key/value path, then each limit
// (requests per unit, or per window when it is no one unit, the
// algorithm, the burst and name when set) separated by " + ", then the
// rule's modes. 503 before any rules are loaded.
func (a *Admin) RLConfig() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		rules := a.eng.Rules()
		if rules == nil {
			http.Error(w, "no rules loaded", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		var b strings.Builder
		for _, name := range domainNames(rules) {
			for r := range rules.Domain(name).All() {
				if line := rlconfigLine(r); line != "" {
					fmt.Fprintf(&b, "%s.%s: %s\n", name, r.Path, line)
				}
			}
		}
		io.WriteString(w, b.String())
	})
}

// domainNames returns the names of the domains of rules, sorted.
func domainNames(rules *config.Rules) []string {
	var names []string
	for _, d := range rules.Domains() {
		names = append(names, d.Domain)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// rlconfigLine describes r's limits and modes, "" for a rule that only
// leads to others.
func rlconfigLine(r *config.Rule) string {
	var parts []string
	for _, l := range r.Limits {
		p := strconv.FormatUint(l.Requests, 10) + " per " + window(l.Window) + " " + l.Algorithm.String()
		if l.Algorithm == backend.Concurrency {
			p = strconv.FormatUint(l.Requests, 10) + " at once lease " + window(l.Window) + " concurrency"
		}
		if l.Burst != 0 {
			p += " burst=" + strconv.FormatUint(l.Burst, 10)
		}
		if l.Name != "" {
			p += " name=" + l.Name
		}
		parts = append(parts, p)
	}
	line := strings.Join(parts, " + ")
	if r.Unlimited {
		line = "unlimited"
	}
	if line == "" {
		return ""
	}
	for _, m := range []struct {
		name string
		on   bool
	}{{"shadow_mode", r.ShadowMode}, {"quota_mode", r.QuotaMode}, {"detailed_metric", r.DetailedMetric}} {
		if m.on {
			line += " " + m.name
		}
	}
	return line
}

// window names a limit's window w: its Envoy unit in lower case when it
// is exactly one, its duration otherwise.
func window(w time.Duration) string {
	u, _ := envoyunit.ByWindow(w) // the zero Unit's number is UNKNOWN's
	if u := rlsv3.RateLimitResponse_RateLimit_Unit(u.Envoy); u != rlsv3.RateLimitResponse_RateLimit_UNKNOWN {
		return strings.ToLower(u.String())
	}
	return w.String()
}
