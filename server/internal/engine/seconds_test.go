package engine

import (
	"math"
	"testing"
	"time"
)

// TestSeconds: durations round up to whole seconds, and the largest ones
// (a saturated reset) stay positive instead of wrapping.
func TestSeconds(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want int64
	}{
		{-time.Second, 0},
		{0, 0},
		{1, 1},
		{time.Second, 1},
		{time.Second + 1, 2},
		{math.MaxInt64, math.MaxInt64/int64(time.Second) + 1},
		{math.MaxInt64 - time.Second + 2, math.MaxInt64 / int64(time.Second)},
	} {
		if got := seconds(tt.d); got != tt.want {
			t.Errorf("seconds(%d) = %d, want %d", tt.d, got, tt.want)
		}
	}
}
