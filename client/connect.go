package client

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// stateConn is what a Client needs of its connection to wait for it to
// connect. *grpc.ClientConn has these methods; a connection that lacks
// them is used as it is (see WithConnectTimeout).
type stateConn interface {
	GetState() connectivity.State
	WaitForStateChange(ctx context.Context, sourceState connectivity.State) bool
	Connect()
}

// A connector holds a Client's calls while their connection connects, so
// that the handshake is paid from the connect budget rather than from a
// call's, and bounds that wait.
//
// A connection attempt, as the Client sees it, begins when the Client
// finds the connection not ready (at New, or at a call after it was last
// seen ready) and ends when it finds it ready. Calls wait while the
// connection is idle or connecting, until timeout after the attempt
// began: past that, until the connection is ready again, no call waits.
// Calls never wait while the connection is in TRANSIENT_FAILURE (the
// server refused or failed the handshake): gRPC fails them at once, and
// the failure policy decides.
type connector struct {
	conn    stateConn     // nil: the connection does not report its state
	timeout time.Duration // the connect budget; <= 0: calls never wait
	epoch   time.Time     // since is counted from it, on the monotonic clock
	// since is when the current attempt began, in nanoseconds after
	// epoch plus 1, or 0 while the connection is seen ready.
	since atomic.Int64
}

// start makes the connector of conn, with a connect budget of timeout,
// and starts connecting conn when it is idle (a no-op otherwise).
func (w *connector) start(conn grpc.ClientConnInterface, timeout time.Duration) {
	sc, ok := conn.(stateConn)
	if !ok {
		return
	}
	sc.Connect()
	if timeout <= 0 {
		return
	}
	w.conn, w.timeout, w.epoch = sc, timeout, time.Now()
	if sc.GetState() != connectivity.Ready {
		w.since.Store(1)
	}
}

// wait returns once the connection is ready, in TRANSIENT_FAILURE or shut
// down, or once the current attempt's connect budget is spent: the call
// then goes ahead with its own budget. It returns ctx's error if ctx ends
// first.
func (w *connector) wait(ctx context.Context) error {
	if w.conn == nil {
		return nil
	}
	s := w.conn.GetState()
	if s == connectivity.Ready { // the fast path: one lock in gRPC, one atomic load
		if w.since.Load() != 0 {
			w.since.Store(0)
		}
		return nil
	}
	since := w.since.Load()
	if since == 0 { // an attempt begins, unless another call began it
		w.since.CompareAndSwap(0, int64(time.Since(w.epoch))+1)
		if since = w.since.Load(); since == 0 {
			return nil // seen ready meanwhile
		}
	}
	deadline := w.epoch.Add(time.Duration(since-1) + w.timeout)
	for {
		switch s {
		case connectivity.Ready:
			w.since.Store(0)
			return nil
		case connectivity.TransientFailure, connectivity.Shutdown:
			return nil
		case connectivity.Idle:
			w.conn.Connect()
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil
		}
		wctx, cancel := context.WithTimeout(ctx, left)
		changed := w.conn.WaitForStateChange(wctx, s)
		cancel()
		if !changed {
			return ctx.Err() // nil when the connect budget is spent
		}
		s = w.conn.GetState()
	}
}
