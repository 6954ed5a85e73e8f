package tlsconfig_test

import (
	"crypto/x509"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratelimitd/ratelimitd/internal/certtest"
	"github.com/ratelimitd/ratelimitd/internal/tlsconfig"
)

// TestCollectors: a Reloader's metrics, under its listener's label, follow
// the files: the expiry of the certificate served, and the sets taken up
// and refused.
func TestCollectors(t *testing.T) {
	scratch := t.TempDir()
	ca := certtest.NewCA(t, "test CA")
	old := ca.Server(t, scratch, "old", "localhost")
	nw := ca.Issue(t, scratch, "new", &x509.Certificate{
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		NotAfter:    time.Now().Add(48 * time.Hour),
	}, "localhost")
	v := newVolume(t, styles[0].write)
	v.put(t, pair(old))
	var clk clock
	r := newReloader(t, tlsconfig.Options{CertFile: v.path(certName), KeyFile: v.path(keyName), Now: clk.Now})
	reg := prometheus.NewRegistry()
	reg.MustRegister(r.Collectors("grpc")...)

	want := func(when string, expiry time.Time, reloads, refused float64) {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				if l := m.GetLabel(); len(l) != 1 || l[0].GetName() != "listener" || l[0].GetValue() != "grpc" {
					t.Errorf("%s: %s labelled %v, want listener=grpc", when, mf.GetName(), l)
				}
				got[mf.GetName()] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
		for name, v := range map[string]float64{
			"ratelimitd_tls_certificate_expiry_timestamp_seconds": float64(expiry.Unix()),
			"ratelimitd_tls_reloads_total":                        reloads,
			"ratelimitd_tls_reload_errors_total":                  refused,
		} {
			if g, ok := got[name]; !ok || g != v {
				t.Errorf("%s: %s = %v (present %v), want %v", when, name, g, ok, v)
			}
		}
	}
	want("at start", old.Cert.NotAfter, 0, 0)

	v.put(t, map[string][]byte{certName: []byte("garbage")})
	clk.tick()
	want("after garbage", old.Cert.NotAfter, 0, 1)

	v.put(t, pair(nw))
	clk.tick()
	want("after a new certificate", nw.Cert.NotAfter, 1, 1)

	if probs, err := testutil.GatherAndLint(reg); err != nil || len(probs) > 0 {
		t.Errorf("promlint: %v, %v", probs, err)
	}
}
