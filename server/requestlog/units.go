package requestlog

import "github.com/ratelimitd/ratelimitd/internal/envoyunit"

// overrideUnits are the units a limit override can name (and so a line),
// longest first, from the one table of Envoy's units.
var overrideUnits = func() []envoyunit.Unit {
	var us []envoyunit.Unit
	for _, u := range envoyunit.All() {
		if u.Override {
			us = append(us, u)
		}
	}
	return us
}()
