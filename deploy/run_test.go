package deploy_test

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestDeploymentRunsTheDaemon starts the real ratelimitd as each rendered
// Deployment would, with its arguments and variables, and checks that the
// daemon takes them and serves: a value it refuses (a malformed URL, a
// flag's wrong value, TLS files that do not go together) fails. Kubernetes's
// part is played here: the variables from Secrets get stand-in values,
// $(NAME) is filled in, the mounts become directories of the test (the
// rules ConfigMap's files; a certificate, its key and itself as CA for each
// TLS Secret), and the listeners move to free loopback ports. Redis and
// the xDS server are not there: ratelimitd starts without them.
func TestDeploymentRunsTheDaemon(t *testing.T) {
	bin := daemonBinary(t)
	ch := loadChart(t)
	for _, file := range valuesFiles(t) {
		t.Run(cmpName(file), func(t *testing.T) {
			t.Parallel() // each waits out its --shutdown-delay when stopped
			manifests, err := render(ch, readValues(t, file))
			if err != nil {
				t.Fatalf("helm template: %v", err)
			}
			objs := decode(t, manifests)
			d := find[appsv1.Deployment](objs)[0]
			cms := find[corev1.ConfigMap](objs)
			c := d.Spec.Template.Spec.Containers[0]

			root := t.TempDir()
			mountVolumes(t, root, d, cms)
			ports := map[string]string{} // container port -> loopback address
			for _, p := range c.Ports {
				ports[fmt.Sprintf(":%d", p.ContainerPort)] = freeAddr(t)
			}
			// onHost rewrites a value as the test runs it: a listen
			// address to its loopback port, a path under a mount to the
			// test's directory.
			onHost := func(v string) string {
				if a, ok := ports[v]; ok {
					return a
				}
				for _, m := range c.VolumeMounts {
					if v == m.MountPath || strings.HasPrefix(v, m.MountPath+"/") {
						return filepath.Join(root, v)
					}
				}
				return v
			}

			env := map[string]string{}
			var environ []string
			for _, e := range c.Env {
				v := e.Value
				switch {
				case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
					v = secretStandIn(e.ValueFrom.SecretKeyRef)
				case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
					v = d.Name + "-5d8f7c9b4-x2x7k" // a pod's name
				default:
					v = expand(v, env)
				}
				env[e.Name] = v
				environ = append(environ, e.Name+"="+v)
			}
			var args []string
			for _, a := range c.Args {
				name, value, ok := strings.Cut(expand(a, env), "=")
				if ok {
					value = onHost(value)
				}
				args = append(args, name+"="+value)
			}

			dm := startDaemon(t, bin, t.TempDir(), environ, args...)
			scheme := "http"
			if c.LivenessProbe.HTTPGet.Scheme == corev1.URISchemeHTTPS {
				scheme = "https"
			}
			httpc := &http.Client{
				Timeout:   5 * time.Second,
				Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, // the test's own certificates
			}
			probe := fmt.Sprintf("%s://%s%s", scheme, ports[fmt.Sprintf(":%d", containerPorts(c)["http"])], c.LivenessProbe.HTTPGet.Path)
			dm.waitReady(t, httpc, probe)
			t.Logf("ratelimitd %s: %s answers 200", strings.Join(args, " "), probe)
		})
	}
}

// expand fills in $(NAME) with the variables defined so far, as
// Kubernetes does; $$ stands for $.
func expand(s string, env map[string]string) string {
	s = varRef.ReplaceAllStringFunc(s, func(ref string) string {
		if v, ok := env[ref[2:len(ref)-1]]; ok {
			return v
		}
		return ref
	})
	return strings.ReplaceAll(s, "$$", "$")
}

// secretStandIn is the value the test gives a variable from a Secret's key.
func secretStandIn(ref *corev1.SecretKeySelector) string {
	switch {
	case ref.Key == "url":
		return "redis://:stand-in-password@redis.test.invalid:6379/0"
	case strings.Contains(ref.Key, "headers"):
		return "authorization=Bearer stand-in-token"
	}
	return "stand-in-password"
}

// mountVolumes lays out under root what the Deployment's volumes hold:
// the rules ConfigMap's files (or, for a ConfigMap the chart does not
// render, a rule file), an empty directory for an emptyDir or a claim,
// for a Secret, tls.crt, tls.key and ca.crt, and for one mounted by its
// keys (the admin tokens), a token file per key.
func mountVolumes(t *testing.T, root string, d *appsv1.Deployment, cms []*corev1.ConfigMap) {
	t.Helper()
	c := d.Spec.Template.Spec.Containers[0]
	vols := map[string]corev1.Volume{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		vols[v.Name] = v
	}
	for _, m := range c.VolumeMounts {
		dir := filepath.Join(root, m.MountPath)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		v := vols[m.Name]
		switch {
		case v.ConfigMap != nil:
			data := map[string]string{"rules.yaml": metricsRules}
			for _, cm := range cms {
				if cm.Name == v.ConfigMap.Name {
					data = cm.Data
				}
			}
			for name, content := range data {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		case v.Secret != nil && len(v.Secret.Items) > 0:
			// A Secret mounted by its keys (the admin tokens): each
			// key's file holds a stand-in token of the daemon's format.
			for _, it := range v.Secret.Items {
				if err := os.WriteFile(filepath.Join(dir, it.Path), []byte("ops:stand-in-token-of-32-bytes-long\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
		case v.Secret != nil:
			cert, _ := selfSigned(t, dir)
			pem, err := os.ReadFile(cert)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "ca.crt"), pem, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
