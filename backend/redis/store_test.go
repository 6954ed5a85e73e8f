package redis_test

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/backendtest"
	"github.com/ratelimitd/ratelimitd/backend/redis"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

func hourly(n uint64) backend.Limit {
	return backend.Limit{Algorithm: backend.FixedWindow, Requests: n, Window: time.Hour}
}

// descriptors returns n one-limit requests, one per descriptor, with keys
// as the engine makes them.
func descriptors(n int, l backend.Limit) []backend.Request {
	reqs := make([]backend.Request, n)
	for i := range reqs {
		k := backend.AppendKeyPart(nil, "domain")
		k = backend.AppendKeyPart(k, "user")
		k = backend.AppendKeyPart(k, "u"+strconv.Itoa(i))
		reqs[i] = backend.Request{Key: string(backend.AppendKeySuffix(k, l)), Limit: l, Hits: 1, Group: i}
	}
	return reqs
}

func take(t *testing.T, s backend.Store, reqs ...backend.Request) ([]backend.Result, error) {
	t.Helper()
	res := make([]backend.Result, len(reqs))
	return res, s.Take(t.Context(), reqs, res)
}

func mustTake(t *testing.T, s backend.Store, reqs ...backend.Request) []backend.Result {
	t.Helper()
	res, err := take(t, s, reqs...)
	if err != nil {
		t.Fatalf("Take() error: %v", err)
	}
	return res
}

// TestOneRoundTrip: a 5-descriptor call on standalone Redis is one read
// on the server (INFO stats total_reads_processed): one script over every
// key.
func TestOneRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	// One connection, so that no idle connection is dialed (HELLO, CLIENT
	// SETINFO) while the test counts.
	client, err := redis.NewClient("redis://"+srv.Addr, redis.ClientOptions{PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	s := newStore(t, client, redis.Options{})
	reqs := descriptors(5, hourly(10))
	mustTake(t, s, reqs...) // warm: connections dialed, script loaded

	// INFO on one open connection: each is one read.
	admin := srv.Client(t)
	reads := func() int {
		info, err := admin.Info(t.Context(), "stats").Result()
		if err != nil {
			t.Fatal(err)
		}
		_, v, _ := strings.Cut(info, "total_reads_processed:")
		n, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(v, "\n", 2)[0]))
		return n
	}
	before := reads()
	res := mustTake(t, s, reqs...)
	after := reads()
	// The second INFO is one read.
	if got := after - before - 1; got != 1 {
		t.Errorf("a 5-descriptor Take cost %d reads on Redis, want 1", got)
	}
	for i, r := range res {
		if r.OverLimit || r.Remaining != 8 {
			t.Errorf("result %d = %+v, want admitted with 8 remaining", i, r)
		}
	}
}

// TestKeys: keys carry the prefix, and expire when their state is as good
// as fresh, a second later on a clock that is not Redis's.
func TestKeys(t *testing.T) {
	srv := redistest.Start(t)
	clock := backendtest.NewClock(backendtest.T0)
	s := newStore(t, newClient(t, "redis://"+srv.Addr), redis.Options{Prefix: "rl-test:", Now: clock.Now})
	rdb := srv.Client(t)
	for _, a := range backend.Algorithms {
		l := backend.Limit{Algorithm: a, Requests: 10, Window: time.Minute}
		reqs := descriptors(1, l)
		mustTake(t, s, reqs...)
		// The prefix, the layout, the counter key, and for a window
		// '@' and the window's number.
		key := "rl-test:v2:" + reqs[0].Key
		if a == backend.FixedWindow || a == backend.SlidingWindow {
			window := backendtest.T0.UnixMicro() / l.Window.Microseconds()
			key += "@" + strconv.FormatInt(window, 10)
		}
		ttl, err := rdb.PTTL(t.Context(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		// Windows: until the state is forgotten (sliding: two windows);
		// buckets: until full again (one hit: a tenth of the window);
		// a sliding log's entry and a lease: until they expire.
		// Then a second's grace: the store's clock is not Redis's.
		const grace = time.Second
		maxTTL := grace + map[backend.Algorithm]time.Duration{
			backend.FixedWindow: time.Minute, backend.SlidingWindow: 2 * time.Minute, backend.SlidingLog: time.Minute,
			backend.TokenBucket: 6 * time.Second, backend.GCRA: 6 * time.Second, backend.Concurrency: time.Minute,
		}[a]
		if ttl <= grace || ttl > maxTTL+time.Millisecond {
			t.Errorf("%v: PTTL %s = %v, want in (%v, %v]", a, key, ttl, grace, maxTTL)
		}
	}
	// On Redis's clock, no grace: one hit on a bucket of 10 a minute is
	// forgotten 6 s later.
	plain := newStore(t, newClient(t, "redis://"+srv.Addr), redis.Options{Prefix: "rl-plain:", Timeout: 5 * time.Second})
	tb := descriptors(1, backend.Limit{Algorithm: backend.TokenBucket, Requests: 10, Window: time.Minute})
	mustTake(t, plain, tb...)
	if ttl := rdb.PTTL(t.Context(), "rl-plain:v2:"+tb[0].Key).Val(); ttl <= 5*time.Second || ttl > 6*time.Second {
		t.Errorf("token bucket on Redis's clock: PTTL = %v, want in (5s, 6s]", ttl)
	}
	// A check-only call writes nothing.
	reqs := descriptors(1, backend.Limit{Algorithm: backend.FixedWindow, Requests: 5, Window: 2 * time.Minute})
	reqs[0].Hits = 0
	mustTake(t, s, reqs...)
	if keys, _ := rdb.Keys(t.Context(), "rl-test:v2:"+reqs[0].Key+"*").Result(); len(keys) != 0 {
		t.Error("a check-only call on a fresh counter wrote a key")
	}
}

// TestLeanKeys: what take.lua's lean path (calls of window limits) leaves
// in Redis. An admitted call's new window keys get their windows' TTL; a
// refused call leaves its counts as they were, deleting the keys it
// created; a run that fails on a key that holds no count gives back what
// its call raised, leaving no key without a TTL.
func TestLeanKeys(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	clock := backendtest.NewClock(backendtest.T0)
	s := newStore(t, newClient(t, "redis://"+srv.Addr), redis.Options{Prefix: "lean:", Now: clock.Now, LocalCache: -1})
	window := func(r backend.Request) string {
		return "lean:v2:" + r.Key + "@" + strconv.FormatInt(backendtest.T0.UnixMicro()/r.Limit.Window.Microseconds(), 10)
	}
	fixed := descriptors(2, backend.Limit{Algorithm: backend.FixedWindow, Requests: 1, Window: time.Minute})
	sliding := descriptors(1, backend.Limit{Algorithm: backend.SlidingWindow, Requests: 5, Window: time.Minute})
	sliding[0].Key += "s" // a counter of its own
	if s.Compact(append(fixed, sliding...)) != true {
		t.Fatal("a call of window limits on distinct counters is not compact")
	}

	// lean takes reqs as one call and checks that the lean path decided it.
	lean := func(reqs ...backend.Request) ([]backend.Result, error) {
		t.Helper()
		before := redis.FastRuns(s)
		res, err := take(t, s, reqs...)
		if runs := redis.FastRuns(s) - before; runs != 1 {
			t.Errorf("%d lean script runs for one call, want 1", runs)
		}
		return res, err
	}
	if _, err := lean(fixed[0]); err != nil {
		t.Fatal(err)
	}
	const grace = time.Second
	if ttl := rdb.PTTL(t.Context(), window(fixed[0])).Val(); ttl <= grace || ttl > time.Minute+grace {
		t.Errorf("admitted: PTTL %v, want in (%v, %v]", ttl, grace, time.Minute+grace)
	}
	// fixed[0] is full: the call of fixed[1] (fresh) and fixed[0] is
	// refused, and fixed[1]'s key, raised then given back, is gone.
	if res, _ := lean(fixed[1], fixed[0]); !res[1].OverLimit || res[0].OverLimit || res[0].Remaining != 1 {
		t.Errorf("refused call: %+v, want fixed[0] over, fixed[1] within its limit and uncounted", res)
	}
	if n := rdb.Exists(t.Context(), window(fixed[1])).Val(); n != 0 {
		t.Error("a refused call left the key it created")
	}
	if v := rdb.Get(t.Context(), window(fixed[0])).Val(); v != "1" {
		t.Errorf("a refused call changed a count: %q, want 1", v)
	}
	// A key that holds no count fails the run; the call's first request,
	// raised before, is given back.
	if err := rdb.Set(t.Context(), window(sliding[0]), "not a count", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := lean(fixed[1], sliding[0]); err == nil {
		t.Error("a call on a key that holds no count: no error")
	}
	keys, err := rdb.Keys(t.Context(), "lean:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if rdb.PTTL(t.Context(), k).Val() < 0 {
			t.Errorf("key %s has no TTL", k)
		}
		if k == window(fixed[1]) {
			t.Error("the failed call left the key it created")
		}
	}
	if res := mustTake(t, s, fixed[1]); res[0].OverLimit {
		t.Errorf("after the failed call: %+v, want fixed[1]'s hit admitted (none counted before)", res[0])
	}

	// A concurrency limit's take and its release by lease take the lean
	// path too: the take gives its log the lease's TTL, the release
	// keeps it.
	conc := descriptors(1, backend.Limit{Algorithm: backend.Concurrency, Requests: 2, Window: time.Minute})
	held := descriptors(1, conc[0].Limit)[0] // a lease held beside, so that the log stays
	mustTake(t, s, held)
	res, err := lean(conc[0])
	if err != nil || res[0].OverLimit || res[0].Lease == 0 || res[0].Remaining != 0 {
		t.Fatalf("lean acquire: %+v %v, want a lease and nothing remaining", res, err)
	}
	logKey := "lean:v2:" + conc[0].Key
	// (Stamped a microsecond after now, which the lease beside holds: a
	// millisecond more, rounded up.)
	if ttl := rdb.PTTL(t.Context(), logKey).Val(); ttl <= grace || ttl > time.Minute+grace+time.Millisecond {
		t.Errorf("acquired: PTTL %v, want in (%v, %v]", ttl, grace, time.Minute+grace+time.Millisecond)
	}
	release := conc[0]
	release.Op, release.Lease = backend.GiveBack, res[0].Lease
	if res, err := lean(release); err != nil || res[0].OverLimit || res[0].Remaining != 1 {
		t.Errorf("lean release: %+v %v, want one slot free", res, err)
	}
	if ttl := rdb.PTTL(t.Context(), logKey).Val(); ttl <= grace {
		t.Errorf("released: PTTL %v, want the lease's still", ttl)
	}
	if n := rdb.LLen(t.Context(), logKey).Val(); n != 2 {
		t.Errorf("released: the log has %d elements, want its header and the lease held beside", n)
	}
}

// TestScriptFlush: the script survives SCRIPT FLUSH and a Redis restart.
func TestScriptFlush(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, newClient(t, "redis://"+srv.Addr), redis.Options{LocalCache: -1})
	reqs := descriptors(1, hourly(3))
	mustTake(t, s, reqs...)
	if err := srv.Client(t).ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	if r := mustTake(t, s, reqs...); r[0].Remaining != 1 {
		t.Errorf("after SCRIPT FLUSH: %+v, want 1 remaining", r[0])
	}
	srv.Kill()
	srv.Restart(t)
	waitTake(t, s, time.Second, reqs...)
}

// waitTake retries Take until it succeeds, failing t after within.
func waitTake(t *testing.T, s backend.Store, within time.Duration, reqs ...backend.Request) []backend.Result {
	t.Helper()
	start := time.Now()
	for {
		res, err := take(t, s, reqs...)
		if err == nil {
			t.Logf("decisions resumed after %v", time.Since(start).Round(time.Millisecond))
			return res
		}
		if time.Since(start) > within {
			t.Fatalf("no decision within %v: %v", within, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLocalCache: a refused call, repeated, costs no Redis round trip
// until its retry_after; a raised limit takes effect at once.
// TestLocalCacheGiveBack: a give-back lifts the refusals the local cache
// holds for its counter, so that the refused call, made again, goes to
// Redis and is admitted; a give-back is never answered from the cache;
// and a Concurrency limit's refusal, which lifts when a lease is
// released, is never cached.
func TestLocalCacheGiveBack(t *testing.T) {
	srv := redistest.Start(t)
	clock := backendtest.NewClock(backendtest.T0)
	s := newStore(t, newClient(t, "redis://"+srv.Addr), redis.Options{Now: clock.Now})
	reqs := descriptors(1, hourly(1))
	mustTake(t, s, reqs...)
	if res := mustTake(t, s, reqs...); !res[0].OverLimit || s.LocalCacheEntries() != 1 {
		t.Fatalf("second hit = %+v with %d cached, want refused and cached", res[0], s.LocalCacheEntries())
	}
	give := reqs[0]
	give.Op = backend.GiveBack
	if res := mustTake(t, s, give); res[0].OverLimit || res[0].Remaining != 1 || res[0].Cached {
		t.Fatalf("give-back = %+v, want 1 remaining, from Redis", res[0])
	}
	if res := mustTake(t, s, reqs...); res[0].OverLimit || res[0].Cached {
		t.Errorf("the refused call after a give-back = %+v, want admitted by Redis", res[0])
	}

	conc := descriptors(1, backend.Limit{Algorithm: backend.Concurrency, Requests: 1, Window: time.Hour})
	lease := mustTake(t, s, conc...)[0].Lease
	for range 2 {
		if res := mustTake(t, s, conc...); !res[0].OverLimit || res[0].Cached {
			t.Fatalf("acquire past the limit = %+v, want refused by Redis", res[0])
		}
	}
	release := conc[0]
	release.Op, release.Lease = backend.GiveBack, lease
	mustTake(t, s, release)
	if res := mustTake(t, s, conc...); res[0].OverLimit {
		t.Errorf("acquire after the release = %+v, want admitted", res[0])
	}
}

func TestLocalCache(t *testing.T) {
	srv := redistest.Start(t)
	clock := backendtest.NewClock(backendtest.T0)
	s := newStore(t, newClient(t, "redis://"+srv.Addr), redis.Options{Now: clock.Now})
	reqs := descriptors(2, hourly(1))
	reqs[1].Limit = hourly(100)
	mustTake(t, s, reqs...)
	evals := func() int { // script runs: FCALL, or EVALSHA before Redis 7.0
		n := 0
		for _, cmd := range []string{"cmdstat_fcall", "cmdstat_evalsha"} {
			calls, _, _ := strings.Cut(strings.TrimPrefix(srv.Info(t, "commandstats")[cmd], "calls="), ",")
			c, _ := strconv.Atoi(calls)
			n += c
		}
		return n
	}
	before := evals()
	var res []backend.Result
	for range 100 {
		res = mustTake(t, s, reqs...)
	}
	if got := evals() - before; got != 1 {
		t.Errorf("100 refused calls ran the script %d times, want 1 (then the local cache)", got)
	}
	// Hits: the over request of each cached refusal. Misses: the two
	// requests of the two calls Redis decided, and the request within its
	// limit of each cached refusal.
	if hits, misses := s.LocalCacheHits(), s.LocalCacheMisses(); hits != 99 || misses != 103 {
		t.Errorf("LocalCacheHits(), LocalCacheMisses() = %d, %d; want 99, 103", hits, misses)
	}
	want := `
# HELP ratelimitd_local_cache_hits_total Requests (one limit of one descriptor) the local over-limit cache answered over their limit without asking Redis.
# TYPE ratelimitd_local_cache_hits_total counter
ratelimitd_local_cache_hits_total 99
# HELP ratelimitd_local_cache_misses_total Requests the local over-limit cache did not answer over their limit: those of calls that went to Redis, and those within their limit in a refusal the cache answered.
# TYPE ratelimitd_local_cache_misses_total counter
ratelimitd_local_cache_misses_total 103
# HELP ratelimitd_local_cache_entries Counters' results the local over-limit cache remembers.
# TYPE ratelimitd_local_cache_entries gauge
ratelimitd_local_cache_entries 2
`
	if err := testutil.CollectAndCompare(s, strings.NewReader(want), "ratelimitd_local_cache_hits_total",
		"ratelimitd_local_cache_misses_total", "ratelimitd_local_cache_entries"); err != nil {
		t.Errorf("local cache metrics: %v", err)
	}
	if !res[0].OverLimit || res[1].OverLimit || res[1].Remaining != 99 || res[0].RetryAfter != time.Hour {
		t.Errorf("cached answer = %+v, want the first over (retry in 1h), the second not, 99 remaining", res)
	}

	clock.Set(backendtest.T0.Add(10 * time.Minute))
	if res := mustTake(t, s, reqs...); res[0].RetryAfter != 50*time.Minute {
		t.Errorf("cached RetryAfter 10 minutes later = %v, want 50m", res[0].RetryAfter)
	}

	raised := append([]backend.Request(nil), reqs...)
	raised[0].Limit = hourly(2)
	if res := mustTake(t, s, raised...); backend.Refused(raised, res) {
		t.Errorf("after raising the limit to 2: refused %+v", res)
	}

	clock.Set(backendtest.T0.Add(time.Hour))
	if res := mustTake(t, s, reqs...); backend.Refused(reqs, res) {
		t.Errorf("after retry_after: refused %+v", res)
	}
}

// TestLocalCacheCounts: the local cache counts its hits and misses per
// request, as envoyproxy/ratelimit's local cache counts its lookups, and
// marks the results it answers Cached; off, it counts nothing.
func TestLocalCacheCounts(t *testing.T) {
	srv := redistest.Start(t)
	clock := backendtest.NewClock(backendtest.T0)
	client := newClient(t, "redis://"+srv.Addr)
	s := newStore(t, client, redis.Options{Now: clock.Now, Prefix: "counts:"})
	reqs := descriptors(2, hourly(20))
	one := reqs[:1]
	// 21 calls of a descriptor with a limit of 20, then 4 more: 21
	// misses (Redis decided them), then 4 hits.
	for i := range 25 {
		res := mustTake(t, s, one...)
		if over, cached := res[0].OverLimit, res[0].Cached; over != (i >= 20) || cached != (i >= 21) {
			t.Errorf("call %d = %+v, want over %v, cached %v", i+1, res[0], i >= 20, i >= 21)
		}
	}
	if hits, misses, entries := s.LocalCacheHits(), s.LocalCacheMisses(), s.LocalCacheEntries(); hits != 4 || misses != 21 || entries != 1 {
		t.Errorf("after 25 calls: hits %d, misses %d, entries %d; want 4, 21, 1", hits, misses, entries)
	}
	// Two descriptors, the first over and cached, the second within: a
	// first call goes to Redis (2 misses), the second is answered from
	// the cache (1 hit, 1 miss), every result Cached.
	mustTake(t, s, reqs...)
	res := mustTake(t, s, reqs...)
	if !res[0].OverLimit || res[1].OverLimit || !res[0].Cached || !res[1].Cached {
		t.Errorf("repeated call of two descriptors = %+v, want both from the cache, the first over", res)
	}
	if hits, misses, entries := s.LocalCacheHits(), s.LocalCacheMisses(), s.LocalCacheEntries(); hits != 5 || misses != 24 || entries != 2 {
		t.Errorf("after the calls of two descriptors: hits %d, misses %d, entries %d; want 5, 24, 2", hits, misses, entries)
	}
	// Two descriptors both over: a cached refusal is 2 hits.
	both := descriptors(2, hourly(1))
	for i := range both {
		both[i].Key += ":both"
	}
	for range 3 { // admitted, refused by Redis, refused from the cache
		mustTake(t, s, both...)
	}
	if hits, misses, entries := s.LocalCacheHits(), s.LocalCacheMisses(), s.LocalCacheEntries(); hits != 7 || misses != 28 || entries != 4 {
		t.Errorf("after the calls of two descriptors over: hits %d, misses %d, entries %d; want 7, 28, 4", hits, misses, entries)
	}

	off := newStore(t, client, redis.Options{Now: clock.Now, Prefix: "off:", LocalCache: -1})
	for range 25 {
		if res := mustTake(t, off, one...); res[0].Cached {
			t.Fatalf("result without a local cache = %+v, want not cached", res[0])
		}
	}
	if hits, misses, entries := off.LocalCacheHits(), off.LocalCacheMisses(), off.LocalCacheEntries(); hits != 0 || misses != 0 || entries != 0 {
		t.Errorf("without a local cache: hits %d, misses %d, entries %d; want none", hits, misses, entries)
	}
}

// TestRedisDown: with Redis gone every call fails within the timeout;
// after a few failures the breaker fails calls at once and reports open;
// decisions resume well within a second of Redis's return.
func TestRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = 100 * time.Millisecond
	// A small pool: go-redis's pool stops dialing after as many failed
	// dials as it has connections, and then retries once a second. The
	// breaker's probes must not be what fills that count.
	client, err := redis.NewClient("redis://"+srv.Addr, redis.ClientOptions{PoolSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	var logs breakerLog
	s := newStore(t, client, redis.Options{Timeout: timeout, LocalCache: -1, Logger: slog.New(&logs)})
	reqs := descriptors(1, hourly(1000))
	mustTake(t, s, reqs...)
	srv.Kill()
	var slowest time.Duration
	for i := range 20 {
		start := time.Now()
		_, err := take(t, s, reqs...)
		slowest = max(slowest, time.Since(start))
		if err == nil {
			t.Fatalf("call %d with Redis killed: no error", i)
		}
		if i >= 3 && (!errors.Is(err, redis.ErrUnavailable) || !errors.Is(err, backend.ErrUnavailable)) {
			t.Errorf("call %d with Redis killed: %v, want the breaker's ErrUnavailable, a backend.ErrUnavailable", i, err)
		}
	}
	if slowest > timeout+100*time.Millisecond {
		t.Errorf("slowest call with Redis killed took %v, want at most the timeout %v (+100ms of slack)", slowest, timeout)
	}
	if got := s.State(); got != "open" {
		t.Errorf("State() with Redis killed = %q, want open", got)
	}
	breakers := map[string]string{}
	s.Breakers(func(node, state string) { breakers[node] = state })
	if want := map[string]string{"redis": "open"}; !maps.Equal(breakers, want) {
		t.Errorf("Breakers() with Redis killed = %v, want %v", breakers, want)
	}
	want := `
# HELP ratelimitd_backend_breaker_state State of each Redis node's circuit breaker (the per-second Redis's nodes named per-second/...): 1 for the state it is in (closed, half-open or open), 0 for the others.
# TYPE ratelimitd_backend_breaker_state gauge
ratelimitd_backend_breaker_state{node="redis",state="closed"} 0
ratelimitd_backend_breaker_state{node="redis",state="half-open"} 0
ratelimitd_backend_breaker_state{node="redis",state="open"} 1
`
	if err := testutil.CollectAndCompare(s, strings.NewReader(want), "ratelimitd_backend_breaker_state"); err != nil {
		t.Errorf("breaker metrics with Redis killed: %v", err)
	}
	// A longer outage: the breaker probes every 250 ms.
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		_, _ = take(t, s, reqs...) // fails: Redis is down
	}
	srv.Restart(t)
	waitTake(t, s, 750*time.Millisecond, reqs...)
	if got := s.State(); got != "ok" {
		t.Errorf("State() after Redis returned = %q, want ok", got)
	}
	// The outage is logged once when it starts and once when it ends; the
	// probes between are at debug level.
	if got := logs.count(); got[slog.LevelWarn] != 1 || got[slog.LevelInfo] != 1 || got[slog.LevelDebug] < 2 {
		t.Errorf("breaker log lines by level = %v, want 1 WARN, 1 INFO and the probes at DEBUG", got)
	}
}

// breakerLog is a slog.Handler that counts the breaker's records by level.
type breakerLog struct {
	mu     sync.Mutex
	levels map[slog.Level]int
}

func (*breakerLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *breakerLog) WithAttrs([]slog.Attr) slog.Handler     { return h }
func (h *breakerLog) WithGroup(string) slog.Handler          { return h }
func (h *breakerLog) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r.Message == "redis circuit breaker" {
		if h.levels == nil {
			h.levels = map[slog.Level]int{}
		}
		h.levels[r.Level]++
	}
	return nil
}

func (h *breakerLog) count() map[slog.Level]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.levels)
}

// TestSentinelFailover: decisions resume within 5 s of SENTINEL FAILOVER,
// on the counters the replica had.
func TestSentinelFailover(t *testing.T) {
	sg := redistest.StartSentinel(t)
	client := newClient(t, sg.URL())
	reqs := descriptors(1, hourly(1000))
	// The first call asks Sentinel for the master, dials it, checks its
	// version and loads the script: more than 50 ms under -race on a busy
	// machine. A patient store makes it, on the client the test uses.
	mustTake(t, newStore(t, client, redis.Options{LocalCache: -1, Timeout: 5 * time.Second}), reqs...)
	s := newStore(t, client, redis.Options{LocalCache: -1})
	sg.Failover(t)
	res := waitTake(t, s, 5*time.Second, reqs...)
	if res[0].OverLimit || res[0].Remaining > 998 {
		t.Errorf("after failover: %+v, want the counter kept (at most 998 remaining)", res[0])
	}
	// The breaker follows the group, not the former master's address.
	if got := s.State(); got != "ok" {
		t.Errorf("State() once decisions resumed after failover = %q, want ok", got)
	}
}

// TestClusterNodeDown: a Cluster node down fails the calls on its slots;
// the others keep deciding.
func TestClusterNodeDown(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	client := newClient(t, c.URL())
	reqs := descriptors(30, hourly(1000))
	// Warm up with a patient store: the client dials its connections
	// (each checks the node's version) and loads the script on every node.
	mustTake(t, newStore(t, client, redis.Options{LocalCache: -1, Timeout: 5 * time.Second}), reqs...)
	s := newStore(t, client, redis.Options{LocalCache: -1, Timeout: 200 * time.Millisecond})

	// The node of the first request's slot goes down.
	var nodes []*goredis.Client
	for _, n := range c.Nodes {
		nodes = append(nodes, n.Client(t))
	}
	key := func(r backend.Request) string {
		for _, n := range nodes {
			if keys, _ := n.Keys(t.Context(), "*"+r.Key+"@*").Result(); len(keys) == 1 { // its window's key
				return keys[0]
			}
		}
		t.Fatalf("no node holds a key ending in %q", r.Key)
		return ""
	}
	down := c.NodeForKey(t, key(reqs[0]))
	var same, other []backend.Request
	for _, r := range reqs {
		if c.NodeForKey(t, key(r)) == down {
			same = append(same, r)
		} else {
			other = append(other, r)
		}
	}
	if len(same) == 0 || len(other) == 0 {
		t.Fatalf("30 descriptors on 3 nodes: %d on the node, %d elsewhere", len(same), len(other))
	}
	down.Kill()
	for _, r := range other {
		if _, err := take(t, s, r); err != nil {
			t.Errorf("Take on a live node's slot: %v", err)
		}
	}
	for _, r := range same {
		if _, err := take(t, s, r); err == nil {
			t.Errorf("Take on the down node's slot: no error")
		}
	}
	// A call over both fails as a whole, and gives back what it took.
	before := mustTake(t, s, other[0])[0].Remaining
	if _, err := take(t, s, other[0], withGroup(same[0], 1)); err == nil {
		t.Error("Take over a live and a down slot: no error")
	}
	if got := s.Refunds(); got != 1 {
		t.Errorf("Refunds() = %d, want 1: the live slot's part given back", got)
	}
	if after := mustTake(t, s, other[0])[0].Remaining; after != before-1 {
		t.Errorf("remaining on the live slot went %d -> %d, want only the check's own hit counted", before, after)
	}
}

func withGroup(r backend.Request, g int) backend.Request {
	r.Group = g
	return r
}

// TestLocalCacheOneCounterTwice: a refused call that counts one counter
// twice is not remembered: the same counter alone may still admit.
func TestLocalCacheOneCounterTwice(t *testing.T) {
	srv := redistest.Start(t)
	clock := backendtest.NewClock(backendtest.T0)
	s := newStore(t, newClient(t, "redis://"+srv.Addr), redis.Options{Now: clock.Now})
	a := descriptors(1, hourly(1))[0]
	twice := []backend.Request{a, withGroup(a, 1)}
	if res := mustTake(t, s, twice...); !backend.Refused(twice, res) {
		t.Fatalf("[A, A] on a limit of 1: admitted %+v", res)
	}
	if res := mustTake(t, s, a); res[0].OverLimit {
		t.Errorf("A alone after a refused [A, A]: %+v, want admitted", res[0])
	}
}

// TestTimeoutWhileRedisBusy: a call never waits past the store's timeout,
// nor past its caller's deadline, while Redis is busy.
func TestTimeoutWhileRedisBusy(t *testing.T) {
	srv := redistest.Start(t, "--enable-debug-command", "yes")
	const timeout = 100 * time.Millisecond
	client, err := redis.NewClient("redis://"+srv.Addr, redis.ClientOptions{ReadTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	s := newStore(t, client, redis.Options{Timeout: timeout, LocalCache: -1})
	reqs := descriptors(1, hourly(1000))
	mustTake(t, s, reqs...)

	busy := make(chan error, 1)
	go func() { busy <- srv.Client(t).Do(context.Background(), "DEBUG", "SLEEP", "0.7").Err() }()
	time.Sleep(50 * time.Millisecond) // Redis is asleep
	for _, deadline := range []time.Duration{20 * time.Millisecond, time.Second} {
		ctx, cancel := context.WithTimeout(t.Context(), deadline)
		start := time.Now()
		err := s.Take(ctx, reqs, make([]backend.Result, 1))
		took := time.Since(start)
		cancel()
		want := min(deadline, timeout)
		if err == nil || took > want+100*time.Millisecond {
			t.Errorf("Take with a %v deadline while Redis sleeps: %v after %v, want an error within %v", deadline, err, took, want)
		}
	}
	if err := <-busy; err != nil {
		t.Fatal(err)
	}
}

// TestClusterOneRoundTripPerNode: a call whose descriptors live on every
// node of a Cluster costs each node one read: its parts go out in one
// pipeline, one round trip per node.
func TestClusterOneRoundTripPerNode(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	client, err := redis.NewClient(c.URL()+"&pool_size=1", redis.ClientOptions{DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	s := newStore(t, client, redis.Options{LocalCache: -1, Timeout: 2 * time.Second})
	reqs := descriptors(12, hourly(100))
	mustTake(t, s, reqs...) // warm: connections dialed, the library loaded on every node

	// INFO on one open connection per node: each is one read.
	admins := map[string]*goredis.Client{}
	for _, n := range c.Nodes {
		admins[n.Addr] = n.Client(t)
	}
	reads := func() map[string]int {
		m := map[string]int{}
		for addr, admin := range admins {
			info, err := admin.Info(t.Context(), "stats").Result()
			if err != nil {
				t.Fatal(err)
			}
			_, v, _ := strings.Cut(info, "total_reads_processed:")
			m[addr], _ = strconv.Atoi(strings.TrimSpace(strings.SplitN(v, "\n", 2)[0]))
		}
		return m
	}
	holding := map[string]bool{} // the nodes that hold a part of the call
	for addr, admin := range admins {
		for _, r := range reqs {
			if keys, _ := admin.Keys(t.Context(), "*"+r.Key+"@*").Result(); len(keys) > 0 { // its window's key
				holding[addr] = true
			}
		}
	}
	before := reads()
	mustTake(t, s, reqs...)
	after := reads()
	for _, n := range c.Nodes {
		// The second INFO is one read too.
		got := after[n.Addr] - before[n.Addr] - 1
		want := 0
		if holding[n.Addr] {
			want = 1
		}
		if got != want {
			t.Errorf("node %s: %d reads for a 12-descriptor call, want %d", n.Addr, got, want)
		}
	}
	if len(holding) < 2 {
		t.Errorf("the call's descriptors live on %d node(s): the test proves nothing", len(holding))
	}
}
