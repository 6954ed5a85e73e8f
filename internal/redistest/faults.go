package redistest

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"time"
)

// A Faults is a go-redis Dialer (its Dial method) whose connections can be
// made slow or failing while a test runs: it holds back, or fails, the
// writes that carry a marker. A Cluster client dials the addresses its
// nodes announce, so a Dialer, unlike a proxy in front of one address,
// reaches every node. The zero value dials plain TCP and interferes with
// nothing. It is safe for concurrent use.
type Faults struct {
	mu     sync.Mutex
	delay  time.Duration // requires mu
	slow   []byte        // requires mu; writes containing it are delayed; nil: every write
	fail   []byte        // requires mu; writes containing it fail; nil: none
	failed int           // requires mu; writes failed so far
	limit  int           // requires mu; how many writes to fail at most; 0: all

	delayed int           // requires mu; writes delayed so far
	changed chan struct{} // requires mu; closed when delayed grows
}

// WaitDelayed waits until n writes have been held back in all, or ctx
// ends.
func (f *Faults) WaitDelayed(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		if f.delayed >= n {
			f.mu.Unlock()
			return nil
		}
		if f.changed == nil {
			f.changed = make(chan struct{})
		}
		ch := f.changed
		f.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Delay holds back every write by d from now on; zero ends the delay.
func (f *Faults) Delay(d time.Duration) { f.DelayMatching(d, nil) }

// DelayMatching holds back by d the writes that contain marker (all, if
// marker is nil) from now on.
func (f *Faults) DelayMatching(d time.Duration, marker []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delay, f.slow = d, marker
}

// FailMatching makes the next n writes that contain marker fail (every
// such write if n is 0), without sending anything, as a connection reset
// would; a nil marker ends the failures.
func (f *Faults) FailMatching(marker []byte, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail, f.limit, f.failed = marker, n, 0
}

// Failed reports how many writes FailMatching has failed.
func (f *Faults) Failed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

// Dial dials addr over TCP and wraps the connection; it has the signature
// of go-redis's Options.Dialer.
func (f *Faults) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &faultConn{Conn: c, f: f}, nil
}

// errInjected is the cause of the writes that FailMatching fails.
var errInjected = errors.New("redistest: injected write failure")

// verdict says what to do with the write b: how long to hold it back, and
// whether to fail it.
func (f *Faults) verdict(b []byte) (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil && bytes.Contains(b, f.fail) && (f.limit == 0 || f.failed < f.limit) {
		f.failed++
		return 0, true
	}
	if f.delay > 0 && (f.slow == nil || bytes.Contains(b, f.slow)) {
		f.delayed++
		if f.changed != nil {
			close(f.changed)
			f.changed = nil
		}
		return f.delay, false
	}
	return 0, false
}

type faultConn struct {
	net.Conn
	f *Faults
}

func (c *faultConn) Write(b []byte) (int, error) {
	d, fail := c.f.verdict(b)
	if fail {
		return 0, &net.OpError{Op: "write", Net: "tcp", Addr: c.RemoteAddr(), Err: errInjected}
	}
	if d > 0 {
		time.Sleep(d) // the connection's writer waits, as on a slow link
	}
	return c.Conn.Write(b)
}
