package backendtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ratelimitd/ratelimitd/backend"
)

// NewOverrideStore returns a fresh, empty override store. It should
// register its own cleanup with t.Cleanup.
type NewOverrideStore func(t *testing.T) backend.OverrideStore

// RunOverrides runs the conformance suite of backend.OverrideStore
// against stores made by newStore.
//
// Usage, in a store's tests:
//
//	func TestOverrides(t *testing.T) {
//		backendtest.RunOverrides(t, func(t *testing.T) backend.OverrideStore {
//			s := memory.New(memory.Options{})
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
func RunOverrides(t *testing.T, newStore NewOverrideStore) {
	for _, c := range []struct {
		name string
		f    func(*testing.T, backend.OverrideStore)
	}{
		{"empty", overridesEmpty},
		{"put list delete", overridesPutListDelete},
		{"max", overridesMax},
		{"bytes", overridesBytes},
		{"concurrent puts", overridesConcurrentPuts},
		{"canceled", overridesCanceled},
	} {
		t.Run(c.name, func(t *testing.T) { c.f(t, newStore(t)) })
	}
}

// Put stores rec under id in st with a bound of max, failing t on error,
// and returns the version.
func Put(t *testing.T, st backend.OverrideStore, id, rec string, max int) uint64 {
	t.Helper()
	v, err := st.PutOverride(t.Context(), id, []byte(rec), max)
	if err != nil {
		t.Fatalf("PutOverride(%q, %q, %d) error: %v", id, rec, max, err)
	}
	return v
}

// List returns every record of st, as strings, and the version, failing
// t on error. It asks for version 0 first, and, if st is still at
// version 0, returns no records.
func List(t *testing.T, st backend.OverrideStore) (map[string]string, uint64) {
	t.Helper()
	recs, v, err := st.Overrides(t.Context(), 0)
	if err != nil {
		t.Fatalf("Overrides(0) error: %v", err)
	}
	if v == 0 && recs != nil {
		t.Errorf("Overrides(0) = %d records at version 0, want nil: the version is still 0", len(recs))
	}
	got := make(map[string]string, len(recs))
	for id, rec := range recs {
		got[id] = string(rec)
	}
	return got, v
}

func overridesEmpty(t *testing.T, st backend.OverrideStore) {
	got, v := List(t, st)
	if len(got) != 0 {
		t.Errorf("a fresh store holds %v, want no records", got)
	}
	recs, v2, err := st.Overrides(t.Context(), v)
	if err != nil || recs != nil || v2 != v {
		t.Errorf("Overrides(%d) = %v, %d, %v; want nil, %d, nil", v, recs, v2, err, v)
	}
	found, v3, err := st.DeleteOverride(t.Context(), "none")
	if err != nil || found || v3 != v {
		t.Errorf("DeleteOverride(none) on a fresh store = %v, %d, %v; want false, %d, nil", found, v3, err, v)
	}
}

func overridesPutListDelete(t *testing.T, st backend.OverrideStore) {
	_, v0 := List(t, st)
	seen := map[uint64]string{v0: "the start"}
	change := func(what string, v uint64) {
		t.Helper()
		if prev, ok := seen[v]; ok {
			t.Errorf("%s: version %d, the version of %s already", what, v, prev)
		}
		seen[v] = what
	}
	v1 := Put(t, st, "a", "rec a", 10)
	change("put a", v1)
	if got, v := List(t, st); v != v1 || !cmp.Equal(got, map[string]string{"a": "rec a"}) {
		t.Errorf("after put a: Overrides = %v at %d, want {a: rec a} at %d", got, v, v1)
	}
	recs, v, err := st.Overrides(t.Context(), v1)
	if err != nil || recs != nil || v != v1 {
		t.Errorf("Overrides(%d) unchanged = %v, %d, %v; want nil, %d, nil", v1, recs, v, err, v1)
	}
	v2 := Put(t, st, "a", "rec a'", 10)
	change("replace a", v2)
	v3 := Put(t, st, "b", "rec b", 10)
	change("put b", v3)
	recs, v, err = st.Overrides(t.Context(), v1)
	if err != nil || v != v3 {
		t.Fatalf("Overrides(%d) = %d, %v; want version %d", v1, v, err, v3)
	}
	if got := asStrings(recs); !cmp.Equal(got, map[string]string{"a": "rec a'", "b": "rec b"}) {
		t.Errorf("after replace a, put b: Overrides = %v, want {a: rec a', b: rec b}", got)
	}
	found, v4, err := st.DeleteOverride(t.Context(), "a")
	if err != nil || !found {
		t.Fatalf("DeleteOverride(a) = %v, %v; want true, nil", found, err)
	}
	change("delete a", v4)
	found, v5, err := st.DeleteOverride(t.Context(), "a")
	if err != nil || found || v5 != v4 {
		t.Errorf("DeleteOverride(a) again = %v, %d, %v; want false, %d (unchanged), nil", found, v5, err, v4)
	}
	if got, v := List(t, st); v != v4 || !cmp.Equal(got, map[string]string{"b": "rec b"}) {
		t.Errorf("after delete a: Overrides = %v at %d, want {b: rec b} at %d", got, v, v4)
	}
	found, v6, err := st.DeleteOverride(t.Context(), "b")
	if err != nil || !found {
		t.Fatalf("DeleteOverride(b) = %v, %v; want true, nil", found, err)
	}
	change("delete b", v6)
	recs, v, err = st.Overrides(t.Context(), v4)
	if err != nil || v != v6 || recs == nil || len(recs) != 0 {
		t.Errorf("Overrides(%d) after the last delete = %v, %d, %v; want an empty non-nil set at %d", v4, recs, v, err, v6)
	}
}

func overridesMax(t *testing.T, st backend.OverrideStore) {
	Put(t, st, "a", "1", 2)
	v := Put(t, st, "b", "1", 2)
	if got, err := st.PutOverride(t.Context(), "c", []byte("1"), 2); !errors.Is(err, backend.ErrTooManyOverrides) {
		t.Errorf("PutOverride(c) on 2 records of at most 2 = %d, %v; want ErrTooManyOverrides", got, err)
	}
	if got, err := st.PutOverride(t.Context(), "d", []byte("1"), 0); !errors.Is(err, backend.ErrTooManyOverrides) {
		t.Errorf("PutOverride(d) with max 0 = %d, %v; want ErrTooManyOverrides", got, err)
	}
	if got, gv := List(t, st); gv != v || !cmp.Equal(got, map[string]string{"a": "1", "b": "1"}) {
		t.Errorf("after refused puts: Overrides = %v at %d, want {a, b} unchanged at %d", got, gv, v)
	}
	// A record's replacement is no new record: it passes at the bound,
	// and under a lower one.
	Put(t, st, "a", "2", 2)
	Put(t, st, "b", "2", 1)
	if got, _ := List(t, st); !cmp.Equal(got, map[string]string{"a": "2", "b": "2"}) {
		t.Errorf("after replacements at the bound: Overrides = %v, want {a: 2, b: 2}", got)
	}
	if _, _, err := st.DeleteOverride(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	Put(t, st, "c", "1", 2)
	if got, _ := List(t, st); !cmp.Equal(got, map[string]string{"b": "2", "c": "1"}) {
		t.Errorf("after a delete made room: Overrides = %v, want {b: 2, c: 1}", got)
	}
}

func overridesBytes(t *testing.T, st backend.OverrideStore) {
	rec := []byte("\x00\xff{\"k\":\"é\"}\r\n")
	want := string(rec)
	id := "edge\x00api_key=k-1\xff"
	if _, err := st.PutOverride(t.Context(), id, rec, 10); err != nil {
		t.Fatal(err)
	}
	rec[0] = 'X' // the store keeps its own copy
	recs, _, err := st.Overrides(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(recs[id]); got != want || len(recs) != 1 {
		t.Errorf("Overrides()[%q] = %q (of %d records), want %q", id, got, len(recs), want)
	}
	recs[id][0] = 'Y' // the caller's copy
	recs, _, err = st.Overrides(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(recs[id]); got != want {
		t.Errorf("Overrides()[%q] after the caller changed its copy = %q, want %q", id, got, want)
	}
	found, _, err := st.DeleteOverride(t.Context(), id)
	if err != nil || !found {
		t.Errorf("DeleteOverride(%q) = %v, %v; want true, nil", id, found, err)
	}
}

// overridesConcurrentPuts: puts of distinct ids at once never store more
// than the bound, and each is stored or refused whole.
func overridesConcurrentPuts(t *testing.T, st backend.OverrideStore) {
	const callers, max = 32, 10
	var stored, refused atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for i := range callers {
		wg.Go(func() {
			_, err := st.PutOverride(t.Context(), fmt.Sprint("id", i), []byte("r"), max)
			switch {
			case err == nil:
				stored.Add(1)
			case errors.Is(err, backend.ErrTooManyOverrides):
				refused.Add(1)
			default:
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got, _ := List(t, st)
	if stored.Load() != max || refused.Load() != callers-max || len(got) != max {
		t.Errorf("%d puts at once, at most %d: %d stored, %d refused, %d held; want %d, %d, %d",
			callers, max, stored.Load(), refused.Load(), len(got), max, callers-max, max)
	}
}

func overridesCanceled(t *testing.T, st backend.OverrideStore) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := st.PutOverride(ctx, "a", []byte("r"), 10); !errors.Is(err, context.Canceled) {
		t.Errorf("PutOverride on a canceled context: %v, want context.Canceled", err)
	}
	if _, _, err := st.DeleteOverride(ctx, "a"); !errors.Is(err, context.Canceled) {
		t.Errorf("DeleteOverride on a canceled context: %v, want context.Canceled", err)
	}
	if _, _, err := st.Overrides(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Overrides on a canceled context: %v, want context.Canceled", err)
	}
	if got, _ := List(t, st); len(got) != 0 {
		t.Errorf("after calls on a canceled context: Overrides = %v, want none", got)
	}
}

func asStrings(recs map[string][]byte) map[string]string {
	m := make(map[string]string, len(recs))
	for id, rec := range recs {
		m[id] = string(rec)
	}
	return m
}

// RunReset runs the conformance suite of backend.Resetter against stores
// made by newStore, which must implement it.
func RunReset(t *testing.T, newStore NewStore) {
	resetter := func(t *testing.T, clock *Clock) (backend.Store, backend.Resetter) {
		st := newStore(t, clock.Now)
		r, ok := st.(backend.Resetter)
		if !ok {
			t.Fatalf("%T is no backend.Resetter", st)
		}
		return st, r
	}
	reset := func(t *testing.T, r backend.Resetter, reqs ...backend.Request) {
		t.Helper()
		if err := r.Reset(t.Context(), reqs); err != nil {
			t.Fatalf("Reset(%d requests) error: %v", len(reqs), err)
		}
	}
	for _, a := range backend.Algorithms {
		t.Run("full again/"+a.String(), func(t *testing.T) {
			clock := NewClock(T0)
			st, r := resetter(t, clock)
			l := backend.Limit{Algorithm: a, Requests: 10, Window: time.Minute}
			req := backend.Request{Key: CounterKey("k", l), Tag: "k", Limit: l, Hits: 10}
			other := backend.Request{Key: CounterKey("other", l), Tag: "other", Limit: l, Hits: 4}
			take(t, st, other)
			if a == backend.SlidingWindow {
				// Counts in two windows: 5 in the previous one, which
				// weighs 59/60 a second into the next, and 4 in the
				// current one. A reset must forget both.
				take(t, st, backend.Request{Key: req.Key, Tag: req.Tag, Limit: l, Hits: 5})
				clock.Set(T0.Add(l.Window + time.Second))
				req.Hits = 4
			}
			take(t, st, req)
			before := take1(t, st, backend.Request{Key: req.Key, Tag: req.Tag, Limit: l})
			if before.Remaining > 1 {
				t.Fatalf("before the reset: remaining %d, want at most 1 (the test counts nothing)", before.Remaining)
			}
			reset(t, r, req)
			res := take1(t, st, backend.Request{Key: req.Key, Tag: req.Tag, Limit: l})
			if res.OverLimit || res.Remaining != l.Capacity() {
				t.Errorf("after Reset: %+v, want remaining %d (a fresh counter)", res, l.Capacity())
			}
			res = take1(t, st, backend.Request{Key: req.Key, Tag: req.Tag, Limit: l, Hits: l.Capacity()})
			if res.OverLimit || res.Remaining != 0 {
				t.Errorf("a full take after Reset: %+v, want admitted, remaining 0", res)
			}
			if got := take1(t, st, backend.Request{Key: other.Key, Tag: other.Tag, Limit: l}).Remaining; got >= l.Capacity() {
				t.Errorf("another key's remaining after Reset = %d, want less than %d: Reset forgot it too", got, l.Capacity())
			}
		})
	}
	t.Run("several keys", func(t *testing.T) {
		clock := NewClock(T0)
		st, r := resetter(t, clock)
		l := backend.Limit{Algorithm: backend.FixedWindow, Requests: 5, Window: time.Hour}
		var reqs []backend.Request
		for i := range 40 {
			k := fmt.Sprint("k", i)
			reqs = append(reqs, backend.Request{Key: CounterKey(k, l), Tag: k, Limit: l, Hits: 5})
		}
		kept := backend.Request{Key: CounterKey("kept", l), Tag: "kept", Limit: l, Hits: 3}
		for _, req := range append(reqs, kept) {
			take(t, st, req)
		}
		reset(t, r, reqs...)
		for _, req := range reqs {
			if got := take1(t, st, backend.Request{Key: req.Key, Tag: req.Tag, Limit: l}).Remaining; got != 5 {
				t.Errorf("remaining on %q after Reset = %d, want 5", req.Key, got)
			}
		}
		if got := take1(t, st, backend.Request{Key: kept.Key, Tag: kept.Tag, Limit: l}).Remaining; got != 2 {
			t.Errorf("remaining on %q, not reset, = %d, want 2", kept.Key, got)
		}
	})
	t.Run("never counted", func(t *testing.T) {
		st, r := resetter(t, NewClock(T0))
		l := backend.Limit{Algorithm: backend.TokenBucket, Requests: 5, Window: time.Second}
		reset(t, r, backend.Request{Key: CounterKey("new", l), Limit: l}, backend.Request{Key: CounterKey("ban", l), Limit: backend.Limit{Window: time.Second}})
		reset(t, r)
		if got := remaining(t, st, CounterKey("new", l), l); got != 5 {
			t.Errorf("remaining after Reset of a key never counted = %d, want 5", got)
		}
	})
	t.Run("canceled", func(t *testing.T) {
		st, r := resetter(t, NewClock(T0))
		l := backend.Limit{Algorithm: backend.FixedWindow, Requests: 5, Window: time.Hour}
		req := backend.Request{Key: CounterKey("k", l), Limit: l, Hits: 5}
		take(t, st, req)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := r.Reset(ctx, []backend.Request{req}); !errors.Is(err, context.Canceled) {
			t.Errorf("Reset on a canceled context: %v, want context.Canceled", err)
		}
		if got := remaining(t, st, req.Key, l); got != 0 {
			t.Errorf("remaining after a canceled Reset = %d, want 0 (nothing reset)", got)
		}
	})
}

// CounterKey returns the counter key of a descriptor of domain "d" with
// one entry, name = value v, under l, as the engine makes them.
func CounterKey(v string, l backend.Limit) string {
	var b []byte
	b = backend.AppendKeyPart(b, "d")
	b = backend.AppendKeyPart(b, "name")
	b = backend.AppendKeyPart(b, v)
	return string(backend.AppendKeySuffix(b, l))
}
