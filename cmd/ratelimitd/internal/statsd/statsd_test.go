package statsd_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	gostats "github.com/lyft/gostats"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/cmd/ratelimitd/internal/statsd"
)

// wait bounds every wait for the server's side in these tests: reaching it
// is a failure, never the expected path.
const wait = 10 * time.Second

// eof is what a tcpServer's lines carry when a connection ends.
const eof = "<eof>"

// tcpServer is a statsd server over TCP that passes on the lines it reads.
type tcpServer struct {
	ln    net.Listener
	lines chan string
	read  bool // false: accept connections but never read them

	mu    sync.Mutex
	conns []net.Conn // requires mu
	wg    sync.WaitGroup
}

// listenTCP starts a tcpServer on addr ("127.0.0.1:0" for a free port),
// stopped at the end of the test if not before.
func listenTCP(t testing.TB, addr string, read bool) *tcpServer {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &tcpServer{ln: ln, lines: make(chan string, 10000), read: read}
	s.wg.Go(s.accept)
	t.Cleanup(s.close)
	return s
}

func (s *tcpServer) addr() string { return s.ln.Addr().String() }

func (s *tcpServer) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns = append(s.conns, c)
		s.mu.Unlock()
		if !s.read {
			// Never read: what the client can still write is what its
			// send buffer and this window hold. Should the smaller window
			// fail, the 16 MiB of TestStalledServer exceed a default one.
			_ = c.(*net.TCPConn).SetReadBuffer(4096)
			continue
		}
		s.wg.Go(func() {
			sc := bufio.NewScanner(c)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				s.lines <- sc.Text()
			}
			s.lines <- eof
		})
	}
}

// close stops the server: it closes the listener and every connection,
// and waits for its goroutines.
func (s *tcpServer) close() {
	s.ln.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// next returns the next line the server reads.
func (s *tcpServer) next(t *testing.T) string {
	t.Helper()
	select {
	case l := <-s.lines:
		return l
	case <-time.After(wait):
		t.Fatalf("no line from the client in %v", wait)
		return ""
	}
}

// take returns the next n lines the server reads, sorted.
func (s *tcpServer) take(t *testing.T, n int) []string {
	t.Helper()
	var got []string
	for range n {
		got = append(got, s.next(t))
	}
	slices.Sort(got)
	return got
}

// logBuffer collects an Exporter's log.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer // requires mu
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// count returns how many times s was logged.
func (b *logBuffer) count(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), s)
}

// rig is an Exporter with its registry and log.
type rig struct {
	*statsd.Exporter
	reg *prometheus.Registry
	log *logBuffer
}

// newRig returns an Exporter of o, its metrics in a registry of their own
// and its log in a buffer.
func newRig(t *testing.T, o statsd.Options) rig {
	t.Helper()
	r := rig{reg: prometheus.NewRegistry(), log: &logBuffer{}}
	o.Registerer = r.reg
	o.Logger = slog.New(slog.NewTextHandler(r.log, nil))
	if o.FlushInterval == 0 {
		o.FlushInterval = time.Hour // the tests flush
	}
	e, err := statsd.New(o)
	if err != nil {
		t.Fatal(err)
	}
	r.Exporter = e
	return r
}

// counts are the exporter's metrics.
type counts struct{ OK, Errors, Dropped float64 }

func (r rig) counts(t *testing.T) counts {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var c counts
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			v := m.GetCounter().GetValue()
			switch {
			case mf.GetName() == "ratelimitd_statsd_dropped_stats_total":
				c.Dropped = v
			case mf.GetName() == "ratelimitd_statsd_flushes_total" && m.GetLabel()[0].GetValue() == "ok":
				c.OK = v
			case mf.GetName() == "ratelimitd_statsd_flushes_total" && m.GetLabel()[0].GetValue() == "error":
				c.Errors = v
			}
		}
	}
	return c
}

func (r rig) wantCounts(t *testing.T, want counts) {
	t.Helper()
	if diff := cmp.Diff(want, r.counts(t)); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}

// TestCounterLatched: a counter is sent as its change since the last
// flush, and not at all while it does not change.
func TestCounterLatched(t *testing.T) {
	srv := listenTCP(t, "127.0.0.1:0", true)
	r := newRig(t, statsd.Options{Addr: srv.addr()})
	c := r.Root().Scope("a").NewCounter("b")
	c.Inc()
	c.Inc()
	c.Inc()
	r.Flush()
	if got, want := srv.next(t), "ratelimit.a.b:3|c"; got != want {
		t.Errorf("first flush: %q, want %q", got, want)
	}
	r.Flush() // c has not changed: nothing
	r.Root().NewCounter("marker").Inc()
	r.Flush()
	if got, want := srv.next(t), "ratelimit.marker:1|c"; got != want {
		t.Errorf("after a flush with no change: %q, want %q (nothing from the flush before)", got, want)
	}
	c.Add(2)
	r.Flush()
	if got, want := srv.next(t), "ratelimit.a.b:2|c"; got != want {
		t.Errorf("after Add(2): %q, want %q", got, want)
	}
	r.wantCounts(t, counts{OK: 4})
	if n := r.log.count("connected"); n != 1 {
		t.Errorf("logged %q %d times, want once", "connected", n)
	}
}

// TestGaugesAndTimers: a gauge is sent at every flush with its value;
// timers with each value recorded, an integer as such and others with six
// decimals, as gostats writes them (a Timer's AddDuration counts whole
// microseconds, and a MilliTimer's milliseconds, both sent as "ms").
func TestGaugesAndTimers(t *testing.T) {
	srv := listenTCP(t, "127.0.0.1:0", true)
	r := newRig(t, statsd.Options{Addr: srv.addr()})
	g := r.Root().NewGauge("g")
	g.Set(7)
	tm := r.Root().NewTimer("t")
	tm.AddValue(5)
	tm.AddDuration(1500 * time.Microsecond)
	tm.AddValue(1.5)
	r.Root().NewMilliTimer("mt").AddDuration(3 * time.Millisecond)
	r.Flush()
	// Gauges come before the timers; timers in the order recorded.
	want := []string{"ratelimit.g:7|g", "ratelimit.t:5|ms", "ratelimit.t:1500|ms", "ratelimit.t:1.500000|ms", "ratelimit.mt:3|ms"}
	var got []string
	for range want {
		got = append(got, srv.next(t))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("first flush (-want +got):\n%s", diff)
	}
	g.Dec()
	r.Flush()
	if got, want := srv.next(t), "ratelimit.g:6|g"; got != want {
		t.Errorf("second flush: %q, want %q", got, want)
	}
	r.Flush()
	if got, want := srv.next(t), "ratelimit.g:6|g"; got != want {
		t.Errorf("third flush, no change: %q, want %q", got, want)
	}
}

// TestTags: Options.Tags are on every stat under Root, serialized by
// gostats into the name sorted by key, merged with a scope's own tags.
func TestTags(t *testing.T) {
	srv := listenTCP(t, "127.0.0.1:0", true)
	r := newRig(t, statsd.Options{Addr: srv.addr(), Tags: map[string]string{
		"foo": "bar", "a": "b", "": "no key", "no_value": "",
	}})
	r.Root().NewCounter("x").Inc()
	r.Root().ScopeWithTags("s", map[string]string{"b": "c.d:e|f"}).NewGauge("n").Set(2)
	r.Flush()
	want := []string{"ratelimit.s.n.__a=b.__b=c_d_e_f.__foo=bar:2|g", "ratelimit.x.__a=b.__foo=bar:1|c"}
	if diff := cmp.Diff(want, srv.take(t, 2)); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}
}

// TestSameLinesAsGostats: the same stats give the same lines through our
// sink as through gostats' own TCP sink, the reference's.
func TestSameLinesAsGostats(t *testing.T) {
	tags := map[string]string{"env": "prod", "az": "x.y"} // az is one of gostats' reserved tag words
	record := func(root gostats.Scope) {
		svc := root.Scope("service")
		svc.NewCounter("rate_limit.domain.key_value.total_hits").Add(12)
		svc.NewCounterWithTags("config_load_success", map[string]string{"k": "v"}).Inc()
		svc.NewGauge("cx_active").Set(3)
		svc.NewTimer("response_time").AddValue(250)
		svc.NewTimer("response_time").AddValue(0.25)
		svc.NewMilliTimer("ms").AddDuration(2 * time.Second)
	}

	ref := listenTCP(t, "127.0.0.1:0", true)
	host, port, _ := net.SplitHostPort(ref.addr())
	p, _ := strconv.Atoi(port)
	store := gostats.NewStore(gostats.NewTCPStatsdSink(gostats.WithStatsdHost(host), gostats.WithStatsdPort(p)), false)
	record(store.ScopeWithTags("ratelimit", tags))
	store.Flush()

	srv := listenTCP(t, "127.0.0.1:0", true)
	r := newRig(t, statsd.Options{Addr: srv.addr(), Tags: tags})
	record(r.Root())
	r.Flush()

	const n = 7 // the reserved tag word is counted in a stat of its own
	want, got := ref.take(t, n), srv.take(t, n)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("lines (-gostats +ours):\n%s", diff)
	}
	t.Logf("lines:\n%s", strings.Join(got, "\n"))
}

// TestUDP: over UDP, lines go in datagrams of at most 1432 bytes, each
// holding whole lines.
func TestUDP(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	datagrams := make(chan string, 1000)
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 64<<10)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			datagrams <- string(buf[:n])
		}
	})
	t.Cleanup(func() { pc.Close(); wg.Wait() })

	r := newRig(t, statsd.Options{Addr: pc.LocalAddr().String(), Network: "udp"})
	var want []string
	for i := range 300 {
		name := fmt.Sprintf("counter_%03d_with_a_name_of_some_length", i)
		r.Root().NewCounter(name).Add(uint64(i + 1))
		want = append(want, fmt.Sprintf("ratelimit.%s:%d|c", name, i+1))
	}
	r.Flush()
	slices.Sort(want)
	var got []string
	for len(got) < len(want) {
		select {
		case d := <-datagrams:
			if len(d) > 1432 || !strings.HasSuffix(d, "\n") {
				t.Errorf("a datagram of %d bytes, ending %q: want at most 1432, whole lines", len(d), d[max(0, len(d)-10):])
			}
			got = append(got, strings.Split(strings.TrimSuffix(d, "\n"), "\n")...)
		case <-time.After(wait):
			t.Fatalf("%d of %d lines in %v", len(got), len(want), wait)
		}
	}
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}
	r.wantCounts(t, counts{OK: 1})
}

// TestReconnect: when the server closes the connection, the next flush
// connects again and its lines reach the new server; while no server
// listens, lines are dropped and counted, and the failure logged once.
func TestReconnect(t *testing.T) {
	srv := listenTCP(t, "127.0.0.1:0", true)
	addr := srv.addr()
	r := newRig(t, statsd.Options{Addr: addr})
	c := r.Root().NewCounter("c")
	c.Inc()
	r.Flush()
	if got, want := srv.next(t), "ratelimit.c:1|c"; got != want {
		t.Fatalf("first flush: %q, want %q", got, want)
	}

	srv.close() // the connection with it
	srv = listenTCP(t, addr, true)
	c.Add(2)
	r.Flush()
	if got, want := srv.next(t), "ratelimit.c:2|c"; got != want {
		t.Errorf("after the server closed the connection: %q, want %q", got, want)
	}
	r.wantCounts(t, counts{OK: 2})

	srv.close()
	c.Add(3)
	r.Flush() // dropped
	r.Flush() // nothing to send, still down
	r.wantCounts(t, counts{OK: 2, Errors: 2, Dropped: 1})
	if n := r.log.count("cannot send stats"); n != 1 {
		t.Errorf("the failure logged %d times in two flushes, want once", n)
	}

	srv = listenTCP(t, addr, true)
	c.Add(4)
	r.Flush()
	// The 3 of the dropped flush is lost: gostats latched it.
	if got, want := srv.next(t), "ratelimit.c:4|c"; got != want {
		t.Errorf("after the server came back: %q, want %q", got, want)
	}
	r.wantCounts(t, counts{OK: 3, Errors: 2, Dropped: 1})
	if n := r.log.count("connected"); n != 2 {
		t.Errorf("logged %q %d times, want twice (at first, and after the failure)", "connected", n)
	}
}

// freeAddr returns an address where nothing listens.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestServerDown: with no server, each flush's lines are dropped and
// counted, and the failure logged once.
func TestServerDown(t *testing.T) {
	r := newRig(t, statsd.Options{Addr: freeAddr(t)})
	for _, name := range []string{"a", "b", "c"} {
		r.Root().NewCounter(name).Inc()
	}
	r.Root().NewGauge("g").Set(1)
	r.Root().NewTimer("t").AddValue(1)
	r.Flush()
	r.wantCounts(t, counts{Errors: 1, Dropped: 5})
	r.Flush() // the gauge again
	r.wantCounts(t, counts{Errors: 2, Dropped: 6})
	if n := r.log.count("cannot send stats"); n != 1 {
		t.Errorf("the failure logged %d times in two flushes, want once", n)
	}
}

// TestStalledServer: a server that stops reading holds a flush no longer
// than the write timeout; what could not be written is dropped and counted.
func TestStalledServer(t *testing.T) {
	srv := listenTCP(t, "127.0.0.1:0", false)
	r := newRig(t, statsd.Options{Addr: srv.addr(), WriteTimeout: 100 * time.Millisecond})
	const n, size = 1600, 10 << 10 // 16 MiB: more than the socket buffers hold
	for i := range n {
		r.Root().NewCounter(fmt.Sprintf("%0*d", size, i)).Inc()
	}
	done := make(chan struct{})
	go func() {
		r.Flush()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(wait):
		t.Fatalf("Flush still blocked after %v, with a write timeout of 100ms", wait)
	}
	c := r.counts(t)
	if c.Errors != 1 || c.Dropped < 1 || c.Dropped > n {
		t.Errorf("metrics %+v: want 1 error, and between 1 and %d dropped", c, n)
	}
}

// TestTimerBuffer: timer values beyond TimerBuffer bytes between two
// flushes are dropped and counted, the overflow logged once while it
// lasts; the others are sent.
func TestTimerBuffer(t *testing.T) {
	srv := listenTCP(t, "127.0.0.1:0", true)
	const line = "ratelimit.t:5|ms"
	r := newRig(t, statsd.Options{Addr: srv.addr(), TimerBuffer: 3 * len(line+"\n")})
	tm := r.Root().NewTimer("t")
	for range 2 {
		for range 5 {
			tm.AddValue(5)
		}
		r.Flush()
		if diff := cmp.Diff([]string{line, line, line}, srv.take(t, 3)); diff != "" {
			t.Errorf("lines (-want +got):\n%s", diff)
		}
	}
	r.Root().NewCounter("marker").Inc()
	r.Flush()
	if got, want := srv.next(t), "ratelimit.marker:1|c"; got != want {
		t.Errorf("after the timers: %q, want %q", got, want)
	}
	r.wantCounts(t, counts{OK: 3, Dropped: 4})
	if n := r.log.count("too many timer values"); n != 1 {
		t.Errorf("the overflow logged %d times in two flushes, want once", n)
	}
}

// TestConcurrentTimers: timers recorded while flushes run are each either
// sent or counted as dropped.
func TestConcurrentTimers(t *testing.T) {
	srv := listenTCP(t, "127.0.0.1:0", true)
	r := newRig(t, statsd.Options{Addr: srv.addr(), TimerBuffer: 4 << 10})
	tm := r.Root().NewTimer("t")
	const goroutines, each = 4, 2000
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				tm.AddValue(1)
			}
		})
	}
	recorded := make(chan struct{})
	go func() { wg.Wait(); close(recorded) }()
	flushes := 0
	for done := false; !done; flushes++ {
		select {
		case <-recorded:
			done = true
		default:
		}
		r.Flush()
	}
	r.Root().NewCounter("marker").Inc()
	r.Flush()
	sent := 0
	for l := srv.next(t); l != "ratelimit.marker:1|c"; l = srv.next(t) {
		if l != "ratelimit.t:1|ms" {
			t.Fatalf("line %q", l)
		}
		sent++
	}
	if c := r.counts(t); sent+int(c.Dropped) != goroutines*each {
		t.Errorf("%d sent + %v dropped in %d flushes, want %d", sent, c.Dropped, flushes, goroutines*each)
	}
}

// TestRun: Run flushes at each tick, and when its context is done flushes
// a last time, closes the connection and returns; later flushes drop.
func TestRun(t *testing.T) {
	srv := listenTCP(t, "127.0.0.1:0", true)
	r := newRig(t, statsd.Options{Addr: srv.addr()})
	tick := make(chan time.Time)
	statsd.SetTicker(r.Exporter, tick)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		r.Run(ctx)
		close(done)
	}()
	c := r.Root().NewCounter("c")
	c.Inc()
	tick <- time.Now()
	if got, want := srv.next(t), "ratelimit.c:1|c"; got != want {
		t.Errorf("at the tick: %q, want %q", got, want)
	}
	c.Add(2)
	cancel()
	<-done
	if got, want := srv.next(t), "ratelimit.c:2|c"; got != want {
		t.Errorf("at the end: %q, want %q (the last flush)", got, want)
	}
	if got := srv.next(t); got != eof {
		t.Errorf("after Run returned: %q, want the connection closed", got)
	}
	c.Inc()
	r.Flush()
	r.wantCounts(t, counts{OK: 2, Errors: 1, Dropped: 1})
}

// TestNewChecks: New refuses options it cannot use, and a registry that
// already has the metrics.
func TestNewChecks(t *testing.T) {
	good := statsd.Options{Addr: "127.0.0.1:8125", FlushInterval: time.Second}
	for _, tc := range []struct {
		name string
		edit func(*statsd.Options)
	}{
		{"network unix", func(o *statsd.Options) { o.Network = "unix" }},
		{"network tcp6", func(o *statsd.Options) { o.Network = "tcp6" }},
		{"no address", func(o *statsd.Options) { o.Addr = "" }},
		{"no port", func(o *statsd.Options) { o.Addr = "statsd" }},
		{"no flush interval", func(o *statsd.Options) { o.FlushInterval = 0 }},
		{"negative flush interval", func(o *statsd.Options) { o.FlushInterval = -time.Second }},
		{"negative write timeout", func(o *statsd.Options) { o.WriteTimeout = -1 }},
		{"negative timer buffer", func(o *statsd.Options) { o.TimerBuffer = -1 }},
	} {
		o := good
		tc.edit(&o)
		if _, err := statsd.New(o); err == nil {
			t.Errorf("%s: New(%+v): no error", tc.name, o)
		}
	}
	for _, network := range []string{"", "tcp", "udp"} {
		o := good
		o.Network = network
		if _, err := statsd.New(o); err != nil {
			t.Errorf("network %q: %v", network, err)
		}
	}
	o := good
	o.Registerer = prometheus.NewRegistry()
	if _, err := statsd.New(o); err != nil {
		t.Fatal(err)
	}
	if _, err := statsd.New(o); err == nil {
		t.Error("New with a registry that has the metrics already: no error")
	}
}
