package statsd

import (
	"bufio"
	"bytes"
	"log/slog"
	"math"
	"net"
	"strconv"
	"sync"
	"time"

	gostats "github.com/lyft/gostats"
)

// Buffer sizes of the sink's writer, as gostats' net sink has them: over
// UDP a flush of the buffer is one datagram, and 1432 bytes fit in one
// Ethernet frame (MTU 1500) with the IP and UDP headers, so datagrams are
// never fragmented.
const (
	tcpBuffer = 64 << 10
	udpBuffer = 1432
)

// sink is the gostats.FlushableSink the Exporter's Store flushes to.
//
// It is ours, not gostats' NewTCPStatsdSink/NewNetSink, because that sink
// starts a goroutine that never exits (ratelimitd gives every goroutine a
// defined exit, and its tests check for leaks) and reads its settings from
// the environment itself (GetSettings), where ratelimitd reads them once, in
// cmd. The lines it writes are those of gostats' net sink: "name:value|c\n"
// for counters, "|g\n" for gauges and "|ms\n" for timers, a timer's value
// written as an integer when it is one and with six decimals otherwise.
//
// Counters and gauges arrive from the Store's Flush and go straight
// through a bufio.Writer of fixed size to the connection, which is dialed
// lazily at the first line of a flush and again after it breaks; a
// flush's writes share one deadline. Timers
// arrive from any goroutine when a value is recorded: they wait, within
// timerMax bytes, for the next Flush, so that no request goroutine ever
// writes to the network. While the connection is down a flush's lines are
// dropped and counted; nothing queues up behind it.
type sink struct {
	network, addr string
	timeout       time.Duration // of a dial, and of a flush's writes
	log           *slog.Logger
	m             *metrics

	mu sync.Mutex
	// The fields below require that mu is held.
	conn    net.Conn      // nil while not connected
	cw      connWriter    // what w writes to
	w       *bufio.Writer // lines not yet written to conn
	inW     int           // how many lines w holds
	started bool          // the flush under way has checked the connection
	failed  bool          // the flush under way could not send all its lines
	dropped int           // lines the flush under way lost
	closed  bool          // close was called: no more dials
	state   connState     // for logging its changes only
	line    []byte        // scratch for one line
	sending []byte        // the timers being sent, swapped with timers

	tmu sync.Mutex
	// The fields below require that tmu is held.
	timers        []byte // timer lines waiting for the next Flush
	timerMax      int    // bound of len(timers)
	timersDropped int    // timer lines dropped since the last Flush
	timersFull    bool   // the last Flush dropped timers too (log once)
}

var _ gostats.FlushableSink = (*sink)(nil)

// connState is what the log last said of the connection.
type connState int

const (
	stateNew connState = iota
	stateUp
	stateDown
)

func newSink(network, addr string, timeout time.Duration, timerMax int, log *slog.Logger, m *metrics) *sink {
	size := tcpBuffer
	if network == "udp" {
		size = udpBuffer
	}
	s := &sink{network: network, addr: addr, timeout: timeout, log: log, m: m, timerMax: timerMax}
	s.w = bufio.NewWriterSize(&s.cw, size)
	return s
}

// connWriter writes to the connection of the moment.
type connWriter struct{ conn net.Conn }

func (c *connWriter) Write(p []byte) (int, error) { return c.conn.Write(p) }

// appendUint appends the statsd line of name with value v and suffix.
func appendUint(b []byte, name string, v uint64, suffix string) []byte {
	b = append(b, name...)
	b = append(b, ':')
	b = strconv.AppendUint(b, v, 10)
	return append(b, suffix...)
}

// appendTimer appends the statsd line of a timer's value v: an integer when
// v is one (gostats' timers are given whole microseconds or milliseconds),
// else v with six decimals, as gostats writes them.
func appendTimer(b []byte, name string, v float64) []byte {
	if v >= 0 && v < math.MaxUint64 && math.Trunc(v) == v {
		return appendUint(b, name, uint64(v), "|ms\n")
	}
	b = append(b, name...)
	b = append(b, ':')
	b = strconv.AppendFloat(b, v, 'f', 6, 64)
	return append(b, "|ms\n"...)
}

// FlushCounter sends a counter's change since the last flush. The Store
// calls it from its Flush.
func (s *sink) FlushCounter(name string, value uint64) {
	s.mu.Lock()
	s.line = appendUint(s.line[:0], name, value, "|c\n")
	s.writeLine(s.line)
	s.mu.Unlock()
}

// FlushGauge sends a gauge's value. The Store calls it from its Flush.
func (s *sink) FlushGauge(name string, value uint64) {
	s.mu.Lock()
	s.line = appendUint(s.line[:0], name, value, "|g\n")
	s.writeLine(s.line)
	s.mu.Unlock()
}

// FlushTimer keeps a timer's value for the next Flush, or drops it when
// timerMax bytes already wait. gostats calls it from the goroutine that
// records the value.
func (s *sink) FlushTimer(name string, value float64) {
	s.tmu.Lock()
	n := len(s.timers)
	s.timers = appendTimer(s.timers, name, value)
	if len(s.timers) > s.timerMax {
		s.timers = s.timers[:n]
		s.timersDropped++
	}
	s.tmu.Unlock()
}

// Flush sends the timers kept since the last Flush and whatever the writer
// still holds, and ends the flush: the Store calls it last in its Flush.
func (s *sink) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	// tmu is taken only after mu, and only for the swap: a goroutine that
	// records a timer never waits for the network.
	s.tmu.Lock()
	s.timers, s.sending = s.sending[:0], s.timers
	timersDropped, wasFull := s.timersDropped, s.timersFull
	s.timersFull = timersDropped > 0
	s.timersDropped = 0
	s.tmu.Unlock()

	if timersDropped > 0 && !wasFull {
		s.log.Warn("statsd: too many timer values between flushes; dropping those beyond the bound",
			"bound_bytes", s.timerMax, "dropped", timersDropped)
	}
	for rest := s.sending; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n') + 1
		s.writeLine(rest[:i])
		rest = rest[i:]
	}
	s.begin() // a flush with no lines checks the connection too
	if s.conn != nil {
		if err := s.w.Flush(); err != nil {
			s.fail(err)
		}
		s.inW = 0
	}
	if s.failed {
		s.m.flushErrors.Inc()
	} else {
		s.m.flushesOK.Inc()
	}
	s.m.dropped.Add(float64(s.dropped + timersDropped))
	s.started, s.failed, s.dropped = false, false, 0
}

// writeLine writes one whole line to w, flushing w first when the line does
// not fit in what is left of it, so that no line is split across two
// writes (two datagrams, over UDP). It requires that mu is held.
func (s *sink) writeLine(line []byte) {
	s.begin()
	if s.conn == nil {
		s.dropped++
		return
	}
	if s.w.Available() < len(line) && s.w.Buffered() > 0 {
		if err := s.w.Flush(); err != nil {
			s.fail(err)
			s.dropped++
			return
		}
		s.inW = 0
	}
	// A line longer than the whole buffer goes straight to the connection.
	if _, err := s.w.Write(line); err != nil {
		s.fail(err)
		s.dropped++
		return
	}
	s.inW++
	if s.w.Buffered() == 0 {
		s.inW = 0
	}
}

// begin readies the connection at the start of a flush: it drops a TCP
// connection the server has closed (a write to it would seem to succeed,
// and its lines be lost), dials when there is none, and sets the deadline
// of the flush's writes. It requires that mu is held.
func (s *sink) begin() {
	if s.started {
		return
	}
	s.started = true
	if s.closed {
		s.failed = true
		return
	}
	if s.conn != nil && s.network == "tcp" && peerClosed(s.conn) {
		s.log.Info("statsd: the server closed the connection; reconnecting", "addr", s.addr)
		s.drop()
	}
	if s.conn == nil {
		conn, err := net.DialTimeout(s.network, s.addr, s.timeout)
		if err != nil {
			s.failed = true
			s.down(err)
			return
		}
		s.conn, s.cw.conn = conn, conn
		s.w.Reset(&s.cw)
		if s.state != stateUp {
			s.log.Info("statsd: connected", "network", s.network, "addr", s.addr)
			s.state = stateUp
		}
	}
	// One deadline for all the writes of the flush: a server that stops
	// reading holds it no longer than timeout.
	if err := s.conn.SetWriteDeadline(time.Now().Add(s.timeout)); err != nil {
		s.fail(err)
	}
}

// fail ends the connection after a write error; the lines w held are lost.
// It requires that mu is held.
func (s *sink) fail(err error) {
	s.failed = true
	s.dropped += s.inW
	s.drop()
	s.down(err)
}

// drop closes the connection. It requires that mu is held.
func (s *sink) drop() {
	s.conn.Close()
	s.conn, s.cw.conn = nil, nil
	s.inW = 0
	s.w.Reset(&s.cw) // forget the lines and the write error
}

// down logs that stats cannot be sent, once until the connection is up
// again. It requires that mu is held.
func (s *sink) down(err error) {
	if s.state != stateDown {
		s.log.Warn("statsd: cannot send stats; dropping them until the server can be reached",
			"network", s.network, "addr", s.addr, "err", err)
		s.state = stateDown
	}
}

// close closes the connection; later flushes drop their lines.
func (s *sink) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.conn != nil {
		s.drop()
	}
}
