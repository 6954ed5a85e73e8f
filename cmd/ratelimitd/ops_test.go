package main

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/ratelimitd/ratelimitd/internal/certtest"
	"github.com/ratelimitd/ratelimitd/internal/metricstest"
)

// get GETs url with client (nil: http.DefaultClient) and returns the
// status code and body.
func get(t *testing.T, client *http.Client, url string) (int, string) {
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
	return resp.StatusCode, string(body)
}

// scrapeDaemon GETs d's /metrics, checked by promlint.
func scrapeDaemon(t *testing.T, d *daemon) metricstest.Families {
	t.Helper()
	return metricstest.Scrape(t, nil, "http://"+d.httpAddr+"/metrics")
}

// TestMetricsEndpoint: the daemon's /metrics carries its own, the store's,
// gRPC's, Go's and the process's series, all passing promlint, with the
// values of known traffic; an invalid rules change is counted.
func TestMetricsEndpoint(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	writeFile(t, path, goodRules)
	d := startDaemon(t, "--config", dir)
	for range 5 { // limit 3
		d.limit(t)
	}
	mfs := scrapeDaemon(t, d)
	for _, tt := range []struct {
		name, labels string
		want         float64 // -1: any value
	}{
		{"ratelimitd_rule_hits_total", "domain=d,rule=k", 5},
		{"ratelimitd_rule_over_limit_total", "domain=d,rule=k", 2},
		{"ratelimitd_rule_within_limit_total", "domain=d,rule=k", 3},
		{"ratelimitd_rule_near_limit_total", "domain=d,rule=k", 1},
		{"ratelimitd_decisions_total", "api=envoy,code=over_limit", 2},
		{"ratelimitd_memory_keys", "", 1},
		{"ratelimitd_memory_evictions_total", "", 0},
		{"ratelimitd_memory_refusing_evictions_total", "", 0},
		{"ratelimitd_memory_declined_keys_total", "", 0},
		{"ratelimitd_config_loads_total", "result=success", 1},
		{"ratelimitd_failure_mode_answers_total", "mode=allow", 0},
		{"grpc_server_handled_total", "grpc_service=envoy.service.ratelimit.v3.RateLimitService,grpc_code=OK", 5},
		{"ratelimitd_build_info", "version=" + version(), 1},
		{"go_goroutines", "", -1},
		{"process_cpu_seconds_total", "", -1},
	} {
		got, ok := mfs.Value(tt.name, tt.labels)
		switch {
		case !ok:
			t.Errorf("%s{%s}: no such series", tt.name, tt.labels)
		case tt.want >= 0 && got != tt.want:
			t.Errorf("%s{%s} = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}

	// An invalid change keeps the rules and counts an error.
	writeFile(t, path, badRules)
	deadline := time.Now().Add(10 * time.Second)
	for {
		mfs := scrapeDaemon(t, d)
		if v, _ := mfs.Value("ratelimitd_config_loads_total", "result=error"); v == 1 {
			if ok, _ := mfs.Value("ratelimitd_config_last_load_successful", ""); ok != 0 {
				t.Errorf("ratelimitd_config_last_load_successful = %v after an invalid change, want 0", ok)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the invalid change was not counted; logs:\n%s", d.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := d.limit(t); got != 3 {
		t.Errorf("limit after an invalid change = %d, want the previous 3", got)
	}

	// /config shows the rules in force, not the invalid file.
	code, body := get(t, nil, "http://"+d.httpAddr+"/config")
	if code != http.StatusOK || !strings.Contains(body, "requests_per_unit: 3") || !strings.Contains(body, path) {
		t.Errorf("GET /config = %d %q, want the rules in force, naming %s", code, body, path)
	}
}

// TestHTTPJSONOff: --http-json=false leaves POST /json out.
func TestHTTPJSONOff(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, goodRules)
	body := `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`
	for _, tt := range []struct {
		args []string
		want int
	}{{nil, http.StatusOK}, {[]string{"--http-json=false"}, http.StatusNotFound}} {
		d := startDaemon(t, append([]string{"--config", path}, tt.args...)...)
		resp, err := http.Post("http://"+d.httpAddr+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%v: POST /json = %d, want %d", tt.args, resp.StatusCode, tt.want)
		}
	}
}

// TestDebugAddr: pprof, but for the command line, is served on
// --debug-addr only, and not at all without it.
func TestDebugAddr(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, goodRules)
	d := startDaemon(t, "--config", path, "--debug-addr", "127.0.0.1:0")
	if d.debugAddr == "" {
		t.Fatalf("no debug address in the start-up line; logs:\n%s", d.logs)
	}
	for _, p := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1"} {
		if code, _ := get(t, nil, "http://"+d.debugAddr+p); code != http.StatusOK {
			t.Errorf("GET %s on --debug-addr = %d, want 200", p, code)
		}
	}
	// The command line may carry --backend's password.
	if code, body := get(t, nil, "http://"+d.debugAddr+"/debug/pprof/cmdline"); code != http.StatusNotFound {
		t.Errorf("GET /debug/pprof/cmdline on --debug-addr = %d %q, want 404", code, body)
	}
	if code, _ := get(t, nil, "http://"+d.httpAddr+"/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("GET /debug/pprof/ on --http-addr = %d, want 404", code)
	}

	plain := startDaemon(t, "--config", path)
	if plain.debugAddr != "" {
		t.Errorf("without --debug-addr, a debug listener on %s", plain.debugAddr)
	}
}

// shouldRateLimit calls Envoy's ShouldRateLimit for k=v on conn.
func shouldRateLimit(ctx context.Context, conn *grpc.ClientConn) (*rlsv3.RateLimitResponse, error) {
	return rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain:      "d",
		Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}},
	})
}

// dialTLS connects to addr over gRPC with cfg.
func dialTLS(t *testing.T, addr string, cfg *tls.Config) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// serverSerial returns the serial of the certificate addr presents.
func serverSerial(t *testing.T, addr string, cfg *tls.Config) *big.Int {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatalf("tls.Dial(%s): %v", addr, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}

// TestTLS: with the TLS flags, gRPC requires mutual TLS from a client
// whose certificate carries an allowed SAN, HTTP serves HTTPS, and a
// certificate replaced on disk is served without a restart.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	writeFile(t, rules, goodRules)
	ca := certtest.NewCA(t, "ratelimitd test CA")
	srvCert := ca.Server(t, dir, "server", "localhost", "127.0.0.1")
	caFile := ca.WriteCert(t, dir, "ca")
	d := startDaemon(t, "--config", rules,
		"--grpc-tls-cert", srvCert.CertFile, "--grpc-tls-key", srvCert.KeyFile,
		"--grpc-tls-client-ca", caFile, "--grpc-tls-allowed-sans", "spiffe://test/envoy, *.mesh.local",
		"--http-tls-cert", srvCert.CertFile, "--http-tls-key", srvCert.KeyFile)

	envoy := ca.Client(t, dir, "envoy", "spiffe://test/envoy")
	sidecar := ca.Client(t, dir, "sidecar", "a.mesh.local")
	stranger := ca.Client(t, dir, "stranger", "spiffe://test/other")
	other := certtest.NewCA(t, "another CA")
	forged := other.Client(t, dir, "forged", "spiffe://test/envoy")
	for _, tt := range []struct {
		name string
		cfg  *tls.Config
		ok   bool
	}{
		{"allowed URI SAN", ca.ClientTLS(envoy), true},
		{"allowed DNS SAN", ca.ClientTLS(sidecar), true},
		{"SAN not allowed", ca.ClientTLS(stranger), false},
		{"no client certificate", ca.ClientTLS(nil), false},
		{"client certificate of another CA", ca.ClientTLS(forged), false},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, err := shouldRateLimit(ctx, dialTLS(t, d.grpcAddr, tt.cfg))
		cancel()
		if (err == nil) != tt.ok {
			t.Errorf("%s: ShouldRateLimit error = %v, want success %v", tt.name, err, tt.ok)
		}
	}
	// Plaintext gRPC gets nowhere.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if _, err := shouldRateLimit(ctx, d.conn); err == nil {
		t.Error("plaintext gRPC to a TLS listener succeeded")
	}

	// HTTPS, trusting the CA.
	https := &http.Client{Transport: &http.Transport{TLSClientConfig: ca.ClientTLS(nil)}}
	t.Cleanup(https.CloseIdleConnections)
	if code, _ := get(t, https, "https://"+d.httpAddr+"/healthz"); code != http.StatusOK {
		t.Errorf("GET https://…/healthz = %d, want 200", code)
	}
	// POST /json is not behind the gRPC listener's mTLS: the daemon warns.
	if !strings.Contains(d.logs.String(), "POST /json on the HTTP listener decides without") {
		t.Errorf("no warning that /json bypasses mTLS; logs:\n%s", d.logs)
	}

	// A new certificate, written by an atomic rename, is served to new
	// connections without a restart.
	before := serverSerial(t, d.grpcAddr, ca.ClientTLS(envoy))
	next := ca.Server(t, t.TempDir(), "server", "localhost", "127.0.0.1")
	for _, f := range []struct{ from, to string }{{next.KeyFile, srvCert.KeyFile}, {next.CertFile, srvCert.CertFile}} {
		data, err := os.ReadFile(f.from)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, f.to+".tmp", string(data))
		if err := os.Rename(f.to+".tmp", f.to); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for serverSerial(t, d.grpcAddr, ca.ClientTLS(envoy)).Cmp(next.Cert.SerialNumber) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the certificate swapped on disk (serial %v → %v) was not served; logs:\n%s", before, next.Cert.SerialNumber, d.logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := shouldRateLimit(t.Context(), dialTLS(t, d.grpcAddr, ca.ClientTLS(envoy))); err != nil {
		t.Errorf("ShouldRateLimit after the swap: %v", err)
	}
	if v, _ := metricstest.Scrape(t, https, "https://"+d.httpAddr+"/metrics").Value("ratelimitd_tls_reloads_total", "listener=grpc"); v < 1 {
		t.Errorf("ratelimitd_tls_reloads_total{listener=grpc} = %v after a swap, want at least 1", v)
	}
}

// collector is an OTLP/gRPC trace receiver that keeps what it receives.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu      sync.Mutex
	spans   []*tracepb.Span
	service string // the resource's service.name
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				c.service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			c.spans = append(c.spans, ss.GetSpans()...)
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (c *collector) find(name string) *tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.spans {
		if s.GetName() == name {
			return s
		}
	}
	return nil
}

// TestTracing: with --otlp-endpoint, a ShouldRateLimit call that carries a
// sampled trace context is exported as a server span in the caller's
// trace, with the store call as its child.
func TestTracing(t *testing.T) {
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50") // export within 50 ms
	t.Setenv("OTEL_SERVICE_NAME", "edge-ratelimit")
	col := &collector{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(g, col)
	served := make(chan error, 1)
	go func() { served <- g.Serve(lis) }()
	t.Cleanup(func() {
		g.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})

	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, goodRules)
	d := startDaemon(t, "--config", path, "--otlp-endpoint", lis.Addr().String(), "--otlp-insecure")

	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	ctx := metadata.AppendToOutgoingContext(t.Context(), "traceparent", "00-"+traceID+"-"+parentID+"-01")
	if _, err := shouldRateLimit(ctx, d.conn); err != nil {
		t.Fatal(err)
	}
	const rpc, take = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", "ratelimitd.backend.Take"
	deadline := time.Now().Add(10 * time.Second)
	for col.find(rpc) == nil || col.find(take) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("spans %q and %q were not exported; logs:\n%s", rpc, take, d.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	server, store := col.find(rpc), col.find(take)
	if got := hex.EncodeToString(server.GetTraceId()); got != traceID {
		t.Errorf("server span trace ID = %s, want the caller's %s", got, traceID)
	}
	if got := hex.EncodeToString(server.GetParentSpanId()); got != parentID {
		t.Errorf("server span parent = %s, want the caller's span %s", got, parentID)
	}
	col.mu.Lock()
	if col.service != "edge-ratelimit" {
		t.Errorf("service.name = %q, want OTEL_SERVICE_NAME's edge-ratelimit", col.service)
	}
	col.mu.Unlock()
	if server.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("server span kind = %v, want SERVER", server.GetKind())
	}
	if string(store.GetParentSpanId()) != string(server.GetSpanId()) || string(store.GetTraceId()) != string(server.GetTraceId()) {
		t.Errorf("store span is not the server span's child: %v", store)
	}

	// The default sampler follows the caller: an unsampled call exports
	// nothing. A sampled call after it is exported; by then, the unsampled
	// one would have been too.
	col.mu.Lock()
	col.spans = nil
	col.mu.Unlock()
	unsampled, sampled := strings.Repeat("1", 32), strings.Repeat("2", 32)
	for _, tp := range []string{"00-" + unsampled + "-" + parentID + "-00", "00-" + sampled + "-" + parentID + "-01"} {
		if _, err := shouldRateLimit(metadata.AppendToOutgoingContext(t.Context(), "traceparent", tp), d.conn); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); !col.hasTrace(sampled); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the sampled call's spans were not exported; logs:\n%s", d.logs)
		}
	}
	if col.hasTrace(unsampled) {
		t.Error("an unsampled call was exported")
	}
}

// hasTrace reports whether c received a span of the trace with the hex ID.
func (c *collector) hasTrace(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.spans {
		if hex.EncodeToString(s.GetTraceId()) == id {
			return true
		}
	}
	return false
}
