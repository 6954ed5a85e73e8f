package memory_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/backendtest"
	"github.com/ratelimitd/ratelimitd/backend/memory"
)

func exchange(t *testing.T, s *memory.Store, reqs ...backend.ShareRequest) []backend.ShareResult {
	t.Helper()
	res := make([]backend.ShareResult, len(reqs))
	if err := s.ExchangeShares(t.Context(), reqs, res); err != nil {
		t.Fatalf("ExchangeShares error: %v", err)
	}
	return res
}

func TestExpiredSharesDroppedOnExchange(t *testing.T) {
	clock := backendtest.NewClock(backendtest.T0)
	s := newStore(t, memory.Options{Now: clock.Now})
	exchange(t, s,
		backend.ShareRequest{Bucket: "b", Replica: "r1", Limit: 10, Want: 1, TTL: time.Second},
		backend.ShareRequest{Bucket: "b", Replica: "r2", Limit: 10, Want: 1, TTL: time.Hour})
	if got := s.Shares(); got != 2 {
		t.Fatalf("Shares() = %d after two replicas' entries, want 2", got)
	}
	clock.Set(backendtest.T0.Add(time.Second))
	exchange(t, s, backend.ShareRequest{Bucket: "b", Replica: "r2", Limit: 10, Want: 1, TTL: time.Hour})
	if got := s.Shares(); got != 1 {
		t.Errorf("Shares() = %d after r1's entry expired and its bucket was exchanged, want 1", got)
	}
}

func TestSweeperDropsExpiredShares(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memory.New(memory.Options{SweepInterval: time.Second})
		defer s.Close()
		exchange(t, s,
			backend.ShareRequest{Bucket: "a", Replica: "r1", Limit: 10, Want: 1, TTL: time.Second},
			backend.ShareRequest{Bucket: "b", Replica: "r1", Limit: 10, Want: 1, TTL: time.Second},
			backend.ShareRequest{Bucket: "b", Replica: "r2", Limit: 10, Want: 1, TTL: time.Hour})
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if got := s.Shares(); got != 1 {
			t.Errorf("Shares() = %d after the second-long entries passed, want 1", got)
		}
	})
}

func TestShareConformance(t *testing.T) {
	backendtest.RunShares(t, func(t *testing.T, now func() time.Time) backend.ShareStore {
		return newStore(t, memory.Options{Now: now})
	})
}

func TestShareConformanceOneShard(t *testing.T) {
	backendtest.RunShares(t, func(t *testing.T, now func() time.Time) backend.ShareStore {
		return newStore(t, memory.Options{Now: now, MaxKeys: 50})
	})
}
