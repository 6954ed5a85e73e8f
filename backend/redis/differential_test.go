package redis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/backendtest"
	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/backend/redis"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// The differential tests replay seeded random traffic against a
// memory.Store, whose decisions are backend.Decide's, and a redis.Store on
// one manual clock, and compare every Result of every call. The traffic
// mixes every algorithm under small limits (so that refusals are common),
// the three modes, several groups per call, keys repeated within a call,
// calls repeated, check-only requests, consume_when_over, multi-hit
// requests (up to 2^64-1 hits), bans, counts changed under one counter,
// give-backs on every algorithm, concurrency limits' leases released and
// renewed by their stamps (held, released, lapsed or made up), and clock
// steps from none to an hour. On Cluster, calls span several slots, so
// that parts and refunds are exercised, give-backs and renews beside
// takes on other slots.
//
// The local cache is off but in one run, which compares only each call's
// verdict: the cache answers a repeated refusal with what Redis said
// then, so the Remaining and OverLimit of the requests that were within
// their limits may be stale (by design; see Store and traffic.cache).
//
// The store's Options.Now sets the scripts' clock, but Redis expires keys
// on its own: a key whose state is fresh again a millisecond later on the
// manual clock would vanish a real second later (the keys' grace, see
// take.lua), however little the manual clock has moved. So after every
// call the test removes the TTL of every key it wrote (persistAll). A state kept past its expiry decides
// as a fresh one (backend.State.Expiry), so this changes no decision.
//
// The traffic leaves out four known differences, each explained where
// the generator avoids it: a token bucket's count changed under one
// counter (traffic.call), debts that put times past 2^53 µs (traffic.call;
// pinned in the standalone "times past 2^53 µs" run), and on Cluster a
// refund on a bucket in debt (pinned in "refund on a bucket in debt") and
// consume_when_over on a concurrency limit (see backend's randomCall).

// diffCalls is how many calls each topology replays.
const diffCalls = 2000

// diffOptions are the store options of the differential tests.
var diffOptions = redis.Options{LocalCache: -1, Timeout: 5 * time.Second}

func TestDifferentialStandalone(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Start(t)
	admin := srv.Client(t)
	persist := func(ctx context.Context, prefix string) error { return persistAll(ctx, admin, prefix) }
	url := "redis://" + srv.Addr
	t.Run("batched", func(t *testing.T) {
		differential(t, diffRun{url: url, opts: diffOptions, persist: persist, traffic: traffic{seed: 1}})
	})
	t.Run("batched, 4 callers", func(t *testing.T) {
		before := scriptRuns(t, admin)
		differential(t, diffRun{url: url, opts: diffOptions, persist: persist, traffic: traffic{seed: 2}, lanes: 4})
		// Each round's persistAll is one script run of its own.
		runs, rounds := scriptRuns(t, admin)-before, diffCalls/4
		t.Logf("%d calls in %d script runs", diffCalls, runs-rounds)
		if runs-rounds <= 0 || runs-rounds >= diffCalls {
			t.Errorf("%d calls took %d script runs: no batch held two calls, or the count missed the store's", diffCalls, runs-rounds)
		}
	})
	t.Run("windows, 4 callers", func(t *testing.T) {
		// The common shape, which take.lua decides on its lean path.
		s := differential(t, diffRun{url: url, opts: diffOptions, persist: persist, traffic: traffic{seed: 9, windows: true}, lanes: 4})
		if fast := redis.FastRuns(s); fast < diffCalls/20 {
			t.Errorf("%d of the script runs took the lean path: too few to compare it", fast)
		}
	})
	t.Run("windows, no batch", func(t *testing.T) {
		o := diffOptions
		o.NoBatch = true
		s := differential(t, diffRun{url: url, opts: o, persist: persist, traffic: traffic{seed: 10, windows: true}})
		if fast := redis.FastRuns(s); fast < diffCalls/2 {
			t.Errorf("%d of %d calls took the lean path", fast, diffCalls)
		}
	})
	t.Run("leases, 4 callers", func(t *testing.T) {
		// Concurrency limits' takes and give-backs beside windows, which
		// take.lua decides on its lean path too.
		s := differential(t, diffRun{url: url, opts: diffOptions, persist: persist, traffic: traffic{seed: 11, leases: true}, lanes: 4})
		if fast := redis.FastRuns(s); fast < diffCalls/20 {
			t.Errorf("%d of the script runs took the lean path: too few to compare it", fast)
		}
	})
	t.Run("leases, no batch", func(t *testing.T) {
		o := diffOptions
		o.NoBatch = true
		s := differential(t, diffRun{url: url, opts: o, persist: persist, traffic: traffic{seed: 12, leases: true}})
		if fast := redis.FastRuns(s); fast < diffCalls/2 {
			t.Errorf("%d of %d calls took the lean path", fast, diffCalls)
		}
	})
	t.Run("no batch", func(t *testing.T) {
		o := diffOptions
		o.NoBatch = true
		differential(t, diffRun{url: url, opts: o, persist: persist, traffic: traffic{seed: 3}})
	})
	t.Run("EVALSHA", func(t *testing.T) {
		differential(t, diffRun{url: url, opts: diffOptions, persist: persist, traffic: traffic{seed: 8}, eval: true})
	})
	t.Run("local cache", func(t *testing.T) {
		o := diffOptions
		o.LocalCache = 0 // the default
		differential(t, diffRun{url: url, opts: o, persist: persist, traffic: traffic{seed: 4, cache: true}})
	})
	t.Run("times past 2^53 µs", func(t *testing.T) {
		// A debt of 2^32-1 hits puts the bucket's refill time near 2^33
		// s from now, past 2^53 µs since the epoch, where take.lua's
		// doubles step by 2 µs: RetryAfter comes out a microsecond
		// short. The traffic above records no such debts.
		tb := backend.Limit{Algorithm: backend.TokenBucket, Requests: 5, Window: 10 * time.Second, Burst: 1}
		nearly(t, url, diffOptions, []time.Duration{0, time.Microsecond}, [][]backend.Request{
			{{Key: "k", Limit: tb, Hits: 1<<32 - 1, ConsumeWhenOver: true}},
			{{Key: "k", Limit: tb, Hits: 1}},
		})
	})
}

func TestDifferentialSentinel(t *testing.T) {
	redistest.Require(t)
	s := redistest.StartSentinel(t)
	admin := s.Client(t)
	persist := func(ctx context.Context, prefix string) error { return persistAll(ctx, admin, prefix) }
	differential(t, diffRun{url: s.URL(), opts: diffOptions, persist: persist, traffic: traffic{seed: 5}})
}

func TestDifferentialCluster(t *testing.T) {
	redistest.Require(t)
	c := redistest.StartCluster(t, 3)
	admin := c.Client(t)
	persist := func(ctx context.Context, prefix string) error {
		return admin.ForEachMaster(ctx, func(ctx context.Context, node *goredis.Client) error {
			return persistAll(ctx, node, prefix)
		})
	}
	// A refund on a token bucket that consume_when_over has put in debt
	// may leave it an ulp off what memory holds (see
	// backend.TestDecidePartsTokenBucketDebt): consume_when_over groups
	// hold no token bucket here.
	t.Run("traffic", func(t *testing.T) {
		differential(t, diffRun{url: c.URL(), opts: diffOptions, persist: persist, traffic: traffic{seed: 6, cluster: true}})
	})
	t.Run("leases", func(t *testing.T) {
		// A call of one slot takes the lean path there, leases and all;
		// one over several slots goes in parts.
		differential(t, diffRun{url: c.URL(), opts: diffOptions, persist: persist, traffic: traffic{seed: 13, cluster: true, leases: true}})
	})
	t.Run("refund on a bucket in debt", func(t *testing.T) {
		// backend.TestDecidePartsTokenBucketDebt on Redis: A
		// (consume_when_over) and B share a bucket; a ban on another
		// descriptor refuses the call, so B's hit is refunded.
		tb := backend.Limit{Algorithm: backend.TokenBucket, Requests: 2, Window: time.Minute}
		ban := backend.Limit{Algorithm: backend.FixedWindow, Window: time.Minute}
		tag := func(desc string) string {
			return string(backend.AppendKeyPart(backend.AppendKeyPart(nil, "diff"), desc))
		}
		key := func(desc string, l backend.Limit) string {
			return string(backend.AppendKeySuffix([]byte(tag(desc)), l))
		}
		nearly(t, c.URL(), diffOptions, []time.Duration{0, 12962 * time.Microsecond, 0}, [][]backend.Request{
			{{Key: key("a", tb), Tag: tag("a"), Limit: tb, Hits: 1}},
			{
				{Key: key("a", tb), Tag: tag("a"), Limit: tb, Hits: 3, Group: 0, Mode: backend.Shadow, ConsumeWhenOver: true},
				{Key: key("a", tb), Tag: tag("a"), Limit: tb, Hits: 1, Group: 1},
				{Key: key("b", ban), Tag: tag("b"), Limit: ban, Hits: 1, Group: 2},
			},
			{{Key: key("a", tb), Tag: tag("a"), Limit: tb, Hits: 1}},
		})
	})
}

// nearly replays calls, each after its step of the clock, on memory and
// on Redis at url, and checks that their results agree but for ResetAfter
// and RetryAfter, which may be a microsecond apart: the known differences
// that the traffic of differential leaves out. It logs where they differ.
func nearly(t *testing.T, url string, opts redis.Options, steps []time.Duration, calls [][]backend.Request) {
	clock := backendtest.NewClock(backendtest.T0)
	mem := memory.New(memory.Options{Now: clock.Now})
	t.Cleanup(func() { mem.Close() })
	opts.Now = clock.Now
	opts.Prefix = "diff:" + strings.ReplaceAll(t.Name(), " ", "_") + ":"
	rs := newStore(t, newClient(t, url), opts)
	now := backendtest.T0
	for n, reqs := range calls {
		now = now.Add(steps[n])
		clock.Set(now)
		memRes, redisRes := make([]backend.Result, len(reqs)), make([]backend.Result, len(reqs))
		if err := mem.Take(t.Context(), reqs, memRes); err != nil {
			t.Fatal(err)
		}
		if err := rs.Take(t.Context(), reqs, redisRes); err != nil {
			t.Fatal(err)
		}
		for i := range reqs {
			m, r := memRes[i], redisRes[i]
			if m.OverLimit != r.OverLimit || m.Remaining != r.Remaining ||
				(m.ResetAfter-r.ResetAfter).Abs() > time.Microsecond || (m.RetryAfter-r.RetryAfter).Abs() > time.Microsecond {
				t.Errorf("call %d, request %d: memory %+v, redis %+v: more than a microsecond apart", n, i, m, r)
			} else if m != r {
				t.Logf("call %d, request %d: memory %+v, redis %+v", n, i, m, r)
			}
		}
	}
}

// scriptRuns returns how many scripts the server of client has run.
func scriptRuns(t *testing.T, client *goredis.Client) int {
	t.Helper()
	info, err := client.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, cmd := range []string{"cmdstat_fcall:calls=", "cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
		if _, v, ok := strings.Cut(info, cmd); ok {
			c, _ := strconv.Atoi(v[:strings.IndexByte(v, ',')])
			n += c
		}
	}
	return n
}

// persistScript removes the TTL of every key of one node that starts with
// ARGV[1].
var persistScript = goredis.NewScript(`
local n = 0
for _, k in ipairs(redis.call('KEYS', ARGV[1] .. '*')) do
  n = n + redis.call('PERSIST', k)
end
return n`)

// persistAll removes the TTL of every key of client's node under prefix.
func persistAll(ctx context.Context, client goredis.Scripter, prefix string) error {
	if err := persistScript.Run(ctx, client, nil, prefix).Err(); err != nil {
		return fmt.Errorf("persist %s*: %w", prefix, err)
	}
	return nil
}

// A diffRun is one differential test: the traffic, the Redis store's
// options, and how to remove the TTLs of its keys.
type diffRun struct {
	url     string
	opts    redis.Options
	persist func(context.Context, string) error
	traffic traffic
	// lanes is how many callers make calls at once, each on descriptors
	// of its own, so that the order in which Redis takes their calls
	// changes nothing: standalone Redis then decides several calls in
	// one script run. Zero means one.
	lanes int
	// eval runs the script with EVALSHA, as on Redis before 7.0.
	eval bool
}

// differential replays the run's calls against a memory store and a
// Redis store, on one manual clock, and fails at the first Result on
// which they differ.
// differential replays run's traffic and returns its redis.Store.
func differential(t *testing.T, run diffRun) *redis.Store {
	tr, lanes := run.traffic, max(run.lanes, 1)
	clock := backendtest.NewClock(backendtest.T0)
	mem := memory.New(memory.Options{Now: clock.Now})
	t.Cleanup(func() { mem.Close() })
	opts := run.opts
	opts.Now = clock.Now
	opts.Prefix = "diff:" + strings.ReplaceAll(t.Name(), " ", "_") + ":"
	rs := newStore(t, newClient(t, run.url), opts)
	if run.eval {
		redis.EvalOnly(rs)
	}

	steps := rand.New(rand.NewPCG(tr.seed, 0))
	ls := make([]*lane, lanes)
	for k := range ls {
		ls[k] = newLane(tr, k)
	}
	now := backendtest.T0
	for n := 0; n < diffCalls; n += lanes {
		now = now.Add(tr.step(steps))
		clock.Set(now)
		var wg sync.WaitGroup
		for _, l := range ls {
			wg.Go(func() { l.err = l.take(t.Context(), mem, rs) })
		}
		wg.Wait()
		for _, l := range ls {
			if l.err != nil {
				t.Fatalf("seed %d, lane %d, call %d at T0+%v: %v", tr.seed, l.id, l.calls, now.Sub(backendtest.T0), l.err)
			}
		}
		if err := run.persist(t.Context(), opts.Prefix); err != nil {
			t.Fatalf("seed %d: %v", tr.seed, err)
		}
	}
	var calls, refused, over, gives, leased, renewed int
	for _, l := range ls {
		calls, refused, over = calls+l.calls, refused+l.refused, over+l.over
		gives, leased, renewed = gives+l.gives, leased+l.leased, renewed+l.renewed
	}
	t.Logf("seed %d: %d calls in %d lanes, %d refused, %d requests over, %d give-backs, %d leases, %d renewed; local cache answered %d, cluster refunds %d",
		tr.seed, calls, lanes, refused, over, gives, leased, renewed, rs.LocalCacheHits(), rs.Refunds())
	if tr.leases && calls/20 > min(gives, leased) {
		t.Errorf("%d give-backs, %d leases in %d calls: too few to compare", gives, leased, calls)
	}
	if calls/100 > min(gives, leased, renewed) && !tr.windows && !tr.leases {
		t.Errorf("%d give-backs, %d leases, %d renewed in %d calls: too few to compare", gives, leased, renewed, calls)
	}
	// Traffic that stops refusing, refunding or hitting the cache would
	// compare too little.
	if refused < calls/20 || over < calls/10 {
		t.Errorf("only %d of %d calls refused, %d requests over: the traffic is too gentle", refused, calls, over)
	}
	if tr.cluster && rs.Refunds() < uint64(calls/50) {
		t.Errorf("only %d refunds in %d calls: the traffic spans too few slots", rs.Refunds(), calls)
	}
	if tr.cache && rs.LocalCacheHits() < uint64(calls/100) {
		t.Errorf("the local cache answered only %d of %d calls: the traffic repeats too few refused calls", rs.LocalCacheHits(), calls)
	}
	return rs
}

// A lane is one caller of a differential test: its traffic, on
// descriptors of its own.
type lane struct {
	id    int
	tr    traffic
	r     *rand.Rand
	descs []descriptor
	last  [][]backend.Request // its latest calls, to repeat
	// leases are the leases its calls were given, by key: held or not,
	// for its give-backs and renews to name.
	leases map[string][]int64

	calls, refused, over int
	// give-backs, leases given, and renews that found their lease
	gives, leased, renewed int
	err                    error
}

func newLane(tr traffic, id int) *lane {
	r := rand.New(rand.NewPCG(tr.seed, uint64(id)+1))
	return &lane{id: id, tr: tr, r: r, descs: tr.descriptors(r, id), leases: map[string][]int64{}}
}

// take makes the lane's next call on both stores and compares them.
func (l *lane) take(ctx context.Context, mem, rs backend.Store) error {
	var reqs []backend.Request
	switch {
	case len(l.last) > 0 && l.tr.cache && l.r.IntN(3) == 0:
		reqs = l.last[len(l.last)-1] // a client retrying at once
	case len(l.last) > 0 && l.r.IntN(5) == 0:
		reqs = l.last[l.r.IntN(len(l.last))] // the same call again
	default:
		reqs = l.tr.call(l.r, l.descs, l.leases)
		l.last = append(l.last, reqs)
		if len(l.last) > 4 {
			l.last = l.last[1:]
		}
	}
	l.calls++
	memRes, redisRes := make([]backend.Result, len(reqs)), make([]backend.Result, len(reqs))
	if err := mem.Take(ctx, reqs, memRes); err != nil {
		return fmt.Errorf("memory: %w", err)
	}
	if err := rs.Take(ctx, reqs, redisRes); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	refused := backend.Refused(reqs, memRes)
	if l.tr.cache {
		if got := backend.Refused(reqs, redisRes); got != refused {
			return fmt.Errorf("memory refused %v, redis with its local cache %v:\n%s", refused, got, describe(reqs, memRes, redisRes))
		}
	} else {
		for i := range reqs {
			if memRes[i] != redisRes[i] {
				return fmt.Errorf("request %d differs:\n%s", i, describe(reqs, memRes, redisRes))
			}
		}
	}
	if refused {
		l.refused++
	}
	for i := range memRes {
		if memRes[i].OverLimit {
			l.over++
		}
		switch {
		case reqs[i].Op == backend.GiveBack:
			l.gives++
		case reqs[i].Op == backend.Renew && !memRes[i].OverLimit:
			l.renewed++
		case memRes[i].Lease != 0:
			l.leased++
		}
		if lease := memRes[i].Lease; lease != 0 {
			k := reqs[i].Key
			if l.leases[k] = append(l.leases[k], lease); len(l.leases[k]) > 8 {
				l.leases[k] = l.leases[k][1:]
			}
		}
	}
	return nil
}

// describe formats a call and both stores' answers, one request a line.
func describe(reqs []backend.Request, memRes, redisRes []backend.Result) string {
	var b strings.Builder
	for i, q := range reqs {
		fmt.Fprintf(&b, "  %d: key %q %v %d/%v burst %d hits %d group %d mode %d cwo %v op %d lease %d -> memory %+v, redis %+v\n",
			i, q.Key, q.Limit.Algorithm, q.Limit.Requests, q.Limit.Window, q.Limit.Burst, q.Hits, q.Group, q.Mode, q.ConsumeWhenOver,
			q.Op, q.Lease, memRes[i], redisRes[i])
	}
	return b.String()
}

// traffic generates a differential test's calls.
type traffic struct {
	seed uint64
	// cluster leaves out what Cluster decides differently by design (see
	// TestDifferentialCluster).
	cluster bool
	// windows makes nine calls in ten of the common shape, which take.lua
	// decides on its lean path: window limits only, enforced, without
	// consume_when_over, on counters of their own within the call. The
	// tenth is of the general mix, so that batches mix both kinds.
	windows bool
	// leases makes nine calls in ten of that shape with concurrency
	// limits in it too, taken and given back (by lease or anonymously),
	// which take.lua decides on its lean path as well; the tenth is of
	// the general mix, where leases are renewed.
	leases bool
	// cache compares only each call's verdict: the store's local cache
	// answers a repeated refusal with the results Redis gave then, whose
	// ResetAfter and RetryAfter it ages but whose Remaining and OverLimit
	// (of the requests that were within their limits) may be stale.
	cache bool
}

// A descriptor is one descriptor's counter-key prefix, its requests' Tag
// and its limits, one per algorithm.
type descriptor struct {
	key    []byte
	tag    string
	limits []backend.Limit
}

// descriptors returns a few descriptors of lane id with keys as the
// engine makes them, so that on Cluster they fall in several slots.
func (tr traffic) descriptors(r *rand.Rand, id int) []descriptor {
	windows := []time.Duration{time.Second, 1500 * time.Millisecond, 10 * time.Second, time.Minute}
	descs := make([]descriptor, 6)
	for d := range descs {
		k := backend.AppendKeyPart(nil, "lane"+strconv.Itoa(id))
		k = backend.AppendKeyPart(k, "user")
		k = backend.AppendKeyPart(k, "u"+strconv.Itoa(d))
		if d%2 == 1 {
			k = backend.AppendKeyPart(k, "path")
			k = backend.AppendKeyPart(k, "/p"+strconv.Itoa(d))
		}
		descs[d].key = k
		// The descriptor's part, as the engine sets it; but one
		// descriptor goes without, so that on Cluster each of its keys
		// is a part of its own and its groups span several parts. (A
		// key keeps one tag: on Cluster the tag is part of the counter's
		// Redis key.)
		if d != 5 {
			descs[d].tag = string(k)
		}
		for _, a := range backend.Algorithms {
			l := backend.Limit{Algorithm: a, Requests: 1 + r.Uint64N(5), Window: windows[r.IntN(len(windows))]}
			if (a == backend.TokenBucket || a == backend.GCRA) && r.IntN(2) == 0 {
				l.Burst = 1 + r.Uint64N(6)
			}
			descs[d].limits = append(descs[d].limits, l)
		}
	}
	return descs
}

// step returns how far the clock moves before the next call: often not
// at all, else anything from a microsecond to an hour.
func (tr traffic) step(r *rand.Rand) time.Duration {
	switch p := r.IntN(100); {
	case p < 30:
		return 0
	case p < 50:
		return time.Duration(1+r.IntN(1000)) * time.Microsecond
	case p < 80:
		return time.Duration(1+r.IntN(1_000_000)) * time.Microsecond
	case p < 95:
		return time.Duration(1+r.Int64N(int64(2*time.Minute/time.Microsecond))) * time.Microsecond
	default:
		return time.Duration(1+r.Int64N(int64(time.Hour/time.Microsecond))) * time.Microsecond
	}
}

// call returns one call: up to four groups, each a descriptor's limits,
// with keys repeated when groups share a descriptor or a group names a
// limit twice. A group in six gives back, one in eight renews leases of
// a concurrency limit; they name leases of leases (by key) at times.
func (tr traffic) call(r *rand.Rand, descs []descriptor, leases map[string][]int64) []backend.Request {
	if tr.windows && r.IntN(10) != 0 {
		return tr.windowCall(r, descs)
	}
	if tr.leases && r.IntN(10) != 0 {
		return tr.leaseCall(r, descs, leases)
	}
	var reqs []backend.Request
	for g := range 1 + r.IntN(4) {
		d := &descs[r.IntN(len(descs))]
		mode := []backend.Mode{backend.Enforce, backend.Enforce, backend.Shadow, backend.Quota}[r.IntN(4)]
		cwo := r.IntN(6) == 0
		op := backend.Take
		switch r.IntN(24) {
		case 0, 1, 2, 3:
			op, cwo = backend.GiveBack, false
		case 4, 5, 6:
			op, cwo = backend.Renew, false
		}
		for range 1 + r.IntN(3) {
			l := d.limits[r.IntN(len(d.limits))]
			if op == backend.Renew {
				l = d.limits[backend.Concurrency] // (one limit per algorithm, in their order)
			}
			if cwo && tr.cluster && (l.Algorithm == backend.TokenBucket || l.Algorithm == backend.Concurrency) {
				l = d.limits[0] // see TestDifferentialCluster
			}
			switch r.IntN(25) {
			case 0:
				l.Requests, l.Burst = 0, 0 // a ban: same key, no counter
			case 1:
				// A limit whose count changed: same counter, as the key
				// holds only the algorithm and window. Not a token
				// bucket's: its Expiry depends on its capacity, and a
				// bucket full under one capacity is forgotten by Redis
				// (fresh, so full, under the other) but by memory only
				// when its sweeper or an eviction comes by, so which one
				// a raised capacity meets depends on timing.
				if l.Algorithm != backend.TokenBucket {
					l.Requests += 1 + r.Uint64N(3)
				}
			}
			var hits uint64
			switch p := r.IntN(100); {
			case p < 15: // check only
			case p < 70:
				hits = 1
			case p < 90:
				hits = 2 + r.Uint64N(2)
			case p < 97 || cwo: // up to past what the limit ever admits
				// (Not astronomically past when recorded: a debt of 2^32
				// hits can put a counter's times past 2^53 µs, beyond
				// which take.lua's doubles no longer hold every
				// microsecond, and RetryAfter may differ by one.)
				hits = r.Uint64N(l.Capacity() + 3)
			default: // astronomically many, up to 2^64-1
				hits = []uint64{1<<32 - 1, 1<<53 + 1, 1 << 62, 1 << 63, 1<<64 - 1}[r.IntN(5)]
			}
			q := backend.Request{
				Key: string(backend.AppendKeySuffix(d.key, l)), Tag: d.tag,
				Limit: l, Hits: hits, Group: g, Mode: mode, ConsumeWhenOver: cwo, Op: op,
			}
			if op != backend.Take && l.Algorithm == backend.Concurrency && r.IntN(4) != 0 {
				if known := leases[q.Key]; len(known) > 0 && r.IntN(6) != 0 {
					q.Lease = known[r.IntN(len(known))]
					if r.IntN(2) == 0 {
						q.Lease = known[len(known)-1] // the newest, most likely held
					}
				} else {
					q.Lease = backend.Micros(backendtest.T0) + 1 + r.Int64N(1e6) // most likely no lease's
				}
			}
			reqs = append(reqs, q)
		}
	}
	return reqs
}

// windowCall returns a call of the common shape (see traffic.windows): up
// to four groups, each one or two of a descriptor's window limits, on
// counters of their own, with the hits of traffic.call's requests but
// for the astronomical ones.
func (tr traffic) windowCall(r *rand.Rand, descs []descriptor) []backend.Request {
	var reqs []backend.Request
	seen := map[string]bool{}
	for g := range 1 + r.IntN(4) {
		d := &descs[r.IntN(len(descs))]
		for range 1 + r.IntN(2) {
			var windows []backend.Limit
			for _, l := range d.limits {
				if l.Algorithm == backend.SlidingWindow || l.Algorithm == backend.FixedWindow {
					windows = append(windows, l)
				}
			}
			l := windows[r.IntN(len(windows))]
			if r.IntN(25) == 0 {
				l.Requests += 1 + r.Uint64N(3) // a limit whose count changed, as in traffic.call
			}
			key := string(backend.AppendKeySuffix(d.key, l))
			if seen[key] {
				continue
			}
			seen[key] = true
			var hits uint64
			switch p := r.IntN(100); {
			case p < 15: // check only
			case p < 75:
				hits = 1
			case p < 92:
				hits = 2 + r.Uint64N(2)
			default:
				hits = r.Uint64N(l.Requests + 3)
			}
			reqs = append(reqs, backend.Request{Key: key, Tag: d.tag, Limit: l, Hits: hits, Group: g})
		}
	}
	return reqs
}

// leaseCall returns a call of the lean shape with concurrency limits (see
// traffic.leases): up to four groups, each one or two of a descriptor's
// window and concurrency limits, on counters of their own, enforced, with
// the hits of traffic.call's requests; or one call in three, a call that
// gives back on concurrency limits a lease each (held, released or
// lapsed, made up) or anonymously.
func (tr traffic) leaseCall(r *rand.Rand, descs []descriptor, leases map[string][]int64) []backend.Request {
	var reqs []backend.Request
	seen := map[string]bool{}
	giveBack := r.IntN(3) == 0
	for g := range 1 + r.IntN(4) {
		d := &descs[r.IntN(len(descs))]
		for range 1 + r.IntN(2) {
			lean := []backend.Limit{d.limits[backend.SlidingWindow], d.limits[backend.FixedWindow]}
			lean = append(lean, d.limits[backend.Concurrency], d.limits[backend.Concurrency]) // as often as both windows
			l := lean[r.IntN(len(lean))]
			if giveBack {
				l = d.limits[backend.Concurrency]
			}
			if r.IntN(25) == 0 {
				l.Requests += 1 + r.Uint64N(3) // a limit whose count changed, as in traffic.call
			}
			key := string(backend.AppendKeySuffix(d.key, l))
			if seen[key] {
				continue
			}
			seen[key] = true
			var hits uint64
			switch p := r.IntN(100); {
			case p < 15: // check only
			case p < 75:
				hits = 1
			case p < 92:
				hits = 2 + r.Uint64N(2)
			case p < 99:
				hits = r.Uint64N(l.Requests + 3)
			default:
				hits = []uint64{1<<32 - 1, 1<<53 + 1, 1<<64 - 1}[r.IntN(3)]
			}
			q := backend.Request{Key: key, Tag: d.tag, Limit: l, Hits: hits, Group: g}
			if giveBack {
				q.Op = backend.GiveBack
				known := leases[key]
				switch p := r.IntN(8); {
				case p < 4 && len(known) > 0:
					q.Lease = known[len(known)-1] // the newest, most likely held
				case p < 6 && len(known) > 0:
					q.Lease = known[r.IntN(len(known))]
				case p < 7:
					q.Lease = backend.Micros(backendtest.T0) + 1 + r.Int64N(1e6) // most likely no lease's
				}
			}
			reqs = append(reqs, q)
		}
	}
	return reqs
}
