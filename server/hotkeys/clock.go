package hotkeys

import (
	"sync/atomic"
	"time"
)

// tick is how often a coarse clock reads the time while it is read.
const tick = 100 * time.Millisecond

// A coarseClock is a clock read with one atomic load: a goroutine reads
// the time every tick and stores it. Reading the system clock costs 20 to
// 100 ns, as much as the rest of an observation. The goroutine runs while
// the clock is read: it ends at the first tick after which nobody read it,
// and the next read starts it again.
//
// The Go client's Quota keeps a coarse clock of its own
// (client/quota_clock.go): the client is a module of its own, which
// cannot import this one, and this one would need that clock exported in
// the client's public API. Theirs ticks every millisecond, for token
// buckets, and its goroutine ends with the Quota's Close.
type coarseClock struct {
	base    time.Time
	now     atomic.Int64 // nanoseconds since base, at the last tick
	read    atomic.Bool  // the clock was read since the last tick
	running atomic.Bool
}

// elapsed returns the nanoseconds since c.base, at most a tick behind.
func (c *coarseClock) elapsed() int64 {
	if !c.running.Load() && c.running.CompareAndSwap(false, true) {
		c.now.Store(int64(time.Since(c.base)))
		go c.run()
	}
	if !c.read.Load() { // a load first: most reads then write nothing
		c.read.Store(true)
	}
	return c.now.Load()
}

// run stores the time every tick, and returns at the first tick after
// which nobody read the clock.
func (c *coarseClock) run() {
	t := time.NewTicker(tick)
	defer t.Stop()
	for range t.C {
		c.now.Store(int64(time.Since(c.base)))
		if !c.read.Swap(false) {
			c.running.Store(false)
			return
		}
	}
}
