package rlqs

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/internal/grpctest"
)

// faultyStore is a real memory store whose exchanges fail while down is set.
type faultyStore struct {
	*memory.Store
	down atomic.Bool
}

func (f *faultyStore) ExchangeShares(ctx context.Context, reqs []backend.ShareRequest, res []backend.ShareResult) error {
	if f.down.Load() {
		return fmt.Errorf("exchange: %w", backend.ErrUnavailable)
	}
	return f.Store.ExchangeShares(ctx, reqs, res)
}

// replicaSet serves n Services sharing one memory store, on one test
// clock, each exchanging every 5 ms of real time.
func replicaSet(t *testing.T, n int, opts Options) ([]*Service, []*grpc.ClientConn, *clock, *faultyStore) {
	t.Helper()
	clk := &clock{now: time.Unix(1_700_000_000, 0)}
	mem := memory.New(memory.Options{Now: clk.Now})
	t.Cleanup(func() { mem.Close() })
	store := &faultyStore{Store: mem}
	services := make([]*Service, n)
	conns := make([]*grpc.ClientConn, n)
	for i := range services {
		o := opts
		o.Store, o.Replica, o.SyncInterval, o.Now = store, fmt.Sprintf("replica-%d", i), 5*time.Millisecond, clk.Now
		services[i] = New(rulesOf(t, oneRule), o)
		t.Cleanup(services[i].EndStreams)
		g := grpc.NewServer()
		services[i].Register(g)
		conns[i], _ = grpctest.Serve(t, g)
	}
	return services, conns, clk, store
}

// TestSharedAcrossReplicas: two clients of one bucket, on two replicas of
// one store, each end up with half the limit, pushed to them as the
// replicas exchange; when one leaves, the other gets the whole limit once
// the assignment of the one that left has expired.
func TestSharedAcrossReplicas(t *testing.T) {
	_, conns, clk, _ := replicaSet(t, 2, Options{})
	id := map[string]string{"path": "/api"}
	a, b := newClient(t, conns[0], clk, "web"), newClient(t, conns[1], clk, "web")
	a.report(usage{id: id, allowed: 1})
	if got := rate(a.strategy(id)); !near(got, 100) {
		t.Fatalf("alone: %v per second, want the limit 100", got)
	}
	b.report(usage{id: id, allowed: 1})
	a.until(func() bool { return near(rate(a.strategy(id)), 50) })
	b.until(func() bool { return near(rate(b.strategy(id)), 50) })
	if sum := rate(a.strategy(id)) + rate(b.strategy(id)); sum > 100 {
		t.Errorf("shares across replicas sum to %v, over the limit 100", sum)
	}
	if err := a.st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.st.Recv(); err == nil {
		t.Fatal("a's stream goes on after CloseSend")
	}
	b.report(usage{id: id, allowed: 1, elapsed: time.Second})
	if got := rate(b.strategy(id)); got > 50 {
		t.Errorf("while a's assignment is in force: %v per second, want at most 50", got)
	}
	// Replica 0's entry stands until a's assignment expires, plus one
	// assignment's time to live (what it could have handed out before its
	// next exchange): past both, b has the whole limit whether or not
	// replica 0 has removed its entry yet.
	clk.Advance(2*ttlFor(DefaultReportingInterval) + time.Second)
	// b's replica asks by the demands it knew (a's, then): its next
	// exchange asks for the whole limit and pushes it.
	b.report(usage{id: id, allowed: 1, elapsed: time.Second})
	b.until(func() bool { return near(rate(b.strategy(id)), 100) })
}

// TestLongReportingInterval: a client reporting less often than the
// fair-share tracker's TTL gets its share at every report, not the
// failure mode's answer: each report's assignment outlives the grant
// exchanged before it, and is exchanged anew.
func TestLongReportingInterval(t *testing.T) {
	_, conns, clk, _ := replicaSet(t, 1, Options{Fallback: FallbackDenyAll})
	id := map[string]string{"path": "/api"}
	a := newClient(t, conns[0], clk, "web")
	for i := range 4 {
		a.report(usage{id: id, allowed: 1, elapsed: 20 * time.Second})
		if got := rate(a.strategy(id)); !near(got, 100) {
			t.Fatalf("report %d at a 20 s interval: %s, want 100 per second", i, describe(a.strategy(id)))
		}
		clk.Advance(20 * time.Second)
	}
}

// TestViewConcurrent: GET /rlqs while reports come, for the race
// detector.
func TestViewConcurrent(t *testing.T) {
	services, conns, clk, _ := replicaSet(t, 1, Options{})
	cl := newClient(t, conns[0], clk, "web")
	id := map[string]string{"path": "/api"}
	cl.report(usage{id: id, allowed: 1})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 100 {
			services[0].ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/rlqs", nil))
		}
	}()
	for range 100 {
		cl.report(usage{id: id, allowed: 1})
	}
	<-done
}

// TestFallback: while the store grants nothing, a new limited bucket gets
// what the failure mode says; unlimited buckets are not concerned; when
// the store is back, the bucket gets its share at its next report.
func TestFallback(t *testing.T) {
	for _, c := range []struct {
		fallback Fallback
		want     string
	}{
		{FallbackAllowAll, "ALLOW_ALL"},
		{FallbackDenyAll, "DENY_ALL"},
		{FallbackNone, "none"},
	} {
		t.Run(c.want, func(t *testing.T) {
			_, conns, clk, store := replicaSet(t, 1, Options{Fallback: c.fallback})
			store.down.Store(true)
			cl := newClient(t, conns[0], clk, "web")
			id := map[string]string{"path": "/api"}
			if c.fallback == FallbackNone {
				// No assignment comes: the one answer, to a second
				// bucket of no rule, shows the first got none.
				cl.send(usage{id: id, allowed: 1}, usage{id: map[string]string{"other": "x"}, allowed: 1})
				if got := cl.recv(); len(got) != 1 || got[0] != bucketKey("", map[string]string{"other": "x"}) {
					t.Errorf("store down: answered %q, want only the bucket of no rule", got)
				}
			} else {
				cl.report(usage{id: id, allowed: 1})
			}
			if got := describe(cl.strategy(id)); got != c.want {
				t.Errorf("store down, new bucket: %s, want %s", got, c.want)
			}
			if got := describe(cl.strategy(map[string]string{"other": "x"})); c.fallback == FallbackNone && got != "ALLOW_ALL" {
				t.Errorf("store down, bucket of no rule: %s, want ALLOW_ALL", got)
			}
			store.down.Store(false)
			cl.report(usage{id: id, allowed: 1, elapsed: time.Second})
			if got := rate(cl.strategy(id)); !near(got, 100) {
				t.Errorf("store back: %v per second, want 100", got)
			}
		})
	}
}

// describe names a strategy for the tests: none, ALLOW_ALL, DENY_ALL or
// its token bucket's rate.
func describe(s *typev3.RateLimitStrategy) string {
	switch {
	case s == nil:
		return "none"
	case isBlanket(s, typev3.RateLimitStrategy_ALLOW_ALL):
		return "ALLOW_ALL"
	case isBlanket(s, typev3.RateLimitStrategy_DENY_ALL):
		return "DENY_ALL"
	}
	return fmt.Sprintf("%g/s", rate(s))
}

// TestView: GET /rlqs shows the buckets held, with the rule, the
// replica's grant and each stream's assignment; values that are not UTF-8
// come out valid (the test client cannot send them: validID is checked
// alone).
func TestView(t *testing.T) {
	services, conns, clk, _ := replicaSet(t, 1, Options{})
	cl := newClient(t, conns[0], clk, "web")
	id := map[string]string{"path": "/api"}
	cl.report(usage{id: id, allowed: 1})
	rec := httptest.NewRecorder()
	services[0].ServeHTTP(rec, httptest.NewRequest("GET", "/rlqs", nil))
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var v View
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("GET /rlqs: %v\n%s", err, rec.Body)
	}
	if v.Replica != "replica-0" || len(v.Buckets) != 1 {
		t.Fatalf("GET /rlqs: %+v, want replica-0 with one bucket", v)
	}
	b := v.Buckets[0]
	if b.Domain != "web" || b.Rule != "path" || b.BucketID["path"] != "/api" {
		t.Errorf("bucket %+v, want web's rule path, id path=/api", b)
	}
	if got := validID(map[string]string{"k\xfe": "v\xff"}); got["k\uFFFD"] != "v\uFFFD" {
		t.Errorf("validID of bytes that are not UTF-8: %q", got)
	}
	if b.Limit == nil || *b.Limit != 100 || b.Granted == nil || *b.Granted != 100 || b.OtherClients == nil || *b.OtherClients != 0 {
		t.Errorf("bucket limit %v, granted %v, others %v: want 100, 100, 0", b.Limit, b.Granted, b.OtherClients)
	}
	if len(b.Clients) != 1 || b.Clients[0].Assignment != "token_bucket" || !near(b.Clients[0].Rate, 100) {
		t.Errorf("clients %+v, want one token_bucket of 100 per second", b.Clients)
	}
}
