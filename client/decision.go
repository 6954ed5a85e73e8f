package client

import (
	"fmt"
	"time"
)

// A Descriptor names one counter of a request: entries matched, outermost
// first, against the nested rules of the request's domain (for example
// [tenant=acme, path=/search]).
type Descriptor struct {
	// Entries are the key/value pairs, outermost first: 1 to 32 of them.
	Entries []Entry
	// Hits is how much the work consumes on this descriptor (requests,
	// tokens, bytes...); 0 means 1.
	Hits uint64
	// CheckOnly asks whether the counter is already past its limit,
	// without consuming anything; Hits is then ignored.
	CheckOnly bool
	// GiveBack gives the descriptor's Hits back instead of taking them,
	// on every limit of its rule (the native API's give_back, Envoy's
	// negative hits): for work counted ahead that did not happen, such as
	// tokens reserved beyond what a response used. A give-back is never
	// refused and never goes past the limit; the request's other
	// descriptors are decided as ever, and the give-back applies whatever
	// they decide. A request holding a give-back is always sent to
	// ratelimitd, never refused from the Client's memory of refusals.
	// CheckOnly and GiveBack do not go together, and Acquire takes no
	// give-back (it holds slots: give them back with the release).
	GiveBack bool
	// Limit, when set, replaces the configured limits of this descriptor
	// for this request (the native API's LimitOverride): for plans or
	// quotas kept outside ratelimitd's rules. nil applies the rules.
	Limit *LimitOverride
}

// A LimitOverride is a limit a request gives for one of its descriptors,
// in place of the limits its rule configures. ratelimitd counts it with
// the algorithm of the rule the descriptor matches (the default
// algorithm, sliding_window, when none matches; a sliding log admits at
// most 10000 requests per window whatever Requests says), under the
// name of the rule's limit when it has a single one, and applies it in a
// domain its rules name only: in an unknown domain, the override is
// ignored and the descriptor is allowed, as any descriptor there.
//
// ratelimitd counts a descriptor under an override in its counter for
// the window and algorithm: requests giving the same window share a
// count whatever their Requests (and share it with a configured limit of
// that window and algorithm); another window counts apart. The Client
// remembers a refusal (see the package documentation) per limit given.
type LimitOverride struct {
	// Requests is how many requests (hits) the limit admits per Window;
	// 0 refuses every request.
	Requests uint32
	// Window is the limit's window: a whole number of microseconds, from
	// 1 ms to 100 years (of 365 days). ShouldRateLimit refuses a request
	// whose window is outside these bounds with codes.InvalidArgument, as
	// ratelimitd would.
	Window time.Duration
}

// An Entry is one key/value pair of a Descriptor.
type Entry struct {
	// Key names the entry, such as "remote_address": 1 to 1024 bytes of
	// valid UTF-8.
	Key string
	// Value may hold any bytes, of any length: see the package
	// documentation on values.
	Value string
}

// D returns a Descriptor of one hit whose entries are kv, given as key,
// value pairs: D("path", "/login", "remote_address", "10.0.0.1").
// D panics if given an odd number of arguments, as strings.NewReplacer does.
func D(kv ...string) Descriptor {
	if len(kv)%2 == 1 {
		panic(fmt.Sprintf("client.D: odd argument count %d", len(kv)))
	}
	d := Descriptor{Entries: make([]Entry, len(kv)/2)}
	for i := range d.Entries {
		d.Entries[i] = Entry{Key: kv[2*i], Value: kv[2*i+1]}
	}
	return d
}

// A Decision is the answer to one ShouldRateLimit call.
type Decision struct {
	// Allowed reports whether the work may proceed.
	Allowed bool
	// Statuses holds one Status per request descriptor, in the request's
	// order. It is nil when the failure policy decided (Err != nil).
	Statuses []Status
	// RetryAfter is, when refused, the time until the same request would
	// be admitted: the longest RetryAfter of the descriptors over their
	// limit. It is zero when allowed, and when the failure policy refused.
	RetryAfter time.Duration
	// Headers are the HTTP response headers ratelimitd asks the caller to
	// send with its answer (RateLimit-Policy and RateLimit, or the legacy
	// X-RateLimit family, and Retry-After when refused), as the server is
	// configured. For a Local decision they are those of the remembered
	// answer, counted down as its durations are: Retry-After is
	// RetryAfter in seconds (rounded up, at least 1), and the t
	// parameters of RateLimit (and the legacy RateLimit-Reset) lose the
	// whole seconds elapsed since, not below 0; the rest, such as the
	// remaining r, are as remembered, older by at most the refusal
	// cache's maximum age.
	Headers []Header
	// Local reports that the Client refused by itself, remembering an
	// earlier refusal of the same request, without calling ratelimitd. Its
	// durations count down from the remembered answer's.
	Local bool
	// Err is ratelimitd's failure when the failure policy decided instead
	// of ratelimitd: Allowed is then true (fail open, the default) or false
	// (WithFailClosed). Err is nil when ratelimitd decided.
	Err error
}

// A Status is the decision on one descriptor.
type Status struct {
	// OverLimit reports that this descriptor is over its limit. (A
	// shadow-mode rule reports false; a quota-mode descriptor may be over
	// while the request is allowed.)
	OverLimit bool
	// Limit is the limit that decided: the one that refused, else the one
	// with the least remaining. It is the zero Limit when no limit applies
	// or the rule is unlimited.
	Limit Limit
	// Remaining is how many more hits the limit admits now (4294967295
	// for an unlimited rule, as Envoy's API reports it).
	Remaining uint64
	// ResetAfter is the time until the counter resets (for windows, the
	// end of the current window; for a token bucket, until it is full).
	ResetAfter time.Duration
	// RetryAfter is the time until the same hits would be admitted; zero
	// when admitted.
	RetryAfter time.Duration
	// Unlimited reports that the rule is unlimited: nothing was counted.
	Unlimited bool
}

// A Limit describes a configured (or overridden) limit. The zero Limit
// means none.
type Limit struct {
	// Name is the limit's name, or else the rule's key path (such as
	// "api_key" or "tenant=acme.path").
	Name string
	// Requests is how many requests the limit admits per Window.
	Requests uint32
	// Window is the limit's window.
	Window time.Duration
	// Algorithm is how the limit counts.
	Algorithm Algorithm
	// Burst is how many hits may pass at once (token bucket and GCRA);
	// else equal to Requests.
	Burst uint32
}

// An Algorithm is how a limit counts, named as in the rules' YAML.
type Algorithm string

// The algorithms.
const (
	SlidingWindow Algorithm = "sliding_window"
	FixedWindow   Algorithm = "fixed_window"
	SlidingLog    Algorithm = "sliding_log"
	TokenBucket   Algorithm = "token_bucket"
	GCRA          Algorithm = "gcra"
	// Concurrency admits at most Requests held at once: a hit holds a
	// slot until it is given back or its lease (Window) expires. See
	// Client.Acquire.
	Concurrency Algorithm = "concurrency"
)

// A Header is one HTTP header field.
type Header struct {
	Name, Value string
}
