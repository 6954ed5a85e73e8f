package redis

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
)

// cache remembers the calls Redis refused, so that the same call again is
// refused locally until the refusal may lift: a client hammering a limit
// it already hit costs no Redis round trip until its retry_after.
type cache struct {
	now     func() time.Time
	max     int
	maxHold time.Duration // the longest an entry holds; zero means no bound
	// hits counts the requests answered over their limit from the cache;
	// misses every other request looked up: those of the calls that went
	// to Redis, and those within their limit in a refusal the cache
	// answered (see Store.LocalCacheHits).
	hits, misses atomic.Uint64

	size atomic.Int64 // len(m), readable without mu: most calls find it empty

	mu    sync.Mutex
	m     map[cacheKey]cacheEntry
	swept int64 // when the full cache was last swept, µs
}

// cacheKey is a counter under one limit: the key carries the algorithm
// and window, so a raised count or burst misses the cache.
type cacheKey struct {
	key             string
	requests, burst uint64
}

type cacheEntry struct {
	at, until int64  // µs on the cache's clock: when Redis answered, and until when it holds
	hits      uint64 // the call's hits on this counter
	res       backend.Result
}

func newCache(max int, now func() time.Time) *cache {
	return &cache{now: now, max: max, m: make(map[cacheKey]cacheEntry)}
}

func keyOf(r *backend.Request) cacheKey {
	return cacheKey{key: r.Key, requests: r.Limit.Requests, burst: r.Limit.Burst}
}

// answer decides reqs into res from the cache, if every request has a
// live entry for the same hits and those entries refuse the call: it then
// marks every result Cached and counts its hits and misses. Calls that
// record usage past the limit (ConsumeWhenOver), give back or renew, or
// apply a Concurrency limit, always go to Redis (see remember). A call
// that the cache does not answer is counted by the caller.
func (c *cache) answer(reqs []backend.Request, res []backend.Result) bool {
	if c.size.Load() == 0 {
		return false // nothing refused lately: no lock on the common path
	}
	for i := range reqs {
		if uncached(&reqs[i]) {
			return false
		}
	}
	now := backend.Micros(c.now())
	c.mu.Lock()
	for i := range reqs {
		e, ok := c.m[keyOf(&reqs[i])]
		if !ok || now >= e.until || reqs[i].Hits != e.hits {
			c.mu.Unlock()
			return false
		}
		elapsed := time.Duration(now-e.at) * time.Microsecond
		res[i] = e.res
		res[i].ResetAfter = max(e.res.ResetAfter-elapsed, 0)
		if e.res.OverLimit {
			res[i].RetryAfter = max(e.res.RetryAfter-elapsed, time.Microsecond)
		}
	}
	c.mu.Unlock()
	if !backend.Refused(reqs, res) {
		return false
	}
	over := 0
	for i := range res {
		res[i].Cached = true
		if res[i].OverLimit {
			over++
		}
	}
	c.hits.Add(uint64(over))
	c.misses.Add(uint64(len(res) - over))
	return true
}

// uncached reports whether a call with r always goes to Redis: r records
// usage past the limit, or is no take (it changes the counter whatever
// the cache holds), or is on a Concurrency limit, whose refusals lift
// when a holder releases its lease, not at their retry_after.
func uncached(r *backend.Request) bool {
	return r.ConsumeWhenOver || r.Op != backend.Take || r.Limit.Algorithm == backend.Concurrency
}

// remember records a call that Redis refused: each over-limit counter
// until its retry_after, the others' results until the soonest of those.
// A call that gives back forgets the refusals of its counters instead:
// they may lift now. (Those that other replicas' caches hold lift at
// their retry_after, or the Cluster bound on holding, clusterCacheHold.)
func (c *cache) remember(reqs []backend.Request, res []backend.Result) {
	c.forgetGiven(reqs)
	if !backend.Refused(reqs, res) {
		return
	}
	soonest := time.Duration(1<<63 - 1)
	for i := range reqs {
		if uncached(&reqs[i]) {
			return
		}
		for j := range i {
			if keyOf(&reqs[j]) == keyOf(&reqs[i]) {
				// One counter twice: its entry could hold only one of the
				// two results, and the later one alone would refuse what
				// the counter admits.
				return
			}
		}
		if res[i].OverLimit {
			soonest = min(soonest, res[i].RetryAfter)
		}
	}
	if c.maxHold > 0 {
		soonest = min(soonest, c.maxHold)
	}
	if soonest <= 0 {
		return
	}
	now := backend.Micros(c.now())
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m)+len(reqs) > c.max {
		if now-c.swept < int64(time.Second/time.Microsecond) {
			return // full of live refusals: Redis decides this one again
		}
		c.swept = now // at most one sweep a second, under the lock
		c.sweep(now)
		if len(c.m)+len(reqs) > c.max {
			return
		}
	}
	for i := range reqs {
		hold := soonest
		if res[i].OverLimit && (c.maxHold == 0 || res[i].RetryAfter < c.maxHold) {
			hold = res[i].RetryAfter
		}
		c.m[keyOf(&reqs[i])] = cacheEntry{
			at:    now,
			until: now + int64(hold/time.Microsecond),
			hits:  reqs[i].Hits,
			res:   res[i],
		}
	}
	c.size.Store(int64(len(c.m)))
}

// forgetGiven drops the entries of the counters that reqs give back to
// or renew on: nothing to do, and no lock, when the cache is empty or
// reqs are all takes (such a call's refusal, uncached, is not
// remembered).
func (c *cache) forgetGiven(reqs []backend.Request) {
	if c.size.Load() == 0 {
		return
	}
	first := 0
	for first < len(reqs) && reqs[first].Op == backend.Take {
		first++
	}
	if first == len(reqs) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := first; i < len(reqs); i++ {
		if reqs[i].Op != backend.Take {
			delete(c.m, keyOf(&reqs[i]))
		}
	}
	c.size.Store(int64(len(c.m)))
}

// sweep drops the entries that no longer hold.
func (c *cache) sweep(now int64) {
	for k, e := range c.m {
		if now >= e.until {
			delete(c.m, k)
		}
	}
	c.size.Store(int64(len(c.m)))
}

// forget drops the entries of the counters keys, whatever their limits:
// a reset counter (Store.Reset) refuses nothing that Redis would admit.
func (c *cache) forget(keys []string) {
	if c.size.Load() == 0 {
		return
	}
	set := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		set[k] = struct{}{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.m {
		if _, ok := set[k.key]; ok {
			delete(c.m, k)
		}
	}
	c.size.Store(int64(len(c.m)))
}

// clear drops every entry.
func (c *cache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.m)
	c.size.Store(0)
}
