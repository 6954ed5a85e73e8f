package rlqs

import (
	"cmp"
	"crypto/rand"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/fairshare"
)

// Bounds on what clients may make the service hold.
const (
	// MaxBucketsPerStream is how many buckets one stream may hold; the
	// buckets it reports past that get no assignment. A stream drops, at
	// its next report, the buckets not reported within their assignment's
	// time to live, which makes room.
	MaxBucketsPerStream = 1000
	// MaxBuckets is how many buckets all the streams together may hold;
	// the buckets reported past that get no assignment. A report refused
	// at this bound has every stream drop its buckets not reported within
	// their assignment's time to live, so that the next one finds room.
	MaxBuckets = 100_000
	// MaxBucketEntries is how many keys a bucket id may have; a bucket id
	// with more gets no assignment.
	MaxBucketEntries = 32
	// MaxBucketIDBytes is how many bytes the keys and values of a bucket
	// id may have together; a bucket id with more gets no assignment.
	MaxBucketIDBytes = 1024
)

// Assignment lifetimes: see ttlFor.
const (
	// DefaultReportingInterval is the reporting interval assumed for a
	// bucket until its client reports one (a time_elapsed).
	DefaultReportingInterval = 10 * time.Second
	// MinTTL and MaxTTL bound assignment_time_to_live.
	MinTTL = time.Second
	MaxTTL = 10 * time.Minute
)

// A Sharer divides a bucket's limit among the clients that report on it:
// fairshare.Tracker.
type Sharer interface {
	// ReportFor records a client's usage of a bucket since its last
	// report, keeps the client at least keep after now (the time to live
	// of the assignment answering the report), and reports false when it
	// was refused (the sharer is full).
	ReportFor(bucket, client string, allowed, denied uint64, keep time.Duration, now time.Time) bool
	// Share returns the client's share, in requests per second, of limit
	// requests per second. ok is false, and the client has no share, when
	// the bucket or the client is not held (refused, expired or
	// forgotten): the shares of the clients held sum to at most limit.
	Share(bucket, client string, limit float64, now time.Time) (rate float64, ok bool)
	// Forget drops every share of the client at now; a share still in
	// force stays counted until it expires.
	Forget(client string, now time.Time)
}

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
	// that use it (a fairshare.Pool): the shares of all the clients of all
	// the replicas add up to at most the limit. Nil divides each limit
	// among this replica's clients only (Sharer).
	Store backend.ShareStore
	// Replica names this replica in Store: unique among the replicas
	// sharing it. Empty means a random name.
	Replica string
	// SyncInterval is how often the replica exchanges its buckets' entries
	// with Store; zero means fairshare.DefaultSyncInterval.
	SyncInterval time.Duration
	// Fallback is what a limited bucket gets while Store grants it no
	// share (out of reach): the shares granted before stay in force until
	// they expire in the store.
	Fallback Fallback
	// Sharer divides the limits when Store is nil; nil means a
	// fairshare.Tracker with its default options.
	Sharer Sharer
	// ShadowMode assigns ALLOW_ALL to every bucket, as the rule's
	// shadow_mode does.
	ShadowMode bool
	// Registry, when set, receives the service's metrics.
	Registry prometheus.Registerer
	// Logger receives the service's logs; nil discards them.
	Logger *slog.Logger
	// Now is the clock of reports and shares; nil means time.Now.
	Now func() time.Time
}

// Service serves envoy.service.rate_limit_quota.v3.RateLimitQuotaService
// under the rules in force. It is safe for concurrent use.
type Service struct {
	rules    atomic.Pointer[config.Rules]
	sharer   Sharer
	pool     *fairshare.Pool // nil unless Options.Store
	fallback Fallback
	shadow   bool
	log      *slog.Logger
	now      func() time.Time
	metrics  *metrics
	ids      atomic.Uint64 // numbers the streams, the sharer's client names

	stopOnce sync.Once
	stopped  chan struct{} // closed by EndStreams

	mu      sync.Mutex
	holders map[string]map[*stream]struct{} // by bucket key: the streams holding it
	streams map[*stream]struct{}
	total   int // buckets held, all streams together
	max     int // MaxBuckets; lowered by tests
}

// New returns a Service deciding under rules (nil until SetRules).
func New(rules *config.Rules, opts Options) *Service {
	s := &Service{
		sharer:   opts.Sharer,
		fallback: opts.Fallback,
		shadow:   opts.ShadowMode,
		log:      opts.Logger,
		now:      opts.Now,
		metrics:  newMetrics(opts.Registry),
		holders:  make(map[string]map[*stream]struct{}),
		streams:  make(map[*stream]struct{}),
		stopped:  make(chan struct{}),
		max:      MaxBuckets,
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	switch {
	case opts.Store != nil:
		s.pool = fairshare.NewPool(fairshare.PoolOptions{
			Store:    opts.Store,
			Replica:  cmp.Or(opts.Replica, rand.Text()),
			Interval: opts.SyncInterval,
			Changed:  s.moved,
			Observe:  s.metrics.exchanged,
			Logger:   s.log,
			Now:      s.now,
		})
		s.sharer = s.pool
	case s.sharer == nil:
		s.sharer = fairshare.NewTracker(fairshare.Options{})
	}
	s.rules.Store(rules)
	return s
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
// difference), with a handler that reads and writes bucket ids as bytes
// (see wireReports).
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
	if s.pool != nil {
		s.pool.Close()
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
	s.mu.Unlock()
	s.metrics.streams.Inc()
	return st
}

// endStream forgets a stream, its buckets and its shares, and lets the
// streams that shared its buckets take them up.
func (s *Service) endStream(st *stream) {
	s.metrics.streams.Dec()
	s.sharer.Forget(st.client, s.now()) // before the others wake to their new shares
	for key, b := range st.buckets {
		st.drop(key, b)
	}
	s.mu.Lock()
	delete(s.streams, st)
	s.mu.Unlock()
}

// hold records that st holds the bucket key, and reports false when that
// would pass MaxBuckets; every stream is then woken to drop its idle
// buckets (see stream.sweep).
func (s *Service) hold(st *stream, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.total >= s.max {
		for o := range s.streams {
			o.wake("")
		}
		return false
	}
	s.total++
	h := s.holders[key]
	if h == nil {
		h = make(map[*stream]struct{})
		s.holders[key] = h
	}
	h[st] = struct{}{}
	return true
}

// release undoes hold, and wakes the other holders of the bucket: their
// shares grew.
func (s *Service) release(st *stream, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total--
	h := s.holders[key]
	delete(h, st)
	if len(h) == 0 {
		delete(s.holders, key)
	}
	for o := range h {
		o.wake(key)
	}
}

// moved wakes every holder of the bucket key: an exchange with the store
// moved its grant or the other replicas' demands.
func (s *Service) moved(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for o := range s.holders[key] {
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
