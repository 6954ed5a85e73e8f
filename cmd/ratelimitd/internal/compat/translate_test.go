package compat_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ratelimitd/ratelimitd/cmd/ratelimitd/internal/compat"
)

// TestFlags: each variable's flag values.
func TestFlags(t *testing.T) {
	for _, tt := range []struct {
		name string
		vars map[string]string
		want map[string]string // flags that must have these values ("" = absent)
	}{
		{"listeners", map[string]string{"HOST": "127.0.0.1", "PORT": "9080", "GRPC_HOST": "::", "GRPC_PORT": "0x1f91", "DEBUG_HOST": "", "DEBUG_PORT": "7070"},
			map[string]string{"http-addr": "127.0.0.1:9080", "grpc-addr": "[::]:8081", "debug-addr": ":7070"}},
		{"connection age", map[string]string{"GRPC_MAX_CONNECTION_AGE": "1h", "GRPC_MAX_CONNECTION_AGE_GRACE": "90s"},
			map[string]string{"grpc-max-connection-age": "1h0m0s", "grpc-max-connection-age-grace": "1m30s"}},
		{"gRPC TLS", map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/c.pem", "GRPC_SERVER_TLS_KEY": "/k.pem",
			"GRPC_CLIENT_TLS_CACERT": "/ca.pem", "GRPC_CLIENT_TLS_SAN": "envoy.example.com"},
			map[string]string{"grpc-tls-cert": "/c.pem", "grpc-tls-key": "/k.pem", "grpc-tls-client-ca": "/ca.pem", "grpc-tls-allowed-sans": "envoy.example.com"}},
		{"gRPC TLS off", map[string]string{"GRPC_SERVER_TLS_CERT": "/c.pem", "GRPC_SERVER_TLS_KEY": "/k.pem"},
			map[string]string{"grpc-tls-cert": "", "grpc-tls-key": ""}},
		{"log trace", map[string]string{"LOG_LEVEL": "trace", "LOG_FORMAT": "JSON"}, map[string]string{"log-level": "debug", "log-format": "json"}},
		{"log Info", map[string]string{"LOG_LEVEL": "Info", "LOG_FORMAT": "logfmt"}, map[string]string{"log-level": "info", "log-format": "text"}},
		{"log warning", map[string]string{"LOG_LEVEL": "warning"}, map[string]string{"log-level": "warn"}},
		{"log fatal", map[string]string{"LOG_LEVEL": "FATAL"}, map[string]string{"log-level": "error"}},
		{"runtime", map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_APPDIRECTORY": "rules", "RUNTIME_WATCH_ROOT": "false"},
			map[string]string{"config": "/data/ratelimit/rules", "xds-server": ""}},
		{"runtime without subdirectory", map[string]string{"RUNTIME_ROOT": "/data/"}, map[string]string{"config": "/data/config"}},
		{"xDS defaults", map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW"},
			map[string]string{"config": "", "xds-server": "localhost:18000", "xds-node-id": "default", "xds-tls": "", "xds-node-metadata": "", "xds-headers": ""}},
		{"xDS", map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "eg.envoy-gateway-system:18001",
			"CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit", "CONFIG_GRPC_XDS_NODE_METADATA": "zone=a,skipped,team=x=y",
			"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "x-token:abc,x-team:rl", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "5s",
			"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "/ca.pem",
			"CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "/c.pem", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": "/k.pem", "CONFIG_GRPC_XDS_SERVER_TLS_SAN": "eg.local"},
			map[string]string{"xds-server": "eg.envoy-gateway-system:18001", "xds-node-id": "envoy-ratelimit",
				"xds-node-metadata": `{"team":"x=y","zone":"a"}`, "xds-headers": "x-token=abc,x-team=rl", "xds-retry-interval": "5s",
				"xds-tls": "true", "xds-tls-ca": "/ca.pem", "xds-tls-cert": "/c.pem", "xds-tls-key": "/k.pem", "xds-tls-server-name": "eg.local"}},
		{"xDS TLS off", map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "/ca.pem"},
			map[string]string{"xds-tls": "", "xds-tls-ca": ""}},
		{"answers", map[string]string{"NEAR_LIMIT_RATIO": "0.9", "SHADOW_MODE": "1", "LIMIT_RESPONSE_HEADERS_ENABLED": "true"},
			map[string]string{"near-limit-ratio": "0.9", "shadow-mode": "true", "response-headers": "legacy", "response-header-names": ""}},
		{"header names", map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "T", "LIMIT_REMAINING_HEADER": "X-RateLimit-Remaining"},
			map[string]string{"response-headers": "legacy", "response-header-names": "RateLimit-Limit,X-RateLimit-Remaining,RateLimit-Reset"}},
		{"header names without headers", map[string]string{"LIMIT_LIMIT_HEADER": "X-Limit"},
			map[string]string{"response-headers": "off", "response-header-names": ""}},
		{"shadow off", map[string]string{"SHADOW_MODE": "false"}, map[string]string{"shadow-mode": "false"}},
		{"tracing over gRPC", map[string]string{"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "grpc",
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector:4317", "TRACING_SAMPLING_RATE": "0.25"},
			map[string]string{"otlp-endpoint": "otel-collector:4317", "otlp-insecure": "true", "trace-sample-ratio": "0.25"}},
		{"tracing defaults", map[string]string{"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "grpc",
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://collector"},
			map[string]string{"otlp-endpoint": "collector:4317", "otlp-insecure": "", "trace-sample-ratio": "1"}},
		{"tracing over HTTP", map[string]string{"TRACING_ENABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"},
			map[string]string{"otlp-endpoint": "", "trace-sample-ratio": ""}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := translate(t, with(tcpRedis, tt.vars))
			for flag, want := range tt.want {
				if got, ok := r.Flags[flag]; got != want || ok != (want != "") {
					t.Errorf("%s = %q (set %v), want %q", flag, got, ok, want)
				}
			}
			for name := range tt.vars {
				if !slices.Contains(r.Set, name) && !ignored(r, name) {
					t.Errorf("%s is neither in Set %v nor in Ignored %v", name, r.Set, r.Ignored)
				}
			}
		})
	}
}

// TestXDSMetadataJSON: the node metadata is a JSON object of strings, whatever the values hold.
func TestXDSMetadataJSON(t *testing.T) {
	r := translate(t, with(tcpRedis, map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_METADATA": `a="q",b=\,c=é`}))
	var got map[string]string
	if err := json.Unmarshal([]byte(r.Flags["xds-node-metadata"]), &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"a": `"q"`, "b": `\`, "c": "é"}, got); diff != "" {
		t.Errorf("metadata mismatch (-want +got):\n%s", diff)
	}
}

// TestStatsd: the reference's statsd settings become the --statsd-* flags; USE_STATSD=false and DISABLE_STATS=true
// turn statsd off, and a second sink the reference would refuse is refused.
func TestStatsd(t *testing.T) {
	r := translate(t, with(tcpRedis, map[string]string{
		"STATSD_HOST": "statsd.ns", "STATSD_PORT": "9125", "STATSD_PROTOCOL": "udp", "STATS_FLUSH_INTERVAL": "2s",
		"EXTRA_TAGS": "env:prod,team:rl",
	}))
	for flag, want := range map[string]string{
		"statsd-addr": "statsd.ns:9125", "statsd-network": "udp", "statsd-flush-interval": "2s",
		"statsd-tags": "env=prod,team=rl",
	} {
		if got := r.Flags[flag]; got != want {
			t.Errorf("%s = %q, want %q", flag, got, want)
		}
	}
	for _, off := range []map[string]string{{"USE_STATSD": "false", "STATSD_PORT": "9125"}, {"DISABLE_STATS": "true"}} {
		r := translate(t, with(tcpRedis, off))
		if _, ok := r.Flags["statsd-addr"]; ok {
			t.Errorf("%v: statsd-addr %q, want no statsd", off, r.Flags["statsd-addr"])
		}
		if _, ok := off["STATSD_PORT"]; ok && !ignored(r, "STATSD_PORT") {
			t.Errorf("%v: STATSD_PORT not ignored: %v", off, r.Ignored)
		}
	}
	for _, tt := range []struct {
		vars map[string]string
		bad  string
	}{
		{map[string]string{"USE_DOG_STATSD": "true"}, "USE_DOG_STATSD"},
		{map[string]string{"STATSD_PROTOCOL": "unix"}, "STATSD_PROTOCOL"},
		{map[string]string{"STATS_FLUSH_INTERVAL": "0s"}, "STATS_FLUSH_INTERVAL"},
		{map[string]string{"STATSD_PORT": "70000"}, "STATSD_PORT"},
	} {
		_, err := compat.Envoyproxy(env(with(tcpRedis, tt.vars)))
		if ce, ok := errors.AsType[*compat.Error](err); !ok || ce.Name != tt.bad {
			t.Errorf("%v: error %v, want one naming %s", tt.vars, err, tt.bad)
		}
	}
	// DogStatsD alone is not sent, and says so.
	r = translate(t, with(tcpRedis, map[string]string{"USE_STATSD": "false", "USE_DOG_STATSD": "true"}))
	if !ignored(r, "USE_DOG_STATSD") {
		t.Errorf("USE_DOG_STATSD alone: not ignored: %v", r.Ignored)
	}
}

// TestIgnored: variables that change no decision are named with a reason, and only when set.
func TestIgnored(t *testing.T) {
	vars := with(tcpRedis, map[string]string{
		"USE_STATSD": "true", "STATSD_HOST": "statsd", "STATSD_PORT": "8125", "EXTRA_TAGS": "env:prod,team:rl",
		"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":9090", "GOSTATS_FLUSH_INTERVAL_SECONDS": "",
		"TRACING_SERVICE_NAME": "rl", "RESPONSE_DYNAMIC_METADATA": "true", "MEMCACHE_HOST_PORT": "m:11211",
		"XDS_CLIENT_BACKOFF_JITTER": "true", "RUNTIME_IGNOREDOTFILES": "false", "PROTO": "tcp4",
		"FORCE_START_WITHOUT_INITIAL_CONFIG": "true", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "false",
	})
	r := translate(t, vars)
	var names []string
	for _, ig := range r.Ignored {
		names = append(names, ig.Name)
	}
	want := []string{"FORCE_START_WITHOUT_INITIAL_CONFIG", "GOSTATS_FLUSH_INTERVAL_SECONDS",
		"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "MEMCACHE_HOST_PORT", "PROMETHEUS_ADDR", "PROTO",
		"RESPONSE_DYNAMIC_METADATA", "RUNTIME_IGNOREDOTFILES", "TRACING_SERVICE_NAME",
		"USE_PROMETHEUS", "XDS_CLIENT_BACKOFF_JITTER"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("Ignored mismatch (-want +got):\n%s", diff)
	}
	// Over xDS both are honoured: the reference is healthy before its first
	// rules with FORCE_START_WITHOUT_INITIAL_CONFIG alone.
	for _, tt := range []struct{ force, loaded, wait string }{
		{"", "", "true"}, {"true", "", "false"}, {"true", "true", "true"}, {"false", "true", "true"},
	} {
		vars := with(tcpRedis, map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW"})
		if tt.force != "" {
			vars["FORCE_START_WITHOUT_INITIAL_CONFIG"] = tt.force
		}
		if tt.loaded != "" {
			vars["HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED"] = tt.loaded
		}
		r := translate(t, vars)
		if got := r.Flags["xds-wait-for-rules"]; got != tt.wait || len(r.Ignored) > 0 {
			t.Errorf("xDS, FORCE_START_WITHOUT_INITIAL_CONFIG=%q, HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=%q: xds-wait-for-rules %q, want %q; Ignored %v",
				tt.force, tt.loaded, got, tt.wait, r.Ignored)
		}
	}
	// USE_STATSD defaults to true in the reference, but unset it is not named.
	r = translate(t, tcpRedis)
	if len(r.Ignored) > 0 {
		t.Errorf("nothing set, Ignored %v", r.Ignored)
	}
	// Honoured when false.
	r = translate(t, with(tcpRedis, map[string]string{"USE_STATSD": "false", "RUNTIME_IGNOREDOTFILES": "true"}))
	if !slices.Contains(r.Set, "USE_STATSD") || !slices.Contains(r.Set, "RUNTIME_IGNOREDOTFILES") || len(r.Ignored) > 0 {
		t.Errorf("Set %v, Ignored %v", r.Set, r.Ignored)
	}
}

// TestErrors: malformed values, as envconfig would refuse them (the reference then does not start), and settings
// ratelimitd cannot honour, each named; every error is reported, sorted by variable.
func TestErrors(t *testing.T) {
	vars := with(tcpRedis, map[string]string{
		"SHADOW_MODE":                      "yes",
		"RUNTIME_WATCH_ROOT":               "", // empty is malformed for a boolean, as envconfig reads it
		"PORT":                             "http",
		"DEBUG_PORT":                       "70000",
		"GRPC_MAX_CONNECTION_AGE":          "24",
		"NEAR_LIMIT_RATIO":                 "high",
		"TRACING_SAMPLING_RATE":            "all",
		"EXTRA_TAGS":                       "env=prod",
		"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "4M",
		"LOG_LEVEL":                        "verbose",
		"CONFIG_TYPE":                      "file",
		"MERGE_DOMAIN_CONFIG":              "true",
		"GRPC_UDS":                         "/tmp/ratelimit.sock",
		"GRPC_SERVER_USE_TLS":              "true",
		"LIMIT_RESPONSE_HEADERS_ENABLED":   "true",
		"LIMIT_LIMIT_HEADER":               "X Limit",
		"LOCAL_CACHE_SIZE_IN_BYTES":        "-1",
		"REDIS_POOL_SIZE":                  "-2",
	})
	r, err := compat.Envoyproxy(env(vars))
	checkFlags(t, r)
	if err == nil {
		t.Fatal("no error")
	}
	var names []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		ce, ok := errors.AsType[*compat.Error](e)
		if !ok {
			t.Fatalf("%v is not a *compat.Error", e)
		}
		names = append(names, ce.Name)
	}
	want := []string{"CONFIG_TYPE", "DEBUG_PORT", "EXTRA_TAGS", "GRPC_MAX_CONNECTION_AGE", "GRPC_SERVER_USE_TLS",
		"GRPC_UDS", "LIMIT_LIMIT_HEADER", "LOCAL_CACHE_SIZE_IN_BYTES", "LOG_LEVEL", "MERGE_DOMAIN_CONFIG",
		"NEAR_LIMIT_RATIO", "PORT", "REDIS_POOL_SIZE", "RUNTIME_WATCH_ROOT", "SHADOW_MODE", "TRACING_SAMPLING_RATE",
		"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("errors mismatch (-want +got):\n%s\n%v", diff, err)
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		name, reason, _ := strings.Cut(line, ": ")
		if !slices.Contains(want, name) || reason == "" {
			t.Errorf("line %q does not name a variable and a reason", line)
		}
	}
}

// TestDeployments: environments as deployments of the reference set them translate without error.
func TestDeployments(t *testing.T) {
	for _, tt := range []struct {
		name string
		vars map[string]string
		want map[string]string
	}{
		{"manifest with a ConfigMap", map[string]string{
			"LOG_LEVEL": "debug", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis.default.svc:6379", "USE_STATSD": "false",
			"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false",
			"RUNTIME_IGNOREDOTFILES": "true",
		}, map[string]string{"config": "/data/ratelimit/config", "backend": "redis://redis.default.svc:6379", "log-level": "debug"}},
		{"gateway over xDS, with mutual TLS", map[string]string{
			"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true",
			"RUNTIME_WATCH_ROOT": "false", "LOG_LEVEL": "info", "REDIS_SOCKET_TYPE": "tcp",
			"REDIS_URL": "redis.redis-system.svc.cluster.local:6379", "USE_STATSD": "true", "STATSD_HOST": "localhost",
			"STATSD_PORT": "9125", "CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "envoy-gateway:18001",
			"CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true",
			"CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "/certs/tls.crt", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": "/certs/tls.key",
			"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "/certs/ca.crt", "GRPC_SERVER_USE_TLS": "true",
			"GRPC_SERVER_TLS_CERT": "/certs/tls.crt", "GRPC_SERVER_TLS_KEY": "/certs/tls.key",
			"GRPC_CLIENT_TLS_CACERT": "/certs/ca.crt", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
			"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":19001", "PROMETHEUS_MAPPER_YAML": "/etc/statsd-exporter/conf.yaml",
		}, map[string]string{"config": "", "xds-server": "envoy-gateway:18001", "xds-node-id": "envoy-ratelimit",
			"xds-tls": "true", "xds-tls-ca": "/certs/ca.crt", "grpc-tls-client-ca": "/certs/ca.crt",
			"backend": "redis://redis.redis-system.svc.cluster.local:6379", "log-level": "info",
			"xds-wait-for-rules": "false"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := translate(t, tt.vars)
			for flag, want := range tt.want {
				if got, ok := r.Flags[flag]; got != want || ok != (want != "") {
					t.Errorf("%s = %q (set %v), want %q", flag, got, ok, want)
				}
			}
			if len(r.Set)+len(r.Ignored) != len(tt.vars) {
				t.Errorf("%d variables, %d named: Set %v, Ignored %v", len(tt.vars), len(r.Set)+len(r.Ignored), r.Set, r.Ignored)
			}
		})
	}
}
