package admin

import (
	"embed"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/server/internal/engine"
)

// uiFiles are the operator's page: hand-written HTML, CSS and JavaScript,
// served as they are, with no build step and nothing fetched from
// elsewhere.
//
//go:embed ui
var uiFiles embed.FS

// uiPolicy is the Content-Security-Policy of the page: its own files
// only, no inline script, no plugin, no framing. The page builds its DOM
// from text (never markup), so request values cannot become elements; the
// policy is a second wall.
const uiPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// defaultRateRules is how many rules GET /ui/api/rates returns when the
// page asks no number.
const defaultRateRules = 24

// uiRoutes adds the operator's page and the JSON it reads:
//
//	GET /ui/              the page (ui/index.html, ui.css, ui.js)
//	GET /ui/api/rules     the rules in force as a tree (uiRules)
//	GET /ui/api/rates     per rule, hits admitted and refused each second
//	                      over the last RateSeconds (rateView); ?limit=N
//	                      rules, the busiest first (default 24)
//	GET /ui/api/status    readiness, the store's and its breakers' state
//	                      (uiStatus)
//	GET /ui/api/overrides the first uiOverrides runtime overrides, and how
//	                      many there are
//
// The page also calls GET /hotkeys and POST /explain, and shows "not
// available" while they answer 404.
func (a *Admin) uiRoutes(mux Mux) {
	files := http.FileServerFS(uiFiles) // /ui/x is ui/x in uiFiles
	mux.Handle("GET /ui/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", uiPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	}))
	mux.Handle("GET /ui/api/rules", http.HandlerFunc(a.serveUIRules))
	mux.Handle("GET /ui/api/rates", http.HandlerFunc(a.serveUIRates))
	mux.Handle("GET /ui/api/status", http.HandlerFunc(a.serveUIStatus))
	mux.Handle("GET /ui/api/overrides", http.HandlerFunc(a.serveUIOverrides))
}

// uiRules is the JSON of GET /ui/api/rules.
type uiRules struct {
	Files   []string   `json:"files"`
	Domains []uiDomain `json:"domains"`
}

// uiDomain is one domain's rules, the top level of its tree.
type uiDomain struct {
	Domain string    `json:"domain"`
	Rules  []*uiRule `json:"rules"`
}

// uiRule is one rule of the tree and the rules nested in it.
type uiRule struct {
	Key            string    `json:"key"`
	Value          string    `json:"value,omitempty"`
	Wildcard       bool      `json:"wildcard,omitempty"`
	Path           string    `json:"path"`
	File           string    `json:"file,omitempty"`
	Line           int       `json:"line,omitempty"`
	Limits         []uiLimit `json:"limits"`
	Unlimited      bool      `json:"unlimited,omitempty"`
	ShadowMode     bool      `json:"shadow_mode,omitempty"`
	QuotaMode      bool      `json:"quota_mode,omitempty"`
	DetailedMetric bool      `json:"detailed_metric,omitempty"`
	ValueToMetric  bool      `json:"value_to_metric,omitempty"`
	ShareThreshold bool      `json:"share_threshold,omitempty"`
	Children       []*uiRule `json:"children"`
}

// uiLimit is one limit of a rule.
type uiLimit struct {
	Name      string `json:"name,omitempty"`
	Algorithm string `json:"algorithm"`
	Requests  uint64 `json:"requests"`
	Window    string `json:"window"`
	Burst     uint64 `json:"burst,omitempty"`
}

// serveUIRules writes the rules in force as a tree per domain, domains
// in name order (503 before any are loaded).
func (a *Admin) serveUIRules(w http.ResponseWriter, _ *http.Request) {
	rules := a.eng.Rules()
	if rules == nil {
		http.Error(w, "no rules loaded", http.StatusServiceUnavailable)
		return
	}
	writeJSON(w, ruleTree(rules), false)
}

// ruleTree returns rules as uiRules.
func ruleTree(rules *config.Rules) uiRules {
	out := uiRules{Files: rules.Files(), Domains: []uiDomain{}}
	for _, name := range domainNames(rules) {
		d := uiDomain{Domain: name, Rules: []*uiRule{}}
		nodes := map[*config.Rule]*uiRule{}
		for r := range rules.Domain(name).All() { // parents first
			n := uiRuleOf(r)
			nodes[r] = n
			if len(r.Levels) < 2 {
				d.Rules = append(d.Rules, n)
				continue
			}
			parent := nodes[r.Levels[len(r.Levels)-2]]
			parent.Children = append(parent.Children, n)
		}
		out.Domains = append(out.Domains, d)
	}
	return out
}

// uiRuleOf returns r without its children.
func uiRuleOf(r *config.Rule) *uiRule {
	n := &uiRule{
		Key: r.Key, Value: r.Value, Wildcard: r.Wildcard, Path: r.Path, File: r.File, Line: r.Line,
		Limits: []uiLimit{}, Unlimited: r.Unlimited, ShadowMode: r.ShadowMode, QuotaMode: r.QuotaMode,
		DetailedMetric: r.DetailedMetric, ValueToMetric: r.ValueToMetric, ShareThreshold: r.ShareThreshold,
		Children: []*uiRule{},
	}
	for _, l := range r.Limits {
		n.Limits = append(n.Limits, uiLimit{
			Name: l.Name, Algorithm: l.Algorithm.String(), Requests: l.Requests, Window: window(l.Window), Burst: l.Burst,
		})
	}
	return n
}

// serveUIRates writes the per-rule rates (rateView) of at most ?limit=
// rules.
func (a *Admin) serveUIRates(w http.ResponseWriter, r *http.Request) {
	limit := defaultRateRules
	if q := r.URL.Query().Get("limit"); q != "" {
		n, err := strconv.Atoi(q)
		if err != nil || n < 0 {
			http.Error(w, "limit "+strconv.Quote(q)+": want a number of rules, 0 or more", http.StatusBadRequest)
			return
		}
		limit = min(n, maxRateRules)
	}
	writeJSON(w, a.rates.view(limit), false)
}

// uiStatus is the JSON of GET /ui/api/status: what /readyz reports, and
// more.
type uiStatus struct {
	Ready             bool        `json:"ready"`
	Store             string      `json:"store"` // "ok", or the worst breaker's state
	Breakers          []uiBreaker `json:"breakers"`
	FailureMode       string      `json:"failure_mode"`
	FailureAnswers    uint64      `json:"failure_answers"`
	ReadyWithoutStore bool        `json:"ready_without_store"`
	ShadowMode        bool        `json:"shadow_mode"`
	Replica           string      `json:"replica,omitempty"`
	RulesLoaded       bool        `json:"rules_loaded"`
	Files             []string    `json:"files"`
	// UnknownDomains are the domains requested that have no rules (the
	// first Options.UnknownDomains), the most requested first: their
	// requests are answered OK with nothing limited. UnknownUntracked
	// counts the requests for the others.
	UnknownDomains   []engine.UnknownView `json:"unknown_domains"`
	UnknownUntracked uint64               `json:"unknown_domains_untracked"`
}

// uiBreaker is one node's circuit breaker.
type uiBreaker struct {
	Node  string `json:"node"`
	State string `json:"state"` // closed, half-open or open
}

// serveUIStatus writes the server's uiStatus.
func (a *Admin) serveUIStatus(w http.ResponseWriter, _ *http.Request) {
	ready, state := a.opts.Ready()
	st := uiStatus{
		Ready: ready, Store: state, Breakers: []uiBreaker{}, FailureMode: a.opts.FailureMode.String(),
		FailureAnswers: a.eng.FailureAnswers(), ReadyWithoutStore: a.opts.ReadyWithoutStore, ShadowMode: a.opts.ShadowMode,
		Files: []string{},
	}
	st.UnknownDomains, st.UnknownUntracked = a.eng.UnknownDomains()
	st.Replica = a.opts.Replica
	if rules := a.eng.Rules(); rules != nil {
		st.RulesLoaded = true
		st.Files = rules.Files()
	}
	if b, ok := a.eng.Store().(backend.BreakerReporter); ok {
		b.Breakers(func(node, state string) { st.Breakers = append(st.Breakers, uiBreaker{node, state}) })
		slices.SortFunc(st.Breakers, func(a, b uiBreaker) int { return strings.Compare(a.Node, b.Node) })
	}
	writeJSON(w, st, false)
}
