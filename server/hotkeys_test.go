package server_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/url"
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
	DigestKey     string  `json:"digest_key"`
	DigestKeyID   string  `json:"digest_key_id"`
	Lookup        *struct {
		Value string `json:"value"`
		Found int    `json:"found"`
	} `json:"lookup"`
	Domains []struct {
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
	ts := hotServer(t, opts)
	body, v := getHotKeys(t, ts, "/hotkeys")
	if len(v.Domains) != 1 || v.Domains[0].Domain != "edge" {
		t.Fatalf("GET /hotkeys: want the domain edge alone, got %s", body)
	}
	return body, v
}

// hotServer runs the traffic on a server with opts and returns its HTTP
// endpoints.
func hotServer(t *testing.T, opts server.HotKeysOptions) *httptest.Server {
	t.Helper()
	h := newHarness(t, parseRules(t, hotRules), server.Options{HotKeys: opts})
	ts := httpServer(t, h)
	hotTraffic(t, h, func(body string) int {
		code, _, _ := do(t, ts, "POST", "/json", body)
		return code
	})
	return ts
}

// getHotKeys returns the body of GET path (/hotkeys and a query),
// decoded and not.
func getHotKeys(t *testing.T, ts *httptest.Server, path string) (string, hotView) {
	t.Helper()
	code, body, hdr := do(t, ts, "GET", path, "")
	if code != 200 || hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s = %d (%s) %s", path, code, hdr.Get("Content-Type"), body)
	}
	var v hotView
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, body)
	}
	return body, v
}

// testDigestKey is the digests' key of the tests that know it.
var testDigestKey = []byte("0123456789abcdef-test-key")

// digest is how /hotkeys shows a value by default, under testDigestKey:
// "hmac:" and the first 8 bytes of the HMAC-SHA256 of "v" and the value.
func digest(v string) string {
	m := hmac.New(sha256.New, testDigestKey)
	m.Write([]byte("v" + v))
	return "hmac:" + hex.EncodeToString(m.Sum(nil)[:8])
}

// TestHotKeysHTTP: under traffic from a crowd of addresses, one far over
// its limit and one near it, GET /hotkeys names the attacker first among
// the refused (with its rule, file and line, exact counts and limit) and
// first among the nearest, the near address next, by their keyed digests:
// no address appears as itself, nor as its unkeyed SHA-256.
func TestHotKeysHTTP(t *testing.T) {
	body, v := hotKeys(t, server.HotKeysOptions{Enabled: true, Replica: "replica-a", K: 5, DigestKey: testDigestKey})
	nearest := v.Domains[0].Nearest
	if v.Replica != "replica-a" || v.WindowSeconds != 60 || v.Values != "digest" || v.DigestKey != "file" {
		t.Errorf("replica %q, window %v, values %q, digest key %q; want replica-a, 60, digest, file", v.Replica, v.WindowSeconds, v.Values, v.DigestKey)
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
		sum := sha256.Sum256([]byte(addr))
		if unkeyed := hex.EncodeToString(sum[:8]); strings.Contains(body, addr) || strings.Contains(body, unkeyed) {
			t.Errorf("GET /hotkeys shows %s as itself or as its SHA-256 (%s): %s", addr, unkeyed, body)
		}
	}
}

// TestHotKeysDigestKey: replicas given the same key show the same
// digests and key ID; without a key, each server draws its own, and two
// show different digests for the same value.
func TestHotKeysDigestKey(t *testing.T) {
	attackerDigest := func(v hotView) string {
		t.Helper()
		if len(v.Domains[0].Refused) == 0 {
			t.Fatalf("no refused counter")
		}
		return v.Domains[0].Refused[0].Descriptor[0].Value
	}
	_, a := hotKeys(t, server.HotKeysOptions{Enabled: true, DigestKey: testDigestKey})
	_, b := hotKeys(t, server.HotKeysOptions{Enabled: true, DigestKey: testDigestKey})
	if attackerDigest(a) != attackerDigest(b) || a.DigestKeyID != b.DigestKeyID || a.DigestKeyID == "" {
		t.Errorf("same key: digests %s, %s, key IDs %q, %q; want them equal", attackerDigest(a), attackerDigest(b), a.DigestKeyID, b.DigestKeyID)
	}
	_, c := hotKeys(t, server.HotKeysOptions{Enabled: true})
	_, d := hotKeys(t, server.HotKeysOptions{Enabled: true})
	if c.DigestKey != "random" || d.DigestKey != "random" {
		t.Errorf("digest_key %q, %q without a key; want random", c.DigestKey, d.DigestKey)
	}
	for _, v := range []hotView{c, d} {
		if !strings.HasPrefix(attackerDigest(v), "hmac:") || len(attackerDigest(v)) != len("hmac:")+16 {
			t.Errorf("digest %q, want hmac: and 16 hex digits", attackerDigest(v))
		}
	}
	if attackerDigest(c) == attackerDigest(d) || attackerDigest(c) == attackerDigest(a) || c.DigestKeyID == d.DigestKeyID {
		t.Errorf("random keys: digests %s, %s (key IDs %s, %s), and %s under the test key; want all different",
			attackerDigest(c), attackerDigest(d), c.DigestKeyID, d.DigestKeyID, attackerDigest(a))
	}
}

// TestHotKeysLookup: GET /hotkeys?value=V answers how V shows, and only
// the counters that hold it, in both lists; a value no counter holds
// finds nothing; a value over 1 KiB, counted by its SHA-256, is found by
// itself.
func TestHotKeysLookup(t *testing.T) {
	long := strings.Repeat("k", 2000)
	ts := hotServer(t, server.HotKeysOptions{Enabled: true})
	for range 12 { // over the limit of 10
		if code, body, _ := do(t, ts, "POST", "/json", `{"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "`+long+`"}]}]}`); code != 200 && code != 429 {
			t.Fatalf("POST /json = %d %s", code, body)
		}
	}
	_, all := getHotKeys(t, ts, "/hotkeys")
	if all.Lookup != nil {
		t.Errorf("lookup %+v without ?value=", all.Lookup)
	}
	_, v := getHotKeys(t, ts, "/hotkeys?value="+attacker)
	if v.Lookup == nil || v.Lookup.Found != 2 || len(v.Domains) != 1 {
		t.Fatalf("?value=%s: lookup %+v, %d domains; want found 2 in edge", attacker, v.Lookup, len(v.Domains))
	}
	d := v.Domains[0]
	if len(d.Refused) != 1 || len(d.Nearest) != 1 || d.Refused[0].Descriptor[0].Value != v.Lookup.Value || d.Nearest[0].Descriptor[0].Value != v.Lookup.Value {
		t.Errorf("?value=%s: refused %+v, nearest %+v; want the attacker's counter, shown as %s, in each", attacker, d.Refused, d.Nearest, v.Lookup.Value)
	}
	if all.Domains[0].Refused[0].Descriptor[0].Value != v.Lookup.Value {
		t.Errorf("the most refused shows as %s, the lookup of %s as %s", all.Domains[0].Refused[0].Descriptor[0].Value, attacker, v.Lookup.Value)
	}
	_, v = getHotKeys(t, ts, "/hotkeys?value=192.0.2.200")
	if v.Lookup == nil || v.Lookup.Found != 0 || len(v.Domains) != 0 {
		t.Errorf("?value= of an address never sent: lookup %+v, domains %+v; want nothing found", v.Lookup, v.Domains)
	}
	_, v = getHotKeys(t, ts, "/hotkeys?value="+url.QueryEscape(long))
	if v.Lookup == nil || len(v.Domains) != 1 || len(v.Domains[0].Refused) != 1 || v.Domains[0].Refused[0].Descriptor[0].Value != v.Lookup.Value {
		t.Errorf("?value= of a value over 1 KiB: lookup %+v, domains %+v; want its refused counter", v.Lookup, v.Domains)
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

// TestHotKeysLookupIPPrefix: under an ip_prefix rule, the address a
// client sends finds the counter of its network, as the engine counts it.
func TestHotKeysLookupIPPrefix(t *testing.T) {
	h := newHarness(t, parseRules(t, `
domain: edge
descriptors:
  - key: remote_address
    ip_prefix: {v4: 24}
    rate_limit: {unit: minute, requests_per_unit: 5}
`), server.Options{HotKeys: server.HotKeysOptions{Enabled: true}})
	ts := httpServer(t, h)
	for range 8 { // over the limit of 5
		do(t, ts, "POST", "/json", `{"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.7"}]}]}`)
	}
	_, v := getHotKeys(t, ts, "/hotkeys?value=10.0.0.7")
	if v.Lookup == nil || v.Lookup.Found != 2 {
		t.Errorf("?value=10.0.0.7 under ip_prefix v4 24: lookup %+v, want found 2 (its network's counter, in both lists)", v.Lookup)
	}
	_, v = getHotKeys(t, ts, "/hotkeys?value=10.0.1.7")
	if v.Lookup == nil || v.Lookup.Found != 0 {
		t.Errorf("?value=10.0.1.7, another network: lookup %+v, want nothing found", v.Lookup)
	}
}
