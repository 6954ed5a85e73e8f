package server

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// healthService is grpc-go's health service whose Watch streams end at
// EndHealthWatches: grpc-go keeps them open for as long as the client wants, and
// grpc.Server.GracefulStop waits for every stream, so one watcher (a gRPC
// client doing client-side health checking) would hold a drain until its
// timeout, and then be cut off.
type healthService struct {
	*health.Server
	stopped <-chan struct{} // closed by Server.EndHealthWatches
}

// Watch implements healthpb.HealthServer. Until EndHealthWatches, it is
// health.Server's Watch. Then it sends the final status
// (NOT_SERVING, or SERVICE_UNKNOWN) unless already sent, and ends the
// stream with Unavailable.
func (h healthService) Watch(in *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	w := &lastSent{Health_WatchServer: stream, ctx: ctx, last: -1}
	done := make(chan error, 1)
	go func() { done <- h.Server.Watch(in, w) }()
	select {
	case err := <-done: // the client went away
		return err
	case <-h.stopped:
	}
	cancel()
	<-done //nolint:errcheck // w is ours again; Watch's error is only our cancel
	final := healthpb.HealthCheckResponse_SERVICE_UNKNOWN
	if resp, err := h.Server.Check(stream.Context(), in); err == nil {
		final = resp.Status
	}
	if final != w.last {
		if err := stream.Send(&healthpb.HealthCheckResponse{Status: final}); err != nil {
			return err
		}
	}
	return status.Error(codes.Unavailable, "shutting down")
}

// lastSent is a Watch stream with its own context that remembers the last
// status sent.
type lastSent struct {
	healthpb.Health_WatchServer
	ctx  context.Context
	last healthpb.HealthCheckResponse_ServingStatus
}

func (w *lastSent) Context() context.Context { return w.ctx }

func (w *lastSent) Send(m *healthpb.HealthCheckResponse) error {
	err := w.Health_WatchServer.Send(m)
	if err == nil {
		w.last = m.Status
	}
	return err
}
