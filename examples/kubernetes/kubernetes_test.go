// Package kubernetes_test checks what cmd/ratelimitd's tests of these
// manifests do not: that the image is the one README.md has the user build
// and load, that the PodDisruptionBudget lets drains proceed, and that
// Prometheus scrapes each pod's /metrics once, by annotations or by the
// optional ServiceMonitor.
package kubernetes_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/server"
)

// object is the part of any manifest these tests read.
type object struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name        string            `yaml:"name"`
		Labels      map[string]string `yaml:"labels"`
		Annotations map[string]string `yaml:"annotations"`
	} `yaml:"metadata"`
	Spec yaml.Node `yaml:"spec"`
}

// load returns the objects of the YAML files named, in dir.
func load(t *testing.T, dir string, files ...string) []object {
	t.Helper()
	var objs []object
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var o object
			if err := dec.Decode(&o); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			objs = append(objs, o)
		}
	}
	return objs
}

// kustomization is the part of a kustomization.yaml these tests read.
type kustomization struct {
	Resources []string `yaml:"resources"`
	Images    []struct {
		Name    string `yaml:"name"`
		NewName string `yaml:"newName"`
		NewTag  string `yaml:"newTag"`
	} `yaml:"images"`
	Patches []struct {
		Target struct {
			Kind string `yaml:"kind"`
			Name string `yaml:"name"`
		} `yaml:"target"`
		Patch string `yaml:"patch"`
	} `yaml:"patches"`
}

func loadKustomization(t *testing.T, dir string) kustomization {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", dir, err)
	}
	return k
}

// find returns the object of kind and name among objs.
func find(t *testing.T, objs []object, kind, name string) *object {
	t.Helper()
	for i, o := range objs {
		if o.Kind == kind && o.Metadata.Name == name {
			return &objs[i]
		}
	}
	t.Fatalf("no %s %s", kind, name)
	return nil
}

// deployment is the part of the Deployment's spec these tests read.
type deployment struct {
	Replicas int `yaml:"replicas"`
	Template struct {
		Metadata struct {
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"metadata"`
		Spec struct {
			Containers []struct {
				Image           string `yaml:"image"`
				ImagePullPolicy string `yaml:"imagePullPolicy"`
				Ports           []struct {
					Name          string `yaml:"name"`
					ContainerPort int    `yaml:"containerPort"`
				} `yaml:"ports"`
			} `yaml:"containers"`
		} `yaml:"spec"`
	} `yaml:"template"`
}

func loadDeployment(t *testing.T) deployment {
	t.Helper()
	var d deployment
	if err := find(t, load(t, ".", "deployment.yaml"), "Deployment", "ratelimitd").Spec.Decode(&d); err != nil {
		t.Fatal(err)
	}
	if len(d.Template.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(d.Template.Spec.Containers))
	}
	return d
}

// TestImageIsTheBuiltOne checks that the Deployment runs the image
// README.md has the user build with make docker and load: the
// kustomization's images entry names it, with the tag the README builds.
func TestImageIsTheBuiltOne(t *testing.T) {
	c := loadDeployment(t).Template.Spec.Containers[0]
	k := loadKustomization(t, ".")
	if len(k.Images) != 1 || k.Images[0].Name != c.Image || k.Images[0].NewName != "" {
		t.Fatalf("kustomization images %+v: want one entry that tags the Deployment's image %q", k.Images, c.Image)
	}
	tag := k.Images[0].NewTag
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	// make docker tags the image ratelimitd:$(VERSION).
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^docker:.*\n\tdocker build .*-t ratelimitd:\$\(VERSION\) `).Match(makefile) {
		t.Fatal("the Makefile's docker target does not build ratelimitd:$(VERSION); update README.md and this test")
	}
	for _, cmd := range []string{
		"make docker VERSION=" + tag,
		"kind load docker-image " + c.Image + ":" + tag,
		"minikube image load " + c.Image + ":" + tag,
	} {
		if !bytes.Contains(readme, []byte(cmd)) {
			t.Errorf("README.md does not say %q, which loads the image the kustomization runs", cmd)
		}
	}
	// A loaded image is not in any registry: pulling it would fail.
	if c.ImagePullPolicy != "IfNotPresent" {
		t.Errorf("imagePullPolicy %q, want IfNotPresent, so that a loaded image is used", c.ImagePullPolicy)
	}
}

// TestPodDisruptionBudget checks that the budget covers ratelimitd's pods
// and leaves a pod to evict: minAvailable below the replicas.
func TestPodDisruptionBudget(t *testing.T) {
	d := loadDeployment(t)
	var pdb struct {
		MinAvailable   *int `yaml:"minAvailable"`
		MaxUnavailable *int `yaml:"maxUnavailable"`
		Selector       struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
	}
	if err := find(t, load(t, ".", "pdb.yaml"), "PodDisruptionBudget", "ratelimitd").Spec.Decode(&pdb); err != nil {
		t.Fatal(err)
	}
	if len(pdb.Selector.MatchLabels) == 0 {
		t.Fatal("the budget selects no pods")
	}
	for k, v := range pdb.Selector.MatchLabels {
		if d.Template.Metadata.Labels[k] != v {
			t.Errorf("the budget selects %s=%s, which ratelimitd's pods do not carry", k, v)
		}
	}
	switch {
	case pdb.MinAvailable != nil && pdb.MaxUnavailable == nil:
		if *pdb.MinAvailable < 1 || *pdb.MinAvailable >= d.Replicas {
			t.Errorf("minAvailable %d with %d replicas: want at least 1 and fewer than the replicas, or no drain can proceed", *pdb.MinAvailable, d.Replicas)
		}
	case pdb.MaxUnavailable != nil && pdb.MinAvailable == nil:
		if *pdb.MaxUnavailable < 1 {
			t.Errorf("maxUnavailable %d: no drain can proceed", *pdb.MaxUnavailable)
		}
	default:
		t.Error("want one of minAvailable and maxUnavailable, as integers")
	}
}

// metricsHandler returns the HTTP handler of a ratelimitd with metrics.
func metricsHandler(t *testing.T) http.Handler {
	t.Helper()
	rules, err := config.Load("../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	store := memory.New(memory.Options{})
	t.Cleanup(func() { store.Close() })
	return server.New(store, rules, server.Options{Registry: prometheus.NewRegistry()}).Handler()
}

// serves reports whether h answers GET path with 200.
func serves(h http.Handler, path string) bool {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code == http.StatusOK
}

// TestScrapeAnnotations checks the pod's prometheus.io annotations: the
// HTTP port, and a path ratelimitd serves metrics on.
func TestScrapeAnnotations(t *testing.T) {
	d := loadDeployment(t)
	a := d.Template.Metadata.Annotations
	if a["prometheus.io/scrape"] != "true" {
		t.Errorf("prometheus.io/scrape %q, want \"true\"", a["prometheus.io/scrape"])
	}
	httpPort := 0
	for _, p := range d.Template.Spec.Containers[0].Ports {
		if p.Name == "http" {
			httpPort = p.ContainerPort
		}
	}
	if a["prometheus.io/port"] != strconv.Itoa(httpPort) {
		t.Errorf("prometheus.io/port %q, want the http port %d", a["prometheus.io/port"], httpPort)
	}
	if p := a["prometheus.io/path"]; !serves(metricsHandler(t), p) || !strings.HasPrefix(p, "/metrics") {
		t.Errorf("prometheus.io/path %q: ratelimitd serves its metrics at /metrics", p)
	}
}

// TestServiceMonitor checks the optional ServiceMonitor: it is left out
// of the default kustomization, its overlay adds it to the base, and it
// scrapes /metrics on a port of the Service ratelimitd and of no other
// Service, so that each pod is scraped once.
func TestServiceMonitor(t *testing.T) {
	const overlay = "prometheus-operator"
	if slices.ContainsFunc(loadKustomization(t, ".").Resources, func(r string) bool { return strings.Contains(r, "servicemonitor") }) {
		t.Error("the default kustomization lists the ServiceMonitor, which fails on clusters without the Prometheus Operator")
	}
	k := loadKustomization(t, overlay)
	if !slices.Equal(k.Resources, []string{"..", "servicemonitor.yaml"}) {
		t.Errorf("%s resources %v, want [.. servicemonitor.yaml]", overlay, k.Resources)
	}
	checkAnnotationsRemoved(t, k, loadDeployment(t).Template.Metadata.Annotations)
	var sm struct {
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Endpoints []struct {
			Port string `yaml:"port"`
			Path string `yaml:"path"`
		} `yaml:"endpoints"`
	}
	if err := find(t, load(t, overlay, "servicemonitor.yaml"), "ServiceMonitor", "ratelimitd").Spec.Decode(&sm); err != nil {
		t.Fatal(err)
	}
	if len(sm.Endpoints) != 1 || !serves(metricsHandler(t), sm.Endpoints[0].Path) {
		t.Fatalf("endpoints %+v: want one, on a path ratelimitd serves its metrics at", sm.Endpoints)
	}
	port := sm.Endpoints[0].Port

	// Every Service the selector picks, and whether it has the port.
	var scraped []string
	svcs := load(t, ".", "service.yaml", "service-headless.yaml", "redis.yaml")
	for i := range svcs {
		svc := &svcs[i]
		if svc.Kind != "Service" || !selects(sm.Selector.MatchLabels, svc.Metadata.Labels) {
			continue
		}
		var spec struct {
			Ports []namedPort `yaml:"ports"`
		}
		if err := svc.Spec.Decode(&spec); err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(spec.Ports, func(p namedPort) bool { return p.Name == port }) {
			scraped = append(scraped, svc.Metadata.Name)
		}
	}
	if !slices.Equal(scraped, []string{"ratelimitd"}) {
		t.Errorf("the ServiceMonitor scrapes port %s of the Services %v, want ratelimitd's alone", port, scraped)
	}
}

// namedPort is a Service's port, by name.
type namedPort struct {
	Name string `yaml:"name"`
}

// selects reports whether the selector sel, not empty, matches labels.
func selects(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

// checkAnnotationsRemoved checks that the overlay k removes every
// prometheus.io annotation of the pod template (annotations), so that a
// Prometheus honouring both them and the ServiceMonitor does not scrape
// each pod twice.
func checkAnnotationsRemoved(t *testing.T, k kustomization, annotations map[string]string) {
	t.Helper()
	removed := map[string]bool{}
	for _, p := range k.Patches {
		if p.Target.Kind != "Deployment" || p.Target.Name != "ratelimitd" {
			continue
		}
		var ops []struct {
			Op   string `yaml:"op"`
			Path string `yaml:"path"`
		}
		if err := yaml.Unmarshal([]byte(p.Patch), &ops); err != nil {
			t.Fatalf("patch of the Deployment: %v", err)
		}
		for _, op := range ops {
			// JSON Pointer: "~1" stands for "/", "~0" for "~".
			name, ok := strings.CutPrefix(op.Path, "/spec/template/metadata/annotations/")
			if ok && op.Op == "remove" {
				removed[strings.NewReplacer("~1", "/", "~0", "~").Replace(name)] = true
			}
		}
	}
	n := 0
	for a := range annotations {
		if strings.HasPrefix(a, "prometheus.io/") {
			n++
			if !removed[a] {
				t.Errorf("the overlay keeps the pods' annotation %s: a Prometheus honouring it scrapes each pod twice", a)
			}
		}
	}
	if n == 0 {
		t.Error("the pod template has no prometheus.io annotation: update this test")
	}
}
