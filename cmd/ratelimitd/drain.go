package main

import (
	"context"
	"net/http"
	"time"
)

// drain stops b's servers on shutdown: it reports not ready and keeps
// serving for --shutdown-delay, so that load balancers stop sending, then
// lets the requests in flight finish within --shutdown-timeout and closes
// what is left, which is no failure of the process.
func (b *built) drain(ctx context.Context) {
	f := b.f
	b.log.Info("shutting down", "delay", f.shutdownDelay, "timeout", f.shutdownTimeout)
	b.srv.Shutdown()
	time.Sleep(f.shutdownDelay)
	b.srv.EndHealthWatches()
	if b.debug != nil {
		_ = b.debug.Close() // a profile being taken is not worth waiting for
	}
	// gRPC, HTTP (/json, a probe) and admin (a scrape, the page) drain
	// together.
	dctx, cancel := context.WithTimeout(ctx, f.shutdownTimeout)
	defer cancel()
	var servers []*http.Server
	for _, hs := range []*http.Server{b.http, b.admin} {
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
	go func() { b.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-dctx.Done():
		b.log.Warn("drain timed out; closing remaining connections")
		b.grpc.Stop()
		<-stopped
	}
	for i, hs := range servers {
		if err := <-drained[i]; err != nil {
			_ = hs.Close()
		}
	}
}
