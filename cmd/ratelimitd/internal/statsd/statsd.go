package statsd

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	gostats "github.com/lyft/gostats"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of the Options fields whose zero value means "the default".
const (
	// DefaultWriteTimeout bounds a flush's dial and, separately, its
	// writes: gostats' net sink gives each of its writes one second.
	DefaultWriteTimeout = time.Second
	// DefaultTimerBuffer is how many bytes of timer lines (about 60 bytes
	// each) wait for the next flush before more are dropped.
	DefaultTimerBuffer = 1 << 20
)

// Options configure an Exporter.
type Options struct {
	// Addr is the host:port of the statsd server.
	Addr string
	// Network is "tcp" (the default when empty, as the reference's sink)
	// or "udp"; anything else is an error from New.
	Network string
	// FlushInterval is the time between two flushes of Run; it must be
	// positive. The reference's STATS_FLUSH_INTERVAL defaults to 10s.
	FlushInterval time.Duration
	// Tags are extra tags on every stat under Root, as the reference's
	// EXTRA_TAGS. Tags with an empty key or value are ignored, and '.',
	// ':' and '|' in values become '_' (gostats does both).
	Tags map[string]string
	// Logger logs the connection's changes of state. Nil means
	// slog.Default().
	Logger *slog.Logger
	// Registerer, if not nil, registers the exporter's metrics:
	// ratelimitd_statsd_flushes_total{result="ok"|"error"} and
	// ratelimitd_statsd_dropped_stats_total.
	Registerer prometheus.Registerer

	// WriteTimeout bounds the dial of a flush, and separately all its
	// writes, so that a server that cannot be reached or stops reading
	// holds a flush no longer. Zero means DefaultWriteTimeout.
	WriteTimeout time.Duration
	// TimerBuffer bounds the bytes of timer lines that wait for the next
	// flush (gostats hands timer values to the sink as they are recorded);
	// values beyond it are dropped and counted. Zero means
	// DefaultTimerBuffer.
	TimerBuffer int
}

// An Exporter aggregates stats in a gostats Store and sends them to a
// statsd server at each flush. Its methods are safe for concurrent use.
type Exporter struct {
	store    gostats.Store
	root     gostats.Scope
	sink     *sink
	interval time.Duration
	// ticker returns the ticks of Run and a func that stops them; tests
	// replace it.
	ticker func(time.Duration) (<-chan time.Time, func())
}

// New returns an Exporter for o. It does no I/O and starts no goroutine:
// the connection is dialed at the first flush.
func New(o Options) (*Exporter, error) {
	switch o.Network {
	case "":
		o.Network = "tcp"
	case "tcp", "udp":
	default:
		return nil, fmt.Errorf("statsd: network %q: want tcp or udp", o.Network)
	}
	if _, _, err := net.SplitHostPort(o.Addr); err != nil {
		return nil, fmt.Errorf("statsd: address %q: %w", o.Addr, err)
	}
	if o.FlushInterval <= 0 {
		return nil, fmt.Errorf("statsd: flush interval %v: want more than 0", o.FlushInterval)
	}
	if o.WriteTimeout < 0 {
		return nil, fmt.Errorf("statsd: write timeout %v: want 0 (the default) or more", o.WriteTimeout)
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.TimerBuffer < 0 {
		return nil, fmt.Errorf("statsd: timer buffer %d: want 0 (the default) or more", o.TimerBuffer)
	}
	if o.TimerBuffer == 0 {
		o.TimerBuffer = DefaultTimerBuffer
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	s := newSink(o.Network, o.Addr, o.WriteTimeout, o.TimerBuffer, o.Logger, m)
	store := gostats.NewStore(s, false)
	return &Exporter{
		store:    store,
		root:     store.ScopeWithTags("ratelimit", o.Tags),
		sink:     s,
		interval: o.FlushInterval,
		ticker: func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		},
	}, nil
}

// Root returns the "ratelimit" scope with Options.Tags, the root of the
// reference's stats (its stats manager's store.ScopeWithTags("ratelimit",
// EXTRA_TAGS)).
func (e *Exporter) Root() gostats.Scope { return e.root }

// Store returns the Exporter's Store, for AddStatGenerator (gauges computed
// at each flush) and for scopes outside "ratelimit". Flush the Exporter,
// not the Store, and never Start it: Run flushes.
func (e *Exporter) Store() gostats.Store { return e.store }

// Flush runs the Store's stat generators, latches its counters and sends
// the stats now, on the calling goroutine. It returns within twice
// Options.WriteTimeout (a dial, then the writes), the stats it could not
// send dropped and counted.
func (e *Exporter) Flush() { e.store.Flush() }

// Run flushes every Options.FlushInterval until ctx is done, then flushes
// a last time, closes the connection and returns. Flushes after Run has
// returned drop their stats.
func (e *Exporter) Run(ctx context.Context) {
	tick, stop := e.ticker(e.interval)
	defer stop()
	for {
		select {
		case <-ctx.Done():
			e.Flush()
			e.sink.close()
			return
		case <-tick:
			e.Flush()
		}
	}
}

// metrics are the exporter's own Prometheus metrics.
type metrics struct {
	flushesOK, flushErrors prometheus.Counter
	dropped                prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	flushes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimitd_statsd_flushes_total",
		Help: "Flushes of stats to the statsd server, by result: error when some of the flush's stats could not be sent.",
	}, []string{"result"})
	dropped := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "ratelimitd_statsd_dropped_stats_total",
		Help: "Stats (statsd lines) dropped because the statsd server could not be reached or written to in time, or because more timer values came between two flushes than the timer buffer holds.",
	})
	if reg != nil {
		if err := reg.Register(flushes); err != nil {
			return nil, fmt.Errorf("statsd: register metrics: %w", err)
		}
		if err := reg.Register(dropped); err != nil {
			reg.Unregister(flushes)
			return nil, fmt.Errorf("statsd: register metrics: %w", err)
		}
	}
	return &metrics{
		flushesOK:   flushes.WithLabelValues("ok"),
		flushErrors: flushes.WithLabelValues("error"),
		dropped:     dropped,
	}, nil
}
