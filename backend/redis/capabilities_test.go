package redis_test

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/redis"
)

// The Redis store has every optional capability of backend's doc.
var (
	_ backend.Store              = (*redis.Store)(nil)
	_ backend.ShareStore         = (*redis.Store)(nil)
	_ backend.OverrideStore      = (*redis.Store)(nil)
	_ backend.Resetter           = (*redis.Store)(nil)
	_ backend.StateReporter      = (*redis.Store)(nil)
	_ backend.BreakerReporter    = (*redis.Store)(nil)
	_ backend.LocalCacheReporter = (*redis.Store)(nil)
	_ prometheus.Collector       = (*redis.Store)(nil)
)
