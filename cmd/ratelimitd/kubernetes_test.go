package main

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/server"
)

// The manifests of examples/kubernetes, checked against the daemon: its
// variables are flags, its rules load, its probes and ports are the ones
// ratelimitd serves.

const k8sDir = "../../examples/kubernetes"

// k8sMeta is the part of an object's metadata these tests read.
type k8sMeta struct {
	Name   string            `yaml:"name"`
	Labels map[string]string `yaml:"labels"`
}

type k8sObject struct {
	APIVersion string  `yaml:"apiVersion"`
	Kind       string  `yaml:"kind"`
	Metadata   k8sMeta `yaml:"metadata"`
	node       *yaml.Node
	file       string
}

type k8sConfigMap struct {
	Data map[string]string `yaml:"data"`
}

type k8sDeployment struct {
	Spec struct {
		Replicas int `yaml:"replicas"`
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata k8sMeta    `yaml:"metadata"`
			Spec     k8sPodSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type k8sPodSpec struct {
	TerminationGracePeriodSeconds *int64         `yaml:"terminationGracePeriodSeconds"`
	SecurityContext               k8sSecurity    `yaml:"securityContext"`
	Containers                    []k8sContainer `yaml:"containers"`
	Volumes                       []struct {
		Name      string `yaml:"name"`
		ConfigMap *struct {
			Name string `yaml:"name"`
		} `yaml:"configMap"`
	} `yaml:"volumes"`
}

type k8sSecurity struct {
	RunAsNonRoot             *bool `yaml:"runAsNonRoot"`
	RunAsUser                *int  `yaml:"runAsUser"`
	ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
	AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
	Capabilities             struct {
		Drop []string `yaml:"drop"`
	} `yaml:"capabilities"`
}

type k8sContainer struct {
	Name  string `yaml:"name"`
	Image string `yaml:"image"`
	Env   []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom any    `yaml:"valueFrom"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	ReadinessProbe  *k8sProbe   `yaml:"readinessProbe"`
	LivenessProbe   *k8sProbe   `yaml:"livenessProbe"`
	SecurityContext k8sSecurity `yaml:"securityContext"`
	Lifecycle       struct {
		PreStop struct {
			Sleep *struct {
				Seconds int64 `yaml:"seconds"`
			} `yaml:"sleep"`
		} `yaml:"preStop"`
	} `yaml:"lifecycle"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
	} `yaml:"volumeMounts"`
}

type k8sProbe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"` // a number or a port's name
	} `yaml:"httpGet"`
	GRPC *struct {
		Port int `yaml:"port"`
	} `yaml:"grpc"`
}

type k8sService struct {
	Spec struct {
		Type     string            `yaml:"type"`
		Selector map[string]string `yaml:"selector"`
		Ports    []k8sServicePort  `yaml:"ports"`
	} `yaml:"spec"`
}

type k8sServicePort struct {
	Name        string `yaml:"name"`
	Port        int    `yaml:"port"`
	TargetPort  any    `yaml:"targetPort"` // a number or a port's name
	AppProtocol string `yaml:"appProtocol"`
}

// loadManifests parses every document of every YAML file in k8sDir but the
// kustomization.
func loadManifests(t *testing.T) []k8sObject {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var objs []k8sObject
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var n yaml.Node
			if err := dec.Decode(&n); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			o := k8sObject{node: &n, file: filepath.Base(f)}
			if err := n.Decode(&o); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
				t.Fatalf("%s:%d: an object without apiVersion, kind or metadata.name", f, n.Line)
			}
			objs = append(objs, o)
		}
	}
	if len(objs) == 0 {
		t.Fatalf("no manifests in %s", k8sDir)
	}
	return objs
}

// decode decodes o as v, failing the test on error.
func (o k8sObject) decode(t *testing.T, v any) {
	t.Helper()
	if err := o.node.Decode(v); err != nil {
		t.Fatalf("%s: %s %s: %v", o.file, o.Kind, o.Metadata.Name, err)
	}
}

// find returns the object of kind and name.
func find(t *testing.T, objs []k8sObject, kind, name string) k8sObject {
	t.Helper()
	for _, o := range objs {
		if o.Kind == kind && o.Metadata.Name == name {
			return o
		}
	}
	t.Fatalf("no %s named %q in %s", kind, name, k8sDir)
	return k8sObject{}
}

// containerPort resolves a probe's or a Service's port, a number or a
// name, against c's ports; 0 if it names none.
func containerPort(c k8sContainer, port any) int {
	for _, p := range c.Ports {
		if port == p.Name || port == p.ContainerPort {
			return p.ContainerPort
		}
	}
	return 0
}

// addrPort returns the port of a listen address.
func addrPort(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("listen address %q: %v", addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("listen address %q: %v", addr, err)
	}
	return n
}

// labelsMatch reports whether every label of sel is in labels.
func labelsMatch(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

func TestKubernetesKustomizationListsEveryManifest(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(k8sDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `yaml:"resources"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" {
			want = append(want, b)
		}
	}
	got := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(got, want) {
		t.Errorf("kustomization.yaml lists %v, want the manifests %v", got, want)
	}
}

// TestKubernetesConfigMapRules checks that the ConfigMap's rules load as
// ratelimitd loads the mounted directory, and are examples/config.yaml's.
func TestKubernetesConfigMapRules(t *testing.T) {
	var cm k8sConfigMap
	find(t, loadManifests(t), "ConfigMap", "ratelimitd-rules").decode(t, &cm)
	dir := t.TempDir()
	for name, data := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := config.Load(dir)
	if err != nil {
		t.Fatalf("the ConfigMap's rules do not load: %v", err)
	}
	if len(got.Files()) != len(cm.Data) {
		t.Errorf("ratelimitd reads %d of the ConfigMap's %d files: name them *.yaml", len(got.Files()), len(cm.Data))
	}
	want, err := config.Load("../../examples/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	gotYAML, err := config.Marshal(got.Domains())
	if err != nil {
		t.Fatal(err)
	}
	wantYAML, err := config.Marshal(want.Domains())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(gotYAML, wantYAML) {
		t.Errorf("the ConfigMap's rules differ from examples/config.yaml:\n%s\nwant:\n%s", gotYAML, wantYAML)
	}
}

func TestKubernetesDeployment(t *testing.T) {
	objs := loadManifests(t)
	var d k8sDeployment
	find(t, objs, "Deployment", "ratelimitd").decode(t, &d)
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if !labelsMatch(d.Spec.Selector.MatchLabels, d.Spec.Template.Metadata.Labels) {
		t.Errorf("selector %v does not select the pod's labels %v", d.Spec.Selector.MatchLabels, d.Spec.Template.Metadata.Labels)
	}

	// The environment: flag variables only, and values that parse.
	names := flagEnvNames(t)
	vars := map[string]string{}
	for _, e := range c.Env {
		if !strings.HasPrefix(e.Name, envPrefix) {
			continue
		}
		if !names[e.Name] {
			t.Errorf("env %s is no flag's variable", e.Name)
		}
		if e.ValueFrom != nil {
			t.Errorf("env %s: valueFrom, which this test cannot check", e.Name)
		}
		vars[e.Name] = e.Value
	}
	if vars["RATELIMITD_CONFIG"] == "" {
		t.Fatal("no RATELIMITD_CONFIG: the image holds no rules, and the ConfigMap would go unread")
	}
	f := parseEnv(t, vars)

	// Several replicas must share their counters.
	if d.Spec.Replicas > 1 && f.backend == "memory" {
		t.Errorf("%d replicas on the memory store: each would count alone", d.Spec.Replicas)
	}
	if f.backend != "memory" {
		u, err := url.Parse(f.backend)
		if err != nil {
			t.Fatalf("RATELIMITD_BACKEND %q: %v", f.backend, err)
		}
		// The example's Redis is the Service redis.yaml defines.
		var svc k8sService
		find(t, objs, "Service", u.Hostname()).decode(t, &svc)
		if !slices.ContainsFunc(svc.Spec.Ports, func(p k8sServicePort) bool { return strconv.Itoa(p.Port) == u.Port() }) {
			t.Errorf("RATELIMITD_BACKEND %s: Service %s has no port %s", f.backend, u.Hostname(), u.Port())
		}
	}

	// The rules: RATELIMITD_CONFIG is the mounted ConfigMap directory,
	// mounted whole so that its updates reach ratelimitd.
	mounted := false
	for _, m := range c.VolumeMounts {
		if m.MountPath != f.config {
			continue
		}
		if m.SubPath != "" {
			t.Errorf("volume %s is mounted with subPath: ConfigMap updates would never reach it", m.Name)
		}
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil {
				find(t, objs, "ConfigMap", v.ConfigMap.Name)
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("RATELIMITD_CONFIG=%s is not where a ConfigMap is mounted", f.config)
	}

	// Ports: ratelimitd listens on every interface (its defaults, which
	// the image keeps, are loopback's), on the ports the container declares.
	for _, addr := range []string{f.grpcAddr, f.httpAddr} {
		if host, _, err := net.SplitHostPort(addr); err != nil || host != "" && host != "0.0.0.0" && host != "::" {
			t.Errorf("listen address %q: want every interface, so that the kubelet and clients reach it", addr)
		}
	}
	grpcPort, httpPort := addrPort(t, f.grpcAddr), addrPort(t, f.httpAddr)
	if got := containerPort(c, "grpc"); got != grpcPort {
		t.Errorf("container port grpc is %d, want %d (RATELIMITD_GRPC_ADDR=%s)", got, grpcPort, f.grpcAddr)
	}
	if got := containerPort(c, "http"); got != httpPort {
		t.Errorf("container port http is %d, want %d (RATELIMITD_HTTP_ADDR=%s)", got, httpPort, f.httpAddr)
	}

	// Probes: paths ratelimitd serves, on its HTTP port, or gRPC health on
	// its gRPC port.
	handler := probeHandler(t)
	for _, p := range []struct {
		name  string
		probe *k8sProbe
	}{{"readinessProbe", c.ReadinessProbe}, {"livenessProbe", c.LivenessProbe}} {
		switch {
		case p.probe == nil:
			t.Errorf("no %s", p.name)
		case p.probe.HTTPGet != nil:
			if got := containerPort(c, p.probe.HTTPGet.Port); got != httpPort {
				t.Errorf("%s: port %v is %d, not the HTTP port %d", p.name, p.probe.HTTPGet.Port, got, httpPort)
			}
			rec := httptest.NewRecorder()
			handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p.probe.HTTPGet.Path, nil))
			if rec.Code != http.StatusOK {
				t.Errorf("%s: GET %s answers %d on a ready server, want 200", p.name, p.probe.HTTPGet.Path, rec.Code)
			}
		case p.probe.GRPC != nil:
			if p.probe.GRPC.Port != grpcPort {
				t.Errorf("%s: gRPC port %d, want %d", p.name, p.probe.GRPC.Port, grpcPort)
			}
		default:
			t.Errorf("%s: want httpGet or grpc", p.name)
		}
	}
	if c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil && c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("readinessProbe: %s, want /readyz, which turns 503 on shutdown", c.ReadinessProbe.HTTPGet.Path)
	}

	// Termination: the drain fits in the grace period.
	drain := f.shutdownTimeout
	if s := c.Lifecycle.PreStop.Sleep; s != nil {
		drain += time.Duration(s.Seconds) * time.Second
	}
	grace := 30 * time.Second // Kubernetes's default
	if g := pod.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	if grace <= drain {
		t.Errorf("termination grace period %v: want more than preStop plus --shutdown-timeout, %v", grace, drain)
	}

	// Security: non-root, read-only, no capabilities.
	if !truthy(c.SecurityContext.RunAsNonRoot, pod.SecurityContext.RunAsNonRoot) {
		t.Error("runAsNonRoot is not set")
	}
	if !truthy(c.SecurityContext.ReadOnlyRootFilesystem) {
		t.Error("readOnlyRootFilesystem is not set")
	}
	if a := c.SecurityContext.AllowPrivilegeEscalation; a == nil || *a {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if !slices.Contains(c.SecurityContext.Capabilities.Drop, "ALL") {
		t.Errorf("capabilities drop %v, want ALL", c.SecurityContext.Capabilities.Drop)
	}
	if c.Resources.Requests["cpu"] == "" || c.Resources.Requests["memory"] == "" || c.Resources.Limits["memory"] == "" {
		t.Errorf("resources %+v: want cpu and memory requests and a memory limit", c.Resources)
	}
}

// truthy reports whether the first of bs that is set is true.
func truthy(bs ...*bool) bool {
	for _, b := range bs {
		if b != nil {
			return *b
		}
	}
	return false
}

// probeHandler returns the HTTP handler of a ready ratelimitd.
func probeHandler(t *testing.T) http.Handler {
	t.Helper()
	rules, err := config.Load("../../examples/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	store := memory.New(memory.Options{})
	t.Cleanup(func() { store.Close() })
	return server.New(store, rules, server.Options{}).Handler()
}

func TestKubernetesServices(t *testing.T) {
	objs := loadManifests(t)
	pods := map[string]k8sDeployment{}
	for _, o := range objs {
		if o.Kind == "Deployment" {
			var d k8sDeployment
			o.decode(t, &d)
			pods[o.Metadata.Name] = d
		}
	}
	var svc k8sService
	find(t, objs, "Service", "ratelimitd").decode(t, &svc)
	for _, o := range objs {
		if o.Kind != "Service" {
			continue
		}
		var s k8sService
		o.decode(t, &s)
		// The Service selects exactly one Deployment's pods, and each port
		// reaches a port of its container.
		var selected []string
		for name, d := range pods {
			if labelsMatch(s.Spec.Selector, d.Spec.Template.Metadata.Labels) {
				selected = append(selected, name)
			}
		}
		if len(selected) != 1 {
			t.Errorf("Service %s selects the pods of %v, want one Deployment", o.Metadata.Name, selected)
			continue
		}
		c := pods[selected[0]].Spec.Template.Spec.Containers[0]
		for _, p := range s.Spec.Ports {
			if containerPort(c, p.TargetPort) == 0 {
				t.Errorf("Service %s port %s: targetPort %v is no port of %s", o.Metadata.Name, p.Name, p.TargetPort, selected[0])
			}
		}
	}
	grpc := false
	for _, p := range svc.Spec.Ports {
		if p.Name == "grpc" {
			grpc = true
			if p.AppProtocol != "kubernetes.io/h2c" && p.AppProtocol != "grpc" {
				t.Errorf("Service ratelimitd port grpc: appProtocol %q, want HTTP/2 (kubernetes.io/h2c or grpc)", p.AppProtocol)
			}
		}
	}
	if !grpc {
		t.Error("Service ratelimitd has no port named grpc")
	}
}
