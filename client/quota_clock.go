package client

import (
	"context"
	"time"
)

// Reading the monotonic clock costs tens of nanoseconds on some virtual
// machines, a good part of a Quota's decision. While calls come, a
// goroutine keeps a coarse copy of it, which calls read instead; after
// clockIdleTicks ticks without a call it stops ticking, and the next call
// reads the clock itself and wakes it.
//
// The daemon has a coarse clock too, for hot-key observation
// (server/hotkeys/clock.go in the main module). They are two because
// they live in two modules: this one cannot import the main module, and
// sharing one would put a clock in the client's public API (or a module
// of its own) for some forty lines. Their needs differ as well: a Quota's
// token buckets want a millisecond and a goroutine that Close ends (see
// runClock), hot-key rates a tenth of a second and a goroutine that stops
// when unread.
const (
	// clockTick is how often the coarse clock is updated while in use: how
	// far behind the monotonic clock, scheduling delays aside, it may be.
	clockTick = time.Millisecond
	// clockIdleTicks is how many ticks without a call stop the ticking.
	clockIdleTicks = 1000
)

// nanos returns the Quota's clock: nanoseconds since its creation.
func (q *Quota) nanos() int64 {
	if q.manual {
		return int64(q.now().Sub(q.epoch))
	}
	if !q.clockUsed.Load() { // read first: writes are dearer
		q.clockUsed.Store(true)
	}
	if q.clockOn.Load() {
		return q.clock.Load()
	}
	select {
	case q.clockWake <- struct{}{}:
	default: // already woken
	}
	return int64(time.Since(q.epoch)) // time.Since reads the monotonic clock only
}

// exactNanos is nanos read from the clock itself, for the reporting
// goroutines, which should not keep the coarse clock ticking.
func (q *Quota) exactNanos() int64 {
	if q.manual {
		return int64(q.now().Sub(q.epoch))
	}
	return int64(time.Since(q.epoch))
}

// runClock keeps q.clock, until ctx ends.
func (q *Quota) runClock(ctx context.Context) {
	defer close(q.clockDone)
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.clockWake:
		}
		if !q.tickClock(ctx) {
			return
		}
	}
}

// tickClock updates q.clock every clockTick until it goes unused for
// clockIdleTicks ticks (it returns true) or ctx ends (false).
func (q *Quota) tickClock(ctx context.Context) bool {
	t := time.NewTicker(clockTick)
	defer t.Stop()
	q.clock.Store(int64(time.Since(q.epoch)))
	q.clockOn.Store(true)
	defer q.clockOn.Store(false)
	idle := 0
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		q.clock.Store(int64(time.Since(q.epoch)))
		if q.clockUsed.Load() {
			q.clockUsed.Store(false)
			idle = 0
		} else if idle++; idle >= clockIdleTicks {
			return true
		}
	}
}
