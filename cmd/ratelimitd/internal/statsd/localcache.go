package statsd

import (
	gostats "github.com/lyft/gostats"

	"github.com/ratelimitd/ratelimitd/backend"
)

// LocalCache returns the generator of the reference's gauges of a store's
// local cache, under scope (the reference's is "localcache"): hitCount,
// missCount, lookupCount (their sum: the reference counts lookups since
// the start) and entryCount, set from c before each flush. Give it to
// Store().AddStatGenerator.
func LocalCache(c backend.LocalCacheReporter, scope gostats.Scope) gostats.StatGenerator {
	return &localCacheStats{
		counts:  c,
		hits:    scope.NewGauge("hitCount"),
		misses:  scope.NewGauge("missCount"),
		lookups: scope.NewGauge("lookupCount"),
		entries: scope.NewGauge("entryCount"),
	}
}

// localCacheStats are the gauges of LocalCache.
type localCacheStats struct {
	counts                         backend.LocalCacheReporter
	hits, misses, lookups, entries gostats.Gauge
}

// GenerateStats implements gostats.StatGenerator: it sets the gauges.
func (s *localCacheStats) GenerateStats() {
	hits, misses := s.counts.LocalCacheHits(), s.counts.LocalCacheMisses()
	s.hits.Set(hits)
	s.misses.Set(misses)
	s.lookups.Set(hits + misses)
	s.entries.Set(uint64(max(0, s.counts.LocalCacheEntries())))
}
