package server_test

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/ratelimitd/ratelimitd/server"
)

// hotRules limit each address to 10 hits a minute.
const hotRules = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 10
`

// The addresses of hotTraffic: the attacker goes far over its limit, the
// near one uses 9 of its 10, the crowd 1 or 2 each.
const (
	attacker     = "203.0.113.9"
	nearAddr     = "198.51.100.7"
	attackerHits = 200
	crowd        = 2000
)

// hotTraffic sends the attacker's, the near address's and the crowd's
// requests, from several goroutines, half over gRPC and half over POST
// /json.
func hotTraffic(t *testing.T, h *harness, post func(body string) int) {
	t.Helper()
	var addrs []string
	for range attackerHits {
		addrs = append(addrs, attacker)
	}
	for range 9 {
		addrs = append(addrs, nearAddr)
	}
	for i := range crowd {
		addrs = append(addrs, fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255))
		if i%3 == 0 {
			addrs = append(addrs, fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255))
		}
	}
	var wg sync.WaitGroup
	work := make(chan string)
	for w := range 4 {
		wg.Go(func() {
			for a := range work {
				if w%2 == 0 {
					if _, err := h.envoy.ShouldRateLimit(t.Context(), request("edge", desc("remote_address", a))); err != nil {
						t.Errorf("ShouldRateLimit(%s): %v", a, err)
					}
					continue
				}
				if code := post(`{"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "` + a + `"}]}]}`); code != 200 && code != 429 {
					t.Errorf("POST /json for %s = %d", a, code)
				}
			}
		})
	}
	for _, a := range addrs {
		work <- a
	}
	close(work)
	wg.Wait()
}

// hotView is what the tests read of GET /hotkeys.
type hotView struct {
	Replica       string  `json:"replica"`
	WindowSeconds float64 `json:"window_seconds"`
	Values        string  `json:"values"`
	Domains       []struct {
		Domain  string     `json:"domain"`
		Refused []hotEntry `json:"refused"`
		Nearest []hotEntry `json:"nearest"`
	} `json:"domains"`
}

type hotEntry struct {
	Rule       string `json:"rule"`
	File       string `json:"file"`
	Line       int    `json:"line"`
	Descriptor []struct {
		Key, Value string
	} `json:"descriptor"`
	Hits, Refused, Limit, Remaining uint64
	Window, Reset                   string
	Used                            float64
}

// hotKeys runs the traffic on a server with opts and returns GET
// /hotkeys's body, decoded and not.
func hotKeys(t *testing.T, opts server.HotKeysOptions) (string, hotView) {
	t.Helper()
	h := newHarness(t, parseRules(t, hotRules), server.Options{HotKeys: opts})
	ts := httpServer(t, h)
	hotTraffic(t, h, func(body string) int {
		code, _, _ := do(t, ts, "POST", "/json", body)
		return code
	})
	code, body, hdr := do(t, ts, "GET", "/hotkeys", "")
	if code != 200 || hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /hotkeys = %d (%s) %s", code, hdr.Get("Content-Type"), body)
	}
	var v hotView
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("GET /hotkeys: %v in %s", err, body)
	}
	if len(v.Domains) != 1 || v.Domains[0].Domain != "edge" {
		t.Fatalf("GET /hotkeys: want the domain edge alone, got %s", body)
	}
	return body, v
}

// digest is how /hotkeys shows a value by default.
func digest(v string) string { return fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(v)))[:7+16] }

// TestHotKeysHTTP: under traffic from a crowd of addresses, one far over
// its limit and one near it, GET /hotkeys names the attacker first among
// the refused (with its rule, file and line, exact counts and limit) and
// first among the nearest, the near address next, by their digests: no
// address appears as itself.
func TestHotKeysHTTP(t *testing.T) {
	body, v := hotKeys(t, server.HotKeysOptions{Enabled: true, Replica: "replica-a", K: 5})
	nearest := v.Domains[0].Nearest
	if v.Replica != "replica-a" || v.WindowSeconds != 60 || v.Values != "digest" {
		t.Errorf("replica %q, window %v, values %q; want replica-a, 60, digest", v.Replica, v.WindowSeconds, v.Values)
	}
	refused := v.Domains[0].Refused
	if len(refused) != 1 {
		t.Fatalf("refused = %+v, want the attacker alone", refused)
	}
	a := refused[0]
	if len(a.Descriptor) != 1 || a.Descriptor[0].Key != "remote_address" || a.Descriptor[0].Value != digest(attacker) {
		t.Errorf("refused[0].descriptor = %+v, want remote_address %s", a.Descriptor, digest(attacker))
	}
	if a.Rule != "remote_address" || !strings.HasSuffix(a.File, ".yaml") || a.Line == 0 {
		t.Errorf("refused[0]: rule %q at %s:%d; want remote_address in the rules file", a.Rule, a.File, a.Line)
	}
	// hits counts the hits asked while the list held the counter: from the
	// first refusal, which concurrent callers may reach before the last of
	// the 10 admitted hits, so between the refused and all of them.
	if want := uint64(attackerHits - 10); a.Refused != want || a.Hits < want || a.Hits > attackerHits || a.Limit != 10 || a.Remaining != 0 || a.Window != "1m0s" || a.Used != 1 {
		t.Errorf("refused[0] = %+v; want %d refused of %d to %d hits, limit 10 a minute, none remaining, used 1", a, want, want, attackerHits)
	}
	if len(nearest) != 5 || nearest[0].Descriptor[0].Value != digest(attacker) || nearest[1].Descriptor[0].Value != digest(nearAddr) || nearest[1].Used != 0.9 {
		t.Errorf("nearest = %+v; want 5, the attacker (1.0) then %s (0.9)", nearest, digest(nearAddr))
	}
	for _, addr := range []string{attacker, nearAddr, "10.0.0.0"} {
		if strings.Contains(body, addr) {
			t.Errorf("GET /hotkeys shows %s as itself: %s", addr, body)
		}
	}
}

// TestHotKeysShowValues: with ShowValues, the values are shown as they
// are.
func TestHotKeysShowValues(t *testing.T) {
	_, v := hotKeys(t, server.HotKeysOptions{Enabled: true, ShowValues: true})
	nearest := v.Domains[0].Nearest
	if v.Values != "shown" || len(v.Domains[0].Refused) != 1 || v.Domains[0].Refused[0].Descriptor[0].Value != attacker {
		t.Errorf("values %q, refused %+v; want shown, %s", v.Values, v.Domains[0].Refused, attacker)
	}
	if len(nearest) != 100 || nearest[1].Descriptor[0].Value != nearAddr {
		t.Errorf("nearest has %d (want K = 100), second %+v (want %s)", len(nearest), nearest[1:2], nearAddr)
	}
	if v.Replica == "" {
		t.Error("no replica name")
	}
}

// TestHotKeysOff: without Options.HotKeys, /hotkeys answers 404.
func TestHotKeysOff(t *testing.T) {
	h := newHarness(t, parseRules(t, hotRules), server.Options{})
	if code, body, _ := do(t, httpServer(t, h), "GET", "/hotkeys", ""); code != 404 {
		t.Errorf("GET /hotkeys = %d %s, want 404", code, body)
	}
}
