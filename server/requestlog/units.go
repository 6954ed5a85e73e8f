package requestlog

import (
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// envoyWindows are the lengths of Envoy's units (typev3.RateLimitUnit) as
// ratelimitd takes them, by unit: a month is 30 days, a year 365. The
// units missing (UNKNOWN, WEEK) have none.
var envoyWindows = [...]time.Duration{
	typev3.RateLimitUnit_SECOND: time.Second,
	typev3.RateLimitUnit_MINUTE: time.Minute,
	typev3.RateLimitUnit_HOUR:   time.Hour,
	typev3.RateLimitUnit_DAY:    24 * time.Hour,
	typev3.RateLimitUnit_MONTH:  30 * 24 * time.Hour,
	typev3.RateLimitUnit_YEAR:   365 * 24 * time.Hour,
}

// EnvoyWindow returns the length of Envoy's unit u (a
// typev3.RateLimitUnit) in a limit override, as the server and the log's
// readers take it; false for a unit ratelimitd does not take.
func EnvoyWindow(u int32) (time.Duration, bool) {
	if u <= 0 || int(u) >= len(envoyWindows) || envoyWindows[u] == 0 {
		return 0, false
	}
	return envoyWindows[u], true
}

// envoyUnitsLongestFirst are the units of envoyWindows, longest first, as
// a line names the unit of a limit override.
var envoyUnitsLongestFirst = [...]typev3.RateLimitUnit{
	typev3.RateLimitUnit_YEAR, typev3.RateLimitUnit_MONTH, typev3.RateLimitUnit_DAY,
	typev3.RateLimitUnit_HOUR, typev3.RateLimitUnit_MINUTE, typev3.RateLimitUnit_SECOND,
}
