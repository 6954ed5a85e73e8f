package redis_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/backendtest"
	"github.com/ratelimitd/ratelimitd/backend/redis"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// splitStore returns a store on mainURL whose one-second counters are kept
// by a store on secondURL, both on opts (secondOpts for the second, if
// set), closed at the end of the test.
func splitStore(t *testing.T, mainURL, secondURL string, opts redis.Options, secondOpts ...redis.Options) *redis.Store {
	t.Helper()
	// The default timeout, 50 ms, is a decision's budget in production;
	// under -race on a shared machine a call may take longer.
	if opts.Timeout == 0 {
		opts.Timeout = 2 * time.Second
	}
	so := opts
	if len(secondOpts) > 0 {
		so = secondOpts[0]
		if so.Timeout == 0 {
			so.Timeout = 2 * time.Second
		}
	}
	so.LocalCache = -1
	second, err := redis.New(newClient(t, secondURL), so)
	if err != nil {
		t.Fatalf("redis.New() of the per-second store: %v", err)
	}
	opts.PerSecond = second
	return newStore(t, newClient(t, mainURL), opts) // closes second too
}

func perSec(n uint64) backend.Limit {
	return backend.Limit{Algorithm: backend.FixedWindow, Requests: n, Window: time.Second}
}

func perMin(n uint64) backend.Limit {
	return backend.Limit{Algorithm: backend.FixedWindow, Requests: n, Window: time.Minute}
}

// req returns a one-request descriptor on key under l, in group g.
func req(key string, l backend.Limit, g int) backend.Request {
	k := backend.AppendKeyPart(nil, "domain")
	k = backend.AppendKeyPart(k, key)
	return backend.Request{Key: string(backend.AppendKeySuffix(k, l)), Limit: l, Hits: 1, Group: g}
}

// keysOf returns the keys of srv's Redis, sorted, without the prefix.
func keysOf(t *testing.T, srv *redistest.Server) []string {
	t.Helper()
	keys, err := srv.Client(t).Keys(t.Context(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	return keys
}

// remaining returns what r's counter has left, asking with a check of
// zero hits.
func remaining(t *testing.T, s backend.Store, r backend.Request) uint64 {
	t.Helper()
	r.Hits, r.Group, r.Mode = 0, 0, backend.Enforce
	return mustTake(t, s, r)[0].Remaining
}

// TestPerSecondKeys: the counters of one-second limits are written in the
// per-second Redis, whatever the algorithm; the others, and RLQS shares,
// in the main one.
func TestPerSecondKeys(t *testing.T) {
	redistest.Require(t)
	mainSrv, secondSrv := redistest.Start(t), redistest.Start(t)
	clock := backendtest.NewClock(backendtest.T0)
	s := splitStore(t, "redis://"+mainSrv.Addr, "redis://"+secondSrv.Addr, redis.Options{Now: clock.Now})
	var reqs []backend.Request
	for _, a := range backend.Algorithms {
		for _, w := range []time.Duration{time.Second, time.Minute} {
			reqs = append(reqs, req("k", backend.Limit{Algorithm: a, Requests: 5, Window: w}, len(reqs)))
		}
	}
	// A ban touches no counter: it is decided where the call is. In
	// shadow mode, it refuses nothing.
	ban := req("banned", backend.Limit{Algorithm: backend.FixedWindow, Window: time.Second}, len(reqs))
	ban.Mode = backend.Shadow
	reqs = append(reqs, ban)
	one := req("alone", perSec(5), 0)
	for _, call := range [][]backend.Request{reqs, {one}, {ban}} {
		if res := mustTake(t, s, call...); backend.Refused(call, res) {
			t.Fatalf("Take() = %+v, want admitted", res)
		}
	}
	if err := s.ExchangeShares(t.Context(), []backend.ShareRequest{{Bucket: "b", Replica: "r", Limit: 10, Want: 5, TTL: time.Minute}}, make([]backend.ShareResult, 1)); err != nil {
		t.Fatalf("ExchangeShares() error: %v", err)
	}

	var wantMain, wantSecond []string
	for _, r := range reqs[:len(reqs)-1] {
		k := redis.DefaultPrefix + "v2:" + r.Key
		if a := r.Limit.Algorithm; a == backend.FixedWindow || a == backend.SlidingWindow {
			k += "@" + strconv.FormatInt(backendtest.T0.UnixMicro()/r.Limit.Window.Microseconds(), 10)
		}
		if r.Limit.Window == time.Second {
			wantSecond = append(wantSecond, k)
		} else {
			wantMain = append(wantMain, k)
		}
	}
	wantSecond = append(wantSecond, redis.DefaultPrefix+"v2:"+one.Key+"@"+strconv.FormatInt(backendtest.T0.Unix(), 10))
	wantMain = append(wantMain, redis.ShareKey(redis.DefaultPrefix, "b"))
	slices.Sort(wantMain)
	slices.Sort(wantSecond)
	if got := keysOf(t, mainSrv); !slices.Equal(got, wantMain) {
		t.Errorf("main Redis keys:\n%q\nwant\n%q", got, wantMain)
	}
	if got := keysOf(t, secondSrv); !slices.Equal(got, wantSecond) {
		t.Errorf("per-second Redis keys:\n%q\nwant\n%q", got, wantSecond)
	}
}

// TestPerSecondAllOrNothing: a call over both stores is refused whole:
// a descriptor over on one store consumes nothing on the other, in
// either direction; the refund is counted.
func TestPerSecondAllOrNothing(t *testing.T) {
	redistest.Require(t)
	mainSrv, secondSrv := redistest.Start(t), redistest.Start(t)
	clock := backendtest.NewClock(backendtest.T0)
	s := splitStore(t, "redis://"+mainSrv.Addr, "redis://"+secondSrv.Addr, redis.Options{Now: clock.Now, LocalCache: -1})

	sec, minute := req("sec", perSec(1), 0), req("min", perMin(5), 1)
	if res := mustTake(t, s, sec, minute); backend.Refused([]backend.Request{sec, minute}, res) {
		t.Fatalf("first call refused: %+v", res)
	}
	// The per-second descriptor is over: the per-minute one, admitted by
	// its store, is given back.
	call := []backend.Request{sec, minute}
	res := mustTake(t, s, call...)
	if !backend.Refused(call, res) || !res[0].OverLimit || res[1].OverLimit || res[1].Remaining != 4 {
		t.Errorf("call with the per-second descriptor over = %+v, want refused, the per-minute one within with 4 remaining", res)
	}
	if got := remaining(t, s, minute); got != 4 {
		t.Errorf("per-minute remaining after a call refused by the per-second store = %d, want 4 (nothing consumed)", got)
	}
	if got := s.Refunds(); got != 1 {
		t.Errorf("Refunds() = %d, want 1", got)
	}

	// The other way: the per-minute descriptor over, a fresh per-second
	// one consumes nothing.
	full, fresh := req("full", perMin(1), 0), req("fresh", perSec(3), 1)
	mustTake(t, s, full)
	call = []backend.Request{full, fresh}
	res = mustTake(t, s, call...)
	if !backend.Refused(call, res) || !res[0].OverLimit || res[1].OverLimit || res[1].Remaining != 3 {
		t.Errorf("call with the per-minute descriptor over = %+v, want refused, the per-second one within with 3 remaining", res)
	}
	if got := remaining(t, s, fresh); got != 3 {
		t.Errorf("per-second remaining after a call refused by the main store = %d, want 3 (nothing consumed)", got)
	}
	if got := s.Refunds(); got != 2 {
		t.Errorf("Refunds() = %d, want 2", got)
	}
	want := `
# HELP ratelimitd_backend_refunds_total Calls that gave back the hits an admitted part (a Redis Cluster slot, or one of the main and per-second Redis) took because another part refused.
# TYPE ratelimitd_backend_refunds_total counter
ratelimitd_backend_refunds_total 2
`
	if err := testutil.CollectAndCompare(s, strings.NewReader(want), "ratelimitd_backend_refunds_total"); err != nil {
		t.Errorf("refund metric: %v", err)
	}
}

// TestPerSecondGroups: a group (one descriptor's limits) over both stores
// stands or falls whole, and Quota groups on both stores refuse only
// when all of them are over.
func TestPerSecondGroups(t *testing.T) {
	redistest.Require(t)
	mainSrv, secondSrv := redistest.Start(t), redistest.Start(t)
	clock := backendtest.NewClock(backendtest.T0)
	s := splitStore(t, "redis://"+mainSrv.Addr, "redis://"+secondSrv.Addr, redis.Options{Now: clock.Now, LocalCache: -1})

	t.Run("group over both stores", func(t *testing.T) {
		// One descriptor with 5 per second and 1 per minute.
		sec, minute := req("g-sec", perSec(5), 0), req("g-min", perMin(1), 0)
		mustTake(t, s, sec, minute)
		call := []backend.Request{sec, minute}
		res := mustTake(t, s, call...)
		if !backend.Refused(call, res) || res[0].OverLimit || !res[1].OverLimit {
			t.Errorf("second call = %+v, want refused by the per-minute limit", res)
		}
		if got := remaining(t, s, sec); got != 4 {
			t.Errorf("per-second remaining = %d, want 4: the group is over in the other store", got)
		}
		// Shadow mode: the group over refuses nothing, but consumes
		// nothing either; an enforced group beside it consumes.
		shadowSec := req("g-shadow", perSec(5), 0)
		shadowSec.Mode = backend.Shadow
		shadowMin := minute
		shadowMin.Mode = backend.Shadow
		other := req("g-other", perMin(5), 1)
		call = []backend.Request{shadowSec, shadowMin, other}
		res = mustTake(t, s, call...)
		if backend.Refused(call, res) || !res[1].OverLimit || res[0].OverLimit {
			t.Errorf("shadow call = %+v, want admitted, the shadow group over on its per-minute limit", res)
		}
		if a, b := remaining(t, s, shadowSec), remaining(t, s, other); a != 5 || b != 4 {
			t.Errorf("remaining after the shadow call: shadow per-second %d, other %d; want 5 (its group is over), 4", a, b)
		}
	})

	t.Run("quota", func(t *testing.T) {
		sec, minute := req("q-sec", perSec(1), 0), req("q-min", perMin(2), 1)
		sec.Mode, minute.Mode = backend.Quota, backend.Quota
		enforced := req("q-enforced", perSec(5), 2)
		call := []backend.Request{sec, minute, enforced}
		if res := mustTake(t, s, call...); backend.Refused(call, res) {
			t.Fatalf("first call refused: %+v", res)
		}
		// The per-second quota is over, the per-minute one not: admitted.
		res := mustTake(t, s, call...)
		if backend.Refused(call, res) || !res[0].OverLimit || res[1].OverLimit || res[1].Remaining != 0 {
			t.Errorf("second call = %+v, want admitted with the per-second quota over, the per-minute one at 0 remaining", res)
		}
		// Both quotas over: refused, and the enforced group gives back.
		res = mustTake(t, s, call...)
		if !backend.Refused(call, res) || !res[0].OverLimit || !res[1].OverLimit || res[2].OverLimit {
			t.Errorf("third call = %+v, want refused by both quotas", res)
		}
		if got := remaining(t, s, enforced); got != 3 {
			t.Errorf("enforced group remaining = %d, want 3 (two admitted calls, the refused one gave back)", got)
		}
	})

	t.Run("consume when over", func(t *testing.T) {
		sec, minute := req("c-sec", perSec(1), 0), req("c-min", perMin(10), 1)
		minute.ConsumeWhenOver = true
		mustTake(t, s, sec)
		call := []backend.Request{sec, minute}
		if res := mustTake(t, s, call...); !backend.Refused(call, res) {
			t.Fatalf("call = %+v, want refused by the per-second limit", res)
		}
		if got := remaining(t, s, minute); got != 9 {
			t.Errorf("consume_when_over remaining = %d, want 9: its usage counts in a refused call", got)
		}
	})
}

// TestPerSecondDown: either Redis down, a call over both stores fails,
// and the other store keeps none of its hits; State reports the worse
// store; the breaker metrics name both stores' nodes apart.
func TestPerSecondDown(t *testing.T) {
	redistest.Require(t)
	for _, down := range []string{"per-second", "main"} {
		t.Run(down, func(t *testing.T) {
			mainSrv, secondSrv := redistest.Start(t), redistest.Start(t)
			clock := backendtest.NewClock(backendtest.T0)
			opts := redis.Options{Now: clock.Now, LocalCache: -1, BreakerFailures: 1, BreakerOpenDelay: time.Hour, Timeout: 2 * time.Second}
			s := splitStore(t, "redis://"+mainSrv.Addr, "redis://"+secondSrv.Addr, opts)
			sec, minute := req("sec", perSec(5), 0), req("min", perMin(5), 1)
			mustTake(t, s, sec, minute)
			if got := s.State(); got != "ok" {
				t.Errorf("State() with both up = %q, want ok", got)
			}
			survivor, gone := minute, "per-second/redis"
			if down == "main" {
				survivor, gone = sec, "redis"
				mainSrv.Kill()
			} else {
				secondSrv.Kill()
			}
			if _, err := take(t, s, sec, minute); err == nil {
				t.Fatalf("call over both stores with the %s Redis down: no error", down)
			} else if down == "per-second" && !strings.Contains(err.Error(), "per-second store") {
				t.Errorf("error = %v, want it to name the per-second store", err)
			}
			if got := remaining(t, s, survivor); got != 4 {
				t.Errorf("remaining on the surviving store = %d, want 4: the failed call's hit given back", got)
			}
			other := mainSrv
			if down == "main" {
				other = secondSrv
			}
			before := evalsOn(t, other)
			_, err := take(t, s, sec, minute)
			if !errors.Is(err, backend.ErrUnavailable) {
				t.Errorf("call after the breaker opened: %v, want backend.ErrUnavailable", err)
			}
			if got := evalsOn(t, other) - before; got != 0 {
				t.Errorf("call after the breaker opened ran %d scripts on the other Redis, want none", got)
			}
			if got := s.State(); got != "open" {
				t.Errorf("State() with the %s Redis down = %q, want open", down, got)
			}
			breakers := map[string]string{}
			s.Breakers(func(node, state string) { breakers[node] = state })
			want := map[string]string{"redis": "closed", "per-second/redis": "closed"}
			want[gone] = "open"
			if !maps.Equal(breakers, want) {
				t.Errorf("Breakers() = %v, want %v", breakers, want)
			}
			// One series per node and state: a registry refuses duplicates.
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(s)
			if n, err := testutil.GatherAndCount(reg, "ratelimitd_backend_breaker_state"); err != nil || n != 6 {
				t.Errorf("breaker series = %d (%v), want 6: three states of two nodes", n, err)
			}
		})
	}
}

// TestPerSecondUnreached: the store is ready only once both Redis have
// answered.
func TestPerSecondUnreached(t *testing.T) {
	redistest.Require(t)
	mainSrv, gone := redistest.Start(t), redistest.Start(t)
	gone.Kill()
	s := splitStore(t, "redis://"+mainSrv.Addr, "redis://"+gone.Addr, redis.Options{LocalCache: -1, Timeout: 2 * time.Second})
	mustTake(t, s, req("m", perMin(5), 0)) // the main Redis has answered
	if got := s.State(); got != "unreached" {
		t.Errorf("State() with the per-second Redis never reached = %q, want unreached", got)
	}
}

// TestPerSecondLocalCache: the main store's local cache answers a call
// over both stores, and one wholly on the per-second store, without
// either Redis.
func TestPerSecondLocalCache(t *testing.T) {
	redistest.Require(t)
	mainSrv, secondSrv := redistest.Start(t), redistest.Start(t)
	clock := backendtest.NewClock(backendtest.T0)
	s := splitStore(t, "redis://"+mainSrv.Addr, "redis://"+secondSrv.Addr, redis.Options{Now: clock.Now})
	sec, minute := req("sec", perSec(1), 0), req("min", perMin(5), 1)
	mustTake(t, s, sec)
	mustTake(t, s, req("warm", perMin(5), 0)) // the function loaded on the main Redis
	before := evalsOn(t, mainSrv) + evalsOn(t, secondSrv)
	for _, call := range [][]backend.Request{{sec}, {sec, minute}} {
		if res := mustTake(t, s, call...); !backend.Refused(call, res) || res[0].Cached {
			t.Errorf("call of %d requests = %+v, want refused by Redis", len(call), res)
		}
		res := mustTake(t, s, call...)
		if !backend.Refused(call, res) || slices.ContainsFunc(res, func(r backend.Result) bool { return !r.Cached }) {
			t.Errorf("call of %d requests repeated = %+v, want refused from the local cache", len(call), res)
		}
	}
	// {sec}: one run on the per-second Redis; {sec, minute}: one on each
	// and the per-minute counter's refund; the repeats none.
	if got := evalsOn(t, mainSrv) + evalsOn(t, secondSrv) - before; got != 4 {
		t.Errorf("script runs = %d, want 4", got)
	}
	if got := remaining(t, s, minute); got != 5 {
		t.Errorf("per-minute remaining = %d, want 5", got)
	}
}

// evalsOn returns how many script runs srv's Redis has served.
func evalsOn(t *testing.T, srv *redistest.Server) int {
	t.Helper()
	n := 0
	for _, cmd := range []string{"cmdstat_fcall", "cmdstat_evalsha"} {
		calls, _, _ := strings.Cut(strings.TrimPrefix(srv.Info(t, "commandstats")[cmd], "calls="), ",")
		c, _ := strconv.Atoi(calls)
		n += c
	}
	return n
}

// TestConformancePerSecond runs the conformance suite over a store whose
// one-second counters are on a second Redis: both standalone, a Cluster
// as the per-second Redis, and a Cluster as the main one.
func TestConformancePerSecond(t *testing.T) {
	redistest.Require(t)
	mainSrv, secondSrv := redistest.Start(t), redistest.Start(t)
	run := func(t *testing.T, mainURL, secondURL string, opts redis.Options, wrap ...func(backend.Store) backend.Store) {
		mainClient, secondClient := newClient(t, mainURL), newClient(t, secondURL)
		backendtest.Run(t, func(t *testing.T, now func() time.Time) backend.Store {
			o := opts
			o.Prefix = t.Name() + ":"
			o.Now = now
			o.Timeout = 2 * time.Second
			so := o
			so.LocalCache = -1
			second, err := redis.New(secondClient, so)
			if err != nil {
				t.Fatal(err)
			}
			o.PerSecond = second
			st := backend.Store(newStore(t, mainClient, o))
			for _, w := range wrap {
				st = w(st)
			}
			return st
		})
	}
	// The local cache is off, as on Cluster: the suite's clock stands
	// still, and a refusal caused by hits that another call gives back
	// would hold (see Store).
	t.Run("standalone", func(t *testing.T) {
		run(t, "redis://"+mainSrv.Addr, "redis://"+secondSrv.Addr, redis.Options{LocalCache: -1})
	})
	t.Run("unbatched", func(t *testing.T) {
		run(t, "redis://"+mainSrv.Addr, "redis://"+secondSrv.Addr, redis.Options{LocalCache: -1, NoBatch: true})
	})
	// The suite's calls of several requests are on hourly limits: here
	// those of half the keys are one-second limits, so that its
	// all-or-nothing cases run over both stores. (Its clock stands still
	// through those cases: a one-second window then decides as an hourly
	// one.)
	for parity := range 2 {
		t.Run("split/"+strconv.Itoa(parity), func(t *testing.T) {
			run(t, "redis://"+mainSrv.Addr, "redis://"+secondSrv.Addr, redis.Options{LocalCache: -1},
				func(st backend.Store) backend.Store { return secondly{st, parity} })
		})
	}
	t.Run("per-second cluster", func(t *testing.T) {
		c := redistest.StartCluster(t, 3)
		run(t, "redis://"+mainSrv.Addr, c.URL(), redis.Options{LocalCache: -1})
		for parity := range 2 {
			t.Run("split/"+strconv.Itoa(parity), func(t *testing.T) {
				run(t, "redis://"+mainSrv.Addr, c.URL(), redis.Options{LocalCache: -1},
					func(st backend.Store) backend.Store { return secondly{st, parity} })
			})
		}
		t.Run("main cluster", func(t *testing.T) {
			run(t, c.URL(), "redis://"+secondSrv.Addr, redis.Options{LocalCache: -1},
				func(st backend.Store) backend.Store { return secondly{st, 0} })
		})
	})
}

// secondly is a store that decides the hourly limits of the keys of one
// parity (of the sum of their bytes) as one-second limits; bans aside,
// whose results tell their window.
type secondly struct {
	backend.Store
	parity int
}

func (s secondly) Take(ctx context.Context, reqs []backend.Request, res []backend.Result) error {
	own := slices.Clone(reqs)
	for i := range own {
		sum := 0
		for _, b := range []byte(own[i].Key) {
			sum += int(b)
		}
		if l := &own[i].Limit; l.Window == time.Hour && !l.Ban() && sum%2 == s.parity {
			l.Window = time.Second
		}
	}
	return s.Store.Take(ctx, own, res)
}

func TestPerSecondNested(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	inner := newStore(t, newClient(t, "redis://"+srv.Addr), redis.Options{})
	middle := newStore(t, newClient(t, "redis://"+srv.Addr), redis.Options{PerSecond: inner})
	if _, err := redis.New(newClient(t, "redis://"+srv.Addr), redis.Options{PerSecond: middle}); err == nil {
		t.Error("New() with a per-second store that has its own: no error")
	}
}
