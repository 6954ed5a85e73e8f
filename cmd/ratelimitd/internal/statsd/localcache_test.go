package statsd_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ratelimitd/ratelimitd/cmd/ratelimitd/internal/statsd"
)

// cacheCounts is a store's local cache as LocalCache reads it.
type cacheCounts struct {
	hits, misses uint64
	entries      int64
}

func (c *cacheCounts) LocalCacheHits() uint64   { return c.hits }
func (c *cacheCounts) LocalCacheMisses() uint64 { return c.misses }
func (c *cacheCounts) LocalCacheEntries() int64 { return c.entries }

// TestLocalCache: the reference's local cache gauges are set from the
// store at each flush, lookups as hits plus misses, and a negative size
// as 0.
func TestLocalCache(t *testing.T) {
	srv := listenTCP(t, "127.0.0.1:0", true)
	r := newRig(t, statsd.Options{Addr: srv.addr()})
	c := &cacheCounts{hits: 3, misses: 4, entries: 5}
	r.Store().AddStatGenerator(statsd.LocalCache(c, r.Root().Scope("localcache")))
	for _, want := range [][]string{
		{"ratelimit.localcache.entryCount:5|g", "ratelimit.localcache.hitCount:3|g", "ratelimit.localcache.lookupCount:7|g", "ratelimit.localcache.missCount:4|g"},
		{"ratelimit.localcache.entryCount:0|g", "ratelimit.localcache.hitCount:10|g", "ratelimit.localcache.lookupCount:30|g", "ratelimit.localcache.missCount:20|g"},
	} {
		r.Flush()
		if diff := cmp.Diff(want, srv.take(t, len(want))); diff != "" {
			t.Errorf("flush (-want +got):\n%s", diff)
		}
		*c = cacheCounts{hits: 10, misses: 20, entries: -1}
	}
}
