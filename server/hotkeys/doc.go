// Package hotkeys keeps, per domain, the rate limit counters most
// refused and those nearest their limits, in memory bounded whatever the
// number of distinct counters, at a cost per decision small enough for
// the decision path (see Tracker).
package hotkeys
