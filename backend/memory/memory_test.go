package memory_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/backendtest"
	"github.com/ratelimitd/ratelimitd/backend/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newStore(t *testing.T, opts memory.Options) *memory.Store {
	t.Helper()
	s := memory.New(opts)
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T, now func() time.Time) backend.Store {
		return newStore(t, memory.Options{Now: now})
	})
}

func TestConformanceOneShard(t *testing.T) {
	// A tiny store has one shard, so every call's keys share a lock.
	backendtest.Run(t, func(t *testing.T, now func() time.Time) backend.Store {
		return newStore(t, memory.Options{Now: now, MaxKeys: 50})
	})
}

var minute = backend.Limit{Algorithm: backend.FixedWindow, Requests: 10, Window: time.Minute}

func take(t *testing.T, s *memory.Store, key string, l backend.Limit, hits uint64) backend.Result {
	t.Helper()
	res := make([]backend.Result, 1)
	if err := s.Take(t.Context(), []backend.Request{{Key: key, Limit: l, Hits: hits}}, res); err != nil {
		t.Fatalf("Take(%q) error: %v", key, err)
	}
	return res[0]
}

func TestMaxKeysBoundsTheStore(t *testing.T) {
	clock := backendtest.NewClock(backendtest.T0)
	s := newStore(t, memory.Options{MaxKeys: 100, Now: clock.Now})
	for i := range 250 {
		take(t, s, "k"+strconv.Itoa(i), minute, 1)
	}
	if got := s.Len(); got != 100 {
		t.Errorf("Len() = %d after 250 keys, want the cap 100", got)
	}
	// Each of the 150 keys past the cap entered the window and evicted a
	// counter: the window's oldest key, declined, or, when that key won
	// against the main region's, the main region's. Keys seen once nearly
	// all lose, as the ones held were seen once too.
	evicted, declined := s.Evictions(), s.Declined()
	if evicted != 150 || declined < 140 {
		t.Errorf("Evictions() = %d, Declined() = %d, want 150 evicted, nearly all declined", evicted, declined)
	}
	// The store exports them as metrics that promlint accepts.
	want := fmt.Sprintf(`
# HELP ratelimitd_memory_declined_keys_total New keys the full memory store did not admit past its admission window, its counters being asked for as often or more: each starts again from zero on its next call.
# TYPE ratelimitd_memory_declined_keys_total counter
ratelimitd_memory_declined_keys_total %d
# HELP ratelimitd_memory_evictions_total Live counters the memory store evicted to stay within its maximum number of keys, from its admission window or its main region.
# TYPE ratelimitd_memory_evictions_total counter
ratelimitd_memory_evictions_total %d
# HELP ratelimitd_memory_keys Counters the memory store holds.
# TYPE ratelimitd_memory_keys gauge
ratelimitd_memory_keys 100
# HELP ratelimitd_memory_refusing_evictions_total Evicted counters that were refusing: each let a client over its limit start again from zero.
# TYPE ratelimitd_memory_refusing_evictions_total counter
ratelimitd_memory_refusing_evictions_total 0
`, declined, evicted)
	if err := testutil.CollectAndCompare(s, strings.NewReader(want)); err != nil {
		t.Errorf("metrics: %v", err)
	}
	if problems, err := testutil.CollectAndLint(s); err != nil || len(problems) > 0 {
		t.Errorf("promlint: %v %+v", err, problems)
	}
}

func TestExpiredKeysMakeRoomWithoutEviction(t *testing.T) {
	clock := backendtest.NewClock(backendtest.T0)
	s := newStore(t, memory.Options{MaxKeys: 100, Now: clock.Now})
	for i := range 100 {
		take(t, s, "old"+strconv.Itoa(i), minute, 1)
	}
	clock.Set(backendtest.T0.Add(2 * time.Minute)) // every old window has ended
	for i := range 100 {
		take(t, s, "new"+strconv.Itoa(i), minute, 1)
	}
	if got, declined := s.Evictions(), s.Declined(); got != 0 || declined != 0 {
		t.Errorf("Evictions() = %d, Declined() = %d, want 0 and 0: only expired keys had to go", got, declined)
	}
	if got := s.Len(); got != 100 {
		t.Errorf("Len() = %d, want the 100 new keys", got)
	}

	// A key whose counter expired while it was in the window leaves it
	// without an eviction, even before a sweep (a full shard sweeps once
	// a second at most).
	s = newStore(t, memory.Options{MaxKeys: 100, Now: clock.Now})
	day := backend.Limit{Algorithm: backend.FixedWindow, Requests: 10, Window: 24 * time.Hour}
	short := backend.Limit{Algorithm: backend.FixedWindow, Requests: 10, Window: 100 * time.Millisecond}
	clock.Set(backendtest.T0)
	for i := range 100 { // 99 in the main region, the last in the window
		take(t, s, "day"+strconv.Itoa(i), day, 1)
	}
	take(t, s, "short", short, 1) // day99 leaves the window and loses
	if e, d := s.Evictions(), s.Declined(); e != 1 || d != 1 {
		t.Fatalf("Evictions() = %d, Declined() = %d after a new key in a full store, want 1 and 1", e, d)
	}
	clock.Set(backendtest.T0.Add(500 * time.Millisecond)) // short's window has ended
	take(t, s, "new", day, 1)
	if e, d := s.Evictions(), s.Declined(); e != 1 || d != 1 {
		t.Errorf("Evictions() = %d, Declined() = %d after an expired key left the window, want still 1 and 1", e, d)
	}
	if memory.Holds(s, "short") || !memory.Holds(s, "new") || s.Len() != 100 {
		t.Errorf("holds short: %v, new: %v, Len() = %d, want false, true and 100", memory.Holds(s, "short"), memory.Holds(s, "new"), s.Len())
	}
}

// TestCallWithMoreNewKeysThanTheWindow: a call that brings a full shard
// more new keys than its window holds (here 1) keeps the first in the
// window; the others are admitted by the window's rule at once, and,
// asked for less often than the main region's counters, declined: their
// requests are decided on fresh counters that are not kept.
func TestCallWithMoreNewKeysThanTheWindow(t *testing.T) {
	clock := backendtest.NewClock(backendtest.T0)
	s := newStore(t, memory.Options{MaxKeys: 100, Now: clock.Now})
	for range 3 {
		for i := range 100 {
			take(t, s, "k"+strconv.Itoa(i), minute, 1)
		}
	}
	reqs := []backend.Request{
		{Key: "a", Limit: minute, Hits: 1, Group: 0},
		{Key: "b", Limit: minute, Hits: 1, Group: 1},
		{Key: "c", Limit: minute, Hits: 1, Group: 2},
	}
	res := make([]backend.Result, len(reqs))
	if err := s.Take(t.Context(), reqs, res); err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.OverLimit || r.Remaining != 9 {
			t.Errorf("Take(%q) = %+v, want admitted with 9 remaining", reqs[i].Key, r)
		}
	}
	if !memory.Holds(s, "a") || memory.Holds(s, "b") || memory.Holds(s, "c") {
		t.Errorf("holds a, b, c = %v, %v, %v, want true, false, false",
			memory.Holds(s, "a"), memory.Holds(s, "b"), memory.Holds(s, "c"))
	}
	// Declined: k99, pushed out of the window by a and as often asked for
	// as the main region's counters (evicted), then b and c (never kept).
	if d, e := s.Declined(), s.Evictions(); d != 3 || e != 1 {
		t.Errorf("Declined() = %d, Evictions() = %d, want 3 and 1", d, e)
	}
	if got := s.Len(); got != 100 {
		t.Errorf("Len() = %d, want the bound 100", got)
	}
}

// TestNewKeyIsLimitedFromItsFirstCall: in a store full of keys with
// history, a new key gets a counter in the window from its first call, so
// that its sixth call within a minute against a 5/min limit is refused;
// asked for more often than the main region's counters by the time newer
// keys push it out of the window, it takes the place of one and stays
// limited.
func TestNewKeyIsLimitedFromItsFirstCall(t *testing.T) {
	clock := backendtest.NewClock(backendtest.T0)
	s := newStore(t, memory.Options{MaxKeys: 100, Now: clock.Now})
	for range 3 {
		for i := range 100 {
			take(t, s, "k"+strconv.Itoa(i), minute, 1)
		}
	}
	five := backend.Limit{Algorithm: backend.SlidingWindow, Requests: 5, Window: time.Minute}
	var got []bool
	for range 6 {
		got = append(got, take(t, s, "new", five, 1).OverLimit)
	}
	if want := []bool{false, false, false, false, false, true}; !slices.Equal(got, want) {
		t.Errorf("over limit on calls 1 to 6 = %v, want %v", got, want)
	}
	for i := range 10 { // keys seen once push "new" out of the window
		take(t, s, "once"+strconv.Itoa(i), minute, 1)
	}
	if r := take(t, s, "new", five, 1); !r.OverLimit {
		t.Errorf("call 7 admitted after keys seen once came: the counter was evicted")
	}
	// Evicted: k99 (the window's key, asked for as often as the main
	// region's: declined), the main region's counter "new" took the place
	// of, and 9 of the keys seen once (declined).
	if d, e := s.Declined(), s.Evictions(); d != 10 || e != 11 {
		t.Errorf("Declined() = %d, Evictions() = %d, want 10 and 11", d, e)
	}
}

// TestRefusingCountersGoLast: when a full store must evict, it takes a
// counter that is not refusing over one that is, and counts the eviction
// of a refusing counter apart; a new key seen no more often than the
// refusing counters is declined when it leaves the window.
func TestRefusingCountersGoLast(t *testing.T) {
	clock := backendtest.NewClock(backendtest.T0)
	s := newStore(t, memory.Options{MaxKeys: 100, Now: clock.Now})
	one := backend.Limit{Algorithm: backend.FixedWindow, Requests: 1, Window: time.Minute}
	for i := range 10 {
		take(t, s, "refusing"+strconv.Itoa(i), one, 1) // at its limit
	}
	for i := range 90 {
		take(t, s, "open"+strconv.Itoa(i), minute, 1)
	}
	// 50 keys asked for twice, while in the window, take the places of
	// open counters when they leave it (but when a sample finds only
	// refusing ones and new ones seen twice: then they are declined); a
	// sample of 8 of 99 keys is all refusing with a chance of about 1 in
	// 10⁹.
	for i := range 50 {
		take(t, s, "new"+strconv.Itoa(i), minute, 1)
		take(t, s, "new"+strconv.Itoa(i), minute, 1)
	}
	if e := s.Evictions(); e < 40 {
		t.Errorf("Evictions() = %d, want at least 40", e)
	}
	if r := s.RefusingEvictions(); r != 0 {
		t.Errorf("RefusingEvictions() = %d with open counters held, want 0", r)
	}
	for i := range 10 {
		if r := take(t, s, "refusing"+strconv.Itoa(i), one, 1); !r.OverLimit {
			t.Errorf("refusing%d admitted after the new keys came: its counter was evicted", i)
		}
	}

	// A store of refusing counters only (99 in the main region, the last
	// in the window). A store that holds nothing but refusals cannot take
	// a new key without forgetting one: the first new key pushes the
	// window's refusing counter out, asked for no more often than the
	// main region's, and it is evicted. New keys seen once then push
	// each other out of the window, declined, and evict none of the main
	// region's; a key asked for twice while in the window takes the
	// place of one when it leaves, and the metric counts it.
	s = newStore(t, memory.Options{MaxKeys: 100, Now: clock.Now})
	for i := range 100 {
		take(t, s, "refusing"+strconv.Itoa(i), one, 1)
	}
	for i := range 20 {
		take(t, s, "once"+strconv.Itoa(i), minute, 1)
	}
	if d, e, r := s.Declined(), s.Evictions(), s.RefusingEvictions(); d != 20 || e != 20 || r != 1 {
		t.Errorf("after 20 new keys seen once: Declined() = %d, Evictions() = %d, RefusingEvictions() = %d, want 20, 20 and 1", d, e, r)
	}
	take(t, s, "twice", minute, 1)
	take(t, s, "twice", minute, 1)
	take(t, s, "next", minute, 1) // pushes "twice" out of the window
	if d, e, r := s.Declined(), s.Evictions(), s.RefusingEvictions(); d != 21 || e != 22 || r != 2 {
		t.Errorf("after a new key seen twice: Declined() = %d, Evictions() = %d, RefusingEvictions() = %d, want 21, 22 and 2", d, e, r)
	}
	want := `
# HELP ratelimitd_memory_refusing_evictions_total Evicted counters that were refusing: each let a client over its limit start again from zero.
# TYPE ratelimitd_memory_refusing_evictions_total counter
ratelimitd_memory_refusing_evictions_total 2
`
	if err := testutil.CollectAndCompare(s, strings.NewReader(want), "ratelimitd_memory_refusing_evictions_total"); err != nil {
		t.Errorf("metrics: %v", err)
	}
}

// TestRefusingNewKeyStays: a new key that reached its limit in the window
// takes the place of a main region's counter asked for as often that is
// not refusing when it leaves, so that it stays refused.
func TestRefusingNewKeyStays(t *testing.T) {
	clock := backendtest.NewClock(backendtest.T0)
	s := newStore(t, memory.Options{MaxKeys: 100, Now: clock.Now})
	for i := range 100 {
		take(t, s, "k"+strconv.Itoa(i), minute, 1)
	}
	one := backend.Limit{Algorithm: backend.FixedWindow, Requests: 1, Window: time.Minute}
	if r := take(t, s, "abuser", one, 1); r.OverLimit || r.Remaining != 0 { // asked for once, and refusing
		t.Fatalf("abuser's first hit = %+v, want admitted with 0 remaining", r)
	}
	take(t, s, "next", minute, 1) // pushes abuser out of the window
	if r := take(t, s, "abuser", one, 1); !r.OverLimit {
		t.Errorf("abuser admitted after it left the window: its counter was evicted")
	}
	if r := s.RefusingEvictions(); r != 0 {
		t.Errorf("RefusingEvictions() = %d, want 0", r)
	}
}

func TestEvictionTakesTheSoonestToExpire(t *testing.T) {
	// Among counters alike otherwise (none refusing, each seen once), the
	// one that expires soonest goes first: the second-long ones, here,
	// before the day-long ones. A store of 8 keys has 7 in its main
	// region, and samples all of them.
	clock := backendtest.NewClock(backendtest.T0)
	s := newStore(t, memory.Options{MaxKeys: 8, Now: clock.Now})
	day := backend.Limit{Algorithm: backend.FixedWindow, Requests: 10, Window: 24 * time.Hour}
	sec := backend.Limit{Algorithm: backend.FixedWindow, Requests: 10, Window: time.Second}
	for i := range 4 {
		take(t, s, "day"+strconv.Itoa(i), day, 1)
		take(t, s, "sec"+strconv.Itoa(i), sec, 1)
	}
	for i := range 4 { // each asked twice, so that it is kept when it leaves the window
		take(t, s, "more"+strconv.Itoa(i), sec, 0)
		take(t, s, "more"+strconv.Itoa(i), sec, 1)
	}
	// sec3, the window's key when more0 came, declined, and 3 of the
	// main region's counters for more0 to more2.
	if got := s.Evictions(); got != 4 {
		t.Fatalf("Evictions() = %d, want 4", got)
	}
	// One call holds every day key, so that checking one that was evicted
	// cannot evict another.
	reqs := make([]backend.Request, 4)
	res := make([]backend.Result, 4)
	for i := range reqs {
		reqs[i] = backend.Request{Key: "day" + strconv.Itoa(i), Limit: day, Group: i}
	}
	if err := s.Take(t.Context(), reqs, res); err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Remaining != 9 {
			t.Errorf("day%d evicted while second-long counters were held", i)
		}
	}
}

func TestSweeperDropsExpiredKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memory.New(memory.Options{SweepInterval: time.Second})
		defer s.Close()
		take(t, s, "a", backend.Limit{Algorithm: backend.FixedWindow, Requests: 1, Window: time.Second}, 1)
		take(t, s, "b", backend.Limit{Algorithm: backend.FixedWindow, Requests: 1, Window: time.Hour}, 1)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if got := s.Len(); got != 1 {
			t.Errorf("Len() = %d after the second-long window passed, want 1", got)
		}
		// A shard skips its sweep until its soonest counter may have
		// expired: a counter stored after a sweep that found nothing to
		// drop, and expiring before b, is dropped all the same.
		take(t, s, "c", backend.Limit{Algorithm: backend.FixedWindow, Requests: 1, Window: time.Second}, 1)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if got := s.Len(); got != 1 {
			t.Errorf("Len() = %d after c's window passed, want 1", got)
		}
	})
}

func TestBanTouchesNoCounter(t *testing.T) {
	clock := backendtest.NewClock(backendtest.T0)
	s := newStore(t, memory.Options{Now: clock.Now})
	ban := backend.Limit{Algorithm: backend.FixedWindow, Window: time.Minute}
	l := backend.Limit{Algorithm: backend.FixedWindow, Requests: 2, Window: time.Minute}
	take(t, s, "k", l, 1)
	// A ban on the same key (a limit lowered to 0) neither creates nor
	// overwrites a counter.
	reqs := []backend.Request{
		{Key: "banned", Limit: ban, Hits: 1, Group: 0, Mode: backend.Shadow},
		{Key: "k", Limit: ban, Hits: 1, Group: 1, Mode: backend.Shadow},
		{Key: "k", Limit: l, Hits: 1, Group: 2},
	}
	if err := s.Take(t.Context(), reqs, make([]backend.Result, 3)); err != nil {
		t.Fatal(err)
	}
	if got := s.Len(); got != 1 {
		t.Errorf("Len() = %d after bans, want 1 (only k)", got)
	}
	if r := take(t, s, "k", l, 0); r.Remaining != 0 {
		t.Errorf("k remaining = %d, want 0: both hits on k count", r.Remaining)
	}
}

func TestClose(t *testing.T) {
	s := memory.New(memory.Options{})
	if err := s.Close(); err != nil {
		t.Fatalf("Close() error: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close() error: %v", err)
	}
	err := s.Take(t.Context(), []backend.Request{{Key: "a", Limit: minute, Hits: 1}}, make([]backend.Result, 1))
	if !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Take() after Close error = %v, want backend.ErrClosed", err)
	}
}

func TestTakeDoesNotAllocateOnExistingKeys(t *testing.T) {
	s := newStore(t, memory.Options{})
	for _, key := range []string{"short", string(make([]byte, 1000))} {
		reqs := []backend.Request{{Key: key, Limit: minute, Hits: 0}}
		res := make([]backend.Result, 1)
		ctx := t.Context()
		_ = s.Take(ctx, reqs, res)
		if n := testing.AllocsPerRun(100, func() { _ = s.Take(ctx, reqs, res) }); n != 0 {
			t.Errorf("Take(existing key of %d bytes) allocates %v times, want 0", len(key), n)
		}
	}
}

// BenchmarkTake decides one request on one of 1M existing keys: the
// store's hot path. Each iteration builds its key as the engine does, so
// the key is in the CPU cache and the store's own lookups are measured.
// Keys are drawn from three distributions: "hot" cycles through 1,000 of
// the keys (the store's CPU cost, all in cache); "zipf" draws with s = 1.1,
// as traffic with heavy hitters does; "uniform" draws any of the 1M, so
// nearly every lookup misses the CPU caches and the TLB (compare
// BenchmarkMapFloor, a bare map lookup on the same machine).
// Target: ≤ 250 ns/op and 0 allocs/op.
func BenchmarkTake(b *testing.B) {
	const nkeys = 1_000_000
	hot, uniform, zipf := make([]int32, 1000), make([]int32, nkeys), make([]int32, nkeys)
	r := rand.New(rand.NewPCG(1, 2))
	z := rand.NewZipf(rand.New(rand.NewPCG(3, 4)), 1.1, 1, nkeys-1)
	for i := range nkeys {
		uniform[i] = int32(r.IntN(nkeys))
		zipf[i] = int32(z.Uint64())
	}
	for i := range hot {
		hot[i] = uniform[i]
	}
	for _, a := range backend.Algorithms {
		l := backend.Limit{Algorithm: a, Requests: 1 << 30, Window: time.Hour}
		if a == backend.SlidingLog || a == backend.Concurrency {
			l.Requests = backend.MaxSlidingLog
		}
		if a == backend.Concurrency {
			continue // leases that are never given back: see BenchmarkAcquire
		}
		s := memory.New(memory.Options{MaxKeys: 2 * nkeys})
		res := make([]backend.Result, 1)
		var buf []byte
		for i := range nkeys {
			buf = appendKey(buf[:0], i, l)
			_ = s.Take(b.Context(), []backend.Request{{Key: string(buf), Limit: l, Hits: 1}}, res) // every key holds state
		}
		for _, d := range []struct {
			name string
			seq  []int32
		}{{"hot", hot}, {"zipf", zipf}, {"uniform", uniform}} {
			b.Run(a.String()+"/"+d.name+"/serial", func(b *testing.B) {
				b.ReportAllocs()
				benchTake(b, s, l, d.seq, 0, b.Loop)
			})
			b.Run(a.String()+"/"+d.name+"/parallel", func(b *testing.B) {
				b.ReportAllocs()
				var seed atomic.Int64
				b.RunParallel(func(pb *testing.PB) {
					benchTake(b, s, l, d.seq, int(seed.Add(nkeys/7)), pb.Next)
				})
			})
		}
		s.Close()
	}
}

// appendKey appends the key of user i under l, as the engine builds it.
func appendKey(b []byte, i int, l backend.Limit) []byte {
	b = backend.AppendKeyPart(b, "domain")
	b = backend.AppendKeyPart(b, "user")
	b = strconv.AppendInt(append(b, "8:"...), int64(10_000_000+i), 10)
	return backend.AppendKeySuffix(b, l)
}

func benchTake(b *testing.B, s *memory.Store, l backend.Limit, seq []int32, i int, next func() bool) {
	reqs := []backend.Request{{Limit: l, Hits: 1}}
	res := make([]backend.Result, 1)
	ctx := b.Context()
	var buf []byte
	for next() {
		buf = appendKey(buf[:0], int(seq[i%len(seq)]), l)
		reqs[0].Key = unsafe.String(&buf[0], len(buf)) // the store copies nothing it keeps
		i++
		if err := s.Take(ctx, reqs, res); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcquire sets a Concurrency limit's acquire beside a sliding
// window's decision, serially on 1,000 keys in turn, each holding a
// handful of leases of a limit of 100 (the target: an acquire
// costs at most 1.5 times a sliding-window decision). "acquire" takes a
// slot whose lease lapses (the clock moves so that each key holds
// holders leases, one lapsing as the next is taken); "acquire+release"
// takes a slot and gives it back by its lease, two calls an op.
func BenchmarkAcquire(b *testing.B) {
	const (
		nkeys   = 1000
		holders = 5
	)
	w := time.Minute
	// A plain clock: a test Clock's lock would be most of what is measured.
	now := backendtest.T0
	s := memory.New(memory.Options{Now: func() time.Time { return now }})
	defer s.Close()
	ctx := b.Context()
	keys := make([]string, nkeys)
	for _, a := range []backend.Algorithm{backend.SlidingWindow, backend.Concurrency} {
		l := backend.Limit{Algorithm: a, Requests: 100, Window: w}
		var buf []byte
		for i := range keys {
			buf = appendKey(buf[:0], i, l)
			keys[i] = string(buf)
		}
		// A step of the clock per call, so that a key, asked for every
		// nkeys calls, holds holders leases.
		step := w / (nkeys * holders)
		reqs := []backend.Request{{Limit: l, Hits: 1}}
		res := make([]backend.Result, 1)
		i := 0
		take := func() {
			reqs[0].Key, reqs[0].Op, reqs[0].Lease = keys[i%nkeys], backend.Take, 0
			i++
			now = now.Add(step)
			if err := s.Take(ctx, reqs, res); err != nil || res[0].OverLimit {
				b.Fatalf("take: %v, %+v", err, res[0])
			}
		}
		for range nkeys * holders { // every key holds its leases
			take()
		}
		name := "sliding_window"
		if a == backend.Concurrency {
			name = "acquire"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				take()
			}
		})
		if a != backend.Concurrency {
			continue
		}
		b.Run("acquire+release", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				take()
				reqs[0].Op, reqs[0].Lease = backend.GiveBack, res[0].Lease
				if err := s.Take(ctx, reqs, res); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkTakeNewKey decides one request on a key new to a full store of
// 1M keys, each of them asked for once, as the keys of a flood of new
// keys are: the path of every key past the bound (see Options.MaxKeys),
// where BenchmarkTake measures that of keys held. The store's clock
// stands still, so that no counter expires.
func BenchmarkTakeNewKey(b *testing.B) {
	const nkeys = 1_000_000
	l := backend.Limit{Algorithm: backend.SlidingWindow, Requests: 5, Window: time.Minute}
	clock := backendtest.NewClock(backendtest.T0)
	s := memory.New(memory.Options{MaxKeys: nkeys, Now: clock.Now})
	defer s.Close()
	reqs := []backend.Request{{Limit: l, Hits: 1}}
	res := make([]backend.Result, 1)
	ctx := b.Context()
	var buf []byte
	i := 0
	take := func() {
		buf = appendKey(buf[:0], i, l)
		reqs[0].Key = unsafe.String(&buf[0], len(buf))
		i++
		if err := s.Take(ctx, reqs, res); err != nil {
			b.Fatal(err)
		}
	}
	for range nkeys + nkeys/10 { // every shard full
		take()
	}
	b.ReportAllocs()
	for b.Loop() {
		take()
	}
}

// BenchmarkMapFloor is the floor under BenchmarkTake/uniform on this
// machine: a read and a write of a random entry of a bare Go map holding
// 1M entries the size of the store's.
func BenchmarkMapFloor(b *testing.B) {
	const nkeys = 1_000_000
	type entry struct {
		a uint64
		_ [5]uint64 // the rest of a bucket's 48 bytes
	}
	m := make(map[[2]uint64]entry, nkeys)
	for i := range uint64(nkeys) {
		m[[2]uint64{i * 0x9e3779b97f4a7c15, i}] = entry{}
	}
	r := rand.New(rand.NewPCG(1, 2))
	seq := make([]uint64, nkeys)
	for i := range seq {
		seq[i] = r.Uint64N(nkeys)
	}
	i := 0
	for b.Loop() {
		k := seq[i%nkeys]
		key := [2]uint64{k * 0x9e3779b97f4a7c15, k}
		e := m[key]
		e.a++
		m[key] = e
		i++
	}
}

// BenchmarkMemoryPerKey reports the heap a full store takes per counter
// it holds (B/key), the figure for capacity planning: each counter a
// sliding window, under a key of the engine's form, the store filled
// with 10% more keys than MaxKeys so that every shard is full. It also
// reports the share of MaxKeys held when exactly MaxKeys keys, each seen
// once, have come (held-%): shards fill unevenly, and a full one
// declines keys seen once. Run it with -benchtime=1x: each iteration
// fills a store.
func BenchmarkMemoryPerKey(b *testing.B) {
	l := backend.Limit{Algorithm: backend.SlidingWindow, Requests: 5, Window: time.Minute}
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			var perKey, held float64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				s := memory.New(memory.Options{MaxKeys: n})
				reqs := []backend.Request{{Limit: l, Hits: 1}}
				res := make([]backend.Result, 1)
				var buf []byte
				for i := range n + n/10 {
					if i == n {
						held = 100 * float64(s.Len()) / float64(n)
					}
					buf = appendKey(buf[:0], i, l)
					reqs[0].Key = unsafe.String(&buf[0], len(buf))
					if err := s.Take(b.Context(), reqs, res); err != nil {
						b.Fatal(err)
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				perKey = float64(after.HeapAlloc-before.HeapAlloc) / float64(s.Len())
				s.Close()
			}
			b.ReportMetric(perKey, "B/key")
			b.ReportMetric(held, "held-%")
		})
	}
}
