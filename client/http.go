package client

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// QuotaExceeded is the problem type (RFC 9457) of the body HTTPMiddleware
// sends with a 429, as draft-ietf-httpapi-ratelimit-headers-10 registers it.
const QuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// An HTTPOption configures HTTPMiddleware.
type HTTPOption func(*httpOptions)

type httpOptions struct {
	apiKeyHeader string // "" when not keyed by API key
	clientIP     bool
	trusted      []netip.Prefix
	ipv4Bits     int // the client IP's prefix length, IPv4
	ipv6Bits     int // the client IP's prefix length, IPv6
	proxyHeader  string
	route        bool
	routeFunc    RouteFunc
	descriptors  DescriptorFunc
	xRateLimit   bool
	logger       *slog.Logger
	skip         func(*http.Request) bool
	refused      func(http.ResponseWriter, *http.Request, Decision)
	keyError     func(http.ResponseWriter, *http.Request, error)
	concurrency  bool
}

// A RouteFunc returns the route of a request for WithRouteFunc, or an
// error when it cannot tell: see HTTPMiddleware for what the middleware
// then answers.
type RouteFunc func(*http.Request) (string, error)

// A DescriptorFunc returns descriptors of a request for
// WithHTTPDescriptorFunc, or an error when it cannot build them (say, a
// credential it cannot parse): see HTTPMiddleware for what the middleware
// then answers.
type DescriptorFunc func(*http.Request) ([]Descriptor, error)

// Infallible adapts a function that always builds a request's descriptors
// into a DescriptorFunc that never fails:
// WithHTTPDescriptorFunc(Infallible(f)) is WithHTTPDescriptors(f).
func Infallible(f func(*http.Request) []Descriptor) DescriptorFunc {
	return func(r *http.Request) ([]Descriptor, error) { return f(r), nil }
}

// WithAPIKeyHeader adds the descriptor [api_key=<value of the header
// name>]. A request without the header (or with an empty one) gets no such
// descriptor, so combine it with WithClientIP to limit anonymous callers.
func WithAPIKeyHeader(name string) HTTPOption {
	return func(o *httpOptions) { o.apiKeyHeader = name }
}

// WithClientIP adds the descriptor [remote_address=<client network>]: the
// network of the IP that ClientIP returns, which is the connection's peer,
// or, only when the peer is in one of the trusted proxy prefixes, the
// right-most address of the proxy header (X-Forwarded-For by default, see
// WithProxyHeader) that is not trusted. Without trusted prefixes, the
// headers are never read. A request whose client IP is unknown (a peer
// that is not an IP address, as on a Unix socket) gets no such descriptor.
//
// The network is the address itself for IPv4, and its /64 for IPv6 (see
// WithClientIPPrefix), written as the masked address: 192.0.2.1, or
// 2001:db8:1:2:: for any of 2001:db8:1:2::/64. A single IPv6 host is
// commonly given a whole /64, so counting each IPv6 address apart would
// give one client 2^64 counters. IPv4-mapped IPv6 addresses
// (::ffff:192.0.2.1) count as IPv4, and so do trusted prefixes inside
// ::ffff:0:0/96 of length 96 or more: ::ffff:10.0.0.0/104, the form a
// dual-stack listener shows IPv4 peers in, trusts 10.0.0.0/8 (see
// ClientIP).
func WithClientIP(trusted ...netip.Prefix) HTTPOption {
	return func(o *httpOptions) {
		o.clientIP = true
		o.trusted = append(o.trusted[:0:0], trusted...)
	}
}

// WithClientIPPrefix sets how many leading bits of the client IP make
// the network that WithClientIP counts: v4 (1 to 32, by default 32: each
// IPv4 address apart) and v6 (1 to 128, by default 64: each IPv6 /64
// apart). WithClientIPPrefix(24, 48) counts per IPv4 /24 and IPv6 /48.
// HTTPMiddleware panics when a length is out of range. The option does not
// add the descriptor by itself: it shapes the one of WithClientIP, or of
// the default set.
func WithClientIPPrefix(v4, v6 int) HTTPOption {
	return func(o *httpOptions) { o.ipv4Bits, o.ipv6Bits = v4, v6 }
}

// WithProxyHeader sets the header through which trusted proxies report
// the client: "X-Forwarded-For" (the default), "Forwarded" (RFC 7239,
// read from its for= parameters), or any other header holding a
// comma-separated list of addresses (such as "X-Real-IP"). Name the one
// your proxies set: the others reach the middleware as the client sent
// them.
func WithProxyHeader(name string) HTTPOption {
	return func(o *httpOptions) { o.proxyHeader = name }
}

// WithRoute adds the descriptor [path=<route>, method=<request method>],
// path outermost. route names the request's route; nil means the default:
// r.Pattern when set, else r.URL.Path.
//
// r.Pattern is set by http.ServeMux (Go 1.22+) only when it routes the
// request, after this middleware runs if the middleware wraps the mux:
// there the default sees r.URL.Path, which holds every raw path (IDs and
// all). To key by pattern, wrap each handler inside the mux instead
// (mux.Handle("GET /items/{id}", mw(h))), or pass a route function that
// normalises paths.
func WithRoute(route func(*http.Request) string) HTTPOption {
	if route == nil {
		return WithRouteFunc(nil)
	}
	return WithRouteFunc(func(r *http.Request) (string, error) { return route(r), nil })
}

// WithRouteFunc is WithRoute with a route function that may fail: a
// request whose route it cannot tell is answered as HTTPMiddleware says
// (400 by default, see WithKeyErrorHandler), never let through
// unlimited. nil means WithRoute's default.
func WithRouteFunc(route RouteFunc) HTTPOption {
	return func(o *httpOptions) {
		o.route = true
		o.routeFunc = route
	}
}

// WithHTTPDescriptors adds the descriptors f returns for each request
// (such as [tenant=<id>, plan=<plan>] from an authenticated identity),
// after the others. Values may hold any bytes, but descriptors that are
// malformed or over ratelimitd's bounds (see HTTPMiddleware) make the
// middleware answer 500: keep keys to fixed names, and put what the
// request carries in values.
func WithHTTPDescriptors(f func(*http.Request) []Descriptor) HTTPOption {
	if f == nil {
		return WithHTTPDescriptorFunc(nil)
	}
	return WithHTTPDescriptorFunc(Infallible(f))
}

// WithHTTPDescriptorFunc is WithHTTPDescriptors with a function that may
// fail, when it cannot attribute the request (a token it cannot parse, a
// tenant it cannot find): the request is then answered as HTTPMiddleware
// says (400 by default, see WithKeyErrorHandler), and never let through
// unlimited, since a caller who could make the key fail would otherwise
// escape every limit. Return no descriptors and a nil error for requests
// that should go without.
func WithHTTPDescriptorFunc(f DescriptorFunc) HTTPOption {
	return func(o *httpOptions) { o.descriptors = f }
}

// WithKeyErrorHandler sets what the middleware answers when a RouteFunc
// or DescriptorFunc fails: handle writes the answer (next is not called).
// The default answers 400 Bad Request, with a plain-text body that does
// not include err, and logs err with WithHTTPLogger at Warn. Such a
// request is never passed on: a key function that means to let a request
// through unlimited returns no descriptors and a nil error instead.
func WithKeyErrorHandler(handle func(w http.ResponseWriter, r *http.Request, err error)) HTTPOption {
	return func(o *httpOptions) { o.keyError = handle }
}

// WithSkip makes the middleware pass the requests for which skip returns
// true straight to the next handler, without asking ratelimitd nor
// sending rate-limit headers: health checks, internal callers, static
// files.
func WithSkip(skip func(*http.Request) bool) HTTPOption {
	return func(o *httpOptions) { o.skip = skip }
}

// WithRefusalWriter sets how the middleware answers a request ratelimitd
// refused (or the Client's refusal memory did): write is called instead
// of WriteTooManyRequests, the default, and next is not. When it is
// called, w's header already holds the decision's rate-limit headers
// (and the X-RateLimit ones with WithXRateLimitHeaders) and Retry-After;
// write sets the status and the body, and may change the headers. To add
// to the default answer, call WriteTooManyRequests from write.
func WithRefusalWriter(write func(w http.ResponseWriter, r *http.Request, d Decision)) HTTPOption {
	return func(o *httpOptions) { o.refused = write }
}

// WithXRateLimitHeaders adds, to every decided answer, the legacy
// X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset headers
// of the tightest limit (the longest refused, else the one with the least
// remaining): its requests per window, the requests remaining, and the
// seconds until it resets, rounded up (not a Unix time).
func WithXRateLimitHeaders() HTTPOption {
	return func(o *httpOptions) { o.xRateLimit = true }
}

// WithHTTPConcurrency makes the middleware hold a slot of the domain's
// concurrency limits while the next handler runs: it Acquires (see
// Client.Acquire) instead of asking ShouldRateLimit, with the same
// descriptors, and releases when next returns (or panics), even once the
// request's context is done. Refusals, failures and headers are answered
// as without the option. rl must be an Acquirer, such as a *Client:
// HTTPMiddleware panics otherwise. A slot's lease is its limit's window:
// give concurrency limits a window longer than the longest request.
func WithHTTPConcurrency() HTTPOption {
	return func(o *httpOptions) { o.concurrency = true }
}

// WithHTTPLogger sets the logger of malformed-descriptor errors (logged at
// Error, as they are bugs). nil, the default, discards them.
func WithHTTPLogger(l *slog.Logger) HTTPOption {
	return func(o *httpOptions) { o.logger = l }
}

// HTTPMiddleware returns net/http middleware that asks rl (a *Client, or
// in tests a clienttest.Fake), under the rules of domain, whether each
// request may proceed, before calling the next handler. Requests for
// which WithSkip's function returns true go to the next handler unasked.
//
// # Descriptors
//
// Each request is one hit on each of its descriptors, in this order:
//
//	[api_key=<header value>]             WithAPIKeyHeader
//	[remote_address=<client network>]    WithClientIP, WithClientIPPrefix
//	[path=<route>, method=<method>]      WithRoute, WithRouteFunc
//	...                                  WithHTTPDescriptors, WithHTTPDescriptorFunc
//
// Values are sent whatever their bytes and length (see the package
// documentation): a header or path that is not valid UTF-8 (such as
// X-API-Key: k\xff, or /items/%FF) is sent as bytes, and a value over
// 1024 bytes as its SHA-256 digest. Neither fails the request, nor drops
// any descriptor: the client's network and the route are counted
// whatever the other headers hold.
//
// Without any of these options, the default set is WithClientIP() (the
// peer's network: its IPv4 address, or its IPv6 /64; no proxy trusted)
// and WithRoute(nil). A request that
// ends up with no descriptors (say, only WithAPIKeyHeader and no key
// sent) is passed on without asking ratelimitd, as Envoy does.
//
// # Answers
//
//   - Allowed: the headers ratelimitd sent (Decision.Headers, such as
//     the IETF RateLimit-Policy and RateLimit fields, or what the server's
//     header mode asks for) are set, plus the X-RateLimit ones with
//     WithXRateLimitHeaders, and next is called.
//   - Refused: 429 Too Many Requests with the same headers, Retry-After
//     (Decision.RetryAfter in seconds, rounded up, at least 1), and an
//     application/problem+json body (RFC 9457) of type QuotaExceeded whose
//     "violated-policies" lists the names of the limits over their
//     budget (WriteTooManyRequests; WithRefusalWriter replaces it). next
//     is not called.
//   - ratelimitd failed: the Client's failure policy decides. Fail open
//     (the default) calls next without rate-limit headers. Fail closed
//     answers 503 Service Unavailable, with a plain-text body and no
//     Retry-After: the caller did not exceed any quota, and a 429 would
//     tell it so and invite it to blame itself.
//   - The middleware built a request it cannot send: malformed (an empty
//     domain, or descriptors from WithHTTPDescriptors without entries or
//     with an empty key), or over ratelimitd's bounds (a domain over 256
//     bytes, over 64 descriptors, over 32 entries in one, a key over 1024
//     bytes, a domain or key that is not valid UTF-8, or a request over
//     1 MiB even with long values digested). It answers 500 Internal
//     Server Error, with a plain-text body, logged with WithHTTPLogger,
//     and next is not called: the request is refused, never let through
//     unlimited. Only the middleware's configuration (the domain, and
//     WithHTTPDescriptors) can make such a request, never what the HTTP
//     client sends, so the answer is a 5xx, and no failure policy hides
//     it.
//   - The request's context ended before ratelimitd answered: 503, and
//     next is not called.
//   - A RouteFunc or DescriptorFunc failed: the request cannot be
//     attributed, so it is not counted, and it is not let through either
//     (a caller able to make the key fail would escape every limit): 400
//     Bad Request by default, as the request is what the function could
//     not read; WithKeyErrorHandler changes the answer. ratelimitd is not
//     asked.
//
// HTTPMiddleware panics when given prefix lengths out of range (see
// WithClientIPPrefix), and given WithHTTPConcurrency with an rl that is
// not an Acquirer. The middleware is safe for concurrent use by
// multiple goroutines.
func HTTPMiddleware(rl RateLimiter, domain string, opts ...HTTPOption) func(http.Handler) http.Handler {
	o := httpOptions{proxyHeader: "X-Forwarded-For", ipv4Bits: 32, ipv6Bits: 64}
	for _, opt := range opts {
		opt(&o)
	}
	if o.ipv4Bits < 1 || o.ipv4Bits > 32 || o.ipv6Bits < 1 || o.ipv6Bits > 128 {
		panic(fmt.Sprintf("client: WithClientIPPrefix(%d, %d): want an IPv4 length of 1 to 32 and an IPv6 length of 1 to 128", o.ipv4Bits, o.ipv6Bits))
	}
	if o.apiKeyHeader == "" && !o.clientIP && !o.route && o.descriptors == nil {
		o.clientIP, o.route = true, true
	}
	if o.routeFunc == nil {
		o.routeFunc = httpDefaultRoute
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	if o.refused == nil {
		o.refused = WriteTooManyRequests
	}
	if o.keyError == nil {
		o.keyError = o.badRequest
	}
	decide := func(r *http.Request, ds []Descriptor) (func(), Decision, error) {
		d, err := rl.ShouldRateLimit(r.Context(), domain, ds...)
		return func() {}, d, err
	}
	if o.concurrency {
		acq := mustAcquirer(rl, "WithHTTPConcurrency")
		decide = func(r *http.Request, ds []Descriptor) (func(), Decision, error) {
			return acq.Acquire(r.Context(), domain, ds...)
		}
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if o.skip != nil && o.skip(r) {
				next.ServeHTTP(w, r)
				return
			}
			ds, err := o.requestDescriptors(r)
			if err != nil {
				o.keyError(w, r, err)
				return
			}
			if len(ds) == 0 {
				next.ServeHTTP(w, r)
				return
			}
			release, d, err := decide(r, ds)
			defer release()
			if err != nil {
				if status.Code(err) == codes.InvalidArgument {
					o.logger.ErrorContext(r.Context(), "rate limit request malformed",
						"domain", domain, "err", err)
					http.Error(w, "rate limit: malformed rate limit request", http.StatusInternalServerError)
					return
				}
				http.Error(w, "rate limit: request ended", http.StatusServiceUnavailable)
				return
			}
			if d.Err != nil && !d.Allowed {
				http.Error(w, "rate limit service unavailable", http.StatusServiceUnavailable)
				return
			}
			h := w.Header()
			for _, hd := range d.Headers {
				if strings.EqualFold(hd.Name, "Retry-After") {
					continue // ours, counting down for a Local decision
				}
				h.Add(hd.Name, hd.Value)
			}
			if o.xRateLimit {
				httpSetXRateLimit(h, d.Statuses)
			}
			if d.Allowed {
				next.ServeHTTP(w, r)
				return
			}
			h.Set("Retry-After", strconv.FormatInt(max(seconds(d.RetryAfter), 1), 10))
			o.refused(w, r, d)
		})
	}
}

// badRequest is the default key error handler: 400, logged at Warn.
func (o *httpOptions) badRequest(w http.ResponseWriter, r *http.Request, err error) {
	o.logger.WarnContext(r.Context(), "rate limit key function failed", "err", err)
	http.Error(w, "rate limit: cannot attribute the request", http.StatusBadRequest)
}

// requestDescriptors returns r's descriptors, or the error of a key
// function.
func (o *httpOptions) requestDescriptors(r *http.Request) ([]Descriptor, error) {
	ds := make([]Descriptor, 0, 3) // room for the built-in ones
	if o.apiKeyHeader != "" {
		if v := r.Header.Get(o.apiKeyHeader); v != "" {
			ds = append(ds, D("api_key", v))
		}
	}
	if o.clientIP {
		if ip := ClientIP(r, o.proxyHeader, o.trusted); ip.IsValid() {
			ds = append(ds, D("remote_address", o.network(ip)))
		}
	}
	if o.route {
		route, err := o.routeFunc(r)
		if err != nil {
			return nil, fmt.Errorf("client: route of %s %s: %w", r.Method, r.URL.Path, err)
		}
		ds = append(ds, D("path", route, "method", r.Method))
	}
	if o.descriptors != nil {
		more, err := o.descriptors(r)
		if err != nil {
			return nil, fmt.Errorf("client: descriptors of %s %s: %w", r.Method, r.URL.Path, err)
		}
		ds = append(ds, more...)
	}
	return ds, nil
}

// network returns the network of ip (valid, zone-less and unmapped, as
// ClientIP returns it) that WithClientIP counts, as its masked address.
func (o *httpOptions) network(ip netip.Addr) string {
	bits := o.ipv6Bits
	if ip.Is4() {
		bits = o.ipv4Bits
	}
	p, err := ip.Prefix(bits)
	if err != nil { // cannot happen: bits is checked, ip valid
		return ip.String()
	}
	return p.Addr().String()
}

// httpDefaultRoute is r.Pattern when set, else r.URL.Path.
func httpDefaultRoute(r *http.Request) (string, error) {
	if r.Pattern != "" {
		return r.Pattern, nil
	}
	return r.URL.Path, nil
}

// httpSetXRateLimit sets the X-RateLimit headers of the tightest limit of sts.
func httpSetXRateLimit(h http.Header, sts []Status) {
	tight := -1
	for i, s := range sts {
		if s.Limit == (Limit{}) || s.Unlimited {
			continue
		}
		if tight < 0 {
			tight = i
			continue
		}
		t := sts[tight]
		switch {
		case s.OverLimit && (!t.OverLimit || s.RetryAfter > t.RetryAfter):
			tight = i
		case !s.OverLimit && !t.OverLimit && s.Remaining < t.Remaining:
			tight = i
		}
	}
	if tight < 0 {
		return
	}
	s := sts[tight]
	h.Set("X-RateLimit-Limit", strconv.FormatUint(uint64(s.Limit.Requests), 10))
	h.Set("X-RateLimit-Remaining", strconv.FormatUint(s.Remaining, 10))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(seconds(s.ResetAfter), 10))
}

// httpProblem is the 429 body: RFC 9457 plus the draft's extension.
type httpProblem struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail"`
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
}

// WriteTooManyRequests writes HTTPMiddleware's default answer to a
// refused request: 429 Too Many Requests, Retry-After (d.RetryAfter in
// seconds, rounded up, at least 1), and an application/problem+json body
// (RFC 9457) of type QuotaExceeded whose "violated-policies" lists the
// names of d's limits over their budget. A WithRefusalWriter function may
// call it to keep that answer and add to it.
func WriteTooManyRequests(w http.ResponseWriter, _ *http.Request, d Decision) {
	retry := max(seconds(d.RetryAfter), 1)
	p := httpProblem{
		Type:   QuotaExceeded,
		Title:  "Request cannot be satisfied as assigned quota has been exceeded",
		Status: http.StatusTooManyRequests,
		Detail: "Too many requests; retry in " + strconv.FormatInt(retry, 10) + " s.",
	}
	for _, s := range d.Statuses {
		if s.OverLimit && s.Limit.Name != "" && !slices.Contains(p.ViolatedPolicies, s.Limit.Name) {
			p.ViolatedPolicies = append(p.ViolatedPolicies, s.Limit.Name)
		}
	}
	body, err := json.Marshal(p)
	if err != nil { // cannot happen: strings and an int
		body = []byte(`{"type":"` + QuotaExceeded + `","status":429}`)
	}
	h := w.Header()
	h.Set("Retry-After", strconv.FormatInt(retry, 10))
	h.Set("Content-Type", "application/problem+json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Del("Content-Length")
	w.WriteHeader(http.StatusTooManyRequests)
	w.Write(append(body, '\n'))
}

// ClientIP returns the IP address of r's client, or the zero Addr when it
// is unknown (r.RemoteAddr is not an IP address, with or without a port).
//
// When the connection's peer is in none of the trusted prefixes, ClientIP
// returns the peer and reads no header. Otherwise it walks the addresses
// that proxies appended to header (each appends the address it received
// the request from) from right to left, and returns the first one in no
// trusted prefix; if all are trusted, the left-most. An entry that is not
// an address (RFC 7239's "unknown" or obfuscated identifiers, garbage)
// stops the walk at the last trusted address before it: no proxy vouches
// for what lies beyond.
//
// header is "Forwarded" (RFC 7239: the for= parameter of each element,
// quoted or not, with an optional port and IPv6 in brackets) or the name
// of a comma-separated list of addresses such as "X-Forwarded-For"; all
// the request's fields of that name are read in order. Addresses are
// returned without zone, and IPv4-mapped IPv6 addresses as IPv4.
//
// Addresses are compared with trusted after that unmapping, so a trusted
// prefix inside ::ffff:0:0/96 of length 96 or more stands for the IPv4
// prefix of its length minus 96 (::ffff:10.0.0.5/128 for 10.0.0.5/32);
// a shorter one (::/0) matches no IPv4 address.
//
//nolint:revive // "client" is the HTTP request's here, not this package: client.IP would not say whose
func ClientIP(r *http.Request, header string, trusted []netip.Prefix) netip.Addr {
	peer := httpParseNode(r.RemoteAddr)
	if !peer.IsValid() || !httpTrusted(peer, trusted) {
		return peer
	}
	// This walk is written here rather than taken from realclientip-go
	// (v1.0.0, 2022, on the module proxy; it builds with Go 1.25 and has no
	// dependencies), whose RightmostTrustedRangeStrategy is the same idea
	// with other answers, each of which TestClientIP holds: it reads the
	// header whatever the peer; it returns no address when every entry is
	// trusted (here, the left-most) or when the walk meets an entry that is
	// not an address (here, the last trusted one before it); it accepts only
	// X-Forwarded-For and Forwarded (WithProxyHeader takes any list); it
	// splits Forwarded at every comma, quoted ones too, so that
	// for="10.1.1.1";proto="a,b" loses its element; and it keeps zones. It
	// parses into net.IP and returns a string, which would be parsed again.
	var nodes []string
	values := r.Header.Values(header)
	if http.CanonicalHeaderKey(header) == "Forwarded" {
		nodes = httpForwardedFor(values)
	} else {
		for _, v := range values {
			for n := range strings.SplitSeq(v, ",") {
				nodes = append(nodes, n)
			}
		}
	}
	ip := peer
	for i := len(nodes) - 1; i >= 0; i-- {
		a := httpParseNode(nodes[i])
		if !a.IsValid() {
			break
		}
		ip = a
		if !httpTrusted(a, trusted) {
			break
		}
	}
	return ip
}

// httpTrusted reports whether a, unmapped, is in one of the trusted
// prefixes, IPv4-mapped ones unmapped (see httpUnmapPrefix).
func httpTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if httpUnmapPrefix(p).Contains(a) {
			return true
		}
	}
	return false
}

// httpUnmapPrefix returns the IPv4 prefix of length p.Bits()-96 that p
// stands for when p lies inside ::ffff:0:0/96 and is at least that long,
// as addresses are compared unmapped; p itself otherwise.
func httpUnmapPrefix(p netip.Prefix) netip.Prefix {
	if !p.Addr().Is4In6() || p.Bits() < 96 {
		return p
	}
	return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96).Masked()
}

// httpParseNode parses an address with an optional port, IPv6 optionally in
// brackets: "192.0.2.1", "192.0.2.1:80", "2001:db8::1", "[2001:db8::1]",
// "[2001:db8::1]:80". It returns the zero Addr for anything else.
func httpParseNode(s string) netip.Addr {
	s = strings.TrimSpace(s)
	if s == "" {
		return netip.Addr{}
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		if ap, err := netip.ParseAddrPort(s); err == nil {
			a = ap.Addr()
		} else if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
			if a, err = netip.ParseAddr(s[1 : len(s)-1]); err != nil || !a.Is6() {
				return netip.Addr{}
			}
		} else {
			return netip.Addr{}
		}
	}
	return a.WithZone("").Unmap()
}

// httpForwardedFor returns the for= value of each element of the Forwarded
// field values (RFC 7239 §4), unquoted, in order; "" for an element
// without one, or a malformed one.
func httpForwardedFor(values []string) []string {
	var nodes []string
	for _, v := range values {
		i := 0
		for i <= len(v) {
			// One element: pairs separated by ';', until ',' or the end.
			node := ""
			for {
				for i < len(v) && (v[i] == ' ' || v[i] == '\t' || v[i] == ';') {
					i++
				}
				if i >= len(v) || v[i] == ',' {
					break
				}
				eq := strings.IndexAny(v[i:], "=,;")
				if eq < 0 || v[i+eq] != '=' {
					node, i = "", httpSkipElement(v, i)
					break
				}
				key := strings.TrimSpace(v[i : i+eq])
				i += eq + 1
				val, n, ok := httpPairValue(v[i:])
				if !ok {
					node, i = "", httpSkipElement(v, i)
					break
				}
				i += n
				if strings.EqualFold(key, "for") {
					node = val
				}
			}
			nodes = append(nodes, node)
			i++ // past ',' (or the end)
		}
	}
	return nodes
}

// httpPairValue parses a token or quoted-string at the start of s and returns
// it, unquoted, with the bytes it took.
func httpPairValue(s string) (val string, n int, ok bool) {
	if s == "" || s[0] != '"' {
		end := strings.IndexAny(s, ";, \t")
		if end < 0 {
			end = len(s)
		}
		return s[:end], end, true
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
			if i == len(s) {
				return "", 0, false
			}
			b.WriteByte(s[i])
		case '"':
			return b.String(), i + 1, true
		default:
			b.WriteByte(s[i])
		}
	}
	return "", 0, false // unterminated
}

// httpSkipElement returns the index of the ',' ending the element at i, or
// len(v), skipping quoted strings.
func httpSkipElement(v string, i int) int {
	quoted := false
	for ; i < len(v); i++ {
		switch c := v[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == ',':
			return i
		}
	}
	return len(v)
}
