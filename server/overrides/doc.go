// Package overrides is ratelimitd's runtime overrides: an operator raises
// or lowers one descriptor's limits during an incident, on every replica
// and within a second, without editing rule files or restarting anything.
//
// An Override names a domain and a request descriptor's exact entries,
// and limits written as a rule file's rate_limits are (compiled by
// config.CompileLimits). When a rule matches a descriptor of exactly that
// domain and those entries, the override's limits replace the rule's for
// that descriptor only (see engine.RuntimeOverride).
//
// Overrides are kept where every replica sees them, in the counter
// store's backend.OverrideStore (the memory store: the process; Redis:
// Redis, so that they outlive the daemons). A Manager writes them there
// (Set, Delete, with an audit log line and a metric each), resets
// counters (Reset, through backend.Resetter), and runs the sync loop
// (Run) that polls the store and swaps the overrides in force into the
// engine as one immutable set; while the store cannot be read it keeps
// the last set it saw and says so (State, and a metric).
//
// The HTTP API (package admin) and the gRPC OverridesService (package
// server) are faces over a Manager.
//
// Where things live:
//
//	override.go  Override, its JSON and its checks (Compile)
//	manager.go   Manager: Set, Delete, List, Reset
//	sync.go      the sync loop and the set in force
//	metrics.go   the metrics
package overrides
