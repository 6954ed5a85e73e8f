// Package client is the Go API of ratelimitd: services ask it, before they
// do work, whether they may.
//
// A Client calls ratelimitd's native API (ratelimit.v1.RateLimitService)
// over a connection the caller owns, and returns a Decision: whether the
// work may proceed, one Status per descriptor (the limit that decided,
// what remains, when the counter resets and when a refused request may be
// retried), and the HTTP headers ratelimitd asks the caller to send.
//
// # Installing
//
// The client is a Go module of its own, github.com/ratelimitd/ratelimitd/client
// (Go 1.25 or later), which requires the generated stubs' module,
// github.com/ratelimitd/ratelimitd/gen; neither depends on the daemon's
// module. Once they are tagged (client/vX.Y.Z and gen/vX.Y.Z in
// ratelimitd's repository):
//
//	go get github.com/ratelimitd/ratelimitd/client@latest
//
// No version is published yet. Until then, require both modules from a
// checkout of the repository with replace directives in your go.mod:
//
//	require (
//		github.com/ratelimitd/ratelimitd/client v0.0.0
//		github.com/ratelimitd/ratelimitd/gen v0.0.0
//	)
//
//	replace (
//		github.com/ratelimitd/ratelimitd/client => ../ratelimitd/client
//		github.com/ratelimitd/ratelimitd/gen => ../ratelimitd/gen
//	)
//
// # Usage
//
//	conn, err := grpc.NewClient("ratelimitd:8081",
//		grpc.WithTransportCredentials(insecure.NewCredentials()))
//	if err != nil { ... }
//	defer conn.Close()
//	rl := client.New(conn) // fail open, a 50 ms budget, 1 s of refusal memory
//
//	d, err := rl.ShouldRateLimit(ctx, "edge",
//		client.D("api_key", key),
//		client.D("path", "/login", "remote_address", ip))
//	if err != nil {
//		return err // a malformed request, or ctx ended
//	}
//	if !d.Allowed {
//		// refuse; retry in d.RetryAfter, send d.Headers
//	}
//	// d.Statuses has one Status per descriptor, unless ratelimitd could
//	// not be asked: then d.Err says why, and d.Statuses is empty.
//
// # One shape
//
// Constructors take what they require as arguments and the rest as
// functional options: New(conn, ...Option), NewQuota(conn, domain,
// ...QuotaOption). The options of the failure policy, the logger and the
// clock (WithFailClosed, WithLogger, WithClock) are SharedOptions, which
// both take. Whatever adapts a RateLimiter (a *Client, a *Quota, a
// clienttest.Fake) to a framework takes the RateLimiter, the domain and
// its options, in that order: UnaryServerInterceptor,
// StreamServerInterceptor, UnaryClientInterceptor, StreamClientInterceptor
// and NewLimiter (InterceptorOptions), HTTPMiddleware (HTTPOptions).
//
// # Connecting
//
// grpc.NewClient returns an idle connection, which connects when first
// used. New starts connecting it at once, in the background, and a call
// made while it connects waits for it, for up to the connect budget
// (WithConnectTimeout; DefaultConnectTimeout, 1 s, by default), before
// its own budget (WithTimeout) starts. So a handshake longer than the
// call budget (TLS, a distant or loaded ratelimitd, a service's first
// calls after a deploy) does not make the first calls fail open. The same
// holds when the connection reconnects from idle: after ratelimitd
// restarted, or after gRPC's idle timeout.
//
// The wait is bounded: the connect budget is counted from the start of a
// connection attempt (at New, or at the first call that finds the
// connection not ready), not per call, so a host that accepts connections
// but never answers delays calls once, by the connect budget, and not
// every call. Calls never wait while ratelimitd refuses connections or
// fails the handshake (gRPC's TRANSIENT_FAILURE, in which it reconnects
// with backoff): the failure policy decides at once, as before. The wait
// needs a *grpc.ClientConn (or a connection with its GetState,
// WaitForStateChange and Connect methods); over another
// grpc.ClientConnInterface calls do not wait.
//
// Code must still expect decisions of the failure policy, first calls
// included: ratelimitd may be down, or the connect budget spent. Such a
// Decision has Err set and no Statuses.
//
// Code that asks through the RateLimiter interface, rather than *Client,
// can be tested with clienttest.Fake, which answers by a script, records
// the calls, and drives the interceptors and HTTPMiddleware as a Client
// does.
//
// # Quota mode: deciding locally
//
// A Quota decides without an RPC per call. It speaks Envoy's Rate Limit
// Quota Service (RLQS) to ratelimitd, which serves it on its gRPC port
// unless started with --rlqs=false: each descriptor is a bucket, whose
// entries are the bucket id (a map: a key may not appear twice, and the
// order of the entries does not matter). The Quota reports a bucket to
// ratelimitd on its first use, and then every reporting interval
// (WithReportingInterval; DefaultReportingInterval, 5 s, by default) with the
// calls it allowed and refused, over one stream that it reopens, with
// backoff, when it fails. ratelimitd answers each bucket with an
// assignment, for a time to live (twice the reporting interval, at least
// 1 s): a token bucket holding this client's share of the rule's limit,
// ALLOW_ALL (an unlimited rule, or no rule at all), or DENY_ALL
// (requests_per_unit: 0). Quota.Allow then decides on the spot: a call is
// allowed only if every descriptor's bucket admits it, and a refused call
// takes no token. A bucket without an assignment in force (before
// ratelimitd's first answer, or once it has expired because ratelimitd is
// away) is decided by the failure policy: open by default, as a Client's,
// or closed with WithFailClosed (which refuses the calls of a new
// bucket until ratelimitd's first answer, a round trip later: it suits
// buckets that are few and long-lived; on a new connection, the first
// answer also waits for the handshake, which the reporting stream, opened
// by NewQuota, waits for in the background). So is a bucket past
// WithMaxBuckets, or past the 1000 buckets ratelimitd assigns on
// one stream; a bucket unused for QuotaIdleIntervals reporting intervals
// is forgotten. Counts reported on a stream that then fails may be lost
// with it.
//
//	q, err := client.NewQuota(conn, "edge") // or with WithFailClosed(), WithReportingInterval(d)...
//	if err != nil { ... }
//	defer q.Close()
//	ok, err := q.Allow(client.D("tenant", tenant))
//
// A *Quota is a RateLimiter: the interceptors, NewLimiter and
// HTTPMiddleware take it in place of a Client (its domain must be the
// one they name). Its Decisions have no Headers and no limit statuses:
// refused by a token bucket, RetryAfter is the time to its next fill;
// decided by the failure policy, Err is ErrNoAssignment.
//
// Choose a Client for exact, shared counts: every call is counted by
// ratelimitd against the limit as a whole, limit overrides and every
// algorithm apply, and the answer carries the rate-limit headers, at the
// price of an RPC (and its latency, and ratelimitd's load) per call.
// Choose a Quota for cheap, bounded decisions: a call costs well under a
// microsecond and no RPC, and ratelimitd sees one report per bucket per
// interval whatever the traffic, but the limit is enforced as token
// buckets. A client may go past its share by what its token bucket
// allows: max_tokens at once (a full bucket, the rule's burst share) on
// top of the rate; while shares move between clients, an assignment in
// force still admits its old share until the next answer; and with
// ratelimitd away, the failure policy decides once assignments expire.
// Limit overrides cannot be carried, and the rule's algorithm plays no
// part (ratelimitd divides its rate).
//
// # Observing decisions
//
// WithDecisionHook calls a function after every ShouldRateLimit call,
// with its domain, descriptors, decision, error and duration: feed
// metrics and logs from it. FailOpens counts the requests the failure
// policy let through unchecked, and LocalRefusals those the refusal
// memory refused. A server that does not implement the native API (an
// Envoy rate limit service such as envoyproxy/ratelimit answers
// Unimplemented) is logged once, as an error, to WithLogger's logger
// (slog.Default() by default), rather than failing open in silence.
//
// # Limit overrides
//
// A Descriptor's Limit, when set, replaces the configured limits of that
// descriptor for one request (the native API's LimitOverride): see
// LimitOverride for how ratelimitd applies it and what it accepts.
//
// # Concurrency limits and leases
//
// A limit of `algorithm: concurrency` admits at most its requests_per_unit
// held at once, rather than per window: Acquire takes a slot of every such
// limit its descriptors match (and counts on their other limits as
// ShouldRateLimit does) and returns a release func, which gives the slots
// back, once, even after ctx ended:
//
//	release, d, err := rl.Acquire(ctx, "jobs", client.D("tenant", tenant))
//	if err != nil {
//		return err // a malformed request, or ctx ended
//	}
//	defer release() // never nil; a no-op when nothing is held
//	if !d.Allowed {
//		// all slots busy: refuse, or retry in d.RetryAfter
//	}
//
// A slot frees itself when its lease expires (the limit's window), so a
// caller that dies holds nothing for longer. Work that may outlive the
// lease takes it with AcquireLease, and calls Lease.Renew (halfway to
// Lease.ExpiresAt, say), or runs Lease.KeepAlive, which does so until the
// release; Renew answers ErrLeaseLost once the lease has lapsed.
// WithAutoRenew makes Acquire keep its leases alive. WithConcurrency
// makes the server interceptors, and WithHTTPConcurrency makes
// HTTPMiddleware, hold a slot while the handler runs. Refusals and the
// failure policy are ShouldRateLimit's; the memory of refusals is not
// used.
//
// # Giving hits back
//
// A Descriptor with GiveBack gives its Hits back instead of taking them
// (Envoy's negative hits): to return what was counted ahead and not used,
// such as tokens reserved for a response that came out shorter. It is
// never refused and never goes past the limit.
//
// # Interceptors and middleware
//
// UnaryServerInterceptor and StreamServerInterceptor protect a gRPC server:
// they build descriptors from the call (its method, metadata keys, the
// peer's address, a function of the caller's) and refuse with
// ResourceExhausted, RetryInfo and QuotaFailure, sending the rate-limit
// headers as response metadata. UnaryClientInterceptor and
// StreamClientInterceptor throttle outbound calls. NewLimiter plugs into
// go-grpc-middleware's ratelimit interceptor, with the same options. HTTPMiddleware protects a
// net/http handler: it keys by API key, client network (behind trusted
// proxies: each IPv4 address, and each IPv6 /64, since one IPv6 host
// commonly holds a whole /64; see WithClientIPPrefix), route and method,
// sends the IETF RateLimit-Policy and RateLimit headers, and refuses with
// 429, Retry-After and an application/problem+json body (WithRefusalWriter
// writes another answer). WithSkip exempts requests; key functions that
// can fail (WithRouteFunc, WithHTTPDescriptorFunc) answer 400 when they
// do (WithKeyErrorHandler changes that), never letting the request
// through unlimited. A request it cannot send to ratelimitd, which only
// its own configuration can build (see HTTPMiddleware), is answered 500
// and never let through unlimited either.
//
// # Values
//
// An entry's value may hold any bytes, of any length, as HTTP headers,
// paths and binary gRPC metadata do: the Client sends each value in the
// form ratelimitd counts it by, and a value never makes a request fail.
// A value that is not valid UTF-8 (which protobuf strings must be) is sent
// as bytes; it counts with the same bytes sent as a string. A value over
// 1024 bytes is sent as its SHA-256 digest, so that requests stay small:
// ratelimitd counts every value over 1024 bytes by that digest, so it
// counts with the value itself, but a digested value only matches rules
// that match any value (a rule on its key alone, or a wildcard matching
// every value), never a rule naming a value or a prefix of one. Keys and
// the domain, which come from the caller's code, must be valid UTF-8.
//
// # Errors and the failure policy
//
// Over the limit is a decision, not an error: Decision.Allowed is false. A
// non-nil error from ShouldRateLimit means there is no decision at all, and
// happens in two cases only:
//
//   - the request is malformed or cannot be sent: an empty domain, no
//     descriptors, a descriptor without entries, an empty key, a domain or
//     key that is not valid UTF-8, anything over ratelimitd's bounds (a
//     domain over 256 bytes, over 64 descriptors, over 32 entries in a
//     descriptor, a key over 1024 bytes, over 4294967295 hits, a limit
//     override's window out of [1ms, 100 years] or not in whole
//     microseconds, or a request over 1 MiB once long values are
//     digested), or anything
//     ratelimitd answers with InvalidArgument: status.Code(err) is
//     codes.InvalidArgument. The Client finds all but the last itself,
//     before any RPC. This is a bug in the caller, so the failure policy
//     does not hide it, even when ratelimitd is down: a request the Client
//     could not send is never let through as if ratelimitd had failed;
//   - ctx ended before ratelimitd answered: errors.Is(err, ctx.Err()).
//
// When ratelimitd itself fails (unreachable, stopped, slower than the
// budget of WithTimeout, or answering with any other error), the failure
// policy decides and the error is nil: Decision.Err holds ratelimitd's
// error, and Allowed is true (fail open, the default, as Envoy does) or
// false (WithFailClosed). Check Decision.Err to count or log these.
//
// # Refusal memory
//
// When ratelimitd refuses a request with a retry-after of T, the Client
// refuses the same request (the same domain, and the same descriptors with
// the same entries and hits, in the same order, none giving hits back) by
// itself for min(T, cap) without calling ratelimitd (WithRefusalCache
// sets the cap: 1 s by default, 0 turns it off). Such decisions have
// Decision.Local set, and Client.LocalRefusals counts them. A service
// under a flood of refused requests thus spares ratelimitd most of them.
//
// A Client is safe for concurrent use by multiple goroutines, and starts
// no goroutines. A Quota is safe for concurrent use too, and runs
// goroutines (its reporting stream's, and a coarse clock's) until Close.
package client
