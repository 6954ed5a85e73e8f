package compat

// kind is how the reference parses a variable's value.
type kind uint8

const (
	text     kind = iota // a string: any value
	boolean              // strconv.ParseBool
	integer              // strconv.ParseInt, base 0
	dur                  // time.ParseDuration
	float32k             // strconv.ParseFloat, 32 bits
	float64k             // strconv.ParseFloat, 64 bits
	pairMap              // "k1:v1,k2:v2"
)

// known are the variables Envoyproxy reads, with how the reference parses each: those of the reference's settings
// (every release's), of its statsd library, and the OpenTelemetry exporter's it consults for tracing.
var known = map[string]kind{
	// Listeners.
	"PROTO": text, "HOST": text, "PORT": integer, "DEBUG_HOST": text, "DEBUG_PORT": integer,
	"GRPC_UDS": text, "GRPC_HOST": text, "GRPC_PORT": integer,
	"GRPC_MAX_CONNECTION_AGE": dur, "GRPC_MAX_CONNECTION_AGE_GRACE": dur,
	"GRPC_SERVER_USE_TLS": boolean, "GRPC_SERVER_TLS_CERT": text, "GRPC_SERVER_TLS_KEY": text,
	"GRPC_CLIENT_TLS_CACERT": text, "GRPC_CLIENT_TLS_SAN": text,
	// Logs.
	"LOG_LEVEL": text, "LOG_FORMAT": text,
	// Rules.
	"CONFIG_TYPE": text, "FORCE_START_WITHOUT_INITIAL_CONFIG": boolean,
	"RUNTIME_ROOT": text, "RUNTIME_SUBDIRECTORY": text, "RUNTIME_APPDIRECTORY": text,
	"RUNTIME_IGNOREDOTFILES": boolean, "RUNTIME_WATCH_ROOT": boolean,
	"MERGE_DOMAIN_CONFIG": boolean, "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": boolean,
	// Rules over xDS.
	"CONFIG_GRPC_XDS_NODE_ID": text, "CONFIG_GRPC_XDS_NODE_METADATA": text, "CONFIG_GRPC_XDS_SERVER_URL": text,
	"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": dur, "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": pairMap,
	"CONFIG_GRPC_XDS_SERVER_USE_TLS": boolean, "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": text,
	"CONFIG_GRPC_XDS_CLIENT_TLS_KEY": text, "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": text,
	"CONFIG_GRPC_XDS_SERVER_TLS_SAN":      text,
	"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": dur, "XDS_CLIENT_BACKOFF_MAX_INTERVAL": dur,
	"XDS_CLIENT_BACKOFF_RANDOM_FACTOR": float64k, "XDS_CLIENT_BACKOFF_JITTER": boolean,
	"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": integer,
	// Counters: all stores.
	"BACKEND_TYPE": text, "EXPIRATION_JITTER_MAX_SECONDS": integer, "LOCAL_CACHE_SIZE_IN_BYTES": integer,
	"NEAR_LIMIT_RATIO": float32k, "CACHE_KEY_PREFIX": text, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": boolean,
	// Redis.
	"REDIS_SOCKET_TYPE": text, "REDIS_TYPE": text, "REDIS_URL": text, "REDIS_POOL_SIZE": integer,
	"REDIS_AUTH": text, "REDIS_SENTINEL_AUTH": text, "REDIS_TLS": boolean, "REDIS_TLS_CLIENT_CERT": text,
	"REDIS_TLS_CLIENT_KEY": text, "REDIS_TLS_CACERT": text, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": boolean,
	"REDIS_TIMEOUT": dur, "REDIS_PIPELINE_WINDOW": dur, "REDIS_PIPELINE_LIMIT": integer,
	"REDIS_USE_EXPLICIT_PIPELINE": boolean, "REDIS_POOL_ON_EMPTY_BEHAVIOR": text,
	"REDIS_POOL_ON_EMPTY_WAIT_DURATION": dur, "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": boolean,
	// The per-second Redis.
	"REDIS_PERSECOND": boolean, "REDIS_PERSECOND_SOCKET_TYPE": text, "REDIS_PERSECOND_TYPE": text,
	"REDIS_PERSECOND_URL": text, "REDIS_PERSECOND_POOL_SIZE": integer, "REDIS_PERSECOND_AUTH": text,
	"REDIS_PERSECOND_SENTINEL_AUTH": text, "REDIS_PERSECOND_TLS": boolean, "REDIS_PERSECOND_TIMEOUT": dur,
	"REDIS_PERSECOND_PIPELINE_WINDOW": dur, "REDIS_PERSECOND_PIPELINE_LIMIT": integer,
	"REDIS_PERSECOND_USE_EXPLICIT_PIPELINE": boolean, "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR": text,
	// Memcache.
	"MEMCACHE_HOST_PORT": text, "MEMCACHE_MAX_IDLE_CONNS": integer, "MEMCACHE_SRV": text,
	"MEMCACHE_SRV_REFRESH": dur, "MEMCACHE_TLS": boolean, "MEMCACHE_TLS_CLIENT_CERT": text,
	"MEMCACHE_TLS_CLIENT_KEY": text, "MEMCACHE_TLS_CACERT": text, "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION": boolean,
	// Answers.
	"SHADOW_MODE": boolean, "RESPONSE_DYNAMIC_METADATA": boolean, "LIMIT_RESPONSE_HEADERS_ENABLED": boolean,
	"LIMIT_LIMIT_HEADER": text, "LIMIT_REMAINING_HEADER": text, "LIMIT_RESET_HEADER": text,
	// Metrics. The GOSTATS_ variables belong to the statsd library, which reads an empty one as unset.
	"USE_STATSD": boolean, "STATSD_HOST": text, "STATSD_PORT": integer, "STATSD_PROTOCOL": text,
	"USE_DOG_STATSD": boolean, "USE_DOG_STATSD_MOGRIFIERS": text, "EXTRA_TAGS": pairMap,
	"STATS_FLUSH_INTERVAL": dur, "DISABLE_STATS": boolean, "USE_PROMETHEUS": boolean, "PROMETHEUS_ADDR": text,
	"PROMETHEUS_PATH": text, "PROMETHEUS_MAPPER_YAML": text,
	"GOSTATS_FLUSH_INTERVAL_SECONDS": text, "GOSTATS_LOGGING_SINK_DISABLED": text,
	"GOSTATS_USE_RESERVOIR_TIMER": text, "GOSTATS_PRUNE_IDLE_SECONDS": text,
	// Tracing.
	"TRACING_ENABLED": boolean, "TRACING_SERVICE_NAME": text, "TRACING_SERVICE_NAMESPACE": text,
	"TRACING_SERVICE_INSTANCE_ID": text, "TRACING_EXPORTER_PROTOCOL": text, "TRACING_SAMPLING_RATE": float64k,
	"OTEL_EXPORTER_OTLP_ENDPOINT": text, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": text,
	"OTEL_EXPORTER_OTLP_INSECURE": text, "OTEL_EXPORTER_OTLP_TRACES_INSECURE": text,
}

// validate records every set variable whose value the reference could not parse: the reference fails to start on
// any of them, whether or not ratelimitd would use it.
func (t *translator) validate() {
	for name, k := range known {
		switch k {
		case boolean:
			t.boolean(name, false)
		case integer:
			t.integer(name)
		case dur:
			t.duration(name)
		case float32k:
			t.float(name, 32)
		case float64k:
			t.float(name, 64)
		case pairMap:
			t.pairs(name)
		case text:
		}
	}
}
