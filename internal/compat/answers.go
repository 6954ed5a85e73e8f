package compat

import (
	"net/url"
	"strconv"
	"strings"

	"github.com/ratelimitd/ratelimitd/server"
)

// answers translates what shapes the answers: the near-limit ratio, shadow mode, headers and dynamic metadata.
func (t *translator) answers() {
	if f, ok := t.float("NEAR_LIMIT_RATIO", 32); ok {
		t.flags["near-limit-ratio"] = strconv.FormatFloat(f, 'g', -1, 32)
		t.honour("NEAR_LIMIT_RATIO")
	}
	if t.isSet("SHADOW_MODE") {
		t.flags["shadow-mode"] = strconv.FormatBool(t.boolean("SHADOW_MODE", false))
		t.honour("SHADOW_MODE")
	}
	names := []string{"LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER"}
	t.flags["response-headers"] = "off"
	t.honour("LIMIT_RESPONSE_HEADERS_ENABLED")
	if !t.boolean("LIMIT_RESPONSE_HEADERS_ENABLED", false) {
		t.ignore("LIMIT_RESPONSE_HEADERS_ENABLED is not true: no headers are sent", names...)
	} else {
		t.flags["response-headers"] = "legacy"
		t.headerNames(names)
	}
	if t.boolean("RESPONSE_DYNAMIC_METADATA", false) {
		t.ignore("ratelimitd's dynamic metadata is that of the matched rules (their metadata field), "+
			"not the reference's", "RESPONSE_DYNAMIC_METADATA")
	} else {
		t.honour("RESPONSE_DYNAMIC_METADATA")
	}
}

// headerNames translates LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER and LIMIT_RESET_HEADER (names, in that order)
// to --response-header-names, when any is set.
func (t *translator) headerNames(names []string) {
	first := ""
	for _, name := range names {
		if first == "" && t.isSet(name) {
			first = name
		}
	}
	if first == "" {
		return
	}
	n := server.LegacyHeaderNames{Limit: t.str(names[0], ""), Remaining: t.str(names[1], ""), Reset: t.str(names[2], "")}
	if err := n.Validate(); err != nil {
		t.fail(first, "response-header-names", "(with %s): %v", strings.Join(names, ", "), err)
		return
	}
	t.flags["response-header-names"] = n.String()
	t.honour(names...)
}

// telemetry translates statsd, Prometheus and tracing settings.
func (t *translator) telemetry() {
	if t.boolean("USE_STATSD", true) {
		t.ignore("no statsd: ratelimitd's metrics are Prometheus's, at /metrics on the HTTP listener", "USE_STATSD")
	} else {
		t.honour("USE_STATSD")
	}
	t.ignore("no statsd: ratelimitd's metrics are Prometheus's, at /metrics on the HTTP listener",
		"STATSD_HOST", "STATSD_PORT", "STATSD_PROTOCOL", "STATS_FLUSH_INTERVAL", "USE_DOG_STATSD",
		"USE_DOG_STATSD_MOGRIFIERS", "GOSTATS_FLUSH_INTERVAL_SECONDS", "GOSTATS_LOGGING_SINK_DISABLED",
		"GOSTATS_USE_RESERVOIR_TIMER", "GOSTATS_PRUNE_IDLE_SECONDS")
	t.ignore("no constant tags: add labels in the scrape configuration", "EXTRA_TAGS")
	t.ignore("ratelimitd's metrics are native Prometheus metrics with labels", "PROMETHEUS_MAPPER_YAML")
	t.ignore("ratelimitd serves its metrics at /metrics on the HTTP listener (HOST:PORT): scrape that",
		"USE_PROMETHEUS", "PROMETHEUS_ADDR", "PROMETHEUS_PATH")
	if t.boolean("DISABLE_STATS", false) {
		t.ignore("ratelimitd always serves /metrics: do not scrape it", "DISABLE_STATS")
	} else {
		t.honour("DISABLE_STATS")
	}
	t.tracing()
}

// tracing translates TRACING_*: ratelimitd exports traces over OTLP/gRPC only.
func (t *translator) tracing() {
	service := []string{"TRACING_SERVICE_NAME", "TRACING_SERVICE_NAMESPACE", "TRACING_SERVICE_INSTANCE_ID"}
	t.ignore("set OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (service.namespace, service.instance.id), "+
		"which ratelimitd's tracing reads", service...)
	otel := []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT",
		"OTEL_EXPORTER_OTLP_TRACES_INSECURE", "OTEL_EXPORTER_OTLP_INSECURE"}
	if !t.boolean("TRACING_ENABLED", false) {
		t.honour("TRACING_ENABLED")
		t.ignore("TRACING_ENABLED is not true", "TRACING_EXPORTER_PROTOCOL", "TRACING_SAMPLING_RATE")
		t.ignore("TRACING_ENABLED is not true", otel...)
		return
	}
	switch p := t.str("TRACING_EXPORTER_PROTOCOL", "http"); p {
	case "grpc":
	case "http":
		t.ignore("ratelimitd exports traces over OTLP/gRPC only: set TRACING_EXPORTER_PROTOCOL=grpc "+
			"and a gRPC collector's endpoint", append(otel, "TRACING_ENABLED", "TRACING_EXPORTER_PROTOCOL", "TRACING_SAMPLING_RATE")...)
		return
	default:
		t.fail("TRACING_EXPORTER_PROTOCOL", "", "%q is not http or grpc", clip(p))
		return
	}
	endpoint, insecure := defaultOTLPGRPC, false
	for _, name := range otel[:2] {
		if v := t.str(name, ""); v != "" {
			endpoint, insecure = otlpEndpoint(v)
			t.honour(name)
			break
		}
	}
	for _, name := range otel[2:] {
		if v := t.str(name, ""); v != "" {
			insecure, _ = strconv.ParseBool(v)
			t.honour(name)
			break
		}
	}
	t.flags["otlp-endpoint"] = endpoint
	if insecure {
		t.flags["otlp-insecure"] = "true"
	}
	rate := 1.0 // the reference's default: every request
	if f, ok := t.float("TRACING_SAMPLING_RATE", 64); ok {
		rate = f
	}
	t.flags["trace-sample-ratio"] = strconv.FormatFloat(rate, 'g', -1, 64)
	t.honour("TRACING_ENABLED", "TRACING_EXPORTER_PROTOCOL", "TRACING_SAMPLING_RATE")
}

// otlpEndpoint returns the host:port of an OTLP/gRPC endpoint, a URL (http:// meaning without TLS, and port 4317
// when it names none) or host:port, and whether it is without TLS.
func otlpEndpoint(v string) (string, bool) {
	u, err := url.Parse(v)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return v, false
	}
	host := u.Host
	if u.Port() == "" {
		host += ":4317"
	}
	return host, u.Scheme == "http"
}
