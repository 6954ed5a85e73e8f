package replay_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimitd/ratelimitd/backend/backendtest"
	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/server"
	"github.com/ratelimitd/ratelimitd/server/requestlog"
	"github.com/ratelimitd/ratelimitd/server/requestlog/replay"
)

// liveRules limit by every algorithm but the ban, so that each algorithm's
// state goes through replay.
const liveRules = `domain: live
descriptors:
  - key: a
    rate_limit: {algorithm: sliding_window, unit: second, requests_per_unit: 3}
  - key: b
    rate_limit: {algorithm: token_bucket, unit: second, requests_per_unit: 2, burst: 4}
  - key: c
    rate_limit: {algorithm: gcra, unit: second, requests_per_unit: 5}
  - key: d
    rate_limit: {algorithm: sliding_log, unit: second, requests_per_unit: 2}
  - key: e
    rate_limit: {algorithm: fixed_window, unit: second, requests_per_unit: 4}
`

// TestReplayIsTheDaemon: a server logs random traffic at random times
// under liveRules; replaying its log against liveRules and against no
// rules at all, the requests newly admitted are exactly those the server
// refused, and newly refused the reverse: replay decides as the daemon.
func TestReplayIsTheDaemon(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "requests.log")
	l, err := requestlog.Open(path, requestlog.Options{Sample: 1, Buffer: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	rules := loadRules(t, "live.yaml", liveRules)
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := backendtest.NewClock(start)
	store := memory.New(memory.Options{Now: clock.Now})
	defer store.Close()
	envoy := server.New(store, rules, server.Options{Now: clock.Now, RequestLog: l}).Envoy()

	rnd := rand.New(rand.NewPCG(1, 2))
	refused, n := 0, 20000
	at := start
	for range n {
		at = at.Add(time.Duration(rnd.IntN(40_000)) * time.Microsecond) // about 50 requests a second
		clock.Set(at)
		var descs []*rlv3.RateLimitDescriptor
		for range 1 + rnd.IntN(2) {
			key := string(rune('a' + rnd.IntN(5)))
			descs = append(descs, &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: key, Value: fmt.Sprint(rnd.IntN(3))}}})
		}
		resp, err := envoy.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "live", Descriptors: descs})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			refused++
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if written, dropped := l.Counts(); written != uint64(n) || dropped != 0 {
		t.Fatalf("log: %d written, %d dropped; want %d, 0", written, dropped, n)
	}
	if refused < n/20 || refused > n/2 {
		t.Fatalf("the server refused %d of %d requests: the traffic should refuse some, not most", refused, n)
	}
	none, err := config.Compile(nil)
	if err != nil {
		t.Fatal(err)
	}
	log, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name                    string
		old, neu                *config.Rules
		newlyRefused, newlyAdmt int
	}{
		{"rules to none", rules, none, 0, refused},
		{"none to rules", none, rules, refused, 0},
		{"rules to rules", rules, rules, 0, 0},
	} {
		rep, err := replay.Run(t.Context(), bytes.NewReader(log), replay.Options{Old: tc.old, New: tc.neu})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Requests != n || rep.NewlyRefused != tc.newlyRefused || rep.NewlyAdmitted != tc.newlyAdmt || rep.ErrorChanged != 0 {
			t.Errorf("%s: %d requests, %d newly refused, %d newly admitted, %d error changed; want %d, %d, %d, 0",
				tc.name, rep.Requests, rep.NewlyRefused, rep.NewlyAdmitted, rep.ErrorChanged, n, tc.newlyRefused, tc.newlyAdmt)
		}
	}
}
