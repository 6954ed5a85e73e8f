package client

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

// A RateLimiter decides whether work may proceed: *Client does, by
// asking ratelimitd, *Quota by itself, under ratelimitd's assignments
// (see the package documentation for which to choose), and
// clienttest.Fake by a script, in tests.
// Code that depends on a RateLimiter rather than a *Client can be tested
// without a ratelimitd; the interceptors and HTTPMiddleware take one.
//
// ShouldRateLimit's contract is Client.ShouldRateLimit's: over the limit
// is a Decision with Allowed false; a non-nil error means no decision (a
// malformed request, codes.InvalidArgument, or ctx ended).
type RateLimiter interface {
	ShouldRateLimit(ctx context.Context, domain string, descriptors ...Descriptor) (Decision, error)
}

var _ RateLimiter = (*Client)(nil)

// A Client asks ratelimitd's native API whether work may proceed.
//
// A Client is safe for concurrent use by multiple goroutines. It starts no
// goroutines (but one per lease held with WithAutoRenew, which ends with
// its release) and holds nothing to close: the caller owns the
// connection.
type Client struct {
	rls      ratelimitv1.RateLimitServiceClient
	opts     options
	connect  connector
	refusals *refusals // nil when the refusal memory is off
	local    atomic.Uint64
	failOpen atomic.Uint64
	// unimplemented is set once the server answered Unimplemented, and
	// that was logged.
	unimplemented atomic.Bool
	// timer starts a timer of d (time.NewTimer; tests replace it): its
	// channel, and a func that stops it.
	timer func(d time.Duration) (<-chan time.Time, func() bool)
}

// An Observation describes one ShouldRateLimit call, for the hook of
// WithDecisionHook.
type Observation struct {
	// Domain and Descriptors are the call's arguments. Descriptors is the
	// caller's slice: neither modify nor keep it.
	Domain      string
	Descriptors []Descriptor
	// Decision is the call's decision: by ratelimitd, by the refusal
	// memory (Decision.Local), or by the failure policy (Decision.Err
	// set). It is the zero Decision when Err is set.
	Decision Decision
	// Err is the error ShouldRateLimit returns: a malformed request
	// (codes.InvalidArgument) or ctx ended. It is nil when there is a
	// decision, even one of the failure policy.
	Err error
	// Duration is how long the call took, on the real clock.
	Duration time.Duration
}

// FailedOpen reports whether the failure policy allowed the call because
// ratelimitd could not be asked (or failed): Decision.Allowed with
// Decision.Err set. Client.FailOpens counts these.
func (o Observation) FailedOpen() bool { return o.Decision.Allowed && o.Decision.Err != nil }

// New returns a Client calling ratelimitd over conn, usually a
// *grpc.ClientConn, which the caller keeps and closes. Without options it
// fails open, gives each call a budget of DefaultTimeout, after waiting up
// to DefaultConnectTimeout for the connection to connect, and remembers
// refusals for up to DefaultRefusalCache.
//
// New starts connecting conn, in the background, when it is idle (as
// grpc.NewClient leaves it), so that the first calls find it connected or
// connecting; it does not wait. See WithConnectTimeout for what calls do
// while it connects, and for connections other than *grpc.ClientConn.
func New(conn grpc.ClientConnInterface, opts ...Option) *Client {
	o := defaults
	for _, opt := range opts {
		opt.applyClient(&o)
	}
	c := &Client{rls: ratelimitv1.NewRateLimitServiceClient(conn), opts: o, timer: newTimer}
	c.connect.start(conn, o.connectTimeout)
	if o.refusalAge > 0 && o.refusalSize > 0 {
		c.refusals = newRefusals(o.refusalAge, o.refusalSize)
	}
	return c
}

// newTimer is time.NewTimer's channel and Stop.
func newTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// LocalRefusals reports how many requests the Client refused by itself,
// from its memory of refusals, without calling ratelimitd.
func (c *Client) LocalRefusals() uint64 { return c.local.Load() }

// FailOpens reports how many requests the Client allowed because
// ratelimitd could not be asked or failed (unreachable, slower than the
// budget, answering an error, not implementing the native API) and the
// failure policy is to fail open: requests let through unchecked. Export
// it as a counter; a Client failing closed never counts any.
func (c *Client) FailOpens() uint64 { return c.failOpen.Load() }

// ShouldRateLimit asks whether the work described by descriptors may
// proceed under the rules of domain. The request is allowed only if every
// descriptor is within its limits, and a refused request consumes nothing.
//
// Over the limit is a decision (Allowed false), not an error. When
// ratelimitd fails or is slower than the budget, the failure policy
// decides, reporting ratelimitd's error in Decision.Err, and the error is
// nil. ShouldRateLimit returns a non-nil error, and the zero Decision, only
// for a malformed request, one that ratelimitd would refuse or that cannot
// be sent (codes.InvalidArgument, whatever the policy), or when ctx ends
// first (the error then wraps ctx.Err()). Values may hold any bytes, of
// any length: see the package documentation.
//
// A server that does not implement the native API (codes.Unimplemented:
// an Envoy rate limit service such as envoyproxy/ratelimit, or a wrong
// address) cannot decide anything: the failure policy decides every
// request, and the Client logs an error once (see WithLogger) so that the
// mistake does not go unnoticed behind answers that all fail open.
//
// With WithDecisionHook, the hook sees every call before it returns.
func (c *Client) ShouldRateLimit(ctx context.Context, domain string, descriptors ...Descriptor) (Decision, error) {
	if c.opts.hook == nil {
		return c.shouldRateLimit(ctx, domain, descriptors)
	}
	start := time.Now()
	d, err := c.shouldRateLimit(ctx, domain, descriptors)
	c.opts.hook(ctx, Observation{Domain: domain, Descriptors: descriptors, Decision: d, Err: err, Duration: time.Since(start)})
	return d, err
}

// shouldRateLimit is ShouldRateLimit without the hook.
func (c *Client) shouldRateLimit(ctx context.Context, domain string, descriptors []Descriptor) (Decision, error) {
	if err := check(domain, descriptors); err != nil {
		return Decision{}, err
	}
	// A request that gives hits back is always sent: its give-backs apply
	// whatever it decides, and a refusal from memory would lose them.
	var key []byte
	if c.refusals != nil && !slices.ContainsFunc(descriptors, func(d Descriptor) bool { return d.GiveBack }) {
		key = refusalKey(make([]byte, 0, 128), domain, descriptors)
		if d, ok := c.refusals.get(key, c.opts.now()); ok {
			c.local.Add(1)
			return d, nil
		}
	}

	req, err := request(domain, descriptors)
	if err != nil {
		return Decision{}, err
	}
	var resp *ratelimitv1.ShouldRateLimitResponse
	failed, err := c.send(ctx, "ShouldRateLimit", c.opts.timeout, func(ctx context.Context) (err error) {
		resp, err = c.rls.ShouldRateLimit(ctx, req)
		return err
	})
	switch {
	case err != nil:
		return Decision{}, err
	case failed != nil:
		return c.policy(failed), nil
	}
	d := decision(resp.GetCode(), resp.GetStatuses(), resp.GetHeaders())
	if !d.Allowed && key != nil && d.RetryAfter > 0 {
		c.refusals.put(key, d, c.opts.now())
	}
	return d, nil
}

// send waits for the connection, then calls rpc with ctx shortened to
// budget (none when budget <= 0). It returns in err the error the caller
// must return: ctx ended (wrapping ctx.Err()), or ratelimitd refused the
// request as malformed (codes.InvalidArgument). It returns in failed any
// other failure of ratelimitd, for the failure policy to decide.
func (c *Client) send(ctx context.Context, method string, budget time.Duration, rpc func(context.Context) error) (failed, err error) {
	if err := c.connect.wait(ctx); err != nil {
		return nil, fmt.Errorf("client: %s: waiting for the connection: %w", method, err)
	}
	callCtx := ctx
	if budget > 0 {
		var cancel context.CancelFunc
		callCtx, cancel = context.WithTimeout(ctx, budget)
		defer cancel()
	}
	err = rpc(callCtx)
	if err == nil {
		return nil, nil
	}
	if err := ended(ctx, callCtx, err); err != nil {
		return nil, fmt.Errorf("client: %s: %w", method, err)
	}
	switch status.Code(err) {
	case codes.InvalidArgument:
		return nil, err
	case codes.Unimplemented:
		c.warnUnimplemented(ctx, method, err)
	}
	return err, nil
}

// policy returns the failure policy's decision on a call that failed
// with err, and counts it when it fails open.
func (c *Client) policy(err error) Decision {
	if !c.opts.failClosed {
		c.failOpen.Add(1)
	}
	return Decision{Allowed: !c.opts.failClosed, Err: err}
}

// warnUnimplemented logs, the first time only, that the server does not
// implement method of the native API.
func (c *Client) warnUnimplemented(ctx context.Context, method string, err error) {
	if !c.unimplemented.CompareAndSwap(false, true) {
		return
	}
	policy := "fail open: every request is allowed unchecked"
	if c.opts.failClosed {
		policy = "fail closed: every request is refused"
	}
	c.logger().ErrorContext(ctx, "ratelimitd client: the server does not implement ratelimit.v1.RateLimitService "+
		"(an Envoy rate limit service such as envoyproxy/ratelimit, a ratelimitd older than the method, or the wrong address?); "+
		"nothing is rate limited, the failure policy decides every request (logged once)",
		"method", method, "policy", policy, "err", err)
}

// Validate returns the error ShouldRateLimit would return for a request
// to domain of descriptors without asking ratelimitd (nil when it can be
// sent): codes.InvalidArgument for a malformed request or one over
// ratelimitd's bounds (see the package documentation). clienttest.Fake
// calls it, so that tests catch the malformed requests a Client would
// refuse.
func Validate(domain string, descriptors ...Descriptor) error {
	if err := check(domain, descriptors); err != nil {
		return err
	}
	_, err := request(domain, descriptors)
	return err
}

// ValidateAcquire is Validate for Acquire, which also refuses a
// descriptor with GiveBack (its release gives the slots back).
// clienttest.Fake's Acquire calls it.
func ValidateAcquire(domain string, descriptors ...Descriptor) error {
	if err := checkAcquire(domain, descriptors); err != nil {
		return err
	}
	_, err := request(domain, descriptors)
	return err
}

// checkAcquire is check for Acquire: no descriptor gives back.
func checkAcquire(domain string, descriptors []Descriptor) error {
	if err := check(domain, descriptors); err != nil {
		return err
	}
	for i, d := range descriptors {
		if d.GiveBack {
			return status.Errorf(codes.InvalidArgument, "client: descriptor %d: GiveBack in Acquire", i)
		}
	}
	return nil
}

// ended returns the caller's context error if the call failed because ctx
// ended rather than ratelimitd, else nil. A deadline can end the call
// (gRPC's timer, or the server's) just before ctx reports it: when the
// caller's deadline was the call's, a DeadlineExceeded is the caller's.
func ended(ctx, callCtx context.Context, err error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && status.Code(err) == codes.DeadlineExceeded {
		if cdl, _ := callCtx.Deadline(); cdl.Equal(dl) {
			return context.DeadlineExceeded
		}
	}
	return nil
}

// ratelimitd's bounds on a request, which the Client checks before
// sending it.
const (
	maxDomain      = 256
	maxDescriptors = 64
	maxEntries     = 32
	maxKey         = 1024
	maxValue       = 1024 // a longer value is sent as its SHA-256 digest
	maxHits        = math.MaxUint32
	maxRequest     = 1 << 20 // bytes of the encoded request
	// The bounds of a LimitOverride's window.
	minOverrideWindow = time.Millisecond
	maxOverrideWindow = 100 * 365 * 24 * time.Hour
)

// check returns InvalidArgument for the malformed requests ratelimitd
// would refuse whatever its rules, so that they are reported even while
// ratelimitd is away, and for those it could not encode: a domain or key
// that is not valid UTF-8. (Values may hold any bytes: see entry.)
func check(domain string, descriptors []Descriptor) error {
	switch {
	case domain == "":
		return status.Error(codes.InvalidArgument, "client: domain is empty")
	case len(domain) > maxDomain:
		return status.Errorf(codes.InvalidArgument, "client: domain is %d bytes, over the maximum %d", len(domain), maxDomain)
	case !utf8.ValidString(domain):
		return status.Errorf(codes.InvalidArgument, "client: domain %q is not valid UTF-8", domain)
	case len(descriptors) == 0:
		return status.Error(codes.InvalidArgument, "client: no descriptors")
	case len(descriptors) > maxDescriptors:
		return status.Errorf(codes.InvalidArgument, "client: %d descriptors, over the maximum %d", len(descriptors), maxDescriptors)
	}
	for i, d := range descriptors {
		switch {
		case len(d.Entries) == 0:
			return status.Errorf(codes.InvalidArgument, "client: descriptor %d has no entries", i)
		case len(d.Entries) > maxEntries:
			return status.Errorf(codes.InvalidArgument, "client: descriptor %d has %d entries, over the maximum %d", i, len(d.Entries), maxEntries)
		case !d.CheckOnly && d.Hits > maxHits:
			return status.Errorf(codes.InvalidArgument, "client: descriptor %d: hits %d over the maximum %d", i, d.Hits, uint64(maxHits))
		case d.CheckOnly && d.GiveBack:
			return status.Errorf(codes.InvalidArgument, "client: descriptor %d: both CheckOnly and GiveBack", i)
		}
		if err := checkOverride(i, d.Limit); err != nil {
			return err
		}
		for j, e := range d.Entries {
			switch {
			case e.Key == "":
				return status.Errorf(codes.InvalidArgument, "client: descriptor %d entry %d has an empty key", i, j)
			case len(e.Key) > maxKey:
				return status.Errorf(codes.InvalidArgument, "client: descriptor %d entry %d: key is %d bytes, over the maximum %d", i, j, len(e.Key), maxKey)
			case !utf8.ValidString(e.Key):
				return status.Errorf(codes.InvalidArgument, "client: descriptor %d entry %d: key %q is not valid UTF-8", i, j, e.Key)
			}
		}
	}
	return nil
}

// checkOverride returns InvalidArgument for a limit override ratelimitd
// would refuse: a window out of [1ms, 100 years] (of 365 days), or not a
// whole number of microseconds. nil is no override.
func checkOverride(i int, l *LimitOverride) error {
	switch {
	case l == nil:
		return nil
	case l.Window < minOverrideWindow || l.Window > maxOverrideWindow:
		return status.Errorf(codes.InvalidArgument, "client: descriptor %d: limit override window %v out of range [%v, %v]", i, l.Window, minOverrideWindow, maxOverrideWindow)
	case l.Window%time.Microsecond != 0:
		return status.Errorf(codes.InvalidArgument, "client: descriptor %d: limit override window %v is not a whole number of microseconds", i, l.Window)
	}
	return nil
}

// request returns the request to send for descriptors, checked by check,
// or InvalidArgument when it would exceed ratelimitd's largest request
// even with long values digested. Every request it returns can be encoded.
func request(domain string, descriptors []Descriptor) (*ratelimitv1.ShouldRateLimitRequest, error) {
	req := &ratelimitv1.ShouldRateLimitRequest{
		Domain:      domain,
		Descriptors: make([]*ratelimitv1.Descriptor, len(descriptors)),
	}
	// bound is at least the encoded size: each field's bytes plus a
	// generous allowance for tags and lengths (at most 6 bytes per entry
	// field and its embedding, 15 per descriptor with its hits, 3 for the
	// domain), so that only requests near the limit are measured exactly.
	bound := len(domain) + 16
	for i, d := range descriptors {
		rd := &ratelimitv1.Descriptor{Entries: make([]*ratelimitv1.Entry, len(d.Entries))}
		for j, e := range d.Entries {
			re := entry(e)
			rd.Entries[j] = re
			bound += len(re.Key) + len(re.Value) + len(re.RawValue) + len(re.ValueSha256) + 16
		}
		switch {
		case d.CheckOnly:
			rd.Hits = proto.Uint64(0)
		case d.Hits != 0:
			rd.Hits = proto.Uint64(d.Hits)
		}
		rd.GiveBack = d.GiveBack
		if l := d.Limit; l != nil {
			rd.Limit = &ratelimitv1.LimitOverride{Requests: l.Requests, Window: durationpb.New(l.Window)}
		}
		bound += 48 // hits, and an override of at most 2 + 6 + 2 + 11 + 6
		req.Descriptors[i] = rd
	}
	if bound > maxRequest {
		if n := proto.Size(req); n > maxRequest {
			return nil, status.Errorf(codes.InvalidArgument, "client: request is %d bytes, over the maximum %d", n, maxRequest)
		}
	}
	return req, nil
}

// entry converts e. A value is sent as it is ratelimitd counts it, in the
// smallest form that can be encoded: over maxValue bytes, as its SHA-256
// digest (ratelimitd counts every such value by that digest); else, when
// it is not valid UTF-8 (which a protobuf string must be, and an HTTP
// header or path need not), as bytes; else as a string.
func entry(e Entry) *ratelimitv1.Entry {
	switch {
	case len(e.Value) > maxValue:
		sum := sha256.Sum256([]byte(e.Value))
		return &ratelimitv1.Entry{Key: e.Key, ValueSha256: sum[:]}
	case !utf8.ValidString(e.Value):
		return &ratelimitv1.Entry{Key: e.Key, RawValue: []byte(e.Value)}
	}
	return &ratelimitv1.Entry{Key: e.Key, Value: e.Value}
}

// decision converts ratelimitd's answer: its code, statuses and headers,
// which ShouldRateLimit and Acquire answer alike.
func decision(code ratelimitv1.Code, sts []*ratelimitv1.DescriptorStatus, hs []*ratelimitv1.Header) Decision {
	d := Decision{Allowed: code != ratelimitv1.Code_CODE_OVER_LIMIT}
	if len(sts) > 0 {
		d.Statuses = make([]Status, len(sts))
		for i, st := range sts {
			s := &d.Statuses[i]
			s.OverLimit = st.GetCode() == ratelimitv1.Code_CODE_OVER_LIMIT
			s.Remaining = st.GetRemaining()
			s.ResetAfter = duration(st.GetResetAfter().AsDuration())
			s.RetryAfter = duration(st.GetRetryAfter().AsDuration())
			s.Unlimited = st.GetUnlimited()
			if l := st.GetLimit(); l != nil {
				s.Limit = Limit{
					Name:      l.GetName(),
					Requests:  l.GetRequests(),
					Window:    l.GetWindow().AsDuration(),
					Algorithm: algorithm(l.GetAlgorithm()),
					Burst:     l.GetBurst(),
				}
			}
			if !d.Allowed && s.OverLimit {
				d.RetryAfter = max(d.RetryAfter, s.RetryAfter)
			}
		}
	}
	if len(hs) > 0 {
		d.Headers = make([]Header, len(hs))
		for i, h := range hs {
			d.Headers[i] = Header{Name: h.GetName(), Value: h.GetValue()}
		}
	}
	return d
}

// duration clamps a negative duration, which ratelimitd never sends, to 0.
func duration(d time.Duration) time.Duration { return max(d, 0) }

func algorithm(a ratelimitv1.Algorithm) Algorithm {
	switch a {
	case ratelimitv1.Algorithm_ALGORITHM_SLIDING_WINDOW:
		return SlidingWindow
	case ratelimitv1.Algorithm_ALGORITHM_FIXED_WINDOW:
		return FixedWindow
	case ratelimitv1.Algorithm_ALGORITHM_SLIDING_LOG:
		return SlidingLog
	case ratelimitv1.Algorithm_ALGORITHM_TOKEN_BUCKET:
		return TokenBucket
	case ratelimitv1.Algorithm_ALGORITHM_GCRA:
		return GCRA
	case ratelimitv1.Algorithm_ALGORITHM_CONCURRENCY:
		return Concurrency
	}
	return ""
}
