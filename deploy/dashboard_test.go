package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

const dashboardFile = "grafana/ratelimitd.json"

// The dashboard's JSON, the part these tests read.
type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type variable struct {
	Name  string          `json:"name"`
	Type  string          `json:"type"`
	Query json.RawMessage `json:"query"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	GridPos    struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID        string      `json:"refId"`
		Expr         string      `json:"expr"`
		LegendFormat string      `json:"legendFormat"`
		Datasource   *datasource `json:"datasource"`
	} `json:"targets"`
	Panels      []panel `json:"panels"` // a collapsed row's
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// The values the variables take while the queries are parsed: each
// selector must then filter on the namespace and pod chosen.
const (
	namespaceValue = "namespace-chosen"
	podValue       = "pod-chosen"
)

var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "1m", "${__rate_interval}", "1m",
	"$namespace", namespaceValue, "${namespace}", namespaceValue,
	"$pod", podValue, "${pod}", podValue,
)

var promql = parser.NewParser(parser.Options{})

// parseQuery parses a PromQL query of the dashboard, its variables
// replaced by values; a variable left over fails the parse.
func parseQuery(q string) (parser.Expr, error) {
	return promql.ParseExpr(grafanaVars.Replace(q))
}

// metricNames returns the metrics that expr selects, and its selectors.
func metricNames(expr parser.Expr) (names []string, sels []*parser.VectorSelector) {
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			sels = append(sels, vs)
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
					name = m.Value
				}
			}
			names = append(names, name)
		}
		return nil
	})
	return names, sels
}

// labelValues matches a variable's label_values(SELECTOR, LABEL) query.
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*([a-z_]+)\)$`)

// dashboardQueries returns every PromQL query of the dashboard, with where
// it is: the panels' targets and the variables' label_values selectors.
func dashboardQueries(t *testing.T, d dashboard) map[string]string {
	t.Helper()
	queries := map[string]string{}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Errorf("variable %s: query %s: %v", v.Name, v.Query, err)
			continue
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(SELECTOR, LABEL)", v.Name, q.Query)
			continue
		}
		queries["variable "+v.Name] = m[1]
	}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				queries[fmt.Sprintf("panel %q query %s", p.Title, tg.RefID)] = tg.Expr
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return queries
}

// TestDashboard checks that the dashboard loads, offers the datasource,
// namespace and pod variables, lays its panels out without overlap, and
// that every query parses and filters on the namespace and pod chosen.
func TestDashboard(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q: want both", d.UID, d.Title)
	}
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name+":"+v.Type)
	}
	for _, want := range []string{"datasource:datasource", "namespace:query", "pod:query"} {
		if !slices.Contains(vars, want) {
			t.Errorf("variables %v: want %s", vars, want)
		}
	}

	// Panels: on the 24-column grid, none over another; each asks the
	// chosen datasource.
	type cell struct{ x, y int }
	taken := map[cell]string{}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			g := p.GridPos
			if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
				t.Errorf("panel %q: gridPos %+v off the 24-column grid", p.Title, g)
			}
			for x := g.X; x < g.X+g.W; x++ {
				for y := g.Y; y < g.Y+g.H; y++ {
					if other, ok := taken[cell{x, y}]; ok {
						t.Errorf("panel %q overlaps panel %q at (%d, %d)", p.Title, other, x, y)
					}
					taken[cell{x, y}] = p.Title
				}
			}
			if p.Type != "row" {
				if len(p.Targets) == 0 {
					t.Errorf("panel %q has no query", p.Title)
				}
				if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
					t.Errorf("panel %q: datasource %+v, want the variable ${datasource}", p.Title, p.Datasource)
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)

	queries := dashboardQueries(t, d)
	if len(queries) < 20 {
		t.Errorf("%d queries: the dashboard lost panels", len(queries))
	}
	for where, q := range queries {
		expr, err := parseQuery(q)
		if err != nil {
			t.Errorf("%s: %q does not parse: %v", where, q, err)
			continue
		}
		_, sels := metricNames(expr)
		for _, vs := range sels {
			if where == "variable namespace" {
				continue // lists the namespaces to choose from
			}
			want := map[string]string{"namespace": namespaceValue, "pod": podValue}
			if where == "variable pod" {
				delete(want, "pod")
			}
			for _, m := range vs.LabelMatchers {
				if want[m.Name] == m.Value && m.Type == labels.MatchRegexp {
					delete(want, m.Name)
				}
			}
			if len(want) > 0 {
				t.Errorf("%s: selector %s does not filter on %v by the variables", where, vs, want)
			}
		}
	}
}

// alertQueries returns the expressions of alerts.yaml by alert.
func alertQueries(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	queries := map[string]string{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			queries["alert "+r.Alert] = r.Expr
		}
	}
	return queries
}

// notRatelimitd are the metrics the alerts read from other exporters.
var notRatelimitd = map[string]string{
	"kube_pod_status_ready": "kube-state-metrics",
}

// namedMetrics returns every metric that the dashboard and the alerts
// name, with where.
func namedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	queries := dashboardQueries(t, loadDashboard(t))
	for where, q := range alertQueries(t) {
		queries[where] = q
	}
	names := map[string][]string{}
	for where, q := range queries {
		expr, err := parseQuery(q)
		if err != nil {
			t.Fatalf("%s: %q does not parse: %v", where, q, err)
		}
		ns, _ := metricNames(expr)
		for _, n := range ns {
			names[n] = append(names[n], where)
		}
	}
	return names
}

// TestDashboardShowsWhatOperatorsNeed checks that the dashboard keeps a
// query on each thing it is for: decisions by rule and code, refusals,
// latency, the store's errors and breakers, failure-mode answers, reloads,
// RLQS buckets, grants and fallbacks, and request-log drops.
func TestDashboardShowsWhatOperatorsNeed(t *testing.T) {
	names := namedMetrics(t)
	for _, want := range []string{
		"ratelimitd_decisions_total",
		"ratelimitd_rule_hits_total", "ratelimitd_rule_within_limit_total", "ratelimitd_rule_over_limit_total",
		"ratelimitd_rule_shadow_mode_total",
		"ratelimitd_decision_duration_seconds_bucket",
		"ratelimitd_backend_errors_total", "ratelimitd_backend_breaker_state",
		"ratelimitd_failure_mode_answers_total",
		"ratelimitd_config_loads_total",
		"ratelimitd_rlqs_buckets", "ratelimitd_rlqs_assigned_rate", "ratelimitd_rlqs_fallback_assignments_total",
		"ratelimitd_request_log_dropped_total",
	} {
		if !slices.ContainsFunc(names[want], func(where string) bool { return strings.HasPrefix(where, "panel ") }) {
			t.Errorf("no panel shows %s", want)
		}
	}
}
