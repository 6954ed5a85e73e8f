package compat

import (
	"encoding/json"
	"net"
	"path/filepath"
	"strconv"
	"strings"
)

// The reference's defaults that Envoyproxy applies.
const (
	defaultRuntimeRoot = "/srv/runtime_data/current"
	defaultAppDir      = "config"
	defaultRedisURL    = "/var/run/nutcracker/ratelimit.sock"
	// defaultPerSecondURL is REDIS_PERSECOND_URL's default, twemproxy's socket too.
	defaultPerSecondURL = "/var/run/nutcracker/ratelimitpersecond.sock"
	defaultXDSServer    = "localhost:18000"
	defaultXDSNodeID    = "default"
	defaultOTLPGRPC     = "localhost:4317"
	// BytesPerCacheEntry converts LOCAL_CACHE_SIZE_IN_BYTES to ratelimitd's --local-cache-size, which counts
	// entries: about what one entry of the reference's cache takes (a 24-byte header, a key of some 60 to 100
	// bytes naming the domain, descriptor and window, and the count).
	BytesPerCacheEntry = 128
)

// listeners translates the listen addresses, connection ages and gRPC TLS.
func (t *translator) listeners() {
	t.flags["http-addr"] = t.hostPort("HOST", "PORT", 8080, "0.0.0.0")
	t.flags["grpc-addr"] = t.hostPort("GRPC_HOST", "GRPC_PORT", 8081, "0.0.0.0")
	t.flags["debug-addr"] = t.hostPort("DEBUG_HOST", "DEBUG_PORT", 6070, "0.0.0.0")
	if t.str("GRPC_UDS", "") != "" {
		t.fail("GRPC_UDS", "", "ratelimitd serves gRPC on TCP only (GRPC_HOST:GRPC_PORT, --grpc-addr): "+
			"Envoy's cluster would name a socket nobody listens on; point it at a TCP address")
	} else {
		t.honour("GRPC_UDS")
	}
	if p := t.str("PROTO", "tcp"); p == "tcp" {
		t.honour("PROTO")
	} else {
		t.ignore("ratelimitd listens on tcp, IPv4 and IPv6 alike", "PROTO")
	}
	for name, flag := range map[string]string{
		"GRPC_MAX_CONNECTION_AGE":       "grpc-max-connection-age",
		"GRPC_MAX_CONNECTION_AGE_GRACE": "grpc-max-connection-age-grace",
	} {
		if d, ok := t.duration(name); ok {
			t.flags[flag] = d.String()
			t.honour(name)
		}
	}
	t.grpcTLS()
}

// hostPort returns host:port of the two variables, as the reference joins them, the host defaulting to defHost.
func (t *translator) hostPort(hostVar, portVar string, def int64, defHost string) string {
	port, ok := t.integer(portVar)
	if !ok {
		port = def
	}
	if port < 0 || port > 65535 {
		t.fail(portVar, "", "%d is not a TCP port", port)
		port = def
	}
	t.honour(hostVar, portVar)
	return net.JoinHostPort(t.str(hostVar, defHost), strconv.FormatInt(port, 10))
}

// grpcTLS translates the gRPC listener's TLS, which the reference serves only with GRPC_SERVER_USE_TLS.
func (t *translator) grpcTLS() {
	files := []string{"GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT", "GRPC_CLIENT_TLS_SAN"}
	if !t.boolean("GRPC_SERVER_USE_TLS", false) {
		t.honour("GRPC_SERVER_USE_TLS")
		t.ignore("GRPC_SERVER_USE_TLS is not true: the reference serves gRPC without TLS", files...)
		return
	}
	cert, key := t.str("GRPC_SERVER_TLS_CERT", ""), t.str("GRPC_SERVER_TLS_KEY", "")
	if cert == "" || key == "" {
		t.fail("GRPC_SERVER_USE_TLS", "", "true, but GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY do not both name a file")
		return
	}
	t.flags["grpc-tls-cert"], t.flags["grpc-tls-key"] = cert, key
	t.honour("GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY")
	ca := t.str("GRPC_CLIENT_TLS_CACERT", "")
	if ca != "" {
		t.flags["grpc-tls-client-ca"] = ca
		t.honour("GRPC_CLIENT_TLS_CACERT")
	}
	switch san := t.str("GRPC_CLIENT_TLS_SAN", ""); {
	case san == "":
	case ca == "":
		t.ignore("without GRPC_CLIENT_TLS_CACERT no client certificate is asked for", "GRPC_CLIENT_TLS_SAN")
	case strings.Contains(san, ","):
		t.fail("GRPC_CLIENT_TLS_SAN", "", "%q holds a comma: ratelimitd would read a list of SANs", clip(san))
	default:
		t.flags["grpc-tls-allowed-sans"] = san
		t.honour("GRPC_CLIENT_TLS_SAN")
	}
}

// logging translates LOG_LEVEL, as logrus names levels in any case, and LOG_FORMAT.
func (t *translator) logging() {
	level := t.str("LOG_LEVEL", "WARN")
	switch strings.ToLower(level) {
	case "trace", "debug":
		t.flags["log-level"] = "debug"
	case "info":
		t.flags["log-level"] = "info"
	case "warn", "warning":
		t.flags["log-level"] = "warn"
	case "error", "fatal", "panic":
		t.flags["log-level"] = "error"
	default:
		t.fail("LOG_LEVEL", "", "%q is not a level (want trace, debug, info, warn, error, fatal or panic)", clip(level))
	}
	// The reference writes JSON for "json" in any case, and text for anything else.
	t.flags["log-format"] = "text"
	if strings.EqualFold(t.str("LOG_FORMAT", "text"), "json") {
		t.flags["log-format"] = "json"
	}
	t.honour("LOG_LEVEL", "LOG_FORMAT")
}

// rules translates where the rules come from: a directory, or an xDS server.
func (t *translator) rules() {
	runtime := []string{"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY", "RUNTIME_WATCH_ROOT", "RUNTIME_IGNOREDOTFILES"}
	xds := []string{
		"CONFIG_GRPC_XDS_NODE_ID", "CONFIG_GRPC_XDS_NODE_METADATA", "CONFIG_GRPC_XDS_SERVER_URL",
		"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
		"CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "XDS_CLIENT_BACKOFF_MAX_INTERVAL", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
		"XDS_CLIENT_BACKOFF_JITTER", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
	}
	switch typ := t.str("CONFIG_TYPE", "FILE"); typ {
	case "FILE":
		t.honour("CONFIG_TYPE")
		t.files()
		t.ignore("CONFIG_TYPE is FILE: the rules come from files", xds...)
	case "GRPC_XDS_SOTW":
		t.honour("CONFIG_TYPE")
		t.xds()
		t.ignore("CONFIG_TYPE is GRPC_XDS_SOTW: the rules come over xDS", runtime...)
	default:
		t.fail("CONFIG_TYPE", "", "%q is not FILE or GRPC_XDS_SOTW", clip(typ))
	}
	if t.boolean("MERGE_DOMAIN_CONFIG", false) {
		t.fail("MERGE_DOMAIN_CONFIG", "", "ratelimitd does not merge a domain defined in several files or resources "+
			"(it refuses the rules, naming both places): put each domain's descriptors in one file or resource")
	} else {
		t.honour("MERGE_DOMAIN_CONFIG")
	}
	// Over xDS, the reference waits for the first rules before it serves,
	// unless FORCE_START_WITHOUT_INITIAL_CONFIG; then it is healthy at once
	// unless HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED.
	force, loaded := t.boolean("FORCE_START_WITHOUT_INITIAL_CONFIG", false), t.boolean("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false)
	overXDS := t.str("CONFIG_TYPE", "FILE") == "GRPC_XDS_SOTW"
	switch {
	case overXDS:
		t.flags["xds-wait-for-rules"] = strconv.FormatBool(!force || loaded)
		t.honour("FORCE_START_WITHOUT_INITIAL_CONFIG", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED")
	case force:
		t.ignore("rule files load at startup (an empty directory loads)", "FORCE_START_WITHOUT_INITIAL_CONFIG")
	default:
		t.honour("FORCE_START_WITHOUT_INITIAL_CONFIG")
	}
	if !overXDS {
		if loaded {
			t.honour("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED")
		} else {
			t.ignore("ratelimitd reports not ready until rules have loaded", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED")
		}
	}
}

// files translates the rule directory: the reference reads RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY,
// whether it watches the root (RUNTIME_WATCH_ROOT) or the directory itself.
func (t *translator) files() {
	t.flags["config"] = filepath.Join(t.str("RUNTIME_ROOT", defaultRuntimeRoot), t.str("RUNTIME_SUBDIRECTORY", ""),
		t.str("RUNTIME_APPDIRECTORY", defaultAppDir))
	// Either way of watching reloads on changes, as ratelimitd's watcher does.
	t.honour("RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY", "RUNTIME_WATCH_ROOT")
	if t.boolean("RUNTIME_IGNOREDOTFILES", false) {
		t.honour("RUNTIME_IGNOREDOTFILES")
	} else {
		t.ignore("ratelimitd never reads files whose names start with '.'", "RUNTIME_IGNOREDOTFILES")
	}
}

// xds translates the xDS client's settings.
func (t *translator) xds() {
	t.flags["xds-server"] = t.str("CONFIG_GRPC_XDS_SERVER_URL", defaultXDSServer)
	t.flags["xds-node-id"] = t.str("CONFIG_GRPC_XDS_NODE_ID", defaultXDSNodeID)
	t.honour("CONFIG_GRPC_XDS_SERVER_URL", "CONFIG_GRPC_XDS_NODE_ID")
	// The reference reads "k1=v1,k2=v2", each value a string, and skips items without '='.
	md := map[string]string{}
	for item := range strings.SplitSeq(t.str("CONFIG_GRPC_XDS_NODE_METADATA", ""), ",") {
		if k, v, ok := strings.Cut(item, "="); ok {
			md[k] = v
		}
	}
	if len(md) > 0 {
		b, err := json.Marshal(md)
		if err != nil {
			t.fail("CONFIG_GRPC_XDS_NODE_METADATA", "", "%v", err)
		} else {
			t.flags["xds-node-metadata"] = string(b)
		}
	}
	t.honour("CONFIG_GRPC_XDS_NODE_METADATA")
	t.keyValues("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "xds-headers", "header name", func(k, _ string) bool {
		return strings.Contains(k, "=")
	})
	if d, ok := t.duration("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL"); ok {
		t.flags["xds-retry-interval"] = d.String()
		t.honour("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL")
	}
	t.ignore("ratelimitd's xDS client backs off on its own, from --xds-retry-interval",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "XDS_CLIENT_BACKOFF_MAX_INTERVAL", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
		"XDS_CLIENT_BACKOFF_JITTER")
	t.ignore("ratelimitd's xDS client sets its own largest message", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES")
	files := map[string]string{
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "xds-tls-ca",
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT":   "xds-tls-cert",
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY":    "xds-tls-key",
		"CONFIG_GRPC_XDS_SERVER_TLS_SAN":    "xds-tls-server-name",
	}
	if !t.boolean("CONFIG_GRPC_XDS_SERVER_USE_TLS", false) {
		t.honour("CONFIG_GRPC_XDS_SERVER_USE_TLS")
		for name := range files {
			t.ignore("CONFIG_GRPC_XDS_SERVER_USE_TLS is not true: the reference connects without TLS", name)
		}
		return
	}
	t.flags["xds-tls"] = "true"
	t.honour("CONFIG_GRPC_XDS_SERVER_USE_TLS")
	for name, flag := range files {
		if v := t.str(name, ""); v != "" {
			t.flags[flag] = v
			t.honour(name)
		}
	}
}
