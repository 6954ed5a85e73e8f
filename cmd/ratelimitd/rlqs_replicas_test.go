package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimitd/ratelimitd/client"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
	"github.com/ratelimitd/ratelimitd/server/rlqs"
)

// quotaRules limits tenant acme to 200 requests a second, a burst of 40
// (a token bucket: RLQS assigns each client its share of the burst).
const quotaRules = `domain: quota
descriptors:
  - key: tenant
    rate_limit: {algorithm: token_bucket, unit: second, requests_per_unit: 200, burst: 40}
`

// quotaClient is a Go client in quota mode on its own connection to one
// replica, and what it admitted.
type quotaClient struct {
	q        *client.Quota
	admitted atomic.Int64
	refused  atomic.Int64
}

// newQuotaClient connects a Quota to addr, reporting every interval,
// failing closed.
func newQuotaClient(t *testing.T, addr string, interval time.Duration) *quotaClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	q, err := client.NewQuota(conn, "quota", client.WithReportingInterval(interval), client.WithFailClosed())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return &quotaClient{q: q}
}

// drive has c ask rate times a second for tenant acme until ctx ends.
func (c *quotaClient) drive(ctx context.Context, rate int) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	d := client.D("tenant", "acme")
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if ok, _ := c.q.Allow(d); ok {
			c.admitted.Add(1)
		} else {
			c.refused.Add(1)
		}
	}
}

// scriptCalls returns how many scripts Redis at addr has run.
func scriptCalls(t *testing.T, addr string) int64 {
	t.Helper()
	rdb := goredis.NewClient(&goredis.Options{Addr: addr})
	defer rdb.Close()
	info, err := rdb.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for line := range strings.Lines(info) {
		for _, cmd := range []string{"cmdstat_evalsha:", "cmdstat_eval:"} {
			if rest, ok := strings.CutPrefix(line, cmd); ok {
				calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
				v, err := strconv.ParseInt(calls, 10, 64)
				if err != nil {
					t.Fatalf("INFO commandstats %q: %v", line, err)
				}
				n += v
			}
		}
	}
	return n
}

// TestRLQSReplicasShareLimit: 8 Go clients in quota mode over 3 ratelimitd
// processes sharing one Redis, each asking for 100 requests a second of a
// limit of 200 (4 times the limit in all), for 30 s: they admit, in all,
// the limit over the period within -5% and +1%, plus at most one burst
// per client. Redis runs one script per bucket per replica per sync
// interval, however many requests the clients decide.
func TestRLQSReplicasShareLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("30 s of traffic")
	}
	const (
		limit     = 200
		burst     = 40
		clients   = 8
		perSec    = 100
		period    = 30 * time.Second
		syncEvery = 250 * time.Millisecond
		interval  = 500 * time.Millisecond
	)
	srv := redistest.Start(t)
	path := writeRules(t, quotaRules)
	var procs []*process
	for range 3 {
		procs = append(procs, startProcess(t, "--config", path, "--backend", "redis://"+srv.Addr,
			"--rlqs-sync-interval", syncEvery.String(), "--failure-mode", "deny"))
	}
	cs := make([]*quotaClient, clients)
	for i := range cs {
		cs[i] = newQuotaClient(t, procs[i%3].grpc, interval)
	}
	scripts := scriptCalls(t, srv.Addr)
	ctx, cancel := context.WithTimeout(t.Context(), period)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() { c.drive(ctx, perSec) })
	}
	wg.Wait()
	elapsed := time.Since(start)
	scripts = scriptCalls(t, srv.Addr) - scripts

	var admitted, refused int64
	for i, c := range cs {
		admitted += c.admitted.Load()
		refused += c.refused.Load()
		t.Logf("client %d (replica %d): %d admitted, %d refused", i, i%3, c.admitted.Load(), c.refused.Load())
	}
	want := limit * elapsed.Seconds()
	lo, hi := 0.95*want, 1.01*want+clients*burst // a client's bucket starts full: at most the rule's burst each
	t.Logf("%d admitted, %d refused in %v: %.3f of the limit's %.0f (bounds %.0f to %.0f); %d scripts on Redis: %.2f per replica per sync interval",
		admitted, refused, elapsed.Round(time.Millisecond), float64(admitted)/want, want, lo, hi,
		scripts, float64(scripts)/3/(elapsed.Seconds()/syncEvery.Seconds()))
	if float64(admitted) < lo || float64(admitted) > hi {
		t.Errorf("admitted %d over %v, want %.0f to %.0f (the limit %d per second, -5%% to +1%%, plus one burst per client)",
			admitted, elapsed.Round(time.Millisecond), lo, hi, limit)
	}
	// One bucket, three replicas: a script per replica per sync interval,
	// and a few more for the first reports. A loaded machine ticks less
	// often, never more.
	if maxScripts := int64(3*(elapsed/syncEvery)) + 3*clients; scripts > maxScripts {
		t.Errorf("%d scripts on Redis, want at most %d: one per replica per %v", scripts, maxScripts, syncEvery)
	}
}

// TestRLQSReplicaDown: Go clients on a ratelimitd that stops (its streams
// ended by SIGTERM, or killed outright) keep their assignments until they
// expire, then follow their failure policy (closed: refused); once it is
// back on the same address they get assignments again.
func TestRLQSReplicaDown(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			const interval = 300 * time.Millisecond
			srv := redistest.Start(t)
			path := writeRules(t, quotaRules)
			args := []string{"--config", path, "--backend", "redis://" + srv.Addr, "--rlqs-sync-interval", "100ms"}
			p := startProcess(t, args...)
			c := newQuotaClient(t, p.grpc, interval)
			d := client.D("tenant", "acme")
			eventually(t, "an assignment at start", func() bool { ok, _ := c.q.Allow(d); return ok })

			_ = p.cmd.Process.Signal(sig)
			<-p.exited
			// The assignment lives two reporting intervals: after that
			// every call is refused, the policy failing closed.
			eventually(t, "refusals once the assignment expired", func() bool {
				for range 50 {
					if ok, _ := c.q.Allow(d); ok {
						return false
					}
				}
				return true
			})
			time.Sleep(3 * interval)
			for range 10 {
				if ok, _ := c.q.Allow(d); ok {
					t.Fatal("a call admitted while ratelimitd is down and the assignment expired")
				}
			}

			startProcess(t, append(args, "--grpc-addr", p.grpc)...)
			eventually(t, "an assignment after the restart", func() bool { ok, _ := c.q.Allow(d); return ok })
		})
	}
}

// TestRLQSReload: a limit changed in the rule file reaches every client,
// on every replica, within one reporting interval of the reload (SIGHUP):
// the clients report every minute, so the new assignments that GET /rlqs
// shows sent within eventually's 30 s were pushed, not answers to reports.
func TestRLQSReload(t *testing.T) {
	srv := redistest.Start(t)
	path := writeRules(t, quotaRules)
	const interval = time.Minute
	var procs []*process
	for range 2 {
		procs = append(procs, startProcess(t, "--config", path, "--backend", "redis://"+srv.Addr, "--rlqs-sync-interval", "100ms"))
	}
	var cs []*quotaClient
	for i := range 4 {
		cs = append(cs, newQuotaClient(t, procs[i%2].grpc, interval))
	}
	d := client.D("tenant", "acme")
	for _, c := range cs {
		eventually(t, "an assignment at start", func() bool { ok, _ := c.q.Allow(d); return ok })
	}
	eventually(t, "shares of the first limit", func() bool { return assignedTotal(t, procs) > 150 })

	writeFile(t, path, strings.Replace(quotaRules, "requests_per_unit: 200", "requests_per_unit: 20", 1))
	for _, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGHUP)
	}
	eventually(t, "shares of the new limit", func() bool { r := assignedTotal(t, procs); return r > 0 && r <= 20 })
}

// assignedTotal returns the rates assigned to every stream of every
// process, from GET /rlqs.
func assignedTotal(t *testing.T, procs []*process) float64 {
	t.Helper()
	var total float64
	for _, p := range procs {
		code, body := get(t, http.DefaultClient, "http://"+p.http+"/rlqs")
		var v rlqs.View
		if err := json.Unmarshal([]byte(body), &v); code != http.StatusOK || err != nil {
			t.Fatalf("GET /rlqs: %d %v\n%s", code, err, body)
		}
		for _, b := range v.Buckets {
			for _, c := range b.Clients {
				total += c.Rate
			}
		}
	}
	return total
}
