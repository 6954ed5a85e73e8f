package client

import (
	"net"
	"sync"
	"testing"
	"time"
)

// A gatedListener is a loopback TCP listener that hands each connection
// it accepts to its server only delay later: the client's TCP handshake
// completes at once (the kernel accepts), gRPC's handshake waits for the
// server, as it does for a server that is starting, loaded, or far away.
// With a negative delay it never hands a connection over: the server
// looks hung. Close closes the connections it holds.
type gatedListener struct {
	net.Listener
	delay  time.Duration
	closed chan struct{}
	once   sync.Once

	mu   sync.Mutex
	held []net.Conn // requires that mu is held
}

// listenGated listens on addr ("127.0.0.1:0" for a free port) with
// delay; the test's cleanup closes the listener.
func listenGated(t testing.TB, addr string, delay time.Duration) *gatedListener {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	l := &gatedListener{Listener: lis, delay: delay, closed: make(chan struct{})}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// Accept returns the next connection once delay has passed since it was
// accepted (never, for a negative delay), or an error once l is closed.
func (l *gatedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.delay < 0 {
			l.mu.Lock()
			l.held = append(l.held, c)
			l.mu.Unlock()
			continue
		}
		t := time.NewTimer(l.delay)
		select {
		case <-t.C:
			return c, nil
		case <-l.closed:
			t.Stop()
			_ = c.Close()
			return nil, net.ErrClosed
		}
	}
}

// Close closes the listener and the connections it holds. It may be
// called more than once.
func (l *gatedListener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.closed)
		err = l.Listener.Close()
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, c := range l.held {
			_ = c.Close()
		}
	})
	return err
}
