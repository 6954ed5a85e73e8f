package redis_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/backendtest"
	"github.com/ratelimitd/ratelimitd/backend/redis"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// overridesConformance runs backendtest.RunOverrides and RunReset with
// every store on a fresh prefix of one Redis deployment.
func overridesConformance(t *testing.T, url string, opts redis.Options) {
	client := newClient(t, url)
	opts.Timeout = 2 * time.Second // -race on a shared machine
	t.Run("overrides", func(t *testing.T) {
		backendtest.RunOverrides(t, func(t *testing.T) backend.OverrideStore {
			o := opts
			o.Prefix = t.Name() + ":"
			return newStore(t, client, o)
		})
	})
	t.Run("reset", func(t *testing.T) {
		backendtest.RunReset(t, func(t *testing.T, now func() time.Time) backend.Store {
			o := opts
			o.Prefix = t.Name() + ":"
			o.Now = now
			return newStore(t, client, o)
		})
	})
}

func TestOverridesStandalone(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	overridesConformance(t, "redis://"+srv.Addr, redis.Options{})
}

func TestOverridesCluster(t *testing.T) {
	redistest.Require(t)
	c := redistest.StartCluster(t, 3)
	// No local cache, as in TestConformanceCluster: the suite's clock
	// stands still.
	overridesConformance(t, c.URL(), redis.Options{LocalCache: -1})
}

func TestOverridesSentinel(t *testing.T) {
	redistest.Require(t)
	overridesConformance(t, redistest.StartSentinel(t).URL(), redis.Options{})
}

// TestOverridesShared: overrides are in Redis, under the store's prefix:
// a second store on the same Redis (another replica) sees a put, a new
// store (a restarted daemon) finds them, a store of another prefix does
// not; the set is two keys, without a TTL.
func TestOverridesShared(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	url := "redis://" + srv.Addr
	opts := redis.Options{Prefix: "p:", Timeout: 2 * time.Second}
	a := newStore(t, newClient(t, url), opts)
	b := newStore(t, newClient(t, url), opts)
	_, v0 := backendtest.List(t, b)
	v1 := backendtest.Put(t, a, "edge/k-1", "raise", 10)
	recs, v, err := b.Overrides(t.Context(), v0)
	if err != nil || v != v1 || string(recs["edge/k-1"]) != "raise" || len(recs) != 1 {
		t.Errorf("the other store's Overrides(%d) = %q, %d, %v; want {edge/k-1: raise}, %d", v0, recs, v, err, v1)
	}
	if recs, v, err := b.Overrides(t.Context(), v1); err != nil || recs != nil || v != v1 {
		t.Errorf("the other store's Overrides(%d) = %q, %d, %v; want nil, %d (unchanged)", v1, recs, v, err, v1)
	}
	keys := rdb.Keys(t.Context(), "*").Val()
	slices.Sort(keys)
	if want := []string{"p:{overrides}:records", "p:{overrides}:version"}; !slices.Equal(keys, want) {
		t.Errorf("keys in Redis = %q, want %q", keys, want)
	}
	for _, k := range keys {
		if ttl := rdb.PTTL(t.Context(), k).Val(); ttl != -1 {
			t.Errorf("PTTL(%s) = %v, want none (-1)", k, ttl)
		}
	}

	a.Close()
	b.Close()
	restarted := newStore(t, newClient(t, url), opts)
	if got, v := backendtest.List(t, restarted); v != v1 || got["edge/k-1"] != "raise" || len(got) != 1 {
		t.Errorf("a new store's Overrides = %q at %d, want {edge/k-1: raise} at %d", got, v, v1)
	}
	other := newStore(t, newClient(t, url), redis.Options{Prefix: "q:", Timeout: 2 * time.Second})
	if got, _ := backendtest.List(t, other); len(got) != 0 {
		t.Errorf("a store of another prefix sees %q, want nothing", got)
	}
}

// TestOverridesFlushed: a set lost in Redis (FLUSHALL) starts again past
// every version it had, so that a replica polling with the last version
// it saw never takes the new set for the old one.
func TestOverridesFlushed(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	s := newStore(t, newClient(t, "redis://"+srv.Addr), redis.Options{Timeout: 2 * time.Second})
	var seen uint64
	for range 3 {
		seen = backendtest.Put(t, s, "a", "1", 10)
	}
	if err := srv.Client(t).FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	recs, v, err := s.Overrides(t.Context(), seen)
	if err != nil || recs == nil || len(recs) != 0 {
		t.Errorf("Overrides(%d) after FLUSHALL = %q, %d, %v; want an empty set", seen, recs, v, err)
	}
	for range 3 {
		if v := backendtest.Put(t, s, "b", "1", 10); v <= seen {
			t.Errorf("a put after FLUSHALL made version %d, want past %d, the last version before", v, seen)
		}
	}
}

// TestOverridesCluster: the two keys share one slot, and a Cluster whose
// slot moves keeps serving them.
func TestOverridesClusterSlot(t *testing.T) {
	redistest.Require(t)
	c := redistest.StartCluster(t, 3)
	s := newStore(t, newClient(t, c.URL()), redis.Options{Timeout: 2 * time.Second})
	v := backendtest.Put(t, s, "a", "1", 10)
	records, version := "ratelimitd:{overrides}:records", "ratelimitd:{overrides}:version"
	if c.Slot(t, records) != c.Slot(t, version) {
		t.Errorf("slots of %s and %s differ", records, version)
	}
	if keys := c.Keys(t, "ratelimitd:*"); len(keys) != 2 {
		t.Errorf("keys on the Cluster = %q, want %s and %s", keys, records, version)
	}
	owner := c.NodeForKey(t, records)
	var to *redistest.Server
	for _, n := range c.Nodes {
		if n != owner {
			to = n
			break
		}
	}
	c.MoveSlot(t, c.Slot(t, records), to)
	if got, gv := backendtest.List(t, s); gv != v || got["a"] != "1" {
		t.Errorf("after the slot moved: Overrides = %q at %d, want {a: 1} at %d", got, gv, v)
	}
}

// TestOverridesRedisDown: with Redis gone, every call fails (the caller
// keeps what it last saw), then, once the breaker is open, fails with
// backend.ErrUnavailable.
func TestOverridesRedisDown(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	s := newStore(t, newClient(t, "redis://"+srv.Addr), redis.Options{Timeout: time.Second, BreakerOpenDelay: time.Hour})
	v := backendtest.Put(t, s, "a", "1", 10)
	srv.Kill()
	l := backend.Limit{Algorithm: backend.FixedWindow, Requests: 1, Window: time.Minute}
	for i := range 4 {
		recs, got, err := s.Overrides(t.Context(), v-1)
		if err == nil {
			t.Fatalf("call %d: Overrides with Redis gone = %q, %d, nil; want an error", i, recs, got)
		}
		if i == 3 && !errors.Is(err, backend.ErrUnavailable) {
			t.Errorf("call %d: Overrides error %v, want backend.ErrUnavailable once the breaker opened", i, err)
		}
	}
	if _, err := s.PutOverride(t.Context(), "b", []byte("1"), 10); err == nil {
		t.Error("PutOverride with Redis gone succeeded")
	}
	if _, _, err := s.DeleteOverride(t.Context(), "a"); err == nil {
		t.Error("DeleteOverride with Redis gone succeeded")
	}
	if err := s.Reset(t.Context(), []backend.Request{{Key: backendtest.CounterKey("k", l), Limit: l}}); err == nil {
		t.Error("Reset with Redis gone succeeded")
	}
}

// TestResetOnRedisClock: on Redis's clock (no Options.Now), a reset
// finds the windows that take.lua counted in, and deletes every key of
// the counters, and no other.
func TestResetOnRedisClock(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	s := newStore(t, newClient(t, "redis://"+srv.Addr), redis.Options{Timeout: 2 * time.Second, LocalCache: -1})
	var reqs []backend.Request
	for _, a := range []backend.Algorithm{backend.SlidingWindow, backend.FixedWindow, backend.SlidingLog, backend.TokenBucket, backend.GCRA} {
		l := backend.Limit{Algorithm: a, Requests: 3, Window: time.Hour}
		reqs = append(reqs, backend.Request{Key: backendtest.CounterKey("k", l), Limit: l, Hits: 3, Group: len(reqs)})
	}
	kept := reqs[0]
	kept.Key, kept.Group = backendtest.CounterKey("kept", kept.Limit), len(reqs)
	if err := s.Take(t.Context(), append(slices.Clone(reqs), kept), make([]backend.Result, len(reqs)+1)); err != nil {
		t.Fatal(err)
	}
	before := rdb.DBSize(t.Context()).Val()
	if err := s.Reset(t.Context(), reqs); err != nil {
		t.Fatal(err)
	}
	if keys := rdb.Keys(t.Context(), "ratelimitd:v2:*").Val(); len(keys) != 1 || before != int64(len(reqs)+1) {
		t.Errorf("counter keys after Reset = %q (of %d keys before), want only kept's window", keys, before)
	}
	if n := rdb.LLen(t.Context(), "ratelimitd:{overrides}:resets").Val(); n != 1 {
		t.Errorf("reset notes after a Reset: %d, want 1", n)
	}
	for _, r := range reqs {
		res := make([]backend.Result, 1)
		if err := s.Take(t.Context(), []backend.Request{{Key: r.Key, Limit: r.Limit}}, res); err != nil {
			t.Fatal(err)
		}
		if res[0].Remaining != 3 {
			t.Errorf("%v: remaining after Reset = %d, want 3", r.Limit.Algorithm, res[0].Remaining)
		}
	}
}

// TestResetLocalCache: the store's local cache forgets its refusals on a
// reset counter, which would otherwise refuse it until their retry_after.
func TestResetLocalCache(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	clock := backendtest.NewClock(backendtest.T0)
	s := newStore(t, newClient(t, "redis://"+srv.Addr), redis.Options{Timeout: 2 * time.Second, Now: clock.Now})
	l := backend.Limit{Algorithm: backend.FixedWindow, Requests: 2, Window: time.Hour}
	req := backend.Request{Key: backendtest.CounterKey("k", l), Limit: l, Hits: 2}
	res := make([]backend.Result, 1)
	for i := range 3 {
		if err := s.Take(t.Context(), []backend.Request{req}, res); err != nil {
			t.Fatal(err)
		}
		if i > 0 && !res[0].OverLimit {
			t.Fatalf("take %d: %+v, want over", i, res[0])
		}
	}
	if !res[0].Cached {
		t.Fatalf("the third take was not answered from the cache: %+v (the test tests nothing)", res[0])
	}
	if err := s.Reset(t.Context(), []backend.Request{req}); err != nil {
		t.Fatal(err)
	}
	if err := s.Take(t.Context(), []backend.Request{req}, res); err != nil {
		t.Fatal(err)
	}
	if res[0].OverLimit || res[0].Cached || res[0].Remaining != 0 {
		t.Errorf("a full take after Reset: %+v, want admitted by Redis, remaining 0", res[0])
	}
}

// TestResetPerSecond: with a PerSecond store, the counters of one-second
// limits are reset in its Redis, the others in the store's.
func TestResetPerSecond(t *testing.T) {
	redistest.Require(t)
	mainSrv, secondSrv := redistest.Start(t), redistest.Start(t)
	clock := backendtest.NewClock(backendtest.T0)
	opts := redis.Options{Timeout: 2 * time.Second, Now: clock.Now}
	second := newStore(t, newClient(t, "redis://"+secondSrv.Addr), opts)
	o := opts
	o.PerSecond = second
	s, err := redis.New(newClient(t, "redis://"+mainSrv.Addr), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	perSec := backend.Limit{Algorithm: backend.SlidingWindow, Requests: 5, Window: time.Second}
	perMin := backend.Limit{Algorithm: backend.SlidingWindow, Requests: 5, Window: time.Minute}
	reqs := []backend.Request{
		{Key: backendtest.CounterKey("k", perSec), Limit: perSec, Hits: 5},
		{Key: backendtest.CounterKey("k", perMin), Limit: perMin, Hits: 5, Group: 1},
	}
	if err := s.Take(t.Context(), reqs, make([]backend.Result, 2)); err != nil {
		t.Fatal(err)
	}
	for _, srv := range []*redistest.Server{mainSrv, secondSrv} {
		if n := srv.Client(t).DBSize(t.Context()).Val(); n != 1 {
			t.Fatalf("keys in %s before Reset: %d, want 1", srv.Addr, n)
		}
	}
	if err := s.Reset(t.Context(), reqs); err != nil {
		t.Fatal(err)
	}
	for _, srv := range []*redistest.Server{mainSrv, secondSrv} {
		if keys := srv.Client(t).Keys(t.Context(), "ratelimitd:v2:*").Val(); len(keys) != 0 {
			t.Errorf("counter keys in %s after Reset: %q, want none", srv.Addr, keys)
		}
	}
	if n := secondSrv.Client(t).Exists(t.Context(), "ratelimitd:{overrides}:resets").Val(); n != 0 {
		t.Error("the per-second Redis holds reset notes, want them in the main Redis only")
	}
}

// TestResetScriptFlushed: a Redis that lost the scripts (a restart,
// SCRIPT FLUSH) gets them again.
func TestResetScriptFlushed(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	s := newStore(t, newClient(t, "redis://"+srv.Addr), redis.Options{Timeout: 2 * time.Second})
	l := backend.Limit{Algorithm: backend.GCRA, Requests: 5, Window: time.Minute}
	req := backend.Request{Key: backendtest.CounterKey("k", l), Limit: l, Hits: 5}
	for i := range 2 {
		if err := s.Take(t.Context(), []backend.Request{req}, make([]backend.Result, 1)); err != nil {
			t.Fatal(err)
		}
		if err := rdb.ScriptFlush(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.Reset(t.Context(), []backend.Request{req}); err != nil {
			t.Fatalf("Reset %d after SCRIPT FLUSH: %v", i, err)
		}
		if err := rdb.ScriptFlush(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		backendtest.Put(t, s, "a", "1", 10)
		if n := rdb.Exists(t.Context(), "ratelimitd:v2:"+req.Key).Val(); n != 0 {
			t.Errorf("the counter's key exists after Reset %d", i)
		}
	}
}

// TestResetOtherReplicasCache: a reset through one store reaches the
// local cache of another store on the same Redis (another replica) at its
// next poll of the overrides: it forgets its refusals on the reset
// counter, and only those; after more resets than Redis keeps the notes
// of, its whole cache.
func TestResetOtherReplicasCache(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	clock := backendtest.NewClock(backendtest.T0)
	opts := redis.Options{Timeout: 2 * time.Second, Now: clock.Now}
	a := newStore(t, newClient(t, "redis://"+srv.Addr), opts)
	b := newStore(t, newClient(t, "redis://"+srv.Addr), opts)
	l := backend.Limit{Algorithm: backend.FixedWindow, Requests: 1, Window: time.Hour}
	reset := backend.Request{Key: backendtest.CounterKey("reset", l), Limit: l, Hits: 1}
	kept := backend.Request{Key: backendtest.CounterKey("kept", l), Limit: l, Hits: 1}
	take := func(s *redis.Store, r backend.Request) backend.Result {
		t.Helper()
		res := make([]backend.Result, 1)
		if err := s.Take(t.Context(), []backend.Request{r}, res); err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	poll := func(s *redis.Store) {
		t.Helper()
		if _, _, err := s.Overrides(t.Context(), 0); err != nil {
			t.Fatal(err)
		}
	}
	poll(b)
	for _, r := range []backend.Request{reset, kept} {
		take(b, r)
		if res := take(b, r); !res.OverLimit {
			t.Fatalf("the second take on %s: %+v, want over", r.Key, res)
		}
	}
	if n := b.LocalCacheEntries(); n != 2 {
		t.Fatalf("b's cache holds %d entries, want its 2 refusals", n)
	}
	if err := a.Reset(t.Context(), []backend.Request{reset}); err != nil {
		t.Fatal(err)
	}
	if res := take(b, reset); !res.Cached {
		t.Fatalf("b before its poll: %+v, want its cached refusal (the test tests nothing)", res)
	}
	poll(b)
	if res := take(b, reset); res.OverLimit || res.Cached {
		t.Errorf("b after its poll: %+v, want admitted by Redis", res)
	}
	if res := take(b, kept); !res.OverLimit || !res.Cached {
		t.Errorf("b on a counter not reset: %+v, want its cached refusal still", res)
	}

	for range redis.MaxResetNotes {
		if err := a.Reset(t.Context(), []backend.Request{reset}); err != nil {
			t.Fatal(err)
		}
	}
	poll(b)
	if res := take(b, kept); res.Cached {
		t.Errorf("b after more resets than Redis notes: %+v, want its cache cleared (a note may have been dropped)", res)
	}
}
