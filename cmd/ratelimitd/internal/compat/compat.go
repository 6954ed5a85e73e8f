// Package compat reads envoyproxy/ratelimit's environment for ratelimitd's --compat envoyproxy.
//
// Envoyproxy reads the variables the reference service (envoyproxy/ratelimit) documents, parses their values as the
// reference does (kelseyhightower/envconfig: booleans by strconv.ParseBool, integers by strconv.ParseInt with base 0,
// durations by time.ParseDuration, maps as "k1:v1,k2:v2"), and says what each asks of ratelimitd as flag values.
// Like envconfig, it tells an unset variable from an empty one: an empty string variable is the empty string, and an
// empty boolean, number or duration is malformed (the reference would not start).
//
// The daemon, with --compat envoyproxy, calls Envoyproxy; gives each entry of Result.Flags to its flag unless the
// command line or the flag's RATELIMITD_* variable set it; passes the error through Moot with the flags so set, and
// fails startup on what is left; logs Result.Set and Result.Ignored; and, when the rules come from the directory in
// Flags["config"], calls CheckRuleFiles on it. Envoyproxy itself does no I/O.
package compat

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

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

// Error is one variable that cannot be honoured without changing decisions, or whose value is malformed. Its
// message never quotes the value of a variable that may hold a secret (REDIS_URL, REDIS_AUTH, ...).
type Error struct {
	// Name is the variable.
	Name string
	// Flag, when not empty, is the ratelimitd flag that replaces what the variable asks for (e.g. "backend" for
	// REDIS_SOCKET_TYPE=unix): set on the command line or as RATELIMITD_*, it makes this error moot (see Moot).
	Flag string
	// Err is the reason.
	Err error
}

// Error returns the variable's name and the reason.
func (e *Error) Error() string { return e.Name + ": " + e.Err.Error() }

// Unwrap returns the reason.
func (e *Error) Unwrap() error { return e.Err }

// Moot returns err, from Envoyproxy, without its *Errors whose Flag explicit reports as set on the command line or
// as RATELIMITD_*: nil when none is left.
func Moot(err error, explicit func(flag string) bool) error {
	if err == nil {
		return nil
	}
	var errs []error
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		errs = joined.Unwrap()
	} else {
		errs = []error{err}
	}
	var kept []error
	for _, e := range errs {
		if ce, ok := errors.AsType[*Error](e); ok && ce.Flag != "" && explicit(ce.Flag) {
			continue
		}
		kept = append(kept, e)
	}
	return errors.Join(kept...)
}

// Envoyproxy translates env. The error names every variable that cannot be honoured without changing decisions
// (e.g. BACKEND_TYPE=memcache) or whose value is malformed, with the reason (errors.Join of one error per variable).
func Envoyproxy(env Lookup) (Result, error) {
	t := &translator{env: env, flags: map[string]string{}, set: map[string]bool{}, errs: map[string]*Error{}}
	// The reference's defaults that decide answers: fixed windows, no headers, an error while Redis fails.
	t.flags["default-algorithm"] = "fixed_window"
	t.flags["failure-mode"] = "error"
	// Its answers on the wire: limits named only by their rule's name, resets in whole seconds.
	t.flags["envoyproxy-answers"] = "true"
	t.validate()
	t.listeners()
	t.logging()
	t.rules()
	t.store()
	t.answers()
	t.telemetry()
	return t.result()
}

// Variables returns, sorted, the names of the reference's variables that Envoyproxy reads (and so honours, ignores
// or refuses by name), and those of the OpenTelemetry exporter it consults for tracing.
func Variables() []string {
	return slices.Sorted(maps.Keys(known))
}

// translator accumulates what Envoyproxy finds.
type translator struct {
	env     Lookup
	flags   map[string]string
	set     map[string]bool   // honoured variables that were set
	ignored []Ignored         // set, not honoured, harmless
	errs    map[string]*Error // by variable, the first reason
}

// result returns the Result and the joined errors, all sorted by variable name.
func (t *translator) result() (Result, error) {
	r := Result{Flags: t.flags, Set: slices.Sorted(maps.Keys(t.set))}
	for _, ig := range t.ignored {
		if t.errs[ig.Name] == nil && !t.set[ig.Name] && !slices.ContainsFunc(r.Ignored, func(o Ignored) bool { return o.Name == ig.Name }) {
			r.Ignored = append(r.Ignored, ig)
		}
	}
	slices.SortFunc(r.Ignored, func(a, b Ignored) int { return strings.Compare(a.Name, b.Name) })
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(t.errs)) {
		errs = append(errs, t.errs[name])
	}
	return r, errors.Join(errs...)
}

// lookup returns the variable's value and whether it is set.
func (t *translator) lookup(name string) (string, bool) {
	if t.env == nil {
		return "", false
	}
	return t.env(name)
}

// isSet reports whether the variable is set, even empty.
func (t *translator) isSet(name string) bool {
	_, ok := t.lookup(name)
	return ok
}

// honour records name as honoured, if it is set.
func (t *translator) honour(names ...string) {
	for _, name := range names {
		if t.isSet(name) {
			t.set[name] = true
		}
	}
}

// ignore records each name that is set as ignored, for reason.
func (t *translator) ignore(reason string, names ...string) {
	for _, name := range names {
		if t.isSet(name) {
			t.ignored = append(t.ignored, Ignored{Name: name, Reason: reason})
		}
	}
}

// fail records that name cannot be honoured; flag, when not empty, is the ratelimitd flag that makes it moot. Only
// the first reason of a variable is kept.
func (t *translator) fail(name, flag string, format string, args ...any) {
	if t.errs[name] == nil {
		t.errs[name] = &Error{Name: name, Flag: flag, Err: fmt.Errorf(format, args...)}
	}
}
