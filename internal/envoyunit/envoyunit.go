// Package envoyunit is the one table of Envoy's rate limit units: their
// names in rule files, their lengths as ratelimitd takes them (a month is
// 30 days, a year 365, as envoyproxy/ratelimit takes them), and their
// numbers in Envoy's protos. Rule files (config), limit overrides and
// responses (server), the request log (server/requestlog) and the load
// tools read it; it imports nothing of Envoy's, so that none of them
// needs more than the numbers.
//
// Envoy numbers the units alike in envoy.type.v3.RateLimitUnit, which a
// request's limit override names, and in
// envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit, which a
// response names, but for WEEK: only responses have it (7), so an
// override cannot be a week.
package envoyunit

import (
	"strings"
	"time"
)

// A Unit is one of Envoy's rate limit units.
type Unit struct {
	// Name is the unit in rule files, lower case: "second" ... "year".
	Name string
	// EnvoyName is its name in Envoy's protos: "SECOND" ... "YEAR".
	EnvoyName string
	// Envoy is its number in Envoy's protos: 1 for SECOND ... 7 for WEEK.
	Envoy int32
	// Window is its length.
	Window time.Duration
	// Override reports whether a limit override can name it
	// (envoy.type.v3.RateLimitUnit has it).
	Override bool
}

const day = 24 * time.Hour

// units are Envoy's units, longest first.
var units = [...]Unit{
	{Name: "year", EnvoyName: "YEAR", Envoy: 6, Window: 365 * day, Override: true},
	{Name: "month", EnvoyName: "MONTH", Envoy: 5, Window: 30 * day, Override: true},
	{Name: "week", EnvoyName: "WEEK", Envoy: 7, Window: 7 * day},
	{Name: "day", EnvoyName: "DAY", Envoy: 4, Window: day, Override: true},
	{Name: "hour", EnvoyName: "HOUR", Envoy: 3, Window: time.Hour, Override: true},
	{Name: "minute", EnvoyName: "MINUTE", Envoy: 2, Window: time.Minute, Override: true},
	{Name: "second", EnvoyName: "SECOND", Envoy: 1, Window: time.Second, Override: true},
}

// All returns Envoy's units, longest first.
func All() []Unit { return units[:] }

// ByName returns the unit a rule file names, in any case.
func ByName(name string) (Unit, bool) {
	for _, u := range units {
		if strings.EqualFold(u.Name, name) {
			return u, true
		}
	}
	return Unit{}, false
}

// ByEnvoy returns the unit whose number in Envoy's protos is n.
func ByEnvoy(n int32) (Unit, bool) {
	for i := range units { // by index: no copy of the units passed over
		if units[i].Envoy == n {
			return units[i], true
		}
	}
	return Unit{}, false
}

// OverrideWindow returns the length of the unit a limit override names by
// its number (an envoy.type.v3.RateLimitUnit); false for UNKNOWN, or a
// number that is no unit of overrides.
func OverrideWindow(n int32) (time.Duration, bool) {
	u, ok := ByEnvoy(n)
	if !ok || !u.Override {
		return 0, false
	}
	return u.Window, true
}

// ByWindow returns the unit whose length is w.
func ByWindow(w time.Duration) (Unit, bool) {
	for i := range units { // by index: no copy of the units passed over
		if units[i].Window == w {
			return units[i], true
		}
	}
	return Unit{}, false
}
