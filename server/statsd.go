package server

import (
	"regexp"
	"strings"

	gostats "github.com/lyft/gostats"
)

// envoyproxy/ratelimit's statsd series, which Options.Statsd receives
// beside the Prometheus metrics, so that dashboards and alerts built on
// the reference's keep working. Their names are the reference's, under
// the scope "ratelimit" (with its extra tags):
//
//	service.rate_limit.DOMAIN.KEY.{total_hits,over_limit,near_limit,
//	    within_limit,shadow_mode,over_limit_with_local_cache}
//	service.config_load_success, service.config_load_error
//	service.call.should_rate_limit.redis_error, .service_error
//	service.global_shadow_mode
//
// and, under the scope "ratelimit_server", ShouldRateLimit.total_requests
// (Envoy's calls over gRPC).
//
// where KEY is the rule's path as the reference writes it (see engine.StatKey).
// The counts are ratelimitd's, as documented in docs/migrating.md: a
// refused request's hits count as over_limit only, since none is
// consumed.

// refStats are one rule's counters in the reference's names.
type refStats struct {
	hits, over, near, within, shadow, overCache gostats.Counter
}

// newRefStats returns the counters of the rule whose stat key is key,
// under scope (the reference's service.rate_limit).
func newRefStats(scope gostats.Scope, key string) *refStats {
	key = sanitizeStatName(key)
	return &refStats{
		hits:      scope.NewCounter(key + ".total_hits"),
		over:      scope.NewCounter(key + ".over_limit"),
		near:      scope.NewCounter(key + ".near_limit"),
		within:    scope.NewCounter(key + ".within_limit"),
		shadow:    scope.NewCounter(key + ".shadow_mode"),
		overCache: scope.NewCounter(key + ".over_limit_with_local_cache"),
	}
}

// serviceStats are the reference's counters of the whole service.
type serviceStats struct {
	rateLimit                      gostats.Scope
	configLoadSuccess, configError gostats.Counter
	redisError, serviceError       gostats.Counter
	globalShadowMode               gostats.Counter
	totalRequests                  gostats.Counter
}

// newServiceStats returns the service's counters under root, the scope
// "ratelimit" with the extra tags. The reference counts its gRPC calls
// under a scope "ratelimit_server" beside it, with the same tags.
func newServiceStats(root gostats.Scope, server gostats.Scope) *serviceStats {
	service := root.Scope("service")
	call := service.Scope("call.should_rate_limit")
	return &serviceStats{
		rateLimit:         service.Scope("rate_limit"),
		configLoadSuccess: service.NewCounter("config_load_success"),
		configError:       service.NewCounter("config_load_error"),
		redisError:        call.NewCounter("redis_error"),
		serviceError:      call.NewCounter("service_error"),
		globalShadowMode:  service.NewCounter("global_shadow_mode"),
		totalRequests:     server.Scope("ShouldRateLimit").NewCounter("total_requests"),
	}
}

// ipv4 matches what the reference takes for an IPv4 address in a stat
// name, whose dots it replaces so that they do not split the name.
var ipv4 = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)

// sanitizeStatName makes s a statsd name as the reference does: ':' and
// '|', which end a name on the wire, become '_', and so do the dots of
// IPv4 addresses. So do control characters, which the reference keeps: a
// request value holding a newline would otherwise end the line and
// forge series of its own.
func sanitizeStatName(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == ':' || r == '|' || r < 0x20 || r == 0x7f {
			return '_'
		}
		return r
	}, s)
	return ipv4.ReplaceAllStringFunc(s, func(ip string) string { return strings.ReplaceAll(ip, ".", "_") })
}
