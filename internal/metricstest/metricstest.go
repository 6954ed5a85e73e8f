// Package metricstest scrapes Prometheus metrics for tests: it checks
// them with promlint and reads series values.
package metricstest

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families are scraped metric families, by name.
type Families map[string]*dto.MetricFamily

// Scrape GETs url with client (nil: http.DefaultClient) and returns its
// metric families. It fails t unless the answer is 200 and promlint finds
// nothing wrong with the metrics.
func Scrape(t testing.TB, client *http.Client, url string) Families {
	t.Helper()
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d: %s", url, resp.StatusCode, body)
	}
	problems, err := promlint.New(strings.NewReader(string(body))).Lint()
	if err != nil {
		t.Fatalf("promlint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	return mfs
}

// Value returns the value of the first series of name whose labels
// include labels, given as "k=v,k=v" (the value is what follows the first
// "="): a counter's or gauge's value, a histogram's count. It reports
// whether there is such a series.
func (f Families) Value(name, labels string) (float64, bool) {
next:
	for _, m := range f[name].GetMetric() {
		for kv := range strings.SplitSeq(labels, ",") {
			if kv == "" {
				continue
			}
			k, v, _ := strings.Cut(kv, "=")
			found := false
			for _, lp := range m.GetLabel() {
				found = found || (lp.GetName() == k && lp.GetValue() == v)
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// Want fails t for every series in want, written name{k=v,k=v}, that f
// lacks or whose value differs.
func (f Families) Want(t testing.TB, want map[string]float64) {
	t.Helper()
	for series, v := range want {
		name, labels, _ := strings.Cut(strings.TrimSuffix(series, "}"), "{")
		got, ok := f.Value(name, labels)
		switch {
		case !ok:
			t.Errorf("%s: no such series", series)
		case got != v:
			t.Errorf("%s = %v, want %v", series, got, v)
		}
	}
}
