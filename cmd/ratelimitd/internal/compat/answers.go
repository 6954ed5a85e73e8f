package compat

import (
	"net/url"
	"strconv"
	"strings"
	"time"

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
	t.statsd()
	t.ignore("ratelimitd's metrics are native Prometheus metrics with labels", "PROMETHEUS_MAPPER_YAML")
	t.ignore("ratelimitd serves its metrics at /metrics on the HTTP listener (HOST:PORT): scrape that",
		"USE_PROMETHEUS", "PROMETHEUS_ADDR", "PROMETHEUS_PATH")
	t.tracing()
}

// statsd translates the reference's statsd: on unless USE_STATSD=false or DISABLE_STATS=true, over TCP (gostats's
// STATSD_PROTOCOL) to STATSD_HOST:STATSD_PORT, flushed every STATS_FLUSH_INTERVAL, tagged with EXTRA_TAGS.
func (t *translator) statsd() {
	settings := []string{"STATSD_HOST", "STATSD_PORT", "STATSD_PROTOCOL", "STATS_FLUSH_INTERVAL", "EXTRA_TAGS"}
	gostats := []string{"GOSTATS_FLUSH_INTERVAL_SECONDS", "GOSTATS_LOGGING_SINK_DISABLED", "GOSTATS_USE_RESERVOIR_TIMER",
		"GOSTATS_PRUNE_IDLE_SECONDS"}
	dog := []string{"USE_DOG_STATSD", "USE_DOG_STATSD_MOGRIFIERS"}
	t.honour("USE_STATSD", "DISABLE_STATS")
	if t.boolean("DISABLE_STATS", false) || !t.boolean("USE_STATSD", true) {
		reason := "USE_STATSD is false: no statsd"
		if t.boolean("DISABLE_STATS", false) {
			reason = "DISABLE_STATS is true: no statsd (/metrics is served all the same)"
		}
		t.ignore(reason, settings...)
		t.ignore(reason, gostats...)
		if t.boolean("USE_DOG_STATSD", false) {
			t.ignore("ratelimitd sends no DogStatsD: its statsd lines are the reference's plain statsd "+
				"(USE_STATSD=true); or scrape /metrics", dog...)
		} else {
			t.honour("USE_DOG_STATSD")
			t.ignore("USE_DOG_STATSD is not true", "USE_DOG_STATSD_MOGRIFIERS")
		}
		return
	}
	t.flags["statsd-addr"] = t.hostPort("STATSD_HOST", "STATSD_PORT", 8125, "localhost")
	switch p := t.str("STATSD_PROTOCOL", "tcp"); p {
	case "tcp", "udp":
		t.flags["statsd-network"] = p
		t.honour("STATSD_PROTOCOL")
	default:
		t.fail("STATSD_PROTOCOL", "statsd-network", "%q is not tcp or udp", clip(p))
	}
	interval := 10 * time.Second
	if d, ok := t.duration("STATS_FLUSH_INTERVAL"); ok {
		if d <= 0 {
			t.fail("STATS_FLUSH_INTERVAL", "statsd-flush-interval", "%v is not positive", d)
		}
		interval = d
		t.honour("STATS_FLUSH_INTERVAL")
	}
	t.flags["statsd-flush-interval"] = interval.String()
	t.keyValues("EXTRA_TAGS", "statsd-tags", "tag", func(k, v string) bool {
		return strings.ContainsAny(k, "=,") || strings.Contains(v, ",")
	})
	t.ignore("ratelimitd's statsd writes each flush at once, without a flush timer of its own", "GOSTATS_FLUSH_INTERVAL_SECONDS")
	t.ignore("ratelimitd sends no timers", "GOSTATS_USE_RESERVOIR_TIMER")
	t.ignore("ratelimitd's statsd has no logging sink", "GOSTATS_LOGGING_SINK_DISABLED")
	t.ignore("ratelimitd sends a counter only when it changed, and keeps the counters of the rules in force", "GOSTATS_PRUNE_IDLE_SECONDS")
	if t.boolean("USE_DOG_STATSD", false) {
		// The reference refuses to start with both.
		t.fail("USE_DOG_STATSD", "", "true with USE_STATSD: the reference refuses two statsd sinks, and ratelimitd "+
			"sends only plain statsd; set USE_DOG_STATSD=false")
	} else {
		t.honour("USE_DOG_STATSD")
		t.ignore("USE_DOG_STATSD is not true", "USE_DOG_STATSD_MOGRIFIERS")
	}
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
