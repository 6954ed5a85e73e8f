package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
)

// serve runs the daemon until ctx is done, then drains and stops.
func serve(ctx context.Context, f *flags, stderr io.Writer) error {
	b, err := build(ctx, f, stderr)
	if err != nil {
		return err
	}
	defer b.close()
	return b.serve(ctx)
}

// serve runs b's servers and rules source until ctx is done, then drains.
func (b *built) serve(ctx context.Context) error {
	b.firstOverrides(ctx)
	b.log.Info("ratelimitd started", b.started...)
	group, gctx := errgroup.WithContext(ctx)
	group.Go(func() error {
		// A signal right after the start may stop the server before it serves.
		if err := b.grpc.Serve(b.grpcLis); !errors.Is(err, grpc.ErrServerStopped) {
			return err
		}
		return nil
	})
	group.Go(func() error {
		return serveHTTP(b.http, b.httpLis, b.httpTLS)
	})
	if b.admin != nil {
		group.Go(func() error { return serveHTTP(b.admin, b.adminLis, b.httpTLS) })
	}
	if b.debug != nil {
		group.Go(func() error { return serveHTTP(b.debug, b.debugLis, false) })
	}
	group.Go(func() error { return b.rules.run(gctx) })
	group.Go(func() error { return b.srv.SampleRates(gctx) })
	group.Go(func() error { return b.srv.RunOverrides(gctx) })
	group.Go(func() error { return b.tokens.Watch(gctx, tokenPoll) })
	group.Go(func() error {
		<-gctx.Done()
		b.drain(context.WithoutCancel(gctx))
		return nil
	})
	err := group.Wait()
	if ctx.Err() != nil && err == nil {
		b.log.Info("stopped")
		return nil
	}
	return err
}

// firstOverridesTimeout bounds the first read of the runtime overrides.
const firstOverridesTimeout = 2 * time.Second

// firstOverrides reads the runtime overrides once before the daemon
// answers, so that a replica that starts (or restarts) decides with them
// from its first request. A store that cannot answer in time is logged,
// and the sync loop reads them as soon as it can.
func (b *built) firstOverrides(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, firstOverridesTimeout)
	defer cancel()
	if err := b.srv.Overrides().Sync(ctx); err != nil {
		b.log.Warn("cannot read the runtime overrides yet; starting without them", "err", err)
	}
}

// tokenPoll is how often --admin-token-file is read again without a
// file event.
const tokenPoll = 5 * time.Second

// serveHTTP serves hs on lis, with TLS if tls, until hs is shut down.
func serveHTTP(hs *http.Server, lis net.Listener, tls bool) error {
	var err error
	if tls {
		err = hs.ServeTLS(lis, "", "")
	} else {
		err = hs.Serve(lis)
	}
	if !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
