package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Descriptor keys of the gRPC interceptors.
const (
	// MethodKey is the default key of the descriptor holding a call's full
	// method ("/package.Service/Method"). See WithMethodKey.
	MethodKey = "method"
	// RemoteAddressKey is the key of the descriptor holding the peer's
	// host (WithPeerAddress), as Envoy names it.
	RemoteAddressKey = "remote_address"
)

// An InterceptorOption configures the gRPC interceptors of this package.
type InterceptorOption func(*interceptorOptions)

type interceptorOptions struct {
	methodKey    string
	metadataKeys []string
	peer         bool
	descriptors  func(ctx context.Context, fullMethod string) []Descriptor
	concurrency  bool
}

// WithMethodKey sets the key of the descriptor holding the call's full
// method, MethodKey by default. An empty key leaves that descriptor out.
func WithMethodKey(key string) InterceptorOption {
	return func(o *interceptorOptions) { o.methodKey = key }
}

// WithMetadataKey adds a descriptor for each of keys, whose entry is the
// key (lower-cased, as gRPC metadata keys are) and the first value of that
// metadata in the call (incoming for server interceptors, outgoing for
// client interceptors): WithMetadataKey("x-api-key") adds
// [x-api-key=<the caller's key>]. A call without that metadata, or with an
// empty value, goes without that descriptor. Empty keys are ignored.
func WithMetadataKey(keys ...string) InterceptorOption {
	return func(o *interceptorOptions) {
		for _, k := range keys {
			if k != "" {
				o.metadataKeys = append(o.metadataKeys, strings.ToLower(k))
			}
		}
	}
}

// WithPeerAddress adds, in server interceptors, a descriptor
// [remote_address=<host>] holding the host of the caller's address,
// without its port (or the whole address when it has no port, as for a
// Unix socket). A call without a known peer goes without it. Client
// interceptors ignore this option.
func WithPeerAddress() InterceptorOption {
	return func(o *interceptorOptions) { o.peer = true }
}

// WithDescriptors adds the descriptors that f returns for each call,
// given the call's context and full method: typically from the
// authenticated identity, the tenant or the plan that an earlier
// interceptor put in ctx. f may return none. f must return well-formed
// descriptors (see the package documentation): otherwise the call fails
// with codes.Internal, since the caller of the RPC is not at fault.
func WithDescriptors(f func(ctx context.Context, fullMethod string) []Descriptor) InterceptorOption {
	return func(o *interceptorOptions) { o.descriptors = f }
}

// WithConcurrency makes the server interceptors hold a slot of the
// domain's concurrency limits for the duration of each call: they
// Acquire (see Client.Acquire) instead of asking ShouldRateLimit, with
// the same descriptors, and release when the handler returns (for a
// stream, when it ends), whatever it returns, even once the call's
// context is done. Refusals, failures and headers are answered as
// without the option. rl must be an Acquirer, such as a *Client: the
// server interceptors panic otherwise. UnaryClientInterceptor,
// StreamClientInterceptor and NewLimiter panic given the option, since
// they cannot tell when the work ends.
//
// A slot's lease is its limit's window: give concurrency limits a window
// longer than the longest call (a slot whose lease expires frees itself
// while the call still runs).
func WithConcurrency() InterceptorOption {
	return func(o *interceptorOptions) { o.concurrency = true }
}

// interceptor holds what the interceptors share.
type interceptor struct {
	rl     RateLimiter
	domain string
	o      interceptorOptions
	acq    Acquirer // rl, with WithConcurrency; else nil
}

// newInterceptor returns the interceptor of opts for the function named
// fn, which cannot hold a slot for the call: it panics given
// WithConcurrency.
func newInterceptor(rl RateLimiter, domain, fn string, opts []InterceptorOption) *interceptor {
	in := newServerInterceptor(rl, domain, opts)
	if in.o.concurrency {
		panic("client: WithConcurrency applies to the server interceptors only: " + fn + " cannot tell when the work ends")
	}
	return in
}

// newServerInterceptor returns the interceptor of opts for a server
// interceptor, which holds a slot for the call with WithConcurrency.
func newServerInterceptor(rl RateLimiter, domain string, opts []InterceptorOption) *interceptor {
	o := interceptorOptions{methodKey: MethodKey}
	for _, opt := range opts {
		opt(&o)
	}
	o.metadataKeys = append([]string(nil), o.metadataKeys...)
	in := &interceptor{rl: rl, domain: domain, o: o}
	if o.concurrency {
		in.acq = mustAcquirer(rl, "WithConcurrency")
	}
	return in
}

// mustAcquirer returns rl as an Acquirer for the option named opt, or
// panics when it is none.
func mustAcquirer(rl RateLimiter, opt string) Acquirer {
	acq, ok := rl.(Acquirer)
	if !ok {
		panic(fmt.Sprintf("client: %s needs an Acquirer (such as a *Client), not a %T", opt, rl))
	}
	return acq
}

// descriptors returns the descriptors of a call, in this order: the
// method's, one per metadata key present, the peer's, and the caller's.
func (in *interceptor) descriptors(ctx context.Context, fullMethod string, md metadata.MD, server bool) []Descriptor {
	ds := make([]Descriptor, 0, 2+len(in.o.metadataKeys))
	if in.o.methodKey != "" && fullMethod != "" { // no method: a Limiter outside a gRPC call
		ds = append(ds, D(in.o.methodKey, fullMethod))
	}
	for _, k := range in.o.metadataKeys {
		if vs := md.Get(k); len(vs) > 0 && vs[0] != "" {
			ds = append(ds, D(k, vs[0]))
		}
	}
	if server && in.o.peer {
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			ds = append(ds, D(RemoteAddressKey, host(p.Addr)))
		}
	}
	if in.o.descriptors != nil {
		ds = append(ds, in.o.descriptors(ctx, fullMethod)...)
	}
	return ds
}

// host returns addr's host, or all of addr when it has no port.
func host(addr net.Addr) string {
	s := addr.String()
	if h, _, err := net.SplitHostPort(s); err == nil {
		return h
	}
	return s
}

// decide asks ratelimitd about ds, and returns the decision and the error
// the call must fail with, nil when it may proceed. With no descriptors,
// the call proceeds without asking.
func (in *interceptor) decide(ctx context.Context, fullMethod string, ds []Descriptor) (Decision, error) {
	if len(ds) == 0 {
		return Decision{Allowed: true}, nil
	}
	d, err := in.rl.ShouldRateLimit(ctx, in.domain, ds...)
	if err != nil {
		return Decision{}, callError(fullMethod, err)
	}
	return d, refusedError(fullMethod, ds, d)
}

// hold is decide for a server interceptor, which Acquires a slot with
// WithConcurrency: it also returns the release to call when the call
// ends, never nil.
func (in *interceptor) hold(ctx context.Context, fullMethod string, ds []Descriptor) (release func(), d Decision, err error) {
	if in.acq == nil || len(ds) == 0 {
		d, err := in.decide(ctx, fullMethod, ds)
		return func() {}, d, err
	}
	release, d, err = in.acq.Acquire(ctx, in.domain, ds...)
	if err != nil {
		return release, Decision{}, callError(fullMethod, err)
	}
	return release, d, refusedError(fullMethod, ds, d)
}

// callError converts an error of ShouldRateLimit into the error of the
// intercepted call: the context's status when ctx ended, else Internal,
// since only the interceptor's configuration can make a malformed request.
func callError(fullMethod string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	return status.Errorf(codes.Internal, "client: rate limiting %s: %v", fullMethod, err)
}

// refusedError returns nil when d allows, else the error of the refused call:
// ResourceExhausted, with RetryInfo and QuotaFailure details, when
// ratelimitd refused; Unavailable when the failure policy did.
func refusedError(fullMethod string, ds []Descriptor, d Decision) error {
	if d.Allowed {
		return nil
	}
	if d.Err != nil {
		return status.Errorf(codes.Unavailable, "client: %s refused: rate limit service failed: %v", fullMethod, d.Err)
	}
	st := status.New(codes.ResourceExhausted, fmt.Sprintf("client: %s rate limited, retry in %v", fullMethod, d.RetryAfter))
	qf := &errdetails.QuotaFailure{}
	for i, s := range d.Statuses {
		if !s.OverLimit {
			continue
		}
		subject := s.Limit.Name
		if subject == "" && i < len(ds) {
			subject = keys(ds[i])
		}
		desc := "over limit"
		if s.Limit.Requests > 0 {
			desc = fmt.Sprintf("over limit of %d requests per %v", s.Limit.Requests, s.Limit.Window)
		}
		qf.Violations = append(qf.Violations, &errdetails.QuotaFailure_Violation{Subject: subject, Description: desc})
	}
	withDetails, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)}, qf)
	if err != nil { // cannot happen: both details marshal
		return st.Err()
	}
	return withDetails.Err()
}

// keys returns d's keys joined by dots, such as "tenant.path".
func keys(d Descriptor) string {
	ks := make([]string, len(d.Entries))
	for i, e := range d.Entries {
		ks[i] = e.Key
	}
	return strings.Join(ks, ".")
}

// headerMD returns d's headers as gRPC metadata, the names lower-cased,
// or nil when there are none.
func headerMD(d Decision) metadata.MD {
	if len(d.Headers) == 0 {
		return nil
	}
	md := make(metadata.MD, len(d.Headers))
	for _, h := range d.Headers {
		k := strings.ToLower(h.Name)
		md[k] = append(md[k], h.Value)
	}
	return md
}

// UnaryServerInterceptor returns a gRPC server interceptor that asks
// ratelimitd, through rl (a *Client, or in tests a clienttest.Fake) and
// under the rules of domain, whether each call may proceed.
//
// A call's descriptors are, in this order: [method=<full method>] (see
// WithMethodKey), then one per metadata key of WithMetadataKey that the
// call carries, [remote_address=<host>] with WithPeerAddress, and those
// of WithDescriptors. Each is a separate descriptor, counted by its own
// rule; nested rules (such as per method and API key) come from
// WithDescriptors. A call with no descriptors proceeds without asking.
//
// The headers of the decision (RateLimit-Policy, RateLimit, Retry-After,
// as ratelimitd is configured) are set as response header metadata, their
// names lower-cased, whether the call is allowed or refused. A call
// refused by ratelimitd (or by the Client's memory of refusals) fails with
// codes.ResourceExhausted and the details errdetails.RetryInfo (the
// decision's RetryAfter) and errdetails.QuotaFailure (one violation per
// descriptor over its limit, its subject the limit's name). When
// ratelimitd fails, the Client's failure policy decides: the call
// proceeds (fail open, the default), or fails with codes.Unavailable
// (WithFailClosed). A call whose context ends first fails with its
// status. A request that cannot be sent (malformed, or over ratelimitd's
// bounds: see the package documentation), which only the interceptor's
// configuration makes (the domain, WithMetadataKey's keys, WithDescriptors),
// fails the call with codes.Internal, as a bug of the server, not of its
// caller; it is never let through. Metadata values may hold any bytes
// (binary "-bin" metadata included) and any length: they are sent as
// ratelimitd counts them, and never fail the call.
//
// Usage:
//
//	rl := client.New(conn)
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(
//		client.UnaryServerInterceptor(rl, "api", client.WithMetadataKey("x-api-key"))))
func UnaryServerInterceptor(rl RateLimiter, domain string, opts ...InterceptorOption) grpc.UnaryServerInterceptor {
	in := newServerInterceptor(rl, domain, opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		release, d, err := in.hold(ctx, info.FullMethod, in.descriptors(ctx, info.FullMethod, md, true))
		defer release()
		if hmd := headerMD(d); hmd != nil {
			_ = grpc.SetHeader(ctx, hmd) // fails only once headers are sent, and they are not yet
		}
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor is UnaryServerInterceptor for streams: it asks
// once, when the stream starts (and with WithConcurrency holds the slot
// until the handler returns).
func StreamServerInterceptor(rl RateLimiter, domain string, opts ...InterceptorOption) grpc.StreamServerInterceptor {
	in := newServerInterceptor(rl, domain, opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		md, _ := metadata.FromIncomingContext(ctx)
		release, d, err := in.hold(ctx, info.FullMethod, in.descriptors(ctx, info.FullMethod, md, true))
		defer release()
		if hmd := headerMD(d); hmd != nil {
			_ = ss.SetHeader(hmd)
		}
		if err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// UnaryClientInterceptor returns a gRPC client interceptor that throttles
// outbound calls: it asks ratelimitd, through rl and under the rules of
// domain, before each call, and when refused fails the call locally,
// without sending it, with the errors of UnaryServerInterceptor
// (ResourceExhausted with RetryInfo and QuotaFailure, or Unavailable when
// failing closed). Its descriptors are built as UnaryServerInterceptor's,
// from the outgoing metadata; WithPeerAddress does not apply. The
// decision's headers are not reported.
func UnaryClientInterceptor(rl RateLimiter, domain string, opts ...InterceptorOption) grpc.UnaryClientInterceptor {
	in := newInterceptor(rl, domain, "UnaryClientInterceptor", opts)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		md, _ := metadata.FromOutgoingContext(ctx)
		if _, err := in.decide(ctx, method, in.descriptors(ctx, method, md, false)); err != nil {
			return err
		}
		return invoker(ctx, method, req, reply, cc, callOpts...)
	}
}

// StreamClientInterceptor is UnaryClientInterceptor for streams: it asks
// once, before opening the stream.
func StreamClientInterceptor(rl RateLimiter, domain string, opts ...InterceptorOption) grpc.StreamClientInterceptor {
	in := newInterceptor(rl, domain, "StreamClientInterceptor", opts)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
		md, _ := metadata.FromOutgoingContext(ctx)
		if _, err := in.decide(ctx, method, in.descriptors(ctx, method, md, false)); err != nil {
			return nil, err
		}
		return streamer(ctx, desc, cc, method, callOpts...)
	}
}

// A Limiter adapts a RateLimiter (a *Client, a *Quota, a
// clienttest.Fake) to go-grpc-middleware's
// interceptors/ratelimit.Limiter, to plug it into existing chains of
// interceptors.
//
// That package's interceptors replace Limit's error by a
// codes.ResourceExhausted status of their own, keeping only its text: the
// RetryInfo and QuotaFailure details are lost, as are the rate-limit
// headers, and a failure closed becomes ResourceExhausted too. Prefer
// UnaryServerInterceptor and StreamServerInterceptor, which keep them.
//
// A Limiter is safe for concurrent use by multiple goroutines.
type Limiter struct {
	in *interceptor
}

var _ ratelimit.Limiter = (*Limiter)(nil)

// NewLimiter returns a Limiter asking rl, under the rules of domain,
// about each call, with the descriptors UnaryServerInterceptor would
// send, built from the call's context by the same options: [method=<full
// method>] from grpc.Method(ctx) (WithMethodKey; none outside a gRPC
// server call), the incoming metadata's WithMetadataKey keys, the peer
// (WithPeerAddress) and WithDescriptors. For a *Quota, domain must be its
// own (Quota.Domain).
//
// Usage:
//
//	grpc.NewServer(grpc.ChainUnaryInterceptor(
//		ratelimit.UnaryServerInterceptor(client.NewLimiter(rl, "api", client.WithMetadataKey("x-api-key")))))
func NewLimiter(rl RateLimiter, domain string, opts ...InterceptorOption) *Limiter {
	return &Limiter{in: newInterceptor(rl, domain, "NewLimiter", opts)}
}

// Limit returns nil when the call of ctx may proceed, and otherwise the
// error UnaryServerInterceptor would fail it with: a status error of
// codes.ResourceExhausted with RetryInfo and QuotaFailure details, or
// codes.Unavailable when failing closed, codes.Internal for a malformed
// request, or ctx's status when ctx ended. With no descriptors, Limit
// returns nil without asking.
func (l *Limiter) Limit(ctx context.Context) error {
	method, _ := grpc.Method(ctx)
	md, _ := metadata.FromIncomingContext(ctx)
	_, err := l.in.decide(ctx, method, l.in.descriptors(ctx, method, md, true))
	return err
}
