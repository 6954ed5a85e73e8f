package rlqs

import (
	"math"
	"time"

	"github.com/ratelimitd/ratelimitd/config"
)

// kind is what an assignment tells the client to do.
type kind uint8

const (
	kindNone     kind = iota // nothing assigned: the client's no-assignment behaviour
	kindAllowAll             // BlanketRule ALLOW_ALL
	kindDenyAll              // BlanketRule DENY_ALL
	kindBucket               // a TokenBucket
)

// assignment is one bucket's assignment, comparable so that a stream sends
// it again only when it changed.
type assignment struct {
	kind kind
	// maxTokens, perFill and fill are the TokenBucket of kindBucket.
	maxTokens, perFill uint32
	fill               time.Duration
}

// rate returns the requests per second a assigns, +Inf for ALLOW_ALL.
func (a assignment) rate() float64 {
	switch a.kind {
	case kindBucket:
		return float64(a.perFill) / a.fill.Seconds()
	case kindAllowAll:
		return math.Inf(1)
	}
	return 0
}

// limitRate returns the tightest rate, in requests per second, that rule's
// limits allow, and whether the rule limits at all (false: no limit, or
// unlimited). A rule with a ban has rate 0.
func limitRate(r *config.Rule) (float64, bool) {
	if r == nil || r.Unlimited || len(r.Limits) == 0 {
		return 0, false
	}
	rate := math.Inf(1)
	for _, l := range r.Limits {
		rate = min(rate, float64(l.Requests)/l.Window.Seconds())
	}
	return rate, true
}

// minShare is the smallest share assigned as a token bucket, one request a
// day; a smaller one is DENY_ALL.
const minShare = 1.0 / (24 * 60 * 60)

// bucketFor returns the token bucket of a share of rate requests per
// second of rule r's limits: for each limit, the share's fraction of the
// limit's rate and of its burst; the tightest limit wins. The bucket fills
// n tokens, floor(share) or 1 under one request per second, every n/share
// seconds rounded up to the millisecond: never more than the share, so
// that the shares never add up to more than the limit, and at most 0.2%
// less (the interval is at least half a second, or the share is so large
// that a millisecond is under 0.2% of it).
func bucketFor(r *config.Rule, share, limit float64) assignment {
	if share < minShare || limit <= 0 {
		return assignment{kind: kindDenyAll}
	}
	frac := min(share/limit, 1)
	n := min(max(math.Floor(share), 1), math.MaxUint32)
	fill := time.Duration(math.Ceil(n/share*float64(time.Second/time.Millisecond))) * time.Millisecond
	a := assignment{kind: kindBucket, perFill: uint32(n), fill: max(fill, time.Millisecond)}
	burst := math.Inf(1)
	for _, l := range r.Limits {
		burst = min(burst, math.Floor(float64(l.Capacity())*frac))
	}
	a.maxTokens = uint32(min(max(burst, float64(a.perFill)), math.MaxUint32))
	return a
}
