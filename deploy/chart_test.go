package deploy_test

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

const (
	chartDir    = "helm/ratelimitd"
	releaseName = "rl"
	namespace   = "edge"
	alertsFile  = "prometheus/alerts.yaml"
)

// valuesFiles are the chart's test values (ci/, chart-testing's place),
// each rendered and checked; with "" for the chart's defaults alone.
func valuesFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The stores, the rules' sources, compat mode and the admin listener
	// each have one; losing one loses its coverage.
	for _, want := range []string{"memory", "redis", "sentinel", "cluster", "compat", "xds", "admin"} {
		if !slices.Contains(files, filepath.Join(chartDir, "ci", want+"-values.yaml")) {
			t.Errorf("no ci/%s-values.yaml among %v", want, files)
		}
	}
	return append([]string{""}, files...)
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	return ch
}

// readValues reads a values file, "" being none.
func readValues(t *testing.T, file string) map[string]any {
	t.Helper()
	if file == "" {
		return map[string]any{}
	}
	v, err := common.ReadValuesFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// render renders the chart as helm install would (the schema checked),
// with vals over the chart's values, and returns its manifests by
// template.
func render(ch *chart.Chart, vals map[string]any) (map[string]string, error) {
	opts := common.ReleaseOptions{Name: releaseName, Namespace: namespace, Revision: 1, IsInstall: true}
	rv, err := util.ToRenderValuesWithSchemaValidation(ch, vals, opts, common.DefaultCapabilities, false)
	if err != nil {
		return nil, err
	}
	return engine.Render(ch, rv)
}

// An object is one rendered manifest, decoded.
type object struct {
	file string // the template it came from
	kind string
	name string
	obj  any // a pointer to its Kubernetes type
}

// kinds maps each apiVersion and kind the chart may render to its Go
// type; any other kind fails the test.
var kinds = map[string]func() any{
	"v1/ConfigMap":                            func() any { return new(corev1.ConfigMap) },
	"v1/Service":                              func() any { return new(corev1.Service) },
	"v1/ServiceAccount":                       func() any { return new(corev1.ServiceAccount) },
	"apps/v1/Deployment":                      func() any { return new(appsv1.Deployment) },
	"autoscaling/v2/HorizontalPodAutoscaler":  func() any { return new(autoscalingv2.HorizontalPodAutoscaler) },
	"policy/v1/PodDisruptionBudget":           func() any { return new(policyv1.PodDisruptionBudget) },
	"networking.k8s.io/v1/NetworkPolicy":      func() any { return new(networkingv1.NetworkPolicy) },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return new(monitoringv1.ServiceMonitor) },
	"monitoring.coreos.com/v1/PrometheusRule": func() any { return new(monitoringv1.PrometheusRule) },
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// decode splits the manifests into objects, each decoded strictly (see
// decodeDoc).
func decode(t *testing.T, manifests map[string]string) []object {
	t.Helper()
	var objs []object
	for _, file := range slices.Sorted(maps.Keys(manifests)) {
		if strings.HasSuffix(file, "NOTES.txt") {
			continue
		}
		for _, doc := range docSeparator.Split(manifests[file], -1) {
			o, err := decodeDoc(doc)
			switch {
			case err != nil:
				t.Errorf("%s: %v\n%s", file, err, doc)
			case o != nil:
				o.file = file
				objs = append(objs, *o)
			}
		}
	}
	return objs
}

// decodeDoc decodes one manifest into its Kubernetes type, strictly: a
// field the type does not have, or a key given twice, is an error, as is
// a kind the chart should not render, or an object without a name or in
// another namespace than the release's. An empty document is nil.
func decodeDoc(doc string) (*object, error) {
	var meta struct {
		metav1.TypeMeta `json:",inline"`
		Metadata        metav1.ObjectMeta `json:"metadata"`
	}
	if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
		return nil, err
	}
	if meta.Kind == "" && meta.APIVersion == "" && strings.TrimSpace(stripComments(doc)) == "" {
		return nil, nil
	}
	newObj, ok := kinds[meta.APIVersion+"/"+meta.Kind]
	if !ok {
		return nil, fmt.Errorf("an object of apiVersion %q kind %q, which the test does not know", meta.APIVersion, meta.Kind)
	}
	obj := newObj()
	if err := unmarshalStrict([]byte(doc), obj); err != nil {
		return nil, fmt.Errorf("%s %s does not decode strictly: %w", meta.Kind, meta.Metadata.Name, err)
	}
	if meta.Metadata.Name == "" || meta.Metadata.Namespace != namespace {
		return nil, fmt.Errorf("%s named %q in namespace %q, want a name and namespace %q", meta.Kind, meta.Metadata.Name, meta.Metadata.Namespace, namespace)
	}
	return &object{kind: meta.Kind, name: meta.Metadata.Name, obj: obj}, nil
}

// unmarshalStrict decodes YAML into obj as the Kubernetes API server's
// strict field validation does: field names matched case-sensitively, an
// unknown or a repeated field an error.
func unmarshalStrict(data []byte, obj any) error {
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, obj)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// TestDecodeIsStrict checks that decodeDoc, through which every rendered
// object goes, refuses what Kubernetes would drop or misread.
func TestDecodeIsStrict(t *testing.T) {
	const good = "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\n  namespace: " + namespace + "\nspec:\n  type: ClusterIP\n"
	if o, err := decodeDoc(good); err != nil || o == nil {
		t.Fatalf("decodeDoc(a good Service) = %v, %v", o, err)
	}
	for name, doc := range map[string]string{
		"unknown field":     good + "  clusterIp: None\n",
		"key twice":         good + "  type: NodePort\n",
		"wrong type":        strings.Replace(good, "type: ClusterIP", "type: [ClusterIP]", 1),
		"unknown kind":      strings.Replace(good, "kind: Service", "kind: Servce", 1),
		"other namespace":   strings.Replace(good, "namespace: "+namespace, "namespace: default", 1),
		"arg read as a map": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: " + namespace + "}\nspec:\n  template:\n    spec:\n      containers:\n        - name: c\n          args:\n            - --redis-key-prefix=edge:\n",
	} {
		if _, err := decodeDoc(doc); err == nil {
			t.Errorf("%s: decodeDoc accepted\n%s", name, doc)
		}
	}
}

var comment = regexp.MustCompile(`(?m)^\s*#.*$`)

func stripComments(s string) string { return comment.ReplaceAllString(s, "") }

// find returns the objects of kind among objs.
func find[T any](objs []object) []*T {
	var out []*T
	for _, o := range objs {
		if v, ok := o.obj.(*T); ok {
			out = append(out, v)
		}
	}
	return out
}

// TestLint runs helm lint's checks on the chart with each values file; a
// warning or an error fails.
func TestLint(t *testing.T) {
	for _, file := range valuesFiles(t) {
		t.Run(filepath.Base(file), func(t *testing.T) {
			res := lint.RunAll(chartDir, readValues(t, file), namespace)
			for _, m := range res.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("helm lint: %s", m)
				} else {
					t.Logf("helm lint: %s", m)
				}
			}
		})
	}
}

// TestTemplate renders the chart with each values file, decodes every
// object strictly and checks that the objects fit together and the
// Deployment runs ratelimitd with flags it has.
func TestTemplate(t *testing.T) {
	ch := loadChart(t)
	flags := daemonFlags(t)
	for _, file := range valuesFiles(t) {
		t.Run(cmpName(file), func(t *testing.T) {
			vals := readValues(t, file)
			manifests, err := render(ch, vals)
			if err != nil {
				t.Fatalf("helm template: %v", err)
			}
			objs := decode(t, manifests)
			deps := find[appsv1.Deployment](objs)
			if len(deps) != 1 {
				t.Fatalf("%d Deployments, want 1", len(deps))
			}
			d := deps[0]
			checkDeployment(t, d, flags)
			checkServices(t, d, find[corev1.Service](objs))
			checkConfigMap(t, d, vals, find[corev1.ConfigMap](objs))
			checkScaling(t, d, find[autoscalingv2.HorizontalPodAutoscaler](objs), find[policyv1.PodDisruptionBudget](objs))
			checkNetworkPolicies(t, d, find[networkingv1.NetworkPolicy](objs))
			checkMonitoring(t, d, find[corev1.Service](objs), find[monitoringv1.ServiceMonitor](objs), find[monitoringv1.PrometheusRule](objs))
		})
	}
}

func cmpName(file string) string {
	if file == "" {
		return "defaults"
	}
	return strings.TrimSuffix(filepath.Base(file), "-values.yaml")
}

// containerPorts returns the container's ports by name.
func containerPorts(c corev1.Container) map[string]int32 {
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	return ports
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

func checkDeployment(t *testing.T, d *appsv1.Deployment, flags map[string]bool) {
	t.Helper()
	pod := d.Spec.Template
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(pod.Labels)) {
		t.Errorf("the Deployment's selector %v does not select its pods' labels %v (%v)", d.Spec.Selector, pod.Labels, err)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]

	// Non-root, read-only, nothing more than it needs.
	psc, sc := pod.Spec.SecurityContext, c.SecurityContext
	switch {
	case psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0:
		t.Errorf("pod securityContext %+v: want runAsNonRoot and a non-zero runAsUser", psc)
	case sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Errorf("container securityContext %+v: want readOnlyRootFilesystem", sc)
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL"):
		t.Errorf("container securityContext %+v: want allowPrivilegeEscalation false and capabilities drop ALL", sc)
	case c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero():
		t.Errorf("resources %+v: want a CPU request and a memory limit", c.Resources)
	}

	// Probes: the daemon's /healthz and /readyz on its HTTP port.
	ports := containerPorts(c)
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.StrVal != "http" {
			t.Errorf("%s probe %+v: want GET %s on the port http", p.name, p.probe, p.path)
		}
	}
	if _, ok := ports["http"]; !ok {
		t.Errorf("no container port http among %v", ports)
	}

	// Every flag is one of ratelimitd's, and each listener's port is the
	// container port of its name.
	args := map[string]string{}
	for _, a := range c.Args {
		name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !flags[name] {
			t.Errorf("argument %q: ratelimitd --help has no flag %q", a, name)
		}
		if _, dup := args[name]; dup {
			t.Errorf("flag --%s given twice", name)
		}
		args[name] = value
	}
	for flag, port := range map[string]string{"grpc-addr": "grpc", "http-addr": "http", "admin-addr": "admin"} {
		addr, set := args[flag]
		cport, has := ports[port]
		if set != has || set && addr != fmt.Sprintf(":%d", cport) {
			t.Errorf("--%s=%q and container port %s %d disagree", flag, addr, port, cport)
		}
	}
	if _, xds := args["xds-server"]; xds == (args["config"] != "") {
		t.Errorf("flags %v: want one source of rules, --config or --xds-server", args)
	}
	if args["config"] != "" && !mounted(c, "rules", args["config"]) {
		t.Errorf("--config=%s is not the rules volume's mount", args["config"])
	}
	if v := args["request-log"]; v != "" && !mounted(c, "request-log", filepath.Dir(v)) {
		t.Errorf("--request-log=%s is not in the request-log volume's mount", v)
	}

	// Variables: those named RATELIMITD_* are flags; $(NAME) in a
	// variable or an argument names a variable defined before it, as
	// Kubernetes requires to fill it in.
	defined := map[string]bool{}
	for _, e := range c.Env {
		if flag, ok := envFlag(e.Name); ok && !flags[flag] {
			t.Errorf("variable %s: ratelimitd --help has no flag %q", e.Name, flag)
		}
		if e.Value != "" && e.ValueFrom != nil {
			t.Errorf("variable %s has both a value and valueFrom", e.Name)
		}
		for _, m := range varRef.FindAllStringSubmatch(e.Value, -1) {
			if !defined[m[1]] {
				t.Errorf("variable %s refers to $(%s), not defined before it", e.Name, m[1])
			}
		}
		defined[e.Name] = true
	}
	for _, a := range c.Args {
		for _, m := range varRef.FindAllStringSubmatch(a, -1) {
			if !defined[m[1]] {
				t.Errorf("argument %q refers to $(%s), which no variable defines", a, m[1])
			}
		}
	}

	// Every mount has its volume, and every volume a mount.
	volumes := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = true
	}
	for _, m := range c.VolumeMounts {
		if !volumes[m.Name] {
			t.Errorf("mount %s has no volume", m.Name)
		}
		delete(volumes, m.Name)
	}
	if len(volumes) > 0 {
		t.Errorf("volumes %v are mounted nowhere", slices.Sorted(maps.Keys(volumes)))
	}
	// Every file flag names a file in a mounted volume.
	for name, value := range args {
		if strings.HasPrefix(value, "/etc/ratelimitd/tls/") {
			dir := filepath.Dir(value)
			if !mounted(c, "tls-"+filepath.Base(dir), dir) {
				t.Errorf("--%s=%s: no volume is mounted at %s", name, value, dir)
			}
		}
	}
	if file := args["admin-token-file"]; file != "" {
		if err := secretFile(pod.Spec, c, file); err != nil {
			t.Errorf("--admin-token-file=%s: %v", file, err)
		}
	}

	// The drain fits in the grace period.
	delay, timeout := parseDuration(t, args["shutdown-delay"]), parseDuration(t, args["shutdown-timeout"])
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || float64(*g) <= delay+timeout {
		t.Errorf("terminationGracePeriodSeconds %v: want more than --shutdown-delay plus --shutdown-timeout (%v s)", g, delay+timeout)
	}

	// Topology spread constraints select the pods.
	for _, tsc := range pod.Spec.TopologySpreadConstraints {
		s, err := metav1.LabelSelectorAsSelector(tsc.LabelSelector)
		if err != nil || !s.Matches(labels.Set(pod.Labels)) {
			t.Errorf("topology spread constraint %s selects %v, not the pods (%v)", tsc.TopologyKey, tsc.LabelSelector, err)
		}
	}
	if !slices.ContainsFunc(pod.Spec.TopologySpreadConstraints, func(c corev1.TopologySpreadConstraint) bool {
		return c.TopologyKey == "kubernetes.io/hostname" || c.TopologyKey == "topology.kubernetes.io/zone"
	}) {
		t.Errorf("no topology spread constraint over zones or hosts")
	}
}

// secretFile returns what keeps file from being a Secret's file that the
// kubelet updates in place when the Secret changes: the file must be in
// a directory the container mounts read-only, whole (a subPath mount
// never sees an update), from a Secret volume that puts a key there
// under the file's name.
func secretFile(pod corev1.PodSpec, c corev1.Container, file string) error {
	dir, name := filepath.Split(file)
	dir = filepath.Clean(dir)
	i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return filepath.Clean(m.MountPath) == dir })
	if i < 0 {
		return fmt.Errorf("no volume is mounted at %s", dir)
	}
	m := c.VolumeMounts[i]
	if m.SubPath != "" || m.SubPathExpr != "" || !m.ReadOnly {
		return fmt.Errorf("mount %s: want the whole volume read-only, not a subPath (which never updates): %+v", m.Name, m)
	}
	j := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
	if j < 0 || pod.Volumes[j].Secret == nil || pod.Volumes[j].Secret.SecretName == "" {
		return fmt.Errorf("volume %s is not a Secret's", m.Name)
	}
	sv := pod.Volumes[j].Secret
	if len(sv.Items) > 0 && !slices.ContainsFunc(sv.Items, func(k corev1.KeyToPath) bool { return k.Path == name }) {
		return fmt.Errorf("Secret %s's volume puts no key at %s: %+v", sv.SecretName, name, sv.Items)
	}
	return nil
}

// mounted reports whether the container mounts volume at dir.
func mounted(c corev1.Container, volume, dir string) bool {
	return slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == volume && m.MountPath == dir
	})
}

func parseDuration(t *testing.T, s string) float64 {
	t.Helper()
	var n float64
	var unit string
	if _, err := fmt.Sscanf(s, "%g%s", &n, &unit); err != nil {
		t.Errorf("duration %q: %v", s, err)
		return 0
	}
	switch unit {
	case "s":
		return n
	case "m":
		return 60 * n
	}
	t.Errorf("duration %q: want seconds or minutes", s)
	return 0
}

// checkServices checks that each Service selects the pods and targets
// container ports that exist.
func checkServices(t *testing.T, d *appsv1.Deployment, svcs []*corev1.Service) {
	t.Helper()
	ports := containerPorts(d.Spec.Template.Spec.Containers[0])
	if len(svcs) == 0 {
		t.Fatal("no Service")
	}
	for _, s := range svcs {
		if !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("Service %s selects %v, not the pods %v", s.Name, s.Spec.Selector, d.Spec.Template.Labels)
		}
		for _, p := range s.Spec.Ports {
			if _, ok := ports[p.TargetPort.StrVal]; !ok {
				t.Errorf("Service %s port %s targets %q, which the container does not have (%v)", s.Name, p.Name, p.TargetPort.String(), ports)
			}
		}
	}
}

// checkConfigMap checks the rules' ConfigMap: rendered from the values'
// files, or absent when an existing one or xDS gives the rules.
func checkConfigMap(t *testing.T, d *appsv1.Deployment, vals map[string]any, cms []*corev1.ConfigMap) {
	t.Helper()
	var rulesCM string
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == "rules" && v.ConfigMap != nil {
			rulesCM = v.ConfigMap.Name
		}
	}
	rules, _ := vals["rules"].(map[string]any)
	existing, _ := rules["existingConfigMap"].(string)
	switch {
	case existing != "":
		if rulesCM != existing || len(cms) != 0 {
			t.Errorf("rules.existingConfigMap %q: the pods mount %q and the chart renders %d ConfigMaps, want that one and none", existing, rulesCM, len(cms))
		}
	case rulesCM == "":
		if len(cms) != 0 {
			t.Errorf("no rules volume, but %d ConfigMaps", len(cms))
		}
	default:
		if len(cms) != 1 || cms[0].Name != rulesCM {
			t.Fatalf("the pods mount ConfigMap %q; the chart renders %d ConfigMaps", rulesCM, len(cms))
		}
		if len(cms[0].Data) == 0 {
			t.Errorf("ConfigMap %s holds no rules", rulesCM)
		}
		for name := range cms[0].Data {
			if !strings.HasSuffix(name, ".yaml") && !strings.HasSuffix(name, ".yml") {
				t.Errorf("ConfigMap %s: %s is not a .yaml file, which ratelimitd would not read", rulesCM, name)
			}
		}
	}
}

// checkScaling checks the HorizontalPodAutoscaler and the
// PodDisruptionBudget aim at the Deployment's pods.
func checkScaling(t *testing.T, d *appsv1.Deployment, hpas []*autoscalingv2.HorizontalPodAutoscaler, pdbs []*policyv1.PodDisruptionBudget) {
	t.Helper()
	for _, h := range hpas {
		if h.Spec.ScaleTargetRef.Kind != "Deployment" || h.Spec.ScaleTargetRef.Name != d.Name {
			t.Errorf("HorizontalPodAutoscaler %s scales %+v, not Deployment %s", h.Name, h.Spec.ScaleTargetRef, d.Name)
		}
		if d.Spec.Replicas != nil {
			t.Errorf("HorizontalPodAutoscaler %s with Deployment replicas %d: each upgrade would reset the count", h.Name, *d.Spec.Replicas)
		}
	}
	for _, p := range pdbs {
		s, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if err != nil || !s.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("PodDisruptionBudget %s selects %v, not the pods", p.Name, p.Spec.Selector)
		}
		if (p.Spec.MinAvailable == nil) == (p.Spec.MaxUnavailable == nil) {
			t.Errorf("PodDisruptionBudget %s: want one of minAvailable and maxUnavailable", p.Name)
		}
	}
}

func checkNetworkPolicies(t *testing.T, d *appsv1.Deployment, nps []*networkingv1.NetworkPolicy) {
	t.Helper()
	ports := containerPorts(d.Spec.Template.Spec.Containers[0])
	for _, np := range nps {
		s, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil || !s.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("NetworkPolicy %s selects %v, not the pods", np.Name, np.Spec.PodSelector)
		}
		var named []string
		for _, r := range np.Spec.Ingress {
			for _, p := range r.Ports {
				if _, ok := ports[p.Port.StrVal]; !ok {
					t.Errorf("NetworkPolicy %s opens port %v, which the container does not have", np.Name, p.Port)
				}
				named = append(named, p.Port.StrVal)
			}
		}
		// Callers' ports stay open: a policy that closed them would
		// take every decision away.
		if !slices.Contains(named, "grpc") || !slices.Contains(named, "http") {
			t.Errorf("NetworkPolicy %s opens %v: want grpc and http", np.Name, named)
		}
	}
}

// checkMonitoring checks that the ServiceMonitor scrapes the port that
// serves /metrics, and that the PrometheusRule holds alerts.yaml's groups
// as they are.
func checkMonitoring(t *testing.T, d *appsv1.Deployment, svcs []*corev1.Service, sms []*monitoringv1.ServiceMonitor, prs []*monitoringv1.PrometheusRule) {
	t.Helper()
	c := d.Spec.Template.Spec.Containers[0]
	metricsPort := "http"
	if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--admin-addr=") }) {
		metricsPort = "admin" // --admin-addr moves /metrics off --http-addr
	}
	annotations := d.Spec.Template.Annotations
	if len(sms) > 0 && annotations["prometheus.io/scrape"] != "" {
		t.Errorf("both a ServiceMonitor and scrape annotations: each pod would be scraped twice")
	}
	if p := annotations["prometheus.io/port"]; p != "" && p != fmt.Sprint(containerPorts(c)[metricsPort]) {
		t.Errorf("prometheus.io/port %s: /metrics is on port %s (%d)", p, metricsPort, containerPorts(c)[metricsPort])
	}
	for _, sm := range sms {
		sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		var selected []*corev1.Service
		for _, s := range svcs {
			if sel.Matches(labels.Set(s.Labels)) {
				selected = append(selected, s)
			}
		}
		if len(selected) != 1 {
			t.Errorf("ServiceMonitor %s selects %d Services, want 1 (each pod scraped once)", sm.Name, len(selected))
			continue
		}
		for _, ep := range sm.Spec.Endpoints {
			var target string
			for _, p := range selected[0].Spec.Ports {
				if p.Name == ep.Port {
					target = p.TargetPort.StrVal
				}
			}
			if target != metricsPort || ep.Path != "/metrics" {
				t.Errorf("ServiceMonitor %s scrapes %s on port %s (container port %q), want /metrics on %s", sm.Name, ep.Path, ep.Port, target, metricsPort)
			}
		}
	}
	if len(prs) == 0 {
		return
	}
	data, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var want monitoringv1.PrometheusRuleSpec
	if err := unmarshalStrict(data, &want); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	for _, pr := range prs {
		if !reflect.DeepEqual(pr.Spec, want) {
			t.Errorf("PrometheusRule %s does not hold %s as it is", pr.Name, alertsFile)
		}
	}
	if len(want.Groups) == 0 || len(want.Groups[0].Rules) == 0 {
		t.Errorf("%s holds no rules", alertsFile)
	}
}

// TestTemplateRefuses checks that values that cannot work stop helm
// install with the reason: a typo anywhere (the schema), and the memory
// store on more than one pod (each would allow the whole limit).
func TestTemplateRefuses(t *testing.T) {
	ch := loadChart(t)
	for _, c := range []struct {
		name, values, want string
	}{
		{"typo at the top", "replicaCont: 2", "additional properties 'replicaCont' not allowed"},
		{"typo in store", "store:\n  tpye: redis", "additional properties 'tpye' not allowed"},
		{"typo in redis", "store:\n  type: redis\n  redis:\n    adresses: [r:6379]", "additional properties 'adresses' not allowed"},
		{"typo deep in metrics", "metrics:\n  serviceMonitor:\n    enable: true", "additional properties 'enable' not allowed"},
		{"typo in resources", "resources:\n  limits:\n    memroy: 1Gi", "additional properties 'memroy' not allowed"},
		{"typo in a spread constraint", "topologySpreadConstraints:\n  - maxSkew: 1\n    topologyKey: k\n    whenUnsatisfiable: ScheduleAnyway\n    labelSelectr: {}", "additional properties 'labelSelectr' not allowed"},
		{"unknown store", "store:\n  type: etcd", "store/type"},
		{"bad failure mode", "store:\n  failureMode: maybe", "store/failureMode"},
		{"a flag not as a flag", "extraArgs: [near-limit-ratio]", "extraArgs/0"},
		{"memory with replicas", "replicaCount: 2", "store.type is memory, which counts in each pod alone: 2 replicas"},
		{"memory with autoscaling", "autoscaling:\n  enabled: true\n  maxReplicas: 5", "store.type is memory, which counts in each pod alone: 5 replicas"},
		{"redis without address", "store:\n  type: redis", "set store.redis.addresses"},
		{"sentinel without master", "store:\n  type: sentinel\n  redis:\n    addresses: [s:26379]", "store.redis.masterName"},
		{"xds without server", "xds:\n  enabled: true\n  nodeId: node-a", "set xds.server"},
		{"xds token in plaintext", "xds:\n  enabled: true\n  server: x:1\n  nodeId: node-a\n  headersSecret:\n    name: tok", "xds.tls.enabled"},
		{"no rules", "rules:\n  files: null", "no rules"},
		{"drain past the grace period", "terminationGracePeriodSeconds: 15", "terminationGracePeriodSeconds (15) must exceed"},
		{"both PDB bounds", "podDisruptionBudget:\n  minAvailable: 1", "not both"},
		{"admin mTLS without admin", "tls:\n  http:\n    existingSecret: h\n  admin:\n    clientCA: true", "tls.admin.clientCA needs admin.enabled"},
		{"admin mTLS without a certificate", "admin:\n  enabled: true\ntls:\n  admin:\n    clientCA: true", "tls.admin.clientCA needs tls.http.existingSecret"},
		{"typo in admin tokens", "admin:\n  tokens:\n    existingSecrets: t", "additional properties 'existingSecrets' not allowed"},
		{"admin tokens without a key", "admin:\n  tokens:\n    existingSecret: t\n    key: \"\"", "admin/tokens/key"},
		{"admin tokens key as a path", "admin:\n  tokens:\n    existingSecret: t\n    key: ../tokens", "admin/tokens/key"},
		{"no overrides at all", "overrides:\n  maxOverrides: 0", "overrides/maxOverrides"},
	} {
		t.Run(c.name, func(t *testing.T) {
			vals, err := common.ReadValues([]byte(c.values))
			if err != nil {
				t.Fatal(err)
			}
			_, err = render(ch, vals)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("helm template with %q: error %v, want one with %q", c.values, err, c.want)
			}
		})
	}
}

// TestChartAdminOverrides checks the runtime overrides' values: the
// token file from a Secret, mounted as a directory so that the daemon
// sees its rotations, the overrides' bound and mutual TLS on the admin
// port, each a flag when set and nothing when not.
func TestChartAdminOverrides(t *testing.T) {
	ch := loadChart(t)
	flags := daemonFlags(t)
	const tokens = "admin:\n  tokens:\n    existingSecret: ops-tokens\n    key: ratelimitd.tokens\n"
	for _, c := range []struct {
		name, values string
		want         map[string]string // flag: value; "" for absent
	}{
		{"defaults", "", map[string]string{"admin-token-file": "", "max-overrides": "", "admin-tls-client-ca": ""}},
		{"tokens", tokens, map[string]string{"admin-token-file": "/etc/ratelimitd/admin-tokens/tokens", "max-overrides": "", "admin-tls-client-ca": ""}},
		{"empty secret name", "admin:\n  tokens:\n    existingSecret: \"\"\n", map[string]string{"admin-token-file": ""}},
		{"bound", "overrides:\n  maxOverrides: 2000000\n", map[string]string{"max-overrides": "2000000", "admin-token-file": ""}},
		{"bound null", "overrides:\n  maxOverrides: null\n", map[string]string{"max-overrides": ""}},
		{"admin mTLS", "admin:\n  enabled: true\ntls:\n  http:\n    existingSecret: admin-tls\n  admin:\n    clientCA: true\n", map[string]string{"admin-tls-client-ca": "/etc/ratelimitd/tls/http/ca.crt", "http-tls-cert": "/etc/ratelimitd/tls/http/tls.crt"}},
		{"admin TLS without mTLS", "admin:\n  enabled: true\ntls:\n  http:\n    existingSecret: admin-tls\n", map[string]string{"admin-tls-client-ca": "", "http-tls-cert": "/etc/ratelimitd/tls/http/tls.crt"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			vals, err := common.ReadValues([]byte(c.values))
			if err != nil {
				t.Fatal(err)
			}
			manifests, err := render(ch, vals)
			if err != nil {
				t.Fatalf("helm template: %v", err)
			}
			deps := find[appsv1.Deployment](decode(t, manifests))
			if len(deps) != 1 {
				t.Fatalf("%d Deployments, want 1", len(deps))
			}
			d := deps[0]
			checkDeployment(t, d, flags)
			pod := d.Spec.Template.Spec
			ctr := pod.Containers[0]
			args := map[string]string{}
			for _, a := range ctr.Args {
				name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
				args[name] = value
			}
			for flag, want := range c.want {
				if got, set := args[flag]; got != want || set != (want != "") {
					t.Errorf("--%s=%q (given: %v), want %q", flag, got, set, want)
				}
			}
			i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == "ops-tokens" })
			if args["admin-token-file"] == "" {
				if i >= 0 || slices.ContainsFunc(ctr.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "admin-tokens" }) {
					t.Errorf("no token file, yet volumes %+v and mounts %+v", pod.Volumes, ctr.VolumeMounts)
				}
				return
			}
			// The token file is the Secret's key, alone, in a directory
			// mounted whole: checkDeployment checked the mount
			// (secretFile); here, which key and who may read it.
			if i < 0 {
				t.Fatalf("no volume of Secret ops-tokens among %+v", pod.Volumes)
			}
			sv := pod.Volumes[i].Secret
			wantItems := []corev1.KeyToPath{{Key: "ratelimitd.tokens", Path: filepath.Base(args["admin-token-file"])}}
			if !reflect.DeepEqual(sv.Items, wantItems) {
				t.Errorf("Secret volume items %+v, want %+v", sv.Items, wantItems)
			}
			// Read as YAML 1.1 octal, as Helm sends it: 0440, not 440.
			if sv.DefaultMode == nil || *sv.DefaultMode != 0o440 {
				t.Errorf("Secret volume defaultMode %v: want 0440 (288), read by the owner and the pod's fsGroup only", sv.DefaultMode)
			}
			if !mounted(ctr, pod.Volumes[i].Name, filepath.Dir(args["admin-token-file"])) {
				t.Errorf("Secret ops-tokens is not mounted at %s: %+v", filepath.Dir(args["admin-token-file"]), ctr.VolumeMounts)
			}
		})
	}
}

// TestChartSecretFileCheck checks secretFile, which checks the token file's mount,
// against the mounts that would not see a Secret's update.
func TestChartSecretFileCheck(t *testing.T) {
	good := func() (corev1.PodSpec, corev1.Container) {
		pod := corev1.PodSpec{Volumes: []corev1.Volume{{Name: "tok", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: "s", Items: []corev1.KeyToPath{{Key: "k", Path: "tokens"}},
		}}}}}
		c := corev1.Container{VolumeMounts: []corev1.VolumeMount{{Name: "tok", MountPath: "/etc/t", ReadOnly: true}}}
		return pod, c
	}
	if pod, c := good(); secretFile(pod, c, "/etc/t/tokens") != nil {
		t.Fatalf("secretFile refused a good mount: %v", secretFile(pod, c, "/etc/t/tokens"))
	}
	for name, spoil := range map[string]func(*corev1.PodSpec, *corev1.Container){
		"subPath":        func(_ *corev1.PodSpec, c *corev1.Container) { c.VolumeMounts[0].SubPath = "tokens" },
		"writable":       func(_ *corev1.PodSpec, c *corev1.Container) { c.VolumeMounts[0].ReadOnly = false },
		"other dir":      func(_ *corev1.PodSpec, c *corev1.Container) { c.VolumeMounts[0].MountPath = "/etc/u" },
		"not a Secret":   func(p *corev1.PodSpec, _ *corev1.Container) { p.Volumes[0].Secret = nil },
		"other key path": func(p *corev1.PodSpec, _ *corev1.Container) { p.Volumes[0].Secret.Items[0].Path = "tok" },
	} {
		pod, c := good()
		spoil(&pod, &c)
		if err := secretFile(pod, c, "/etc/t/tokens"); err == nil {
			t.Errorf("%s: secretFile accepted %+v %+v", name, pod.Volumes, c.VolumeMounts)
		}
	}
}

// TestAlertsFileIsTheChartsFile checks that deploy/prometheus/alerts.yaml
// and the chart's files/alerts.yaml are one file (a link), so that the
// PrometheusRule and plain Prometheus get the same rules.
func TestAlertsFileIsTheChartsFile(t *testing.T) {
	a, err := os.Stat(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.Stat(filepath.Join(chartDir, "files", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(a, b) {
		t.Errorf("%s and %s/files/alerts.yaml are two files: make the first a link to the second", alertsFile, chartDir)
	}
}
