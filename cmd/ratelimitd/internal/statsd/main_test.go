package statsd_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// gostats' own net sink, run once by TestSameLinesAsGostats to compare
	// its lines with ours, starts a goroutine that never exits: the reason
	// this package has a sink of its own.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/lyft/gostats.(*netSink).run"))
}
