package rlqs

import (
	"cmp"
	"crypto/rand"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/server/rlqs/fairshare"
)

// Defaults of Bounds, on what clients may make the service hold.
const (
	// DefaultMaxBucketsPerStream is how many buckets one stream may hold.
	DefaultMaxBucketsPerStream = 1000
	// DefaultMaxBucketsPerConnection is how many buckets the streams of
	// one gRPC connection may hold together.
	DefaultMaxBucketsPerConnection = 10_000
	// DefaultMaxBucketsPerPeer is how many buckets the streams of one
	// authenticated peer may hold together, over all its connections.
	DefaultMaxBucketsPerPeer = 50_000
	// DefaultMaxBuckets is how many buckets all the streams together may
	// hold.
	DefaultMaxBuckets = 100_000
	// DefaultMaxStreamsPerBucket is how many streams of one connection, or
	// of one peer, may hold the same bucket.
	DefaultMaxStreamsPerBucket = 16
	// MaxBucketEntries is how many keys a bucket id may have; a bucket id
	// with more gets no assignment.
	MaxBucketEntries = 32
	// MaxBucketIDBytes is how many bytes the keys and values of a bucket
	// id may have together; a bucket id with more gets no assignment.
	MaxBucketIDBytes = 1024
)

// Bounds limits the buckets the service holds for its clients, so that no
// client can fill what the service holds for all of them. A bucket counts
// against the bounds of its stream, of the stream's connection, of the
// connection's authenticated peer (the identity its client certificate
// names under mutual TLS; see tlsconfig.PeerIdentity), and of the
// service, from the first report that names it until its stream drops it,
// and, when its stream ends, until the assignment it was last sent
// expires: the fair-share tracker counts that client's share until then.
// A bucket that no rule matches is answered without being held, and
// counts against no bound. A bucket past a bound gets the Fallback, the
// assignment of the failure mode, and is counted in
// ratelimitd_rlqs_buckets_refused_total by the bound it met; it takes no
// place from a bucket held already. The zero value of a field means its
// default.
type Bounds struct {
	// PerStream is how many buckets one stream may hold
	// (DefaultMaxBucketsPerStream).
	PerStream int
	// PerConnection is how many buckets the streams of one gRPC connection
	// may hold (DefaultMaxBucketsPerConnection).
	PerConnection int
	// PerPeer is how many buckets the streams of one authenticated peer,
	// over all its connections, may hold (DefaultMaxBucketsPerPeer).
	// Connections without a verified client certificate have no peer.
	PerPeer int
	// Total is how many buckets all the streams together may hold
	// (DefaultMaxBuckets).
	Total int
	// StreamsPerBucket is how many streams of one connection, and of one
	// peer, may hold the same bucket (DefaultMaxStreamsPerBucket): each is a
	// client among which the bucket's limit is divided.
	StreamsPerBucket int
}

// withDefaults returns b with its zero or negative fields set to the
// defaults.
func (b Bounds) withDefaults() Bounds {
	or := func(v, d int) int {
		if v <= 0 {
			return d
		}
		return v
	}
	return Bounds{
		PerStream:        or(b.PerStream, DefaultMaxBucketsPerStream),
		PerConnection:    or(b.PerConnection, DefaultMaxBucketsPerConnection),
		PerPeer:          or(b.PerPeer, DefaultMaxBucketsPerPeer),
		Total:            or(b.Total, DefaultMaxBuckets),
		StreamsPerBucket: or(b.StreamsPerBucket, DefaultMaxStreamsPerBucket),
	}
}

// Assignment lifetimes: see ttlFor.
const (
	// DefaultReportingInterval is the reporting interval assumed for a
	// bucket until its client reports one (a time_elapsed).
	DefaultReportingInterval = 10 * time.Second
	// MinTTL and MaxTTL bound assignment_time_to_live.
	MinTTL = time.Second
	MaxTTL = 10 * time.Minute
)

// Fallback is what a limited bucket is assigned while the store grants no
// share of its limit (see Options.Store).
type Fallback uint8

const (
	// FallbackAllowAll assigns ALLOW_ALL (--failure-mode allow).
	FallbackAllowAll Fallback = iota
	// FallbackDenyAll assigns DENY_ALL (--failure-mode deny).
	FallbackDenyAll
	// FallbackNone assigns nothing: the client applies its own
	// no_assignment or expired_assignment behaviour (--failure-mode error).
	FallbackNone
)

// assignment returns f's assignment.
func (f Fallback) assignment() assignment {
	switch f {
	case FallbackAllowAll:
		return assignment{kind: kindAllowAll}
	case FallbackDenyAll:
		return assignment{kind: kindDenyAll}
	}
	return assignment{kind: kindNone}
}

// Options configures a Service. The zero value means the defaults.
type Options struct {
	// Store, when set, shares each bucket's limit with the other replicas
	// that use it (see fairshare.Pool): the shares of all the clients of
	// all the replicas add up to at most the limit. Nil divides each limit
	// among this replica's clients only.
	Store backend.ShareStore
	// Replica names this replica in Store: unique among the replicas
	// sharing it. Empty means DefaultReplica("").
	Replica string
	// SyncInterval is how often the replica looks for buckets to exchange
	// with Store (those that changed, or whose entries are about to
	// lapse); zero means fairshare.DefaultSyncInterval.
	SyncInterval time.Duration
	// Fallback is what a limited bucket gets while Store grants it no
	// share (out of reach): the shares granted before stay in force until
	// they expire in the store.
	Fallback Fallback
	// ShadowMode assigns ALLOW_ALL to every bucket, as the rule's
	// shadow_mode does.
	ShadowMode bool
	// Bounds limits the buckets the service holds for its clients.
	Bounds Bounds
	// UnknownDomain, when set, is called once per report whose domain has
	// no rules (its buckets are all answered ALLOW_ALL), so that a
	// mistyped domain is seen.
	UnknownDomain func(domain string)
	// Registry, when set, receives the service's metrics.
	Registry prometheus.Registerer
	// Logger receives the service's logs; nil discards them.
	Logger *slog.Logger
	// Now is the clock of reports and shares; nil means time.Now.
	Now func() time.Time

	// clientsPerBucket, when positive, bounds the clients of one bucket in
	// the fair-share tracker (fairshare.Options.MaxClientsPerBucket), for
	// the tests that reach that bound.
	clientsPerBucket int
}

// Service serves envoy.service.rate_limit_quota.v3.RateLimitQuotaService
// under the rules in force. It is safe for concurrent use.
type Service struct {
	rules    atomic.Pointer[config.Rules]
	shares   *fairshare.Pool // the fair-share core: shared through Options.Store, if set
	fallback Fallback
	shadow   bool
	unknown  func(domain string) // Options.UnknownDomain; never nil
	log      *slog.Logger
	now      func() time.Time
	metrics  *metrics
	ids      atomic.Uint64 // numbers the streams, the fair-share core's client names

	stopOnce sync.Once
	stopped  chan struct{} // closed by EndStreams
	followed chan struct{} // closed when follow returns; nil without a store

	mu       sync.Mutex
	bounds   Bounds                          // may be lowered by tests
	holders  map[string]map[*stream]struct{} // by bucket key: the streams holding it
	streams  map[*stream]struct{}
	all      account          // the service's holdings, all streams together
	conns    map[any]*account // by connection (see identify)
	peers    map[any]*account // by authenticated peer's name
	departed departures       // holdings of ended streams, until their assignments expire
	swept    time.Time        // when a refusal last had every stream drop its idle buckets
}

// New returns a Service deciding under rules (nil until SetRules).
func New(rules *config.Rules, opts Options) *Service {
	s := &Service{
		fallback: opts.Fallback,
		shadow:   opts.ShadowMode,
		unknown:  opts.UnknownDomain,
		log:      opts.Logger,
		now:      opts.Now,
		metrics:  newMetrics(opts.Registry),
		bounds:   opts.Bounds.withDefaults(),
		holders:  make(map[string]map[*stream]struct{}),
		streams:  make(map[*stream]struct{}),
		conns:    make(map[any]*account),
		peers:    make(map[any]*account),
		stopped:  make(chan struct{}),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.unknown == nil {
		s.unknown = func(string) {}
	}
	// The tracker holds a client per bucket held (the streams tell it when
	// they drop one), each kept as long as its assignment (the keep of
	// ReportFor, at least MinTTL), as the service counts it against its
	// bounds. The tracker drops expired clients as it meets them, so its
	// own bounds, twice the service's, are met only if the service's are.
	tracker := fairshare.Options{TTL: MinTTL, MaxBuckets: 2 * s.bounds.Total, MaxClients: 2 * s.bounds.Total,
		MaxClientsPerBucket: opts.clientsPerBucket}
	po := fairshare.PoolOptions{Tracker: tracker, Logger: s.log, Now: s.now}
	if opts.Store != nil {
		po.Store, po.Replica, po.Interval = opts.Store, cmp.Or(opts.Replica, DefaultReplica("")), opts.SyncInterval
		po.Observe = s.metrics.exchange
	}
	s.shares = fairshare.NewPool(po)
	s.rules.Store(rules)
	if s.shares.Shared() {
		s.followed = make(chan struct{})
		go s.follow() // ends with EndStreams, which waits for it
	}
	return s
}

// follow wakes the holders of the buckets whose shares the exchanges
// with the store moved, as the fair-share core tells them (Moved), until
// EndStreams.
func (s *Service) follow() {
	defer close(s.followed)
	var moved []string
	for {
		select {
		case <-s.shares.Moved():
		case <-s.stopped:
			return
		}
		moved = s.shares.TakeMoved(moved[:0])
		s.mu.Lock()
		for _, key := range moved {
			for o := range s.holders[key] {
				o.wake(key)
			}
		}
		s.mu.Unlock()
	}
}

// Register registers the service on g.
func (s *Service) Register(g grpc.ServiceRegistrar) {
	g.RegisterService(&serviceDesc, s)
}

// wireServer is what serviceDesc serves: *Service.
type wireServer interface {
	serve(g grpc.ServerStream) error
}

// serviceDesc is envoy.service.rate_limit_quota.v3.RateLimitQuotaService
// as rlqsv3 describes it (the same names, so reflection and Envoy see no
// difference), with a handler that reads and writes the messages of
// gen/ratelimit/wire/rlqs/v1, whose bucket ids are bytes (see wire.go).
var serviceDesc = grpc.ServiceDesc{
	ServiceName: rlqsv3.RateLimitQuotaService_ServiceDesc.ServiceName,
	HandlerType: (*wireServer)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName:    "StreamRateLimitQuotas",
		Handler:       func(srv any, g grpc.ServerStream) error { return srv.(wireServer).serve(g) },
		ServerStreams: true,
		ClientStreams: true,
	}},
	Metadata: rlqsv3.RateLimitQuotaService_ServiceDesc.Metadata,
}

// SetRules replaces the rules in force, and has every stream push the
// assignments that changed, and abandon the buckets no rule matches any
// more.
func (s *Service) SetRules(r *config.Rules) {
	s.rules.Store(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	for st := range s.streams {
		st.wake("")
	}
}

// EndStreams ends every stream, and those opened later at once, with
// Unavailable, so that clients reconnect to another replica: a stream
// lasts as long as its client wants, and grpc.Server.GracefulStop waits
// for every stream. Call it when shutting down, before GracefulStop.
func (s *Service) EndStreams() {
	s.stopOnce.Do(func() { close(s.stopped) })
	s.shares.Close()
	if s.followed != nil {
		<-s.followed
	}
}

// serve serves one StreamRateLimitQuotas.
func (s *Service) serve(g grpc.ServerStream) error {
	st := s.newStream(g)
	defer s.endStream(st)
	err := st.run()
	if err != nil {
		s.log.Debug("RLQS stream ended", "domain", st.domain, "err", err)
	}
	return err
}

// newStream registers a stream on g.
func (s *Service) newStream(g grpc.ServerStream) *stream {
	st := &stream{
		s:       s,
		g:       g,
		client:  strconv.FormatUint(s.ids.Add(1), 10),
		buckets: make(map[string]*bucket),
		wakeup:  make(chan struct{}, 1),
		rules:   make(map[ruleLabels]int),
	}
	s.mu.Lock()
	s.streams[st] = struct{}{}
	st.accts = s.open(g.Context())
	s.mu.Unlock()
	s.metrics.streams.Inc()
	return st
}

// endStream forgets a stream, its buckets and its shares, and lets the
// streams that shared its buckets take them up. The buckets whose
// assignments are still in force stay counted against the bounds until
// they expire, as the fair-share core counts their shares.
func (s *Service) endStream(st *stream) {
	s.metrics.streams.Dec()
	now := s.now()
	s.shares.Forget(st.client, now) // before the others wake to their new shares
	for key, b := range st.buckets {
		st.drop(key, b, b.expires)
	}
	s.mu.Lock()
	delete(s.streams, st)
	s.close(st.accts)
	s.mu.Unlock()
}

// hold records that st holds the bucket key, unless that would pass one
// of the Bounds: it then returns the bound met, after having every stream
// drop its idle buckets (see stream.sweep) when the service's bound was
// met, at most once a second.
func (s *Service) hold(st *stream, key string, now time.Time) bound {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireDepartures(now)
	if b := s.admit(st.accts, key); b != "" {
		if b == boundService && now.Sub(s.swept) >= time.Second {
			s.swept = now
			for o := range s.streams {
				o.wake("")
			}
		}
		return b
	}
	take(st.accts, key)
	h := s.holders[key]
	if h == nil {
		h = make(map[*stream]struct{})
		s.holders[key] = h
	}
	h[st] = struct{}{}
	return ""
}

// release undoes hold, and wakes the other holders of the bucket: their
// shares grew. The holding stays counted against the bounds until
// departs, when that is after now (the stream ended while the assignment
// it sent on the bucket is in force).
func (s *Service) release(st *stream, key string, departs, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if departs.After(now) {
		s.depart(st.accts, key, departs)
	} else {
		s.give(st.accts, key)
	}
	h := s.holders[key]
	delete(h, st)
	if len(h) == 0 {
		delete(s.holders, key)
	}
	for o := range h {
		o.wake(key)
	}
}

// shifted wakes the holders of the bucket key but st, after st reported
// on it: their shares may have changed.
func (s *Service) shifted(st *stream, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for o := range s.holders[key] {
		if o != st {
			o.wake(key)
		}
	}
}

// DefaultReplica names this replica among those sharing RLQS limits, when
// Options.Replica is empty: the host name, the address the gRPC listener
// got (if known), and a random part, so that a replica restarted in place
// does not take up the entries its previous process left in the store:
// they stand until the assignments made from them expire at the clients.
func DefaultReplica(grpcAddr string) string {
	host, err := os.Hostname()
	if err != nil {
		host = "localhost"
	}
	return host + "/" + grpcAddr + "/" + rand.Text()[:8]
}
