package envoy_test

import (
	"bytes"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"

	"github.com/ratelimitd/ratelimitd/config"
)

// The compose demo (examples/compose) cannot run here (no Docker, no
// Envoy), so these tests check what would break it: that Envoy accepts its
// envoy.yaml, that the services name each other and mount what the
// commands read, that ratelimitd reads every variable compose.yaml sets
// and its rules load, and that the requests README.md shows get the
// answers it shows.

const composeDir = "../compose"

// composeFile is the part of compose.yaml these tests read.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
}

type composeService struct {
	Image string `yaml:"image"`
	Build *struct {
		Context string `yaml:"context"`
	} `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
}

// loadCompose parses compose.yaml, failing the test if a service the demo
// needs is missing.
func loadCompose(t *testing.T) composeFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(composeDir, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	for _, name := range []string{"envoy", "ratelimitd", "redis"} {
		if _, ok := c.Services[name]; !ok {
			t.Fatalf("compose.yaml has no service %s", name)
		}
	}
	return c
}

// mountSource returns the host path, relative to this directory, that s
// mounts at target or at a directory above it, or "" if none.
func (s composeService) mountSource(target string) string {
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 {
			continue
		}
		src, dst := parts[0], parts[1]
		if rel, ok := strings.CutPrefix(target, dst); ok && (rel == "" || strings.HasPrefix(rel, "/")) {
			return filepath.Join(composeDir, src, filepath.FromSlash(rel))
		}
	}
	return ""
}

// composeRules loads the rules compose.yaml's ratelimitd serves: those of
// the host directory mounted where RATELIMITD_CONFIG points.
func composeRules(t *testing.T, c composeFile) *config.Rules {
	t.Helper()
	rl := c.Services["ratelimitd"]
	target := rl.Environment["RATELIMITD_CONFIG"]
	if target == "" {
		t.Fatal("compose.yaml: ratelimitd has no RATELIMITD_CONFIG: the image holds no rules, so it would not start")
	}
	src := rl.mountSource(target)
	if src == "" {
		t.Fatalf("compose.yaml: RATELIMITD_CONFIG=%s is mounted from no host path", target)
	}
	rules, err := config.Load(src)
	if err != nil {
		t.Fatalf("compose's rules (%s) do not load: %v", src, err)
	}
	return rules
}

// listenPort returns the port of a listen address such as ":8081".
func listenPort(t *testing.T, addr string) uint32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("listen address %q: %v", addr, err)
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		t.Fatalf("listen address %q: %v", addr, err)
	}
	return uint32(n)
}

// TestComposeEnvoyConfig checks compose's envoy.yaml as Envoy would load
// it, and that it reaches ratelimitd's service and gRPC port, and names a
// domain of the rules ratelimitd serves.
func TestComposeEnvoyConfig(t *testing.T) {
	c := loadCompose(t)
	envoy := c.Services["envoy"]
	i := slices.Index(envoy.Command, "-c")
	if i < 0 || i+1 >= len(envoy.Command) {
		t.Fatalf("compose.yaml: envoy's command %v gives no -c FILE", envoy.Command)
	}
	file := envoy.mountSource(envoy.Command[i+1])
	if file == "" {
		t.Fatalf("compose.yaml: envoy reads %s, which is mounted from no host file", envoy.Command[i+1])
	}
	if file != filepath.Join(composeDir, "envoy.yaml") {
		t.Errorf("compose.yaml: envoy reads %s, want compose's envoy.yaml", file)
	}

	bs, p := loadProxyFile(t, file)
	validate(t, bs, "Bootstrap")
	rl := c.Services["ratelimitd"]
	addr := checkRateLimitService(t, bs, p, listenPort(t, rl.Environment["RATELIMITD_GRPC_ADDR"]))
	if addr != nil && addr.GetAddress() != "ratelimitd" {
		t.Errorf("the rate limit cluster points at %s, want the compose service ratelimitd", addr.GetAddress())
	}
	if composeRules(t, c).Domain(p.filter.GetDomain()) == nil {
		t.Errorf("the filter's domain %q is not a domain of compose's rules", p.filter.GetDomain())
	}
}

// buildDaemon builds cmd/ratelimitd into a temporary directory.
func buildDaemon(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ratelimitd")
	cmd := exec.Command("go", "build", "-o", bin, "../../cmd/ratelimitd")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/ratelimitd: %v\n%s", err, out)
	}
	return bin
}

// TestComposeRatelimitd checks compose's ratelimitd service: it is built
// from the repository's Dockerfile, every RATELIMITD_* variable it sets is
// a flag the daemon reads, with a value it accepts, and its Redis is the
// compose service.
func TestComposeRatelimitd(t *testing.T) {
	c := loadCompose(t)
	rl := c.Services["ratelimitd"]
	if rl.Build == nil {
		t.Fatal("compose.yaml: ratelimitd has no build:, so it would pull an image nobody publishes")
	}
	if _, err := os.Stat(filepath.Join(composeDir, rl.Build.Context, "Dockerfile")); err != nil {
		t.Errorf("compose.yaml: ratelimitd's build context %s has no Dockerfile: %v", rl.Build.Context, err)
	}

	bin := buildDaemon(t)
	usage, _ := exec.Command(bin, "-h").CombinedOutput()
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllStringSubmatch(string(usage), -1) {
		flags["RATELIMITD_"+strings.ToUpper(strings.ReplaceAll(m[1], "-", "_"))] = true
	}
	if !flags["RATELIMITD_CONFIG"] {
		t.Fatalf("found no --config flag in ratelimitd -h:\n%s", usage)
	}
	var env []string
	for k, v := range rl.Environment {
		if strings.HasPrefix(k, "RATELIMITD_") && !flags[k] {
			t.Errorf("compose.yaml: %s is no flag's variable", k)
		}
		env = append(env, k+"="+v)
	}
	// --version parses the environment into the flags, and fails on a
	// value a flag refuses, without starting the daemon.
	cmd := exec.Command(bin, "--version")
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Errorf("ratelimitd with compose's environment: %v: %s", err, stderr.String())
	}
	for _, k := range []string{"RATELIMITD_GRPC_ADDR", "RATELIMITD_HTTP_ADDR"} {
		if host, _, err := net.SplitHostPort(rl.Environment[k]); err != nil || host != "" {
			t.Errorf("compose.yaml: %s=%q: want :PORT, every interface, so that the other containers reach it", k, rl.Environment[k])
		}
	}

	u, err := url.Parse(rl.Environment["RATELIMITD_BACKEND"])
	if err != nil || u.Scheme != "redis" {
		t.Fatalf("compose.yaml: RATELIMITD_BACKEND=%q: want the redis service's redis:// URL", rl.Environment["RATELIMITD_BACKEND"])
	}
	if _, ok := c.Services[u.Hostname()]; !ok || u.Port() != "6379" {
		t.Errorf("compose.yaml: RATELIMITD_BACKEND=%s: want a compose service on Redis's port 6379", u)
	}
	// The rules load (composeRules fails the test if not), and are
	// mounted read-only: ratelimitd never writes them.
	composeRules(t, c)
	for _, v := range rl.Volumes {
		if !strings.HasSuffix(v, ":ro") {
			t.Errorf("compose.yaml: ratelimitd mounts %s read-write", v)
		}
	}
}

// TestComposeReadmeRequests plays the requests of compose's README.md
// through envoy.yaml's routes and a ratelimitd serving compose's rules,
// and checks the answers the README shows.
func TestComposeReadmeRequests(t *testing.T) {
	c := loadCompose(t)
	_, p := loadProxyFile(t, filepath.Join(composeDir, "envoy.yaml"))
	client := rls(t, composeRules(t, c))
	const host = "172.18.0.1" // the address Envoy sees for the host's curl
	ask := func(r request) (*rlsv3.RateLimitResponse, bool) {
		t.Helper()
		rt := route(t, p.vhost, r)
		if rt == nil {
			t.Fatalf("no route for %s", r.path)
		}
		ds, _ := descriptors(t, rt, r)
		if len(ds) == 0 {
			return nil, false // Envoy does not ask
		}
		resp, err := client.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: p.filter.GetDomain(), Descriptors: ds})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		return resp, true
	}
	// status returns the HTTP status Envoy answers r with.
	status := func(r request) int {
		t.Helper()
		resp, asked := ask(r)
		if asked && resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			return 429
		}
		return 200
	}
	codes := func(n int, r request) []int {
		t.Helper()
		var got []int
		for range n {
			got = append(got, status(r))
		}
		return got
	}

	// for i in $(seq 7); do curl ... localhost:10000/; done
	if got, want := codes(7, request{path: "/", ip: host}), []int{200, 200, 200, 200, 200, 429, 429}; !slices.Equal(got, want) {
		t.Errorf("seven pages: %v, want %v", got, want)
	}
	// curl -i localhost:10000/: the headers of a refusal.
	resp, _ := ask(request{path: "/", ip: host})
	headers := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		headers[h.GetKey()] = h.GetValue()
	}
	if got, want := headers["RateLimit-Policy"], `"remote_address";q=5;w=60`; got != want {
		t.Errorf("RateLimit-Policy: %q, want %q", got, want)
	}
	if got := headers["RateLimit"]; !regexp.MustCompile(`^"remote_address";r=0;t=[0-9]+$`).MatchString(got) {
		t.Errorf(`RateLimit: %q, want "remote_address";r=0;t=<seconds>`, got)
	}
	if headers["Retry-After"] == "" {
		t.Error("no Retry-After on a refusal")
	}
	// Health checks are never limited, nor asked about.
	if _, asked := ask(request{path: "/healthz", ip: host}); asked {
		t.Error("Envoy asks ratelimitd about /healthz")
	}

	// The API, per key: 3 a minute each, other keys apart.
	key := func(k string) request {
		return request{path: "/api/orders", ip: host, headers: map[string]string{"x-api-key": k}}
	}
	if got, want := codes(4, key("alice")), []int{200, 200, 200, 429}; !slices.Equal(got, want) {
		t.Errorf("four API calls with one key: %v, want %v", got, want)
	}
	if got := status(key("bob")); got != 200 {
		t.Errorf("an API call with another key: %d, want 200", got)
	}
	// Without a key, no descriptor: the API is not limited.
	if _, asked := ask(request{path: "/api/orders", ip: host}); asked {
		t.Error("Envoy asks ratelimitd about an API call without a key; README.md says it does not")
	}
}
