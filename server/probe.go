package server

import (
	"cmp"
	"context"
	"time"
)

// DefaultStoreProbeInterval is Options.StoreProbeInterval when zero.
const DefaultStoreProbeInterval = 250 * time.Millisecond

// storeUnreached is the store's state, in /readyz and /ui/api/status,
// until it first answers.
const storeUnreached = "unreached"

// ProbeStore probes the store with Options.StoreProbe until it first
// answers, or ctx is done: at once, then every Options.StoreProbeInterval.
// Until then the store counts as never having answered (see ready),
// unless a decision's call to it succeeds first. It returns nil at once
// without a StoreProbe, and always nil otherwise: a store that never
// answers leaves the server not ready, not stopped. Run it beside the
// servers, as SampleRates.
func (s *Server) ProbeStore(ctx context.Context) error {
	probe := s.opts.StoreProbe
	if probe == nil {
		return nil
	}
	interval := cmp.Or(s.opts.StoreProbeInterval, DefaultStoreProbeInterval)
	t := time.NewTimer(0)
	defer t.Stop()
	for failures := 0; ; {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if s.answered.Load() {
			return nil // a decision reached it first
		}
		err := probe(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			s.storeAnswered()
			s.log.Info("counter store answered", "probes_failed", failures)
			return nil
		}
		if failures == 0 {
			s.log.Warn("counter store does not answer yet: the failure mode answers, and under deny or error /readyz reports not ready, until it does",
				"failure_mode", s.opts.FailureMode.String(), "err", err)
		}
		failures++
		t.Reset(interval)
	}
}

// storeAnswered records that the store answered once.
func (s *Server) storeAnswered() {
	if !s.answered.Load() { // a load first: decisions call this every time
		s.answered.Store(true)
	}
}
