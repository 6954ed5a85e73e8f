package fairshare

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// t0 is the injected clock's start.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// simClient is a client of the simulation: a true demand that shifts, the
// requests counted since its last report, and when it reports.
type simClient struct {
	id     string
	demand float64 // requests per second
	count  float64 // requests since the last report, fractional
	phase  time.Duration
	// reported is whether it has reported yet: the shares that must sum
	// to at most the limit are those of the clients the Tracker holds.
	reported bool
}

// TestTrackerConvergesAndStaysUnderLimit runs many clients of uneven demand
// reporting every interval at their own phases, on an injected clock, with
// demands shifting at times that fall inside intervals. At every step the
// live clients' shares sum to at most the limit, and from two intervals
// after each shift every share is within 5% of the max-min share of the
// true demands.
func TestTrackerConvergesAndStaysUnderLimit(t *testing.T) {
	const (
		n        = 40
		interval = 10 * time.Second
		step     = 250 * time.Millisecond
		epoch    = 7 * interval // time between shifts
		epochs   = 9
	)
	r := rand.New(rand.NewPCG(7, 8))
	tr := NewTracker(Options{TTL: 3 * interval})
	clients := make([]*simClient, n)
	for i := range clients {
		clients[i] = &simClient{id: fmt.Sprintf("envoy-%d", i), phase: step * time.Duration(r.Int64N(int64(interval/step)))}
	}
	// shift draws new demands from 10 to 1000 per second, at least 100
	// requests per interval so that whole counts measure them to 1%, and
	// returns the limit: 10000, a fair share of 250 that some clients are
	// below and most above, or (one epoch in three) 50000, more than all
	// want.
	shift := func(e int) float64 {
		for _, c := range clients {
			c.demand = 10 * math.Exp(r.Float64()*math.Log(100))
		}
		if e%3 == 2 {
			return 50000
		}
		return 10000
	}
	demands := make([]float64, n)
	target := make([]float64, n)
	checked := 0
	for e := range epochs {
		limit := shift(e)
		start := t0.Add(time.Duration(e)*epoch + 1250*time.Millisecond) // inside most clients' intervals
		for i, c := range clients {
			demands[i] = c.demand
		}
		Allocate(limit, demands, target)
		for now := start; now.Before(start.Add(epoch)); now = now.Add(step) {
			for _, c := range clients {
				c.count += c.demand * step.Seconds()
				if now.Sub(t0)%interval == c.phase {
					whole := math.Floor(c.count)
					c.count -= whole
					allowed := uint64(whole / 2)
					tr.Report("d/k=v", c.id, allowed, uint64(whole)-allowed, now)
					c.reported = true
				}
			}
			var sum float64
			for i, c := range clients {
				if !c.reported {
					continue
				}
				rate, ok := tr.Share("d/k=v", c.id, limit, now)
				if !ok {
					t.Fatalf("at %v: client %s has no share", now.Sub(t0), c.id)
				}
				sum += rate
				if e == 0 || now.Before(start.Add(2*interval)) {
					continue
				}
				if math.Abs(rate-target[i]) > 0.05*target[i] {
					t.Fatalf("at %v, %v after a shift: client %d (demand %.2f) has %.3f, max-min share %.3f",
						now.Sub(t0), now.Sub(start), i, c.demand, rate, target[i])
				}
				checked++
			}
			if sum > limit {
				t.Fatalf("at %v: shares sum to %v, over the limit %v", now.Sub(t0), sum, limit)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no share was checked against the max-min share")
	}
}

func TestTrackerFirstReport(t *testing.T) {
	tr := NewTracker(Options{})
	tr.Report("b", "small", 0, 0, t0)
	tr.Report("b", "small", 100, 0, t0.Add(10*time.Second)) // 10 per second
	if rate, _ := tr.Share("b", "small", 100, t0.Add(10*time.Second)); rate != 100 {
		t.Errorf("the only client: share %v, want the limit 100", rate)
	}
	// The newcomer's demand is unknown until its second report: it takes
	// what the small client leaves.
	tr.Report("b", "new", 5, 5, t0.Add(11*time.Second))
	now := t0.Add(11 * time.Second)
	if rate, _ := tr.Share("b", "small", 100, now); rate != 12.5 {
		t.Errorf("small client beside a newcomer: share %v, want its demand plus headroom 12.5", rate)
	}
	if rate, _ := tr.Share("b", "new", 100, now); rate != 87.5 {
		t.Errorf("newcomer: share %v, want the rest 87.5", rate)
	}
	// Its second report, 2 s later with 40 requests: 20 per second. Both
	// want their demands plus 25% (25 and 12.5), and split the rest.
	now = t0.Add(13 * time.Second)
	tr.Report("b", "new", 40, 0, now)
	if rate, _ := tr.Share("b", "new", 100, now); rate != 25+(100-25-12.5)/2 {
		t.Errorf("newcomer after its second report: share %v, want %v", rate, 25+(100-25-12.5)/2)
	}
}

func TestTrackerReportWithoutElapsedTime(t *testing.T) {
	tr := NewTracker(Options{})
	tr.Report("b", "c", 0, 0, t0)
	tr.Report("b", "big", 0, 0, t0)
	tr.Report("b", "big", 1000, 0, t0.Add(time.Second))
	tr.Report("b", "c", 10, 0, t0.Add(time.Second))
	tr.Report("b", "c", 10, 0, t0.Add(time.Second)) // no time elapsed: kept for the next interval
	now := t0.Add(time.Second)
	if rate, _ := tr.Share("b", "c", 100, now); rate != 12.5 {
		t.Errorf("after a report with no elapsed time: share %v, want 12.5 from the first report's 10 per second", rate)
	}
	now = t0.Add(2 * time.Second)
	tr.Report("b", "c", 10, 0, now) // 10 carried over + 10 in one second
	if rate, _ := tr.Share("b", "c", 100, now); rate != 25 {
		t.Errorf("with the carried-over count: share %v, want 20 per second plus headroom, 25", rate)
	}
}

func TestTrackerShareOfUnknown(t *testing.T) {
	tr := NewTracker(Options{MaxClientsPerBucket: 2})
	if rate, ok := tr.Share("nobody", "c", 100, t0); ok || rate != 0 {
		t.Errorf("unknown bucket: Share = %v, %v; want 0, false", rate, ok)
	}
	tr.Report("b", "a", 0, 0, t0)
	tr.Report("b", "a", 200, 0, t0.Add(10*time.Second)) // 20 per second
	now := t0.Add(10 * time.Second)
	if rate, ok := tr.Share("b", "stranger", 100, now); ok || rate != 0 {
		t.Errorf("unknown client on a known bucket: Share = %v, %v; want 0, false", rate, ok)
	}
	if rate, _ := tr.Share("b", "a", 100, now); rate != 100 {
		t.Errorf("known client after asking for a stranger: share %v, want 100", rate)
	}
	// A client refused at the bound gets no share: the shares held (a and
	// z) are all there is, so they stay within the limit.
	tr.Report("b", "z", 0, 0, now)
	if tr.Report("b", "refused", 0, 0, now) {
		t.Fatalf("a third client on a bucket of at most 2 was not refused")
	}
	if rate, ok := tr.Share("b", "refused", 100, now); ok || rate != 0 {
		t.Errorf("client refused at the bound: Share = %v, %v; want 0, false", rate, ok)
	}
}

func TestTrackerTTL(t *testing.T) {
	const ttl = 30 * time.Second
	tr := NewTracker(Options{TTL: ttl})
	for _, c := range []string{"a", "b"} {
		tr.Report("b", c, 0, 0, t0)
		tr.Report("b", c, 10000, 0, t0.Add(10*time.Second))
	}
	last := t0.Add(10 * time.Second)
	// a keeps reporting; b stops.
	tr.Report("b", "a", 10000, 0, last.Add(ttl))
	if rate, _ := tr.Share("b", "a", 100, last.Add(ttl)); rate != 50 {
		t.Errorf("with b reported exactly a TTL ago: a's share %v, want 50", rate)
	}
	if rate, _ := tr.Share("b", "a", 100, last.Add(ttl+time.Nanosecond)); rate != 100 {
		t.Errorf("with b gone past its TTL: a's share %v, want 100", rate)
	}
	if _, clients := tr.Len(); clients != 1 {
		t.Errorf("after b's TTL: %d clients held, want 1", clients)
	}
	// b, expired, gets no share until it reports again.
	if rate, ok := tr.Share("b", "b", 100, last.Add(ttl+time.Nanosecond)); ok || rate != 0 {
		t.Errorf("expired client: Share = %v, %v; want 0, false", rate, ok)
	}
	// Once every client has expired, the bucket is gone.
	if rate, ok := tr.Share("b", "a", 100, last.Add(2*ttl+time.Nanosecond)); ok || rate != 0 {
		t.Errorf("after every TTL: Share = %v, %v; want 0, false", rate, ok)
	}
	if buckets, clients := tr.Len(); buckets != 0 || clients != 0 {
		t.Errorf("after every TTL: %d buckets and %d clients held, want none", buckets, clients)
	}
}

func TestTrackerLimitChange(t *testing.T) {
	tr := NewTracker(Options{})
	for _, c := range []string{"a", "b"} {
		tr.Report("b", c, 0, 0, t0)
		tr.Report("b", c, 10000, 0, t0.Add(time.Second))
	}
	now := t0.Add(time.Second)
	if rate, _ := tr.Share("b", "a", 100, now); rate != 50 {
		t.Errorf("limit 100: share %v, want 50", rate)
	}
	if rate, _ := tr.Share("b", "a", 60, now); rate != 30 {
		t.Errorf("limit changed to 60: share %v, want 30", rate)
	}
}

func TestTrackerForget(t *testing.T) {
	tr := NewTracker(Options{})
	for _, bucket := range []string{"x", "y"} {
		for _, c := range []string{"a", "b"} {
			tr.Report(bucket, c, 0, 0, t0)
			tr.Report(bucket, c, 1000, 0, t0.Add(time.Second))
		}
	}
	now := t0.Add(time.Second)
	tr.Forget("a", now)
	for _, bucket := range []string{"x", "y"} {
		if rate, _ := tr.Share(bucket, "b", 100, now); rate != 100 {
			t.Errorf("bucket %s after a was forgotten: b's share %v, want 100", bucket, rate)
		}
	}
	if buckets, clients := tr.Len(); buckets != 2 || clients != 2 {
		t.Errorf("after forgetting a: %d buckets and %d clients, want 2 and 2", buckets, clients)
	}
	tr.Forget("b", now)
	if buckets, clients := tr.Len(); buckets != 0 || clients != 0 {
		t.Errorf("after forgetting everything: %d buckets and %d clients, want none", buckets, clients)
	}
	tr.Forget("never-seen", now)
}

// TestTrackerForgetKeepsShareInForce: a client forgotten while the share
// handed out to it (ReportFor's keep) is in force stays counted until it
// expires, so that the others are not handed its part before; then it
// goes. If it reports again meanwhile, it is back.
func TestTrackerForgetKeepsShareInForce(t *testing.T) {
	tr := NewTracker(Options{})
	for _, c := range []string{"a", "b"} {
		tr.ReportFor("x", c, 0, 0, 20*time.Second, t0)
	}
	now := t0.Add(time.Second)
	tr.Forget("a", now)
	if rate, _ := tr.Share("x", "b", 100, now); rate != 50 {
		t.Errorf("while a's share is in force: b's share %v, want 50", rate)
	}
	after := t0.Add(21 * time.Second)
	tr.ReportFor("x", "b", 0, 0, 20*time.Second, after)
	if rate, _ := tr.Share("x", "b", 100, after); rate != 100 {
		t.Errorf("once a's share expired: b's share %v, want 100", rate)
	}
	if _, clients := tr.Len(); clients != 1 {
		t.Errorf("once a's share expired: %d clients held, want 1", clients)
	}

	tr.ReportFor("x", "c", 0, 0, 20*time.Second, after)
	tr.Forget("c", after)
	tr.ReportFor("x", "c", 0, 0, 20*time.Second, after.Add(time.Second)) // back before its share expired
	tr.Forget("c", after.Add(time.Second))
	tr.Forget("c", after.Add(time.Second)) // twice is fine
	if _, clients := tr.Len(); clients != 2 {
		t.Errorf("c forgotten twice, with a share in force: %d clients held, want b and c", clients)
	}
}

func TestTrackerBounds(t *testing.T) {
	const ttl = 30 * time.Second
	tr := NewTracker(Options{TTL: ttl, MaxBuckets: 3, MaxClientsPerBucket: 2})
	for i := range 3 {
		if !tr.Report(fmt.Sprint("b", i), "c", 1, 0, t0.Add(time.Duration(i)*time.Second)) {
			t.Fatalf("bucket %d refused below the bound", i)
		}
	}
	// A flood of new bucket ids is refused while the held ones are live.
	for i := range 1000 {
		if tr.Report(fmt.Sprint("flood", i), "c", 1, 0, t0.Add(ttl)) {
			t.Fatalf("bucket flood%d accepted beyond MaxBuckets", i)
		}
	}
	if buckets, _ := tr.Len(); buckets != 3 {
		t.Fatalf("%d buckets held, want 3", buckets)
	}
	// Once the oldest has expired, a new bucket replaces it.
	if !tr.Report("new", "c", 1, 0, t0.Add(ttl+time.Nanosecond)) {
		t.Fatal("a new bucket refused though the oldest had expired")
	}
	if _, ok := tr.Share("b0", "c", 100, t0.Add(ttl+time.Nanosecond)); ok {
		t.Error("the expired bucket b0 still answers")
	}
	if _, ok := tr.Share("b1", "c", 100, t0.Add(ttl+time.Nanosecond)); !ok {
		t.Error("the live bucket b1 was dropped")
	}

	tr.Report("b1", "d", 1, 0, t0.Add(ttl))
	if tr.Report("b1", "e", 1, 0, t0.Add(ttl)) {
		t.Error("a third client accepted beyond MaxClientsPerBucket")
	}
	// c reported on b1 at 1 s: past its TTL at 31 s, so e takes its place.
	if !tr.Report("b1", "e", 1, 0, t0.Add(ttl+time.Second+time.Nanosecond)) {
		t.Error("a new client refused though another had expired")
	}
	if _, clients := tr.Len(); clients > 3*2 {
		t.Errorf("%d clients held, more than the bounds allow", clients)
	}
}

func TestTrackerMaxClients(t *testing.T) {
	const ttl = 30 * time.Second
	tr := NewTracker(Options{TTL: ttl, MaxClients: 3})
	tr.Report("old", "a", 1, 0, t0)
	tr.Report("x", "b", 1, 0, t0.Add(ttl))
	tr.Report("x", "c", 1, 0, t0.Add(ttl))
	if tr.Report("y", "d", 1, 0, t0.Add(ttl)) {
		t.Error("a fourth client accepted beyond MaxClients while all are live")
	}
	if buckets, clients := tr.Len(); buckets != 2 || clients != 3 {
		t.Errorf("%d buckets and %d clients held, want 2 and 3: a refused client leaves no bucket", buckets, clients)
	}
	// The bucket "old" expires: its client makes room.
	if !tr.Report("y", "d", 1, 0, t0.Add(ttl+time.Nanosecond)) {
		t.Error("a new client refused though the oldest bucket had expired")
	}
	if buckets, clients := tr.Len(); buckets != 2 || clients != 3 {
		t.Errorf("%d buckets and %d clients held, want 2 and 3", buckets, clients)
	}
}

func TestTrackerConcurrent(t *testing.T) {
	tr := NewTracker(Options{TTL: time.Minute, MaxBuckets: 8, MaxClientsPerBucket: 8})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				now := t0.Add(time.Duration(i) * time.Second)
				bucket, client := fmt.Sprint("b", i%10), fmt.Sprint("c", g, i%5)
				tr.Report(bucket, client, uint64(i), 1, now)
				if rate, ok := tr.Share(bucket, client, 100, now); ok && (rate < 0 || rate > 100) {
					t.Errorf("share %v outside [0, 100]", rate)
					return
				}
				if i%97 == 0 {
					tr.Forget(client, now)
				}
			}
		})
	}
	wg.Wait()
	if buckets, clients := tr.Len(); buckets > 8 || clients > 64 {
		t.Errorf("%d buckets and %d clients held, beyond the bounds", buckets, clients)
	}
}

func BenchmarkTrackerReportShare(b *testing.B) {
	for _, n := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
			tr := NewTracker(Options{})
			ids := make([]string, n)
			now := t0
			for i := range ids {
				ids[i] = fmt.Sprint("envoy-", i)
				tr.Report("domain/path=/api", ids[i], 0, 0, now)
			}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(time.Millisecond)
				id := ids[i%n]
				tr.Report("domain/path=/api", id, uint64(i%1000), 3, now)
				tr.Share("domain/path=/api", id, 1000, now)
				i++
			}
		})
	}
}

// TestTrackerReportFor: a client reported with a keep longer than the TTL
// stays counted for the keep, then expires.
func TestTrackerReportFor(t *testing.T) {
	const ttl = 30 * time.Second
	tr := NewTracker(Options{TTL: ttl})
	tr.ReportFor("b", "slow", 0, 0, 2*time.Minute, t0)
	tr.Report("b", "fast", 0, 0, t0)
	now := t0.Add(time.Minute)
	tr.Report("b", "fast", 6000, 0, now) // 100 per second
	if rate, ok := tr.Share("b", "fast", 100, now); !ok || rate != 50 {
		t.Errorf("past the TTL, within the keep: fast's share %v, %v; want 50, true", rate, ok)
	}
	if rate, ok := tr.Share("b", "slow", 100, t0.Add(2*time.Minute)); !ok || rate != 100 {
		t.Errorf("at the end of the keep, fast gone: slow's share %v, %v; want 100, true", rate, ok)
	}
	if rate, ok := tr.Share("b", "slow", 100, t0.Add(2*time.Minute+time.Nanosecond)); ok || rate != 0 {
		t.Errorf("past the keep: slow's share %v, %v; want 0, false", rate, ok)
	}
}
