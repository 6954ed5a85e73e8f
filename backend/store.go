package backend

import (
	"context"
	"errors"
	"time"
)

// A Store applies one decision's hits to rate-limit counters.
//
// Implementations must be safe for concurrent use by multiple goroutines, and
// must decide each call atomically: no other call's hits are counted between
// reading a counter and writing it, so that admitted hits never exceed a
// limit at any concurrency.
type Store interface {
	// Take decides reqs as one request and writes one Result per Request
	// into res (len(res) == len(reqs)), so the hot path allocates nothing.
	//
	// The decision is all or nothing, as Refused and Consumes define it: a
	// refused call leaves no lasting consumption (but on ConsumeWhenOver
	// requests), and an admitted call consumes on every group that is
	// within its limits. Decide is the reference definition of a call's
	// decision on its counters' states.
	//
	// Exceeding a limit is reported in res, never as an error; a non-nil
	// error means the store could not decide (unreachable, timed out,
	// closed), and res is then undefined.
	Take(ctx context.Context, reqs []Request, res []Result) error
}

// ErrClosed is returned by a Store used after its Close.
var ErrClosed = errors.New("backend: store closed")

// ErrUnavailable is wrapped by the errors of a Store that did not try to
// decide because it knows its counters are out of reach, such as a Redis
// store whose circuit breaker is open.
var ErrUnavailable = errors.New("backend: unavailable")

// Mode says what a Request's over-limit does to the whole call.
type Mode uint8

const (
	// Enforce refuses the call when this request's group is over.
	Enforce Mode = iota
	// Shadow reports an over-limit but refuses nothing (a rule's
	// shadow_mode, or the daemon's global shadow mode).
	Shadow
	// Quota refuses the call only when every Quota group of the call is
	// over (a rule's quota_mode).
	Quota
)

// Op says what a Request does to its counter.
type Op uint8

const (
	// Take consumes Hits if the limit admits them (the default).
	Take Op = iota
	// GiveBack gives Hits back (Envoy's is_negative_hits): never past the
	// limit, so that a give-back on a fresh or full budget changes
	// nothing. Fixed and sliding windows lower the current window's count
	// (not below zero), a sliding log drops its newest entries, a token
	// bucket gets tokens back up to its capacity, GCRA moves its TAT back
	// but not before now, and a Concurrency limit frees slots: those of
	// the lease stamped Lease when it is set, else the newest held ones.
	// A give-back is never over and takes no part in the call's verdict
	// (its group must hold give-backs only); the call's give-backs apply
	// before its takes, whatever the takes decide.
	GiveBack
	// Renew extends the lease stamped Lease, on a Concurrency limit only,
	// to a full Window from now; the Result's Lease is its new stamp. It
	// is over when that lease is no longer held (expired or released),
	// and then changes nothing. Like a give-back, a renew takes no part
	// in the verdict of the call's takes.
	Renew
)

// A Request is one limit to apply to one counter.
type Request struct {
	// Key identifies the counter; see AppendKey. Stores may hash it but
	// must not confuse two keys.
	Key string
	// Tag names the counters that must live together: a store that
	// spreads counters over nodes (Redis Cluster) keeps the requests of
	// one Tag on one node, so that they are decided atomically. The
	// engine sets it to the descriptor's part of Key, so that a
	// descriptor's limits stand or fall together. Empty means Key.
	// A Key must come with the same Tag in every call: a store may name
	// the counter by both (Redis Cluster puts the tag in the counter's
	// Redis key), and one Key under two Tags is then two counters.
	Tag string
	// Limit is the limit to apply to the counter.
	Limit Limit
	// Hits is how much the request consumes; zero checks without consuming.
	Hits uint64
	// Group is the index of the request descriptor this limit belongs to.
	// The limits of one descriptor stand or fall together: if one is over,
	// none of them consumes. Requests of one group are adjacent in a call
	// and share Mode and ConsumeWhenOver.
	Group int
	// Mode says whether this group's over-limit refuses the call.
	Mode Mode
	// ConsumeWhenOver records Hits even when the group or the call is
	// refused, past the limit if need be (usage reported after the fact).
	ConsumeWhenOver bool
	// Op is what the request does: Take, GiveBack or Renew.
	Op Op
	// Lease is, on a GiveBack or Renew of a Concurrency limit, the stamp
	// of the lease to release or renew, as a Take's Result gave it; zero
	// on a GiveBack releases the newest held slots.
	Lease int64
}

// A Result is a Store's answer for one Request.
type Result struct {
	// OverLimit reports that this limit could not admit Hits.
	OverLimit bool
	// Cached reports that the store answered this call from a local
	// cache of recent refusals, without its counters (the Redis store's
	// local cache); the result is the one the counters gave then.
	// (Beside OverLimit, so that the flags share one word.)
	Cached bool
	// Remaining is how many more hits the limit would admit now, after
	// this call's consumption.
	Remaining uint64
	// ResetAfter is the time until the counter resets, as the algorithm
	// defines it (see State).
	ResetAfter time.Duration
	// RetryAfter is the time until Hits more would be admitted, if nothing
	// else is counted meanwhile; zero when not over. When Hits exceed what
	// the limit can ever admit it is the limit's Window (for a ban, the end
	// of the current window).
	RetryAfter time.Duration
	// Lease is, on a Concurrency limit, the stamp (µs since the Unix
	// epoch) of the lease that a Take counted or a Renew extended: the
	// lease expires at Lease + Window, and a GiveBack or Renew names it by
	// this stamp. Stamps are unique among the leases a counter holds.
	// Zero when nothing was counted.
	Lease int64
}

// Refused reports whether a call is refused, given each request's
// OverLimit in res: when an Enforce group is over, or when the call has
// Quota groups and all of them are over. Only takes decide: a group of
// give-backs or renews (Op other than Take) is never over and plays no
// part, neither refusing the call nor counting as a Quota group.
//
// It is the rule every Store applies inside its atomic step; the decision
// engine uses it too, to report the overall code.
func Refused(reqs []Request, res []Result) bool {
	quota, quotaUnder := false, false
	for i := 0; i < len(reqs); {
		j, over := groupEnd(reqs, res, i)
		if reqs[i].Op != Take {
			i = j
			continue
		}
		switch reqs[i].Mode {
		case Enforce:
			if over {
				return true
			}
		case Quota:
			quota = true
			quotaUnder = quotaUnder || !over
		}
		i = j
	}
	return quota && !quotaUnder
}

// Consumes reports whether reqs[i], a Take, consumes its hits in a call
// whose verdict is refused: a ConsumeWhenOver request always does; any
// other only when the call is admitted and its group is within its
// limits. A give-back or renew consumes nothing (it applies whatever the
// verdict): Consumes reports false.
func Consumes(reqs []Request, res []Result, refused bool, i int) bool {
	if reqs[i].Op != Take {
		return false
	}
	if reqs[i].ConsumeWhenOver {
		return true
	}
	if refused {
		return false
	}
	return !groupOver(reqs, res, i)
}

// groupOver reports whether any take of reqs[i]'s group is over.
func groupOver(reqs []Request, res []Result, i int) bool {
	g := reqs[i].Group
	for i > 0 && reqs[i-1].Group == g {
		i--
	}
	_, over := groupEnd(reqs, res, i)
	return over
}

// groupEnd returns the index after the group starting at i, and whether
// any of its takes is over (a failed renew does not make a group over).
func groupEnd(reqs []Request, res []Result, i int) (int, bool) {
	g, over := reqs[i].Group, false
	for ; i < len(reqs) && reqs[i].Group == g; i++ {
		over = over || (res[i].OverLimit && reqs[i].Op == Take)
	}
	return i, over
}
