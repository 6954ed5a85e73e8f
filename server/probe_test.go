package server_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/server"
)

// readyz returns srv's GET /readyz.
func readyz(srv *server.Server) (int, string) {
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	return rec.Code, rec.Body.String()
}

// TestReadyUntilStoreAnswers: a store that has never answered keeps the
// server not ready under deny and error (but with ReadyWithoutStore),
// and ready under allow, its state "unreached"; ProbeStore probes it at
// once and every StoreProbeInterval, and the first answer makes the
// server ready and ends the probes. (In a synctest bubble: the
// intervals pass on its clock.)
func TestReadyUntilStoreAnswers(t *testing.T) {
	for _, c := range []struct {
		mode              server.FailureMode
		readyWithoutStore bool
		readyBefore       bool
	}{
		{server.FailDeny, false, false},
		{server.FailError, false, false},
		{server.FailAllow, false, true},
		{server.FailDeny, true, true},
	} {
		name := c.mode.String()
		if c.readyWithoutStore {
			name += "/ready-without-store"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := memory.New(memory.Options{})
				defer store.Close()
				var up atomic.Bool
				var probes atomic.Int32
				srv := server.New(store, parseRules(t, hotRules), server.Options{
					FailureMode: c.mode, ReadyWithoutStore: c.readyWithoutStore, StoreProbeInterval: time.Second,
					StoreProbe: func(ctx context.Context) error {
						probes.Add(1)
						if !up.Load() {
							return errors.New("dial tcp 127.0.0.1:1: connection refused")
						}
						return nil
					},
				})
				wantReady := func(when string, ready bool, state string) {
					t.Helper()
					code, body := readyz(srv)
					if want := map[bool]int{true: http.StatusOK, false: http.StatusServiceUnavailable}[ready]; code != want || !strings.Contains(body, "backend: "+state+"\n") {
						t.Errorf("%s: GET /readyz = %d %q, want %d with backend: %s", when, code, body, want, state)
					}
				}
				wantReady("before any probe", c.readyBefore, "unreached")

				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				done := make(chan error, 1)
				go func() { done <- srv.ProbeStore(ctx) }()
				synctest.Wait()
				if n := probes.Load(); n != 1 {
					t.Errorf("%d probes at start, want 1", n)
				}
				time.Sleep(3 * time.Second)
				synctest.Wait()
				if n := probes.Load(); n != 4 {
					t.Errorf("%d probes after 3 intervals, want 4", n)
				}
				wantReady("store down", c.readyBefore, "unreached")

				up.Store(true)
				time.Sleep(time.Second)
				synctest.Wait()
				wantReady("store up", true, "ok")
				select {
				case err := <-done:
					if err != nil {
						t.Errorf("ProbeStore = %v", err)
					}
				default:
					t.Fatal("ProbeStore goes on after the store answered")
				}
				time.Sleep(10 * time.Second)
				if n := probes.Load(); n != 5 {
					t.Errorf("%d probes, want 5: none after the answer", n)
				}
			})
		})
	}
}

// TestReadyAfterDecision: a decision whose store call succeeds shows the
// store answers, whatever the probe says; ProbeStore then stops, as it
// does when its context ends.
func TestReadyAfterDecision(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New(memory.Options{})
		defer store.Close()
		var probes atomic.Int32
		srv := server.New(store, parseRules(t, hotRules), server.Options{
			FailureMode: server.FailDeny, StoreProbeInterval: time.Second,
			StoreProbe: func(context.Context) error { probes.Add(1); return errors.New("down") },
		})
		if code, _ := readyz(srv); code != http.StatusServiceUnavailable {
			t.Fatalf("GET /readyz = %d before any answer, want 503", code)
		}
		resp, err := srv.Envoy().ShouldRateLimit(t.Context(), request("edge", desc("remote_address", "10.0.0.1")))
		if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("ShouldRateLimit = %v, %v", resp, err)
		}
		if code, body := readyz(srv); code != http.StatusOK {
			t.Errorf("GET /readyz = %d %q after a decision, want 200", code, body)
		}
		if err := srv.ProbeStore(t.Context()); err != nil || probes.Load() != 0 {
			t.Errorf("ProbeStore = %v after %d probes; want nil at once, none", err, probes.Load())
		}

		other := server.New(store, parseRules(t, hotRules), server.Options{
			FailureMode: server.FailDeny, StoreProbe: func(context.Context) error { return errors.New("down") },
		})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- other.ProbeStore(ctx) }()
		time.Sleep(time.Minute)
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ProbeStore = %v when its context ends, want nil", err)
		}
		if code, _ := readyz(other); code != http.StatusServiceUnavailable {
			t.Errorf("GET /readyz = %d, want 503: the store never answered", code)
		}
	})
}
