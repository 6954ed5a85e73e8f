package backend

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Algorithm names how a Limit counts. The zero value is SlidingWindow, the
// default of ratelimitd's configuration.
type Algorithm uint8

const (
	// SlidingWindow is the sliding window counter: the previous window's
	// count weighted by how much of it still overlaps the sliding window,
	// plus the current window's count. O(1) state per key.
	SlidingWindow Algorithm = iota
	// FixedWindow counts in epoch-aligned windows. Up to twice the limit can
	// pass around a window edge.
	FixedWindow
	// SlidingLog keeps the time of every counted request in the last window:
	// exact, with state proportional to the limit (see MaxSlidingLog).
	SlidingLog
	// TokenBucket holds up to Burst tokens, refilled at Requests per Window;
	// each hit takes one. The bucket starts full.
	TokenBucket
	// GCRA is the generic cell rate algorithm (a leaky bucket as a meter):
	// the same decisions as a leaky bucket with one timestamp of state.
	GCRA
	// Concurrency holds at most Requests hits at once: each Take holds its
	// hits as a lease until a GiveBack frees them or the lease lapses
	// Window after its stamp (a caller that dies frees its slots then).
	// Its state is a sliding log's, with a unique stamp per lease.
	Concurrency
)

// Algorithms lists every Algorithm, in the order of their values.
var Algorithms = []Algorithm{SlidingWindow, FixedWindow, SlidingLog, TokenBucket, GCRA, Concurrency}

var algorithmNames = [...]string{
	SlidingWindow: "sliding_window",
	FixedWindow:   "fixed_window",
	SlidingLog:    "sliding_log",
	TokenBucket:   "token_bucket",
	GCRA:          "gcra",
	Concurrency:   "concurrency",
}

// String returns the configuration name of a, such as "sliding_window".
func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", a)
}

// ParseAlgorithm returns the Algorithm named s ("sliding_window",
// "fixed_window", "sliding_log", "token_bucket", "gcra" or "concurrency").
func ParseAlgorithm(s string) (Algorithm, error) {
	for a, name := range algorithmNames {
		if s == name {
			return Algorithm(a), nil
		}
	}
	return 0, fmt.Errorf("unknown algorithm %q (want sliding_window, fixed_window, sliding_log, token_bucket, gcra or concurrency)", s)
}

// Bounds of a valid Limit.
const (
	// MaxRequests is the largest Requests (and Burst) of a Limit, the range
	// of Envoy's requests_per_unit.
	MaxRequests = math.MaxUint32
	// MaxSlidingLog is the largest Requests of a SlidingLog limit, so that
	// one key's log holds at most this many entries (16 bytes each).
	MaxSlidingLog = 10_000
	// MinWindow and MaxWindow bound a Limit's Window.
	MinWindow = time.Millisecond
	MaxWindow = 100 * 365 * 24 * time.Hour
	// maxGCRATolerance bounds Burst times the emission interval of a GCRA
	// limit, in microseconds, so that its arithmetic stays exact in a
	// float64 (as in Redis's Lua) as well as in an int64.
	maxGCRATolerance = 1 << 53
)

// A Limit is one rate limit: Requests per Window, counted by Algorithm.
// The zero Limit is not valid: see Validate.
type Limit struct {
	// Algorithm is how hits are counted.
	Algorithm Algorithm
	// Requests is how many hits the limit admits per Window. Zero refuses
	// everything (a ban) and touches no counter.
	Requests uint64
	// Window is the period of the limit, a whole number of microseconds
	// between MinWindow and MaxWindow.
	Window time.Duration
	// Burst is how many hits may pass at once under TokenBucket and GCRA;
	// zero means Requests. Other algorithms ignore it.
	Burst uint64
}

// Ban reports whether l refuses everything.
func (l Limit) Ban() bool { return l.Requests == 0 }

// Capacity returns how many hits l admits at once, the most Remaining
// can be: Burst, or Requests when Burst is zero (only TokenBucket and
// GCRA limits have a Burst).
func (l Limit) Capacity() uint64 {
	if l.Burst == 0 {
		return l.Requests
	}
	return l.Burst
}

// Validate reports whether l is a limit that every Store can apply.
func (l Limit) Validate() error {
	if int(l.Algorithm) >= len(algorithmNames) {
		return fmt.Errorf("unknown algorithm %d", l.Algorithm)
	}
	if l.Window < MinWindow || l.Window > MaxWindow {
		return fmt.Errorf("window %v out of range [%v, %v]", l.Window, MinWindow, MaxWindow)
	}
	if l.Window%time.Microsecond != 0 {
		return fmt.Errorf("window %v is not a whole number of microseconds", l.Window)
	}
	if l.Requests > MaxRequests {
		return fmt.Errorf("requests %d over the maximum %d", l.Requests, uint64(MaxRequests))
	}
	switch l.Algorithm {
	case SlidingLog:
		if l.Requests > MaxSlidingLog {
			return fmt.Errorf("sliding_log allows at most %d requests per window, got %d", MaxSlidingLog, l.Requests)
		}
	case Concurrency:
		if l.Requests > MaxSlidingLog {
			return fmt.Errorf("concurrency allows at most %d held at once, got %d", MaxSlidingLog, l.Requests)
		}
	case TokenBucket, GCRA:
		if l.Burst > MaxRequests {
			return fmt.Errorf("burst %d over the maximum %d", l.Burst, uint64(MaxRequests))
		}
		if l.Algorithm == GCRA && l.Requests > 0 {
			if t := l.Capacity() * uint64(l.Interval()); t > maxGCRATolerance || t/uint64(l.Interval()) != l.Capacity() {
				return errors.New("gcra: burst × (window / requests) exceeds 285 years")
			}
		}
	}
	if l.Burst != 0 && l.Algorithm != TokenBucket && l.Algorithm != GCRA {
		return fmt.Errorf("burst applies to token_bucket and gcra only, not %v", l.Algorithm)
	}
	return nil
}

// window returns l.Window in microseconds.
func (l Limit) window() int64 { return int64(l.Window / time.Microsecond) }

// Interval returns GCRA's emission interval window/requests in
// microseconds, rounded up so that the rate never exceeds the limit. A
// ban (Requests 0) has none: the caller checks Ban first.
func (l Limit) Interval() int64 {
	w, r := l.window(), int64(l.Requests)
	return (w + r - 1) / r
}
