// Package engine is ratelimitd's decision engine, which every face of
// package server (Envoy's RLS over gRPC and /json, the native API) runs.
// It knows no transport: it imports neither gRPC nor net/http (make
// layers checks it), so it has its own request (Request), answer (Answer,
// Verdict, Header) and errors (InvalidError, ErrStoreUnavailable,
// ErrShuttingDown), which each face decodes into, encodes from and maps
// to its own codes.
//
// Where things live:
//
//	request.go   the request a face decodes, and the engine's errors
//	engine.go    Decide: bounds, matching, counter keys, the store call, verdicts, failure modes
//	headers.go   the response header values (IETF RateLimit, legacy, or none)
//	explain.go   Explain: how the rules would decide a request, on which counters
//	hotkeys.go   the hot keys observed (package server/hotkeys keeps them)
//	unknown.go   the requests for domains without rules
//	metrics.go   what the decision metrics count, handed to a Metrics
//	options.go   Engine, Options, FailureMode, DecideRequest (for replay)
//
// A request walks through Decide once: CheckRequest and the descriptors'
// bounds, config.Match per descriptor and its counter key's prefix
// (domain, entries, length-prefixed: backend.AppendKeyPart), one store
// request per limit not replaced, backend.Store.Take for them all (bans
// decided without it), one Verdict per descriptor, then the header
// values. The metrics go out through Metrics, which package server
// implements with Prometheus and statsd, both of which import net/http.
package engine
