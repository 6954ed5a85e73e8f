package redis_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: the store's
// probes and the Redis calls its callers left end by Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
