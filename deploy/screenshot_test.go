package deploy_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimitd/ratelimitd/client"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// TestDashboardScreenshot draws the dashboard from a real run and writes
// it as a PNG to $DASHBOARD_SCREENSHOT (docs/dashboard.png in the README);
// without that variable it skips. It is how that picture is made, not a
// check: Grafana is not needed. Two ratelimitd pods share a redis-server,
// a Prometheus (Debian's prometheus package) scrapes them every second,
// and for about two minutes they get traffic over /json, gRPC and RLQS,
// with a rejected rule change and a Redis outage on the way. Then each
// panel's queries are asked of Prometheus over the run (the variables set
// to all pods of the namespace) and drawn at the panel's place on the
// dashboard's grid; headless Chromium takes the picture.
func TestDashboardScreenshot(t *testing.T) {
	out := os.Getenv("DASHBOARD_SCREENSHOT")
	if out == "" {
		t.Skip("set DASHBOARD_SCREENSHOT=path.png to draw the dashboard from a real run (about 2 minutes)")
	}
	out, err := filepath.Abs(out)
	if err != nil {
		t.Fatal(err)
	}
	prometheus := requireTool(t, "prometheus", "Debian's prometheus package")
	chromium := requireTool(t, "chromium", "Debian's chromium package")
	bin := daemonBinary(t)
	rdb := redistest.Start(t)

	dir := t.TempDir()
	rules := filepath.Join(dir, "rules")
	if err := os.Mkdir(rules, 0o755); err != nil {
		t.Fatal(err)
	}
	rulesFile := filepath.Join(rules, "deploy.yaml")
	if err := os.WriteFile(rulesFile, []byte(screenshotRules), 0o644); err != nil {
		t.Fatal(err)
	}
	type pod struct{ name, grpc, http, admin string }
	pods := []pod{{name: "ratelimitd-6d9c7b5f4-q8z2x"}, {name: "ratelimitd-6d9c7b5f4-w7k4n"}}
	var targets []string
	for i := range pods {
		p := &pods[i]
		p.grpc, p.http, p.admin = freeAddr(t), freeAddr(t), freeAddr(t)
		pdir := filepath.Join(dir, p.name)
		if err := os.Mkdir(pdir, 0o755); err != nil {
			t.Fatal(err)
		}
		d := startDaemon(t, bin, pdir, nil, "--config", rules, "--backend", "redis://"+rdb.Addr,
			"--grpc-addr", p.grpc, "--http-addr", p.http, "--admin-addr", p.admin,
			"--request-log", filepath.Join(pdir, "requests.log"), "--rlqs-replica", p.name,
			"--redis-breaker-open", "1s")
		d.waitReady(t, http.DefaultClient, "http://"+p.http+"/readyz")
		targets = append(targets, fmt.Sprintf("{targets: [%q], labels: {namespace: edge, pod: %q}}", p.admin, p.name))
	}

	promAddr := freeAddr(t)
	promConfig := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(promConfig, []byte("global: {scrape_interval: 1s}\nscrape_configs:\n  - job_name: ratelimitd\n    static_configs: ["+
		strings.Join(targets, ", ")+"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	promDir := filepath.Join(dir, "prometheus")
	if err := os.Mkdir(promDir, 0o755); err != nil {
		t.Fatal(err)
	}
	pd := startDaemon(t, prometheus, promDir, nil, "--config.file="+promConfig, "--storage.tsdb.path="+promDir,
		"--web.listen-address="+promAddr, "--log.level=warn")
	pd.waitReady(t, http.DefaultClient, "http://"+promAddr+"/-/ready")

	start := time.Now()
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for _, p := range pods {
		wg.Go(func() { sendTraffic(ctx, t, p.http, p.grpc) })
	}
	phase := func(at time.Duration, what string, do func()) {
		time.Sleep(time.Until(start.Add(at)))
		t.Logf("%v: %s", at, what)
		do()
	}
	phase(35*time.Second, "a rule change with a mistake, rejected", func() {
		if err := os.WriteFile(rulesFile, []byte("domain: deploy\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight}\n"), 0o644); err != nil {
			t.Error(err)
		}
	})
	phase(45*time.Second, "the rule change fixed", func() {
		if err := os.WriteFile(rulesFile, []byte(screenshotRules), 0o644); err != nil {
			t.Error(err)
		}
	})
	phase(60*time.Second, "Redis down", rdb.Kill)
	phase(85*time.Second, "Redis back", func() { rdb.Restart(t) })
	phase(120*time.Second, "done", stop)
	wg.Wait()
	end := time.Now()

	page, height := drawDashboard(t, "http://"+promAddr, start, end)
	html := filepath.Join(dir, "dashboard.html")
	if err := os.WriteFile(html, page, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--window-size="+strconv.Itoa(pageWidth)+","+strconv.Itoa(height), "--screenshot="+out, "file://"+html)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, b)
	}
	t.Logf("wrote %s", out)
}

// The screenshot's rules: users get 60 requests a minute, of which the
// traffic's heavy user takes far more; a bot is limited in shadow mode;
// each tenant's RLQS bucket gets 100 a second.
const screenshotRules = `domain: deploy
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 60
  - key: bot
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 30
  - key: tenant
    rate_limit:
      unit: second
      requests_per_unit: 100
`

// sendTraffic sends a pod decisions until ctx ends, 50 a second over
// /json and as many over gRPC: 40 users, one of them heavy, and a
// shadow-mode bot; and RLQS reports of three tenants' buckets.
func sendTraffic(ctx context.Context, t *testing.T, httpAddr, grpcAddr string) {
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close()
	rl := client.New(conn)
	q, err := client.NewQuota(conn, "deploy", client.WithReportingInterval(time.Second)) //nolint:contextcheck // NewQuota takes no context: the deferred Close ends its stream
	if err != nil {
		t.Error(err)
		return
	}
	defer q.Close()
	hc := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		user := fmt.Sprintf("u%d", i%40)
		if i%3 == 0 {
			user = "heavy"
		}
		body := fmt.Sprintf(`{"domain":"deploy","descriptors":[{"entries":[{"key":"user","value":%q}]}]}`, user)
		if i%7 == 0 {
			body = `{"domain":"deploy","descriptors":[{"entries":[{"key":"bot","value":"crawler"}]}]}`
		}
		if resp, err := hc.Post("http://"+httpAddr+"/json", "application/json", strings.NewReader(body)); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body) // a picture, not a check: errors show as gaps
			resp.Body.Close()
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, _ = rl.ShouldRateLimit(cctx, "deploy", client.Descriptor{Entries: []client.Entry{{Key: "user", Value: "g" + user}}})
		cancel()
		for range 5 {
			_, _ = q.Allow(client.Descriptor{Entries: []client.Entry{{Key: "tenant", Value: fmt.Sprintf("t%d", i%3)}}})
		}
	}
}

// The page's geometry: Grafana's grid, 24 columns and 30 px a row unit,
// under a 36 px bar.
const (
	pageWidth = 1600
	rowUnit   = 30
	topBar    = 36
)

var palette = []string{"#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#705da0", "#37872d", "#fade2a"}

type series struct {
	Name   string
	Color  string
	Path   string
	Points [][2]float64
}

type drawnPanel struct {
	Title, Kind, Stat string
	X, Y, W, H        int
	Series            []series
	YMax, YMin        string
	PlotW, PlotH      int
}

// drawDashboard asks Prometheus each panel's queries over [start, end]
// and returns the dashboard as an HTML page of SVG charts, and its height.
func drawDashboard(t *testing.T, prom string, start, end time.Time) (page []byte, height int) {
	t.Helper()
	d := loadDashboard(t)
	vars := strings.NewReplacer("$__rate_interval", "10s", "$namespace", "edge", "$pod", ".*")
	colW := float64(pageWidth-16) / 24
	var drawn []drawnPanel
	for _, p := range d.Panels {
		dp := drawnPanel{Title: p.Title, Kind: p.Type,
			X: int(float64(p.GridPos.X)*colW) + 8, Y: p.GridPos.Y*rowUnit + 8,
			W: int(float64(p.GridPos.W)*colW) - 8, H: p.GridPos.H*rowUnit - 8}
		height = max(height, topBar+dp.Y+dp.H+8)
		if p.Type == "row" {
			drawn = append(drawn, dp)
			continue
		}
		dp.PlotW, dp.PlotH = dp.W-70, dp.H-110
		var all []series
		for _, tg := range p.Targets {
			all = append(all, queryRange(t, prom, vars.Replace(tg.Expr), tg.LegendFormat, start, end)...)
		}
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, s := range all {
			for _, pt := range s.Points {
				lo, hi = min(lo, pt[1]), max(hi, pt[1])
			}
		}
		if p.Type == "stat" {
			dp.Stat = "–"
			if len(all) > 0 && len(all[0].Points) > 0 {
				dp.Stat = format(all[0].Points[len(all[0].Points)-1][1], p.FieldConfig.Defaults.Unit)
			}
			drawn = append(drawn, dp)
			continue
		}
		if math.IsInf(lo, 1) {
			lo, hi = 0, 1
		}
		lo = min(lo, 0)
		if hi <= lo {
			hi = lo + 1
		}
		unit := p.FieldConfig.Defaults.Unit
		dp.YMin, dp.YMax = format(lo, unit), format(hi, unit)
		span := end.Sub(start).Seconds()
		for i := range all {
			s := &all[i]
			var b strings.Builder
			prev := math.NaN()
			for _, pt := range s.Points {
				x := (pt[0] - float64(start.Unix())) / span * float64(dp.PlotW)
				y := float64(dp.PlotH) - (pt[1]-lo)/(hi-lo)*float64(dp.PlotH)
				cmd := "L"
				if math.IsNaN(prev) || pt[0]-prev > 5 {
					cmd = "M" // a gap: the series was absent
				}
				fmt.Fprintf(&b, "%s%.1f,%.1f ", cmd, x, y)
				prev = pt[0]
			}
			s.Path = b.String()
		}
		// Like a legend sorted by maximum: the busiest 8, none that stayed 0.
		peak := func(s series) float64 {
			m := 0.0
			for _, pt := range s.Points {
				m = max(m, pt[1])
			}
			return m
		}
		all = slices.DeleteFunc(all, func(s series) bool { return peak(s) == 0 })
		slices.SortStableFunc(all, func(a, b series) int { return -cmp.Compare(peak(a), peak(b)) })
		if len(all) > 8 {
			all = all[:8]
		}
		for i := range all {
			all[i].Color = palette[i%len(palette)]
		}
		dp.Series = all
		drawn = append(drawn, dp)
	}
	var buf strings.Builder
	if err := pageTemplate.Execute(&buf, map[string]any{
		"Title": d.Title, "Panels": drawn, "Width": pageWidth, "Height": height,
		"Range": fmt.Sprintf("%s to %s", start.Format("15:04:05"), end.Format("15:04:05 MST")),
	}); err != nil {
		t.Fatal(err)
	}
	return []byte(buf.String()), height
}

// queryRange asks Prometheus query over [start, end] a point every 2 s,
// and names each series by legend ({{label}} filled in).
func queryRange(t *testing.T, prom, query, legend string, start, end time.Time) []series {
	t.Helper()
	v := url.Values{"query": {query}, "start": {strconv.FormatInt(start.Unix(), 10)},
		"end": {strconv.FormatInt(end.Unix(), 10)}, "step": {"2"}}
	resp, err := http.Get(prom + "/api/v1/query_range?" + v.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Values [][2]any          `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.Status != "success" {
		t.Fatalf("query %q: %v %s", query, err, r.Error)
	}
	var out []series
	for _, res := range r.Data.Result {
		name := legendVar.ReplaceAllStringFunc(legend, func(m string) string { return res.Metric[strings.Trim(m, "{} ")] })
		if name == "" {
			name = "value"
		}
		s := series{Name: name}
		for _, pv := range res.Values {
			ts, _ := pv[0].(float64)
			str, _ := pv[1].(string)
			f, err := strconv.ParseFloat(str, 64)
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				continue
			}
			s.Points = append(s.Points, [2]float64{ts, f})
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b series) int { return strings.Compare(a.Name, b.Name) })
	return out
}

var legendVar = regexp.MustCompile(`\{\{\s*[a-z_]+\s*\}\}`)

// format writes v in unit as Grafana would, roughly.
func format(v float64, unit string) string {
	switch unit {
	case "percentunit":
		return fmt.Sprintf("%.0f%%", v*100)
	case "s":
		switch {
		case v == 0:
			return "0 s"
		case v < 1e-3:
			return fmt.Sprintf("%.0f µs", v*1e6)
		case v < 1:
			return fmt.Sprintf("%.1f ms", v*1e3)
		case v < 120:
			return fmt.Sprintf("%.0f s", v)
		}
		return fmt.Sprintf("%.1f min", v/60)
	case "reqps":
		return fmt.Sprintf("%.3g req/s", v)
	case "ops":
		return fmt.Sprintf("%.3g ops/s", v)
	}
	return fmt.Sprintf("%.3g", v)
}

var pageTemplate = template.Must(template.New("page").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><style>
body { margin: 0; background: #111217; color: #ccccdc; font: 13px Inter, "Helvetica Neue", Arial, sans-serif; width: {{.Width}}px; height: {{.Height}}px; position: relative; }
.top { position: absolute; left: 8px; top: 0; right: 8px; height: 36px; display: flex; align-items: center; gap: 16px; }
.top b { font-size: 17px; color: #fff; } .top span { color: #8e8e9f; }
.vars span.v { background: #22252b; border: 1px solid #34373d; padding: 3px 8px; border-radius: 2px; color: #ccccdc; }
.panel { position: absolute; background: #181b1f; border: 1px solid #24262b; border-radius: 2px; box-sizing: border-box; }
.panel h3 { margin: 0; padding: 6px 8px; font-size: 13px; font-weight: 500; color: #ccccdc; white-space: nowrap; overflow: hidden; }
.row { position: absolute; font-size: 15px; font-weight: 500; color: #ccccdc; padding: 6px 0; }
.stat { font-size: 48px; font-weight: 500; color: #73bf69; text-align: center; margin-top: 40px; }
.legend { position: absolute; left: 8px; right: 8px; font-size: 11px; line-height: 15px; overflow: hidden; height: 48px; }
.legend i { display: inline-block; width: 14px; height: 3px; margin: 0 4px 3px 0; vertical-align: middle; }
.legend span { margin-right: 12px; white-space: nowrap; }
svg text { fill: #8e8e9f; font-size: 10px; }
</style></head><body>
<div class="top"><b>ratelimitd</b>
<span class="vars">Data source <span class="v">Prometheus</span> Namespace <span class="v">edge</span> Pod <span class="v">All</span></span>
<span>{{.Range}}, two pods on one Redis: traffic over /json, gRPC and RLQS; a rejected rule change at 35 s; Redis down from 60 s to 85 s</span></div>
<div style="position:absolute; top:36px; left:0; right:0; bottom:0">
{{range .Panels}}{{if eq .Kind "row"}}<div class="row" style="left:{{.X}}px; top:{{.Y}}px">{{.Title}}</div>
{{else}}<div class="panel" style="left:{{.X}}px; top:{{.Y}}px; width:{{.W}}px; height:{{.H}}px"><h3>{{.Title}}</h3>
{{if eq .Kind "stat"}}<div class="stat">{{.Stat}}</div>{{else}}
<svg width="{{.W}}" height="{{.PlotH}}" style="position:absolute; left:0; top:30px">
<text x="4" y="10">{{.YMax}}</text><text x="4" y="{{.PlotH}}">{{.YMin}}</text>
<g transform="translate(62,4)"><rect width="{{.PlotW}}" height="{{.PlotH}}" fill="none" stroke="#24262b"/>
{{range .Series}}<path d="{{.Path}}" fill="none" stroke="{{.Color}}" stroke-width="1.5"/>{{end}}</g></svg>
<div class="legend" style="top:{{.PlotH}}px; margin-top:40px">{{range .Series}}<span><i style="background:{{.Color}}"></i>{{.Name}}</span>{{end}}</div>{{end}}
</div>{{end}}{{end}}
</div></body></html>
`))
