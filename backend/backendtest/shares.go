package backendtest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ratelimitd/ratelimitd/backend"
)

// NewShareStore returns a fresh, empty share store that reads the time
// from now. It should register its own cleanup with t.Cleanup.
type NewShareStore func(t *testing.T, now func() time.Time) backend.ShareStore

// RunShares runs the conformance suite of backend.ShareStore against
// stores made by newStore.
//
// Usage, in a store's tests:
//
//	func TestShares(t *testing.T) {
//		backendtest.RunShares(t, func(t *testing.T, now func() time.Time) backend.ShareStore {
//			s := memory.New(memory.Options{Now: now})
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
func RunShares(t *testing.T, newStore NewShareStore) {
	for _, c := range []struct {
		name string
		f    func(*testing.T, NewShareStore)
	}{
		{"grant", sharesGrant},
		{"demands", sharesDemands},
		{"expiry", sharesExpiry},
		{"zero TTL", sharesZeroTTL},
		{"in order", sharesInOrder},
		{"many buckets", sharesManyBuckets},
		{"empty", sharesEmpty},
		{"errors", sharesErrors},
		{"concurrency", sharesConcurrency},
		{"watch", sharesWatch},
	} {
		t.Run(c.name, func(t *testing.T) { c.f(t, newStore) })
	}
}

// share returns a request of replica on bucket for want of limit 10,
// standing a minute, with demands.
func share(bucket, replica string, want float64, demands ...float64) backend.ShareRequest {
	return backend.ShareRequest{Bucket: bucket, Replica: replica, Limit: 10, Want: want, Demands: demands, TTL: time.Minute}
}

// exchange runs one ExchangeShares call of reqs and returns its results.
func exchange(t *testing.T, st backend.ShareStore, reqs ...backend.ShareRequest) []backend.ShareResult {
	t.Helper()
	res := make([]backend.ShareResult, len(reqs))
	if err := st.ExchangeShares(t.Context(), reqs, res); err != nil {
		t.Fatalf("ExchangeShares(%d requests) error: %v", len(reqs), err)
	}
	return res
}

// granted returns the grants of res.
func granted(res []backend.ShareResult) []float64 {
	g := make([]float64, len(res))
	for i := range res {
		g[i] = res[i].Granted
	}
	return g
}

// sorted returns a sorted copy of v, never nil, for comparing Others,
// which come in no particular order.
func sorted(v []float64) []float64 {
	v = append([]float64{}, v...)
	slices.Sort(v)
	return v
}

// sharesGrant: each grant is min(Want, Limit − the others' grants), never
// negative, and a replica's own entry never counts against it.
func sharesGrant(t *testing.T, newStore NewShareStore) {
	st := newStore(t, NewClock(T0).Now)
	steps := []struct {
		replica    string
		want, took float64
	}{
		{"r1", 6, 6},
		{"r2", 6, 4},     // 10 − 6
		{"r3", 6, 0},     // nothing left
		{"r1", 6, 6},     // its own 6 does not count: 10 − 4 − 0
		{"r1", 2, 2},     // a lower want gives back the rest
		{"r3", 6, 4},     // 10 − 2 − 4
		{"r2", 9, 4},     // 10 − 2 − 4
		{"r1", 0.5, 0.5}, // fractions stay fractions
		{"r4", 3, 1.5},   // 10 − 0.5 − 4 − 4
	}
	for i, s := range steps {
		if got := exchange(t, st, share("b", s.replica, s.want))[0].Granted; got != s.took {
			t.Fatalf("step %d: %s wants %v: granted %v, want %v", i, s.replica, s.want, got, s.took)
		}
	}
	// Another bucket is another share.
	if got := exchange(t, st, share("c", "r4", 10))[0].Granted; got != 10 {
		t.Errorf("r4 wants 10 of a fresh bucket: granted %v, want 10", got)
	}
}

// sharesDemands: a replica gets the other entries' demands (+Inf
// included), not its own, appended to the slice it passes; the store
// keeps a copy of the demands.
func sharesDemands(t *testing.T, newStore NewShareStore) {
	st := newStore(t, NewClock(T0).Now)
	inf := math.Inf(1)
	mine := []float64{1, inf, 0.25}
	exchange(t, st, share("b", "r1", 5, mine...))
	mine[0] = 99 // the store kept the values, not the slice
	if got := exchange(t, st, share("b", "r2", 5, 2))[0].Others; !cmp.Equal(sorted(got), []float64{0.25, 1, inf}) {
		t.Errorf("r2's Others = %v, want r1's demands [0.25 1 +Inf]", got)
	}
	if got := exchange(t, st, share("b", "r2", 5, 3))[0].Others; !cmp.Equal(sorted(got), []float64{0.25, 1, inf}) {
		t.Errorf("r2's Others again = %v, want r1's demands [0.25 1 +Inf], without r2's own", got)
	}
	exchange(t, st, share("b", "r3", 5)) // no demands: an entry with none
	if got := exchange(t, st, share("b", "r1", 5))[0].Others; !cmp.Equal(sorted(got), []float64{3}) {
		t.Errorf("r1's Others = %v, want r2's latest demands [3]", got)
	}

	// Others is appended to the slice passed in res.
	res := []backend.ShareResult{{Others: append(make([]float64, 0, 8), -1)}}
	if err := st.ExchangeShares(t.Context(), []backend.ShareRequest{share("b", "r3", 5)}, res); err != nil {
		t.Fatal(err)
	}
	if got := res[0].Others; !cmp.Equal(got, []float64{-1, 3}) {
		t.Errorf("Others passed as [-1] = %v, want -1 then r2's demands [3] (r1's entry now has none)", got)
	}
}

// sharesExpiry: an entry stands for its TTL on the store's clock (the
// others are told how long: OthersExpire), and is
// gone (its grant and its demands) from then on.
func sharesExpiry(t *testing.T, newStore NewShareStore) {
	clock := NewClock(T0)
	st := newStore(t, clock.Now)
	r1 := share("b", "r1", 6, 7)
	r1.TTL = 10 * s
	exchange(t, st, r1)
	clock.Set(T0.Add(9 * s))
	if got := exchange(t, st, share("b", "r2", 10)); got[0].Granted != 4 || !cmp.Equal(got[0].Others, []float64{7}) || got[0].OthersExpire != s {
		t.Errorf("r2 at 9 s, before r1's entry expires: granted %v, Others %v, OthersExpire %v; want 4, [7], 1s",
			got[0].Granted, got[0].Others, got[0].OthersExpire)
	}
	clock.Set(T0.Add(10 * s))
	if got := exchange(t, st, share("b", "r2", 10)); got[0].Granted != 10 || len(got[0].Others) != 0 || got[0].OthersExpire != 0 {
		t.Errorf("r2 at 10 s, when r1's entry expires: granted %v, Others %v, OthersExpire %v; want 10, none, 0",
			got[0].Granted, got[0].Others, got[0].OthersExpire)
	}
	// r2's own entry (a minute from 10 s) expires too, and r1 then finds
	// the whole limit.
	clock.Set(T0.Add(70 * s))
	if got := exchange(t, st, share("b", "r1", 10)); got[0].Granted != 10 || len(got[0].Others) != 0 {
		t.Errorf("r1 at 70 s, when r2's entry expires: granted %v, Others %v; want 10, none", got[0].Granted, got[0].Others)
	}
	// An entry refreshed before it expires stands a TTL from its refresh.
	clock.Set(T0.Add(120 * s))
	if got := exchange(t, st, share("b", "r2", 10))[0].Granted; got != 0 {
		t.Errorf("r2 at 120 s, while r1's refreshed entry stands: granted %v, want 0", got)
	}
}

// sharesZeroTTL: a request with a zero TTL removes its replica's entry
// and grants nothing, but still reports the others' demands.
func sharesZeroTTL(t *testing.T, newStore NewShareStore) {
	st := newStore(t, NewClock(T0).Now)
	exchange(t, st, share("b", "r1", 6, 1), share("b", "r2", 4, 2))
	gone := share("b", "r1", 6, 1)
	gone.TTL = 0
	if got := exchange(t, st, gone)[0]; got.Granted != 0 || !cmp.Equal(got.Others, []float64{2}) {
		t.Errorf("r1 with a zero TTL: granted %v, Others %v; want 0, r2's [2]", got.Granted, got.Others)
	}
	if got := exchange(t, st, share("b", "r3", 10))[0]; got.Granted != 6 || !cmp.Equal(got.Others, []float64{2}) {
		t.Errorf("r3 after r1 left: granted %v, Others %v; want 6, r2's [2] only", got.Granted, got.Others)
	}
	// Removing an entry that is not there changes nothing.
	none := share("b", "r4", 10)
	none.TTL = 0
	if got := exchange(t, st, none)[0].Granted; got != 0 {
		t.Errorf("r4, absent, with a zero TTL: granted %v, want 0", got)
	}
	if got := exchange(t, st, share("b", "r5", 10))[0].Granted; got != 0 {
		t.Errorf("r5 with r2 (4) and r3 (6) standing: granted %v, want 0", got)
	}
}

// sharesInOrder: requests on one bucket within a call are applied in
// order, each seeing the entries of those before it.
func sharesInOrder(t *testing.T, newStore NewShareStore) {
	st := newStore(t, NewClock(T0).Now)
	res := exchange(t, st, share("b", "r1", 6, 1), share("b", "r2", 6, 2), share("b", "r1", 1, 3), share("b", "r3", 9))
	if got, want := granted(res), []float64{6, 4, 1, 5}; !cmp.Equal(got, want) {
		t.Errorf("grants of one call [r1 6, r2 6, r1 1, r3 9] = %v, want %v", got, want)
	}
	if got := res[1].Others; !cmp.Equal(got, []float64{1}) {
		t.Errorf("r2's Others = %v, want r1's first demands [1]", got)
	}
	if got := sorted(res[3].Others); !cmp.Equal(got, []float64{2, 3}) {
		t.Errorf("r3's Others = %v, want r1's latest and r2's demands [2 3]", got)
	}
	gone := share("b", "r3", 9)
	gone.TTL = 0
	res = exchange(t, st, gone, share("b", "r4", 9))
	if got, want := granted(res), []float64{0, 5}; !cmp.Equal(got, want) {
		t.Errorf("grants of one call [r3 leaves, r4 9] = %v, want %v", got, want)
	}
}

// sharesManyBuckets: one call over many buckets exchanges on each, apart.
func sharesManyBuckets(t *testing.T, newStore NewShareStore) {
	st := newStore(t, NewClock(T0).Now)
	const n = 200
	reqs := make([]backend.ShareRequest, n)
	for i := range reqs {
		reqs[i] = share(fmt.Sprintf("bucket-%d", i), "r1", float64(i%11), float64(i))
	}
	exchange(t, st, reqs...)
	for i := range reqs {
		reqs[i] = share(fmt.Sprintf("bucket-%d", i), "r2", 10)
	}
	res := exchange(t, st, reqs...)
	for i := range res {
		want := 10 - float64(i%11)
		if res[i].Granted != want || !cmp.Equal(res[i].Others, []float64{float64(i)}) {
			t.Fatalf("bucket-%d: r2 granted %v, Others %v; want %v, [%d]", i, res[i].Granted, res[i].Others, want, i)
		}
	}
}

// sharesEmpty: a call without requests succeeds.
func sharesEmpty(t *testing.T, newStore NewShareStore) {
	st := newStore(t, NewClock(T0).Now)
	if err := st.ExchangeShares(t.Context(), nil, nil); err != nil {
		t.Errorf("ExchangeShares(no requests) error: %v", err)
	}
}

// sharesErrors: a call whose context has ended, or whose results do not
// match its requests, fails.
func sharesErrors(t *testing.T, newStore NewShareStore) {
	st := newStore(t, NewClock(T0).Now)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	res := make([]backend.ShareResult, 1)
	if err := st.ExchangeShares(ctx, []backend.ShareRequest{share("b", "r1", 1)}, res); err == nil {
		t.Error("ExchangeShares with a cancelled context: no error")
	}
	if err := st.ExchangeShares(t.Context(), []backend.ShareRequest{share("b", "r1", 1)}, nil); err == nil {
		t.Error("ExchangeShares with no room for the result: no error")
	}
}

// sharesConcurrency: replicas exchanging at once on one bucket, with
// wants that change at every round, never hold grants that add up past
// the limit. After each round (every replica's call answered), the
// latest grant of each replica is its entry in the store.
func sharesConcurrency(t *testing.T, newStore NewShareStore) {
	const (
		replicas = 12 // 3 replicas' worth of 4 goroutines each
		rounds   = 40
		limit    = 100
	)
	st := newStore(t, NewClock(T0).Now)
	latest := make([]float64, replicas)
	total := 0.0
	for round := range rounds {
		var wg sync.WaitGroup
		errs := make([]error, replicas)
		for r := range replicas {
			wg.Go(func() {
				req := backend.ShareRequest{
					Bucket: "b", Replica: fmt.Sprintf("r%d", r), Limit: limit,
					Want: float64(rand.IntN(limit + 1)), Demands: []float64{float64(r)}, TTL: time.Hour,
				}
				if rand.IntN(10) == 0 {
					req.TTL = 0 // leaves, and comes back at a later round
				}
				res := make([]backend.ShareResult, 1)
				if errs[r] = st.ExchangeShares(t.Context(), []backend.ShareRequest{req}, res); errs[r] == nil {
					latest[r] = res[0].Granted
					if res[0].Granted < 0 || res[0].Granted > req.Want {
						errs[r] = fmt.Errorf("replica %d wanted %v: granted %v", r, req.Want, res[0].Granted)
					}
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		sum := 0.0
		for _, g := range latest {
			sum += g
		}
		if sum > limit {
			t.Fatalf("round %d: the replicas' latest grants %v add up to %v, past the limit %d", round, latest, sum, limit)
		}
		total += sum
	}
	if total == 0 {
		t.Errorf("%d rounds of %d replicas: nothing granted", rounds, replicas)
	}
}

// watcher collects what WatchShares tells one replica.
type watcher struct {
	ch chan string
}

// watch has replica watch st until the test ends, and waits for the
// first notification, "", which tells that it watches.
func watch(t *testing.T, st backend.ShareStore, replica string) *watcher {
	t.Helper()
	w := &watcher{ch: make(chan string, 100)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- st.WatchShares(ctx, replica, func(bucket string) {
			select {
			case w.ch <- bucket:
			default:
				t.Errorf("%s: more than 100 notifications unread", replica)
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchShares(%s) returned %v when its context ended, want nil", replica, err)
		}
	})
	if got := w.next(t); got != "" {
		t.Fatalf("%s: first notification %q, want \"\" (watching)", replica, got)
	}
	return w
}

// next returns the next notification; a minute without one fails the
// test (a bound against hanging, not a timing assertion).
func (w *watcher) next(t *testing.T) string {
	t.Helper()
	select {
	case b := <-w.ch:
		return b
	case <-time.After(time.Minute):
		t.Fatal("no notification within a minute")
		return ""
	}
}

// sharesWatch: an exchange that changes a replica's entry (adds it,
// changes its grant or demands, makes it expire sooner, removes it)
// notifies the other replicas
// with an entry on the bucket, not itself; one that leaves it as it was
// notifies nobody. Notifications on one bucket come in order, so the
// test tells an unchanged renewal by the change sent after it.
func sharesWatch(t *testing.T, newStore NewShareStore) {
	st := newStore(t, NewClock(T0).Now)
	a, b := watch(t, st, "a"), watch(t, st, "b")
	bucket := "edge/\x00k=v\xff" // any bytes
	exchange(t, st, share(bucket, "a", 4, 1))
	exchange(t, st, share(bucket, "b", 4, 2)) // b joins: a hears of it
	if got := a.next(t); got != bucket {
		t.Fatalf("a after b joined: %q, want %q", got, bucket)
	}
	exchange(t, st, share(bucket, "b", 4, 2)) // the same entry: nobody hears
	exchange(t, st, share(bucket, "b", 4, 3)) // other demands: a hears once
	if got := a.next(t); got != bucket {
		t.Fatalf("a after b's demands changed: %q, want %q", got, bucket)
	}
	exchange(t, st, share(bucket, "a", 7, 1)) // a's grant changes (4 → 6): b hears
	if got := b.next(t); got != bucket {
		t.Fatalf("b after a's grant changed: %q, want %q", got, bucket)
	}
	shorter := share(bucket, "b", 4, 3)
	shorter.TTL = time.Second // b's entry expires sooner: a hears
	exchange(t, st, shorter)
	if got := a.next(t); got != bucket {
		t.Fatalf("a after b's entry was made to expire sooner: %q, want %q", got, bucket)
	}
	exchange(t, st, backend.ShareRequest{Bucket: bucket, Replica: "b", Limit: 10}) // b leaves: a hears
	if got := a.next(t); got != bucket {
		t.Fatalf("a after b left: %q, want %q", got, bucket)
	}
	exchange(t, st, share(bucket, "a", 9, 5)) // alone: nobody hears
	exchange(t, st, share("other", "b", 1, 1))
	exchange(t, st, share("other", "a", 1, 1)) // the marker: b hears
	if got := b.next(t); got != "other" {
		t.Fatalf("b after a's marker: %q, want \"other\" (a's exchanges alone on %q told b)", got, bucket)
	}
	select {
	case got := <-a.ch:
		t.Errorf("a heard %q of its own exchanges or unchanged entries", got)
	case got := <-b.ch:
		t.Errorf("b heard %q after the marker", got)
	default:
	}
}
