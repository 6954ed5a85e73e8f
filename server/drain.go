package server

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"google.golang.org/grpc"
)

// DrainOptions are the servers that serve a Server and the bounds of
// their drain (see Server.Drain). GRPC is required.
type DrainOptions struct {
	// Delay is how long the servers keep serving, reporting not ready, so
	// that load balancers stop sending first.
	Delay time.Duration
	// Timeout bounds the drain of the requests in flight, after Delay:
	// then the connections left are closed. Zero leaves no time at all.
	Timeout time.Duration
	// GRPC is the gRPC server the Server is registered on.
	GRPC *grpc.Server
	// HTTP are the HTTP servers drained beside GRPC (/json, the
	// operators' pages); nil ones are skipped.
	HTTP []*http.Server
	// Close are HTTP servers closed, not drained, once Delay is over: a
	// profile being taken on a debug listener is not worth waiting for.
	// nil ones are skipped.
	Close []*http.Server
	// Logger receives the start of the drain and its timing out; nil
	// discards them.
	Logger *slog.Logger
	// After returns a channel that receives after d, as time.After, for
	// Delay; nil means time.After. Tests step it.
	After func(d time.Duration) <-chan time.Time
}

// Drain stops s and the servers that serve it, in the order the shutdown
// of a replica behind a load balancer needs, and returns once they have
// stopped; a request cut off at Timeout is no failure of Drain. It
// reports not ready (Shutdown) and keeps serving for o.Delay; ends the
// health and RLQS streams, which would hold GracefulStop as long as their
// clients want (EndHealthWatches); closes o.Close; then lets the requests
// in flight on o.GRPC and o.HTTP finish together, within o.Timeout, and
// closes the connections left. The servers' listeners close as their
// drain starts, after o.Delay: from then on a new connection is refused.
func (s *Server) Drain(ctx context.Context, o DrainOptions) {
	log, after := o.Logger, o.After
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if after == nil {
		after = time.After
	}
	log.Info("shutting down", "delay", o.Delay, "timeout", o.Timeout)
	s.Shutdown()
	<-after(o.Delay)
	s.EndHealthWatches()
	for _, hs := range o.Close {
		if hs != nil {
			_ = hs.Close()
		}
	}
	dctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	var servers []*http.Server
	for _, hs := range o.HTTP {
		if hs != nil {
			servers = append(servers, hs)
		}
	}
	drained := make([]chan error, len(servers))
	for i, hs := range servers {
		drained[i] = make(chan error, 1)
		go func() { drained[i] <- hs.Shutdown(dctx) }()
	}
	stopped := make(chan struct{})
	go func() { o.GRPC.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-dctx.Done():
		log.Warn("drain timed out; closing remaining connections")
		o.GRPC.Stop()
		<-stopped
	}
	for i, hs := range servers {
		if err := <-drained[i]; err != nil {
			_ = hs.Close()
		}
	}
}
