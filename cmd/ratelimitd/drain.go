package main

import (
	"context"
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
	httpDrained := make(chan error, 1)
	go func() { httpDrained <- b.http.Shutdown(dctx) }()
	adminDrained := make(chan error, 1)
	go func() {
		if b.admin == nil {
			adminDrained <- nil
			return
		}
		adminDrained <- b.admin.Shutdown(dctx)
	}()
	stopped := make(chan struct{})
	go func() { b.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-dctx.Done():
		b.log.Warn("drain timed out; closing remaining connections")
		b.grpc.Stop()
		<-stopped
	}
	if err := <-httpDrained; err != nil {
		_ = b.http.Close()
	}
	if err := <-adminDrained; err != nil {
		_ = b.admin.Close()
	}
}
