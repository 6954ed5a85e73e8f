package envoy_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ratelimitd/ratelimitd/config"
)

// The Istio example (examples/istio) needs a cluster with Istio, so these
// tests check its parts instead: that each EnvoyFilter patch is Envoy
// config Envoy accepts, that the filter reaches ratelimitd's Service, and
// that the actions build descriptors that the rules of
// examples/kubernetes's ConfigMap (those of examples/config.yaml) limit.

const istioDir = "../istio"

// envoyFilter is the part of an Istio EnvoyFilter these tests read.
type envoyFilter struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name      string `yaml:"name"`
		Namespace string `yaml:"namespace"`
	} `yaml:"metadata"`
	Spec struct {
		WorkloadSelector struct {
			Labels map[string]string `yaml:"labels"`
		} `yaml:"workloadSelector"`
		ConfigPatches []struct {
			ApplyTo string `yaml:"applyTo"`
			Match   struct {
				Context  string `yaml:"context"`
				Listener struct {
					FilterChain struct {
						Filter struct {
							Name      string `yaml:"name"`
							SubFilter struct {
								Name string `yaml:"name"`
							} `yaml:"subFilter"`
						} `yaml:"filter"`
					} `yaml:"filterChain"`
				} `yaml:"listener"`
			} `yaml:"match"`
			Patch struct {
				Operation string    `yaml:"operation"`
				Value     yaml.Node `yaml:"value"`
			} `yaml:"patch"`
		} `yaml:"configPatches"`
	} `yaml:"spec"`
}

// istioPatches is what envoyfilter.yaml adds to the gateway's Envoy.
type istioPatches struct {
	filter    *hcmv3.HttpFilter    // the HTTP_FILTER patch's value
	operation string               // and its operation
	before    string               // the filter it is inserted relative to
	vhost     *routev3.VirtualHost // the VIRTUAL_HOST patch's value
}

// loadIstio reads envoyfilter.yaml and unmarshals its patch values into
// Envoy's types, as Istio does (protojson, refusing unknown fields).
func loadIstio(t *testing.T) istioPatches {
	t.Helper()
	file := filepath.Join(istioDir, "envoyfilter.yaml")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var p istioPatches
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var ef envoyFilter
		if err := dec.Decode(&ef); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if ef.Kind != "EnvoyFilter" {
			t.Fatalf("%s: a %s, want EnvoyFilters only", file, ef.Kind)
		}
		if ef.Spec.WorkloadSelector.Labels["istio"] != "ingressgateway" || ef.Metadata.Namespace != "istio-system" {
			t.Errorf("EnvoyFilter %s: want it for the ingress gateway, in istio-system", ef.Metadata.Name)
		}
		for _, cp := range ef.Spec.ConfigPatches {
			where := ef.Metadata.Name + " " + cp.ApplyTo
			var v any
			if err := cp.Patch.Value.Decode(&v); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			js, err := json.Marshal(v)
			if err != nil {
				t.Fatalf("%s as JSON: %v", where, err)
			}
			switch cp.ApplyTo {
			case "HTTP_FILTER":
				p.filter = &hcmv3.HttpFilter{}
				if err := protojson.Unmarshal(js, p.filter); err != nil {
					t.Fatalf("%s: the patch is no HttpFilter: %v", where, err)
				}
				p.operation = cp.Patch.Operation
				p.before = cp.Match.Listener.FilterChain.Filter.SubFilter.Name
			case "VIRTUAL_HOST":
				p.vhost = &routev3.VirtualHost{}
				if err := protojson.Unmarshal(js, p.vhost); err != nil {
					t.Fatalf("%s: the patch is no VirtualHost: %v", where, err)
				}
				if cp.Patch.Operation != "MERGE" {
					t.Errorf("%s: operation %s, want MERGE into the gateway's virtual host", where, cp.Patch.Operation)
				}
			default:
				t.Fatalf("%s: this test reads HTTP_FILTER and VIRTUAL_HOST patches", where)
			}
			if cp.Match.Context != "GATEWAY" {
				t.Errorf("%s: context %s, want GATEWAY", where, cp.Match.Context)
			}
		}
	}
	if p.filter == nil || p.vhost == nil {
		t.Fatalf("%s: want an HTTP_FILTER and a VIRTUAL_HOST patch", file)
	}
	return p
}

// k8sServicePorts returns the ports (name to number) of the Service name
// in examples/kubernetes/file, in their order.
func k8sServicePorts(t *testing.T, file, name string) []k8sPort {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("../kubernetes", file))
	if err != nil {
		t.Fatal(err)
	}
	var svc struct {
		Kind     string `yaml:"kind"`
		Metadata struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
		Spec struct {
			Ports []k8sPort `yaml:"ports"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(data, &svc); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if svc.Kind != "Service" || svc.Metadata.Name != name {
		t.Fatalf("%s holds a %s %s, want the Service %s", file, svc.Kind, svc.Metadata.Name, name)
	}
	return svc.Spec.Ports
}

// k8sPort is a Service's port.
type k8sPort struct {
	Name string `yaml:"name"`
	Port int    `yaml:"port"`
}

// TestIstioFilter checks the HTTP_FILTER patch: Envoy's rate limit filter,
// valid, inserted before the router, asking the cluster Istio makes for
// ratelimitd's gRPC port, for a domain of the example's rules.
func TestIstioFilter(t *testing.T) {
	p := loadIstio(t)
	validate(t, p.filter, "HttpFilter")
	if p.filter.GetName() != "envoy.filters.http.ratelimit" {
		t.Errorf("the filter is named %q, want envoy.filters.http.ratelimit", p.filter.GetName())
	}
	if p.operation != "INSERT_BEFORE" || p.before != "envoy.filters.http.router" {
		t.Errorf("the filter goes %s %s, want INSERT_BEFORE envoy.filters.http.router (after the router, a filter never runs)", p.operation, p.before)
	}
	rl := rateLimitFilter(t, []*hcmv3.HttpFilter{p.filter})
	if rl == nil {
		t.Fatal("the HTTP_FILTER patch is not the rate limit filter")
	}
	checkFilter(t, rl)
	rules, err := config.Load("../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if rules.Domain(rl.GetDomain()) == nil {
		t.Errorf("the filter's domain %q is not a domain of examples/config.yaml", rl.GetDomain())
	}

	// outbound|<port>||<FQDN>: Istio's cluster for a Service's port.
	gs := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc()
	parts := strings.Split(gs.GetClusterName(), "|")
	if len(parts) != 4 || parts[0] != "outbound" || parts[2] != "" {
		t.Fatalf("cluster %q: want outbound|<port>||<service FQDN>", gs.GetClusterName())
	}
	port, fqdn := parts[1], parts[3]
	if svc, _, _ := strings.Cut(fqdn, "."); svc != "ratelimitd" || !strings.HasSuffix(fqdn, ".svc.cluster.local") {
		t.Errorf("cluster %q: want the Service ratelimitd's FQDN, ratelimitd.<namespace>.svc.cluster.local", gs.GetClusterName())
	}
	if gs.GetAuthority() != fqdn {
		t.Errorf("authority %q, want the Service's FQDN %q", gs.GetAuthority(), fqdn)
	}
	ports := k8sServicePorts(t, "service.yaml", "ratelimitd")
	if !slices.ContainsFunc(ports, func(p k8sPort) bool { return p.Name == "grpc" && strconv.Itoa(p.Port) == port }) {
		t.Errorf("cluster %q: port %s is not the grpc port of the Service ratelimitd, %v", gs.GetClusterName(), port, ports)
	}
}

// TestIstioKustomizationPatchesGRPCPorts checks that the kustomization's
// index-based patches set appProtocol grpc on the ports named grpc.
func TestIstioKustomizationPatchesGRPCPorts(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(istioDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `yaml:"resources"`
		Patches   []struct {
			Target struct {
				Kind string `yaml:"kind"`
				Name string `yaml:"name"`
			} `yaml:"target"`
			Patch string `yaml:"patch"`
		} `yaml:"patches"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(k.Resources, "../kubernetes") || !slices.Contains(k.Resources, "envoyfilter.yaml") {
		t.Errorf("resources %v: want ../kubernetes and envoyfilter.yaml", k.Resources)
	}
	files := map[string]string{"ratelimitd": "service.yaml", "ratelimitd-headless": "service-headless.yaml"}
	patched := map[string]bool{}
	for _, p := range k.Patches {
		var ops []struct {
			Op    string `yaml:"op"`
			Path  string `yaml:"path"`
			Value string `yaml:"value"`
		}
		if err := yaml.Unmarshal([]byte(p.Patch), &ops); err != nil {
			t.Fatalf("patch of %s: %v", p.Target.Name, err)
		}
		file, ok := files[p.Target.Name]
		if p.Target.Kind != "Service" || !ok {
			t.Errorf("a patch of the %s %s, want the Services %v", p.Target.Kind, p.Target.Name, files)
			continue
		}
		ports := k8sServicePorts(t, file, p.Target.Name)
		for _, op := range ops {
			idx, ok := strings.CutPrefix(op.Path, "/spec/ports/")
			idx, ok2 := strings.CutSuffix(idx, "/appProtocol")
			i, err := strconv.Atoi(idx)
			if !ok || !ok2 || err != nil || i >= len(ports) || op.Op != "replace" {
				t.Errorf("Service %s: %s %s is not the replace of a port's appProtocol", p.Target.Name, op.Op, op.Path)
				continue
			}
			if ports[i].Name != "grpc" || op.Value != "grpc" {
				t.Errorf("Service %s: sets port %d (%s) appProtocol %s, want grpc on the port grpc", p.Target.Name, i, ports[i].Name, op.Value)
				continue
			}
			patched[p.Target.Name] = true
		}
	}
	for name := range files {
		if !patched[name] {
			t.Errorf("the grpc port of the Service %s keeps kubernetes.io/h2c", name)
		}
	}
}

// TestIstioActionsHitTheExampleRules replays sample requests through the
// VIRTUAL_HOST patch's actions against a ratelimitd serving
// examples/config.yaml: each descriptor is one a rule limits, every action
// list is used, and the shared /api/ limit refuses the 31st call.
func TestIstioActionsHitTheExampleRules(t *testing.T) {
	p := loadIstio(t)
	for i, rl := range p.vhost.GetRateLimits() {
		validate(t, rl, "rate_limits["+strconv.Itoa(i)+"]")
	}
	rules, err := config.Load("../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rl := rateLimitFilter(t, []*hcmv3.HttpFilter{p.filter})
	domain := rules.Domain(rl.GetDomain())
	client := rls(t, rules)
	// The routes Istio makes carry no rate_limits, so Envoy applies the
	// virtual host's: this route stands for any of them.
	rt := &routev3.Route{Action: &routev3.Route_Route{Route: &routev3.RouteAction{RateLimits: p.vhost.GetRateLimits()}}}
	var used []int // the rate_limits entries some request used
	ask := func(r request) *rlsv3.RateLimitResponse {
		t.Helper()
		ds, from := descriptors(t, rt, r)
		for _, d := range ds {
			if config.Match(domain, d.GetEntries()) == nil {
				t.Errorf("%s: descriptor %v matches no rule of examples/config.yaml", r.path, d.GetEntries())
			}
		}
		used = append(used, from...)
		resp, err := client.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: rl.GetDomain(), Descriptors: ds})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		return resp
	}

	if got := len(ask(request{path: "/index.html", ip: "10.1.0.1"}).GetStatuses()); got != 1 {
		t.Errorf("a page: %d descriptors, want 1 (remote_address)", got)
	}
	if got := len(ask(request{path: "/api/orders", ip: "10.1.0.2", headers: map[string]string{"x-api-key": "k-1"}}).GetStatuses()); got != 3 {
		t.Errorf("an API call with a key: %d descriptors, want 3 (path, remote_address, api_key)", got)
	}
	for i := range p.vhost.GetRateLimits() {
		if !slices.Contains(used, i) {
			t.Errorf("rate_limits[%d] sends a descriptor for none of the sample requests", i)
		}
	}
	// path=/api/ is shared by every client: 30 per 30 s in all, the API
	// call above included.
	for i := range 29 {
		if code := ask(request{path: "/api/items/" + strconv.Itoa(i), ip: "10.2.0." + strconv.Itoa(i)}).GetOverallCode(); code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("API call %d: %v, want OK", i+2, code)
		}
	}
	if code := ask(request{path: "/api/items", ip: "10.3.0.1"}).GetOverallCode(); code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("the 31st API call in 30 s: %v, want OVER_LIMIT", code)
	}
	if code := ask(request{path: "/index.html", ip: "10.3.0.1"}).GetOverallCode(); code != rlsv3.RateLimitResponse_OK {
		t.Errorf("a page from the same address: %v, want OK", code)
	}
}
