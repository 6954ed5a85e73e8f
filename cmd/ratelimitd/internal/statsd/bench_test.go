package statsd_test

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/ratelimitd/ratelimitd/cmd/ratelimitd/internal/statsd"
)

// drained returns an Exporter sending to a server that reads and discards
// its lines (in this process: their strings are among the allocations).
func drained(b *testing.B) *statsd.Exporter {
	b.Helper()
	stop, done := make(chan struct{}), make(chan struct{})
	b.Cleanup(func() { close(stop); <-done }) // after the server's cleanup: it waits for its readers
	srv := listenTCP(b, "127.0.0.1:0", true)
	go func() {
		defer close(done)
		for {
			select {
			case <-srv.lines:
			case <-stop:
				return
			}
		}
	}()
	e, err := statsd.New(statsd.Options{Addr: srv.addr(), FlushInterval: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	return e
}

// BenchmarkTimer measures recording a timer value, which gostats hands to
// the sink on the recording goroutine (a request's, for the reference's
// response_time), with a flush every 4096 values.
func BenchmarkTimer(b *testing.B) {
	e := drained(b)
	tm := e.Root().Scope("ratelimit_server").NewTimer("ShouldRateLimit.response_time")
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		tm.AddValue(1234)
		if i++; i%4096 == 0 {
			e.Flush()
		}
	}
}

// BenchmarkFlush measures a flush of 1000 changed counters.
func BenchmarkFlush(b *testing.B) {
	e := drained(b)
	root := e.Root().Scope("service").Scope("rate_limit")
	var cs []interface{ Inc() }
	for i := range 1000 {
		cs = append(cs, root.NewCounter(fmt.Sprintf("domain.key_%d.total_hits", i)))
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, c := range cs {
			c.Inc()
		}
		e.Flush()
	}
}
