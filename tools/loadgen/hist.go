package main

import (
	"math"
	"math/bits"
	"time"
)

// subBits sets the histogram's precision: each power of two is split into
// 1<<subBits buckets, so a recorded value is off by less than 1/128
// (0.8%) of itself.
const subBits = 7

const subCount = 1 << subBits

// A histogram counts durations in log-linear buckets, as HdrHistogram
// does: values below subCount nanoseconds get a bucket each, and every
// power of two above is split into subCount equal buckets. The zero value
// is empty and ready to use. A histogram is not safe for concurrent use:
// give each goroutine its own and merge them.
type histogram struct {
	counts [(64 - subBits) * subCount]uint64
	n      uint64
	max    time.Duration
}

// bucket returns the index of the bucket that holds v.
func bucket(v uint64) int {
	if v < subCount {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1 // v>>shift is in [subCount, 2*subCount)
	return (shift+1)*subCount + int(v>>shift) - subCount
}

// highest returns the largest value that falls in bucket i.
func highest(i int) uint64 {
	if i < subCount {
		return uint64(i)
	}
	shift := i/subCount - 1
	low := uint64(i%subCount+subCount) << shift
	return low + (1<<shift - 1)
}

// record counts one duration d; negative durations count as zero.
func (h *histogram) record(d time.Duration) { h.recordN(d, 1) }

// recordN counts n durations d at once, as record would one by one.
func (h *histogram) recordN(d time.Duration, n uint64) {
	h.counts[bucket(uint64(max(d, 0)))] += n
	h.n += n
	h.max = max(h.max, d)
}

// merge adds o's counts to h.
func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// quantile returns the smallest recorded bucket's highest value such that
// at least q (0 < q ≤ 1) of the values are at or below it, or 0 if h is
// empty. Like HdrHistogram it reports the top of the bucket, so it
// overstates by less than 1/subCount, and never exceeds the maximum.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		if seen += c; seen >= rank {
			return min(time.Duration(highest(i)), h.max)
		}
	}
	return h.max
}
