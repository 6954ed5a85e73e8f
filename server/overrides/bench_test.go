package overrides_test

import (
	"context"
	"encoding/json"
	"runtime"
	"strconv"
	"testing"

	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/server/overrides"
)

// generated is an OverrideStore of n overrides whose records it makes
// afresh at every read and does not keep, so that what a replica holds
// for them is the Manager's set in force alone.
type generated struct {
	*memory.Store // for Take, not for its overrides
	n             int
}

func (g generated) Overrides(_ context.Context, since uint64) (map[string][]byte, uint64, error) {
	if since == 1 {
		return nil, 1, nil
	}
	recs := make(map[string][]byte, g.n)
	for i := range g.n {
		o := overrides.Override{
			Domain: "edge", Entries: []overrides.Entry{{Key: "api_key", Value: "k-" + strconv.Itoa(i)}},
			Limits: []overrides.Limit{{RequestsPerUnit: 1000, Unit: "minute"}},
			Reason: "incident 4242", Version: 1, SetBy: "alice",
		}
		rec, err := json.Marshal(&o)
		if err != nil {
			return nil, 0, err
		}
		recs[o.Key()] = rec
	}
	return recs, 1, nil
}

// BenchmarkMemoryPerOverride measures the heap a replica holds for
// 100,000 overrides in force (one entry, one limit, a short reason): the
// set the engine looks up, without the store's own copies of the
// records. Target: at most 300 bytes per override.
func BenchmarkMemoryPerOverride(b *testing.B) {
	const n = 100_000
	for b.Loop() {
		store := generated{Store: newStore(b), n: n}
		r := newReplica(b, store, overrides.Options{})
		before := heap()
		if err := r.m.Sync(b.Context()); err != nil {
			b.Fatal(err)
		}
		after := heap()
		if got := r.eng.Overrides().Len(); got != n {
			b.Fatalf("%d overrides in force, want %d", got, n)
		}
		b.ReportMetric(float64(after-before)/n, "bytes/override")
		runtime.KeepAlive(r)
	}
}

// heap returns the bytes of live heap objects after a collection.
func heap() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
