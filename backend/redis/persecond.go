package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
)

// A per-second store (Options.PerSecond) keeps the counters of one-second
// limits in a Redis of their own, as envoyproxy/ratelimit's
// REDIS_PERSECOND does: their many short-lived keys and frequent writes
// then load another Redis than the longer limits.
//
// A call is routed by its requests' limits. A call wholly on one store
// runs there as any call does (batched on standalone and Sentinel, per
// slot on Cluster). A call over both is decided in parts, as a call over
// several Cluster slots is (see takeSides): each store decides its share
// as if the call were admitted, both at once, and what an admitted part
// took is given back when the whole call is refused or a group is over in
// another part. Each store keeps its breakers and timeout: if either
// fails, the call fails, and what the other took is given back; while a
// breaker of either is open, the call fails before either decides. The
// store's local cache covers every call, whichever store decided it.

// Where a call's requests are kept.
type placement uint8

const (
	onMain      placement = iota // every request on the store itself
	onPerSecond                  // every request on the PerSecond store
	onBoth
)

// perSecond reports whether r's counter is kept in the PerSecond store: a
// one-second limit that counts (a ban touches no counter, and is decided
// wherever its call is).
func perSecond(r *backend.Request) bool {
	return r.Limit.Window == time.Second && !r.Limit.Ban()
}

// route returns where the counters of a call are kept.
func (s *Store) route(reqs []backend.Request) placement {
	if s.perSecond == nil {
		return onMain
	}
	main, second := false, false
	for i := range reqs {
		if perSecond(&reqs[i]) {
			second = true
		} else {
			main = true
		}
	}
	switch {
	case !second:
		return onMain
	case !main:
		return onPerSecond
	}
	return onBoth
}

// takeAcross decides a call over both s and its PerSecond store, in parts
// (see takeSides). ctx carries the caller's values, not its deadline.
func (s *Store) takeAcross(ctx context.Context, reqs []backend.Request, res []backend.Result) error {
	var mainIdx, secondIdx []int
	for i := range reqs {
		if perSecond(&reqs[i]) {
			secondIdx = append(secondIdx, i)
		} else {
			mainIdx = append(mainIdx, i)
		}
	}
	tags := make([]string, len(reqs))
	return s.takeSides(ctx, reqs, res, tags, []side{
		{s: s, parts: s.partsOf(reqs, mainIdx, tags)},
		{s: s.perSecond, parts: s.perSecond.partsOf(reqs, secondIdx, tags)},
	})
}

// sideError returns err, an error of store st's in a call to s, saying
// so when st is s's PerSecond store.
func (s *Store) sideError(st *Store, err error) error {
	if st != s && st == s.perSecond {
		return fmt.Errorf("per-second store: %w", err)
	}
	return err
}
