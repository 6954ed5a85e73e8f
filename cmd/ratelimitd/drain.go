package main

import (
	"context"
	"net/http"

	"github.com/ratelimitd/ratelimitd/server"
)

// drain stops b's servers on shutdown, in server.Server.Drain's order,
// within --shutdown-delay and --shutdown-timeout.
func (b *built) drain(ctx context.Context) {
	b.srv.Drain(ctx, server.DrainOptions{
		Delay:   b.f.shutdownDelay,
		Timeout: b.f.shutdownTimeout,
		GRPC:    b.grpc,
		HTTP:    []*http.Server{b.http, b.admin}, // /json, a probe; a scrape, the page
		Close:   []*http.Server{b.debug},
		Logger:  b.log,
	})
}
