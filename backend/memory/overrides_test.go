package memory_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/backendtest"
	"github.com/ratelimitd/ratelimitd/backend/memory"
)

func TestOverrides(t *testing.T) {
	backendtest.RunOverrides(t, func(t *testing.T) backend.OverrideStore {
		s := memory.New(memory.Options{})
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestReset(t *testing.T) {
	backendtest.RunReset(t, func(t *testing.T, now func() time.Time) backend.Store {
		s := memory.New(memory.Options{Now: now})
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// TestResetDropsCounters: a reset key's counter is gone, not zeroed, so
// that it no longer counts towards MaxKeys.
func TestResetDropsCounters(t *testing.T) {
	s := memory.New(memory.Options{})
	defer s.Close()
	l := backend.Limit{Algorithm: backend.SlidingLog, Requests: 3, Window: time.Minute}
	reqs := []backend.Request{
		{Key: backendtest.CounterKey("a", l), Limit: l, Hits: 1},
		{Key: backendtest.CounterKey("b", l), Limit: l, Hits: 1, Group: 1},
	}
	if err := s.Take(t.Context(), reqs, make([]backend.Result, 2)); err != nil {
		t.Fatal(err)
	}
	if err := s.Reset(t.Context(), reqs[:1]); err != nil {
		t.Fatal(err)
	}
	if memory.Holds(s, reqs[0].Key) || !memory.Holds(s, reqs[1].Key) || s.Len() != 1 {
		t.Errorf("after Reset(a): holds a %v, b %v, Len %d; want false, true, 1",
			memory.Holds(s, reqs[0].Key), memory.Holds(s, reqs[1].Key), s.Len())
	}
}

// TestOverridesClosed: a closed store fails every call with
// backend.ErrClosed.
func TestOverridesClosed(t *testing.T) {
	s := memory.New(memory.Options{})
	s.Close()
	if _, err := s.PutOverride(t.Context(), "a", nil, 1); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("PutOverride after Close: %v, want ErrClosed", err)
	}
	if _, _, err := s.DeleteOverride(t.Context(), "a"); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("DeleteOverride after Close: %v, want ErrClosed", err)
	}
	if _, _, err := s.Overrides(t.Context(), 0); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Overrides after Close: %v, want ErrClosed", err)
	}
	if err := s.Reset(t.Context(), nil); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Reset after Close: %v, want ErrClosed", err)
	}
}
