package memory_test

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/memory"
)

// The memory store's optional capabilities, as backend's doc lists them.
var (
	_ backend.Store         = (*memory.Store)(nil)
	_ backend.ShareStore    = (*memory.Store)(nil)
	_ backend.OverrideStore = (*memory.Store)(nil)
	_ backend.Resetter      = (*memory.Store)(nil)
	_ prometheus.Collector  = (*memory.Store)(nil)
)
