package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimitd/ratelimitd/client"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// The rules of the daemon TestMetricsServed starts: a limit that the
// traffic passes, a shadow-mode rule that it passes too, and a rule for
// the RLQS buckets.
const metricsRules = `domain: deploy
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 3
  - key: bot
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
  - key: tenant
    rate_limit:
      unit: second
      requests_per_unit: 100
`

// TestMetricsServed starts a real ratelimitd on Redis, with the request
// log, RLQS, TLS on HTTP and the admin listener, sends it decisions over
// /json and gRPC and RLQS reports, and checks that its /metrics serves
// every ratelimitd metric the dashboard and the alerts name.
func TestMetricsServed(t *testing.T) {
	bin := daemonBinary(t)
	rdb := redistest.Start(t)
	names := namedMetrics(t)
	var want, memoryOnly []string
	for name, where := range names {
		if exporter, ok := notRatelimitd[name]; ok {
			t.Logf("%s (%s) is %s's", name, strings.Join(where, ", "), exporter)
			continue
		}
		if strings.HasPrefix(name, "ratelimitd_memory_") { // the memory store's: see the end
			memoryOnly = append(memoryOnly, name)
			continue
		}
		want = append(want, name)
	}
	slices.Sort(want)
	t.Run("memory store", func(t *testing.T) { memoryMetricsServed(t, bin, memoryOnly, names) })

	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rules, []byte(metricsRules), 0o644); err != nil {
		t.Fatal(err)
	}
	cert, key := selfSigned(t, dir)
	grpcAddr, httpAddr, adminAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	d := startDaemon(t, bin, dir, nil,
		"--config", rules,
		"--backend", "redis://"+rdb.Addr,
		"--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--admin-addr", adminAddr,
		"--http-tls-cert", cert, "--http-tls-key", key,
		"--request-log", filepath.Join(dir, "requests.log"),
		"--rlqs-sync-interval", "100ms",
		"--log-format", "json",
	)
	httpc := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, // the test's own certificate
	}
	d.waitReady(t, httpc, "https://"+httpAddr+"/readyz")

	// Decisions over /json: within, over the limit, and over it in
	// shadow mode; and a domain that has no rules.
	for range 5 {
		for _, body := range []string{
			`{"domain":"deploy","descriptors":[{"entries":[{"key":"user","value":"alice"}]}]}`,
			`{"domain":"deploy","descriptors":[{"entries":[{"key":"bot","value":"crawler"}]}]}`,
			`{"domain":"deplyo","descriptors":[{"entries":[{"key":"user","value":"alice"}]}]}`,
		} {
			resp, err := httpc.Post("https://"+httpAddr+"/json", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("POST /json %s: %s", body, resp.Status)
			}
		}
	}

	// Decisions over gRPC (ratelimit.v1), and RLQS reports from a Quota.
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rl := client.New(conn, client.WithFailClosed())
	for range 4 {
		if _, err := rl.ShouldRateLimit(t.Context(), "deploy", client.Descriptor{Entries: []client.Entry{{Key: "user", Value: "bob"}}}); err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
	}
	q, err := client.NewQuota(conn, "deploy", client.WithReportingInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()

	// Poll /metrics, reporting to RLQS meanwhile, until every metric is
	// there: the RLQS series appear once a report has been taken and
	// shares exchanged with Redis.
	var missing []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		for range 10 {
			if _, err := q.Allow(client.Descriptor{Entries: []client.Entry{{Key: "tenant", Value: "acme"}}}); err != nil {
				t.Fatalf("Quota.Allow: %v", err)
			}
		}
		served := scrape(t, httpc, "https://"+adminAddr+"/metrics")
		missing = missing[:0]
		for _, name := range want {
			if !served[name] {
				missing = append(missing, name)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, name := range missing {
				t.Errorf("%s, named by %s, is not served by ratelimitd's /metrics", name, strings.Join(names[name], ", "))
			}
			t.Logf("ratelimitd's log:\n%s", d.log())
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("all %d metrics named by the dashboard and the alerts are served", len(want))
}

// memoryMetricsServed starts ratelimitd on the memory store and checks
// that it serves the metrics in want, which only that store has.
func memoryMetricsServed(t *testing.T, bin string, want []string, names map[string][]string) {
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rules, []byte(metricsRules), 0o644); err != nil {
		t.Fatal(err)
	}
	httpAddr := freeAddr(t)
	d := startDaemon(t, bin, dir, nil, "--config", rules, "--grpc-addr", freeAddr(t), "--http-addr", httpAddr, "--log-format", "json")
	httpc := &http.Client{Timeout: 5 * time.Second}
	d.waitReady(t, httpc, "http://"+httpAddr+"/readyz")
	served := scrape(t, httpc, "http://"+httpAddr+"/metrics")
	for _, name := range want {
		if !served[name] {
			t.Errorf("%s, named by %s, is not served by ratelimitd's /metrics on the memory store", name, strings.Join(names[name], ", "))
		}
	}
}

// scrape returns the names of the samples that url serves, in
// Prometheus's text format: histograms' as name_bucket, _sum and _count.
func scrape(t *testing.T, c *http.Client, url string) map[string]bool {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	served := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			served[line[:i]] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return served
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// selfSigned writes a certificate for 127.0.0.1, valid for a day, and its
// key into dir.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "ratelimitd test"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for file, block := range map[string]*pem.Block{certFile: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "EC PRIVATE KEY", Bytes: kder}} {
		if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return certFile, keyFile
}

// A runningDaemon is a ratelimitd process a test started.
type runningDaemon struct {
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	exit    error         // how it exited, once done is closed
}

// startDaemon starts bin with args and the variables env (and none of the
// test's own RATELIMITD_* variables), its output in dir, and registers a
// cleanup that stops it (SIGTERM, then SIGKILL after 10 s).
func startDaemon(t *testing.T, bin, dir string, env []string, args ...string) *runningDaemon {
	t.Helper()
	d := &runningDaemon{logPath: filepath.Join(dir, "ratelimitd.log"), done: make(chan struct{})}
	logf, err := os.Create(d.logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close() // the child has its own descriptor
	d.cmd = exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RATELIMITD_") {
			d.cmd.Env = append(d.cmd.Env, kv)
		}
	}
	d.cmd.Env = append(d.cmd.Env, env...)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf // files: exec starts no copying goroutine
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { // ends when the process exits, which the cleanup ensures
		d.exit = d.cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(func() {
		if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Logf("stopping ratelimitd: %v", err) // it has exited
		}
		select {
		case <-d.done:
		case <-time.After(10 * time.Second):
			if err := d.cmd.Process.Kill(); err != nil {
				t.Logf("killing ratelimitd: %v", err)
			}
			<-d.done
		}
	})
	return d
}

// waitReady waits until url answers 200, failing the test if the daemon
// exits or 30 s pass.
func (d *runningDaemon) waitReady(t *testing.T, c *http.Client, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-d.done:
			t.Fatalf("ratelimitd exited: %v\n%s", d.exit, d.log())
		case <-ctx.Done():
			t.Fatalf("%s did not answer 200 within 30s (last: %v)\n%s", url, err, d.log())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (d *runningDaemon) log() string {
	b, err := os.ReadFile(d.logPath)
	if err != nil {
		return fmt.Sprintf("(reading the log: %v)", err)
	}
	return string(bytes.TrimSpace(b))
}
