package hotkeys

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
)

// clock is a settable clock for Options.Now.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                   { return &clock{t: time.Unix(1_700_000_000, 0)} }
func counterKey(dom string, kv ...string) []byte {
	b := backend.AppendKeyPart(nil, dom)
	for _, s := range kv {
		b = backend.AppendKeyPart(b, s)
	}
	return b
}

var minuteLimit = backend.Limit{Requests: 100, Window: time.Minute}

// refuse observes hits refused on the counter of ip in domain edge.
func refuse(tr *Tracker, ip string, hits uint64) {
	tr.Observe("edge", counterKey("edge", "remote_address", ip), &Observation{
		Path: "remote_address", Hits: hits, Refused: true, Limit: minuteLimit, Reset: time.Second,
	})
}

// admit observes an admitted hit on the counter of ip leaving remaining.
func admit(tr *Tracker, ip string, remaining uint64) {
	tr.Observe("edge", counterKey("edge", "remote_address", ip), &Observation{
		Path: "remote_address", Hits: 1, Limit: minuteLimit, Remaining: remaining,
	})
}

// values returns the remote_address values of es, in order.
func values(t *testing.T, es []Entry) []string {
	t.Helper()
	var out []string
	for _, e := range es {
		_, parts, ok := DecodeKey(e.Key)
		if !ok || len(parts) != 1 {
			t.Fatalf("DecodeKey(%q) = %v, %v", e.Key, parts, ok)
		}
		out = append(out, parts[0].Value)
	}
	return out
}

// oneDomain returns tr's only domain's view.
func oneDomain(t *testing.T, tr *Tracker) Domain {
	t.Helper()
	v := tr.View()
	if len(v) != 1 {
		t.Fatalf("View() has %d domains, want 1", len(v))
	}
	return v[0]
}

// TestRefusedHeavyHitters: under Zipf-distributed refusals over 100,000
// distinct counters, the sketch of K=50 holds the 12 most refused, its
// estimates bound the true counts from above within their error bounds,
// and no shard holds more than its tables' K counters each. (Each of
// the 12 has about 1% of the refusals or more, more than 1/K of its
// shard's whichever shard it falls in: space-saving guarantees them.)
func TestRefusedHeavyHitters(t *testing.T) {
	tr := New(Options{K: 50, Now: newClock().now})
	r := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(r, 1.1, 1, 99_999)
	truth := map[string]uint64{}
	for range 500_000 {
		ip := fmt.Sprintf("10.%d", zipf.Uint64())
		truth[ip]++
		refuse(tr, ip, 1)
	}
	d := oneDomain(t, tr)
	if len(d.Refused) != 50 {
		t.Fatalf("%d refused counters shown, want K = 50", len(d.Refused))
	}
	shown := values(t, d.Refused)
	for i := range 12 {
		if ip := fmt.Sprintf("10.%d", i); !slices.Contains(shown, ip) {
			t.Errorf("the #%d most refused counter, %s (%d refusals), is not shown: %v", i+1, ip, truth[ip], shown)
		}
	}
	for i, e := range d.Refused {
		got, want := e.Refused, truth[shown[i]]
		if got < want || got-e.RefusedError > want {
			t.Errorf("%s: refused %d with error %d, true count %d", shown[i], got, e.RefusedError, want)
		}
	}
	for i := range shards {
		sh := &(*tr.domains.Load())["edge"].shards[i]
		if n := len(sh.refused.slots) + len(sh.previous.slots); n > 2*50 {
			t.Errorf("shard %d holds %d counters", i, n)
		}
	}
}

// TestRefusedWindows: refusals count over the current and the previous
// window, then are forgotten.
func TestRefusedWindows(t *testing.T) {
	c := newClock()
	tr := New(Options{K: 10, Window: time.Minute, Now: c.now})
	refuse(tr, "10.0.0.1", 5)
	c.advance(70 * time.Second) // the next window: the refusals are the previous window's
	refuse(tr, "10.0.0.2", 1)
	d := oneDomain(t, tr)
	if got := values(t, d.Refused); !slices.Equal(got, []string{"10.0.0.1", "10.0.0.2"}) {
		t.Fatalf("refused after a window = %v, want 10.0.0.1 then 10.0.0.2", got)
	}
	if d.Refused[0].Refused != 5 || d.Refused[0].Hits != 5 {
		t.Errorf("10.0.0.1: refused %d, hits %d; want 5, 5", d.Refused[0].Refused, d.Refused[0].Hits)
	}
	c.advance(60 * time.Second)
	if got := values(t, oneDomain(t, tr).Refused); !slices.Equal(got, []string{"10.0.0.2"}) {
		t.Fatalf("refused after two windows = %v, want 10.0.0.2 alone", got)
	}
	c.advance(2 * time.Minute)
	if got := oneDomain(t, tr).Refused; len(got) != 0 {
		t.Fatalf("refused after an idle window = %v, want none", values(t, got))
	}
}

// TestRefusedCountsAdmittedHits: a held counter's admitted hits count in
// its hits, not in its refusals.
func TestRefusedCountsAdmittedHits(t *testing.T) {
	tr := New(Options{Now: newClock().now})
	refuse(tr, "10.0.0.1", 2)
	admit(tr, "10.0.0.1", 10)
	admit(tr, "10.0.0.1", 9)
	e := oneDomain(t, tr).Refused[0]
	if e.Hits != 4 || e.Refused != 2 || e.Remaining != 9 {
		t.Errorf("hits %d, refused %d, remaining %d; want 4, 2, 9", e.Hits, e.Refused, e.Remaining)
	}
}

// TestNearestAgesOut: the nearest list ranks counters by their peak share
// within the window, and drops a peak that left it.
func TestNearestAgesOut(t *testing.T) {
	c := newClock()
	tr := New(Options{K: 2, Window: time.Minute, Now: c.now})
	admit(tr, "10.0.0.1", 10) // 0.9
	admit(tr, "10.0.0.2", 60) // 0.4
	admit(tr, "10.0.0.3", 80) // 0.2: below both, K = 2
	admit(tr, "10.0.0.2", 70) // lower than its peak: the peak stays
	d := oneDomain(t, tr)
	if got := values(t, d.Nearest); !slices.Equal(got, []string{"10.0.0.1", "10.0.0.2"}) {
		t.Fatalf("nearest = %v, want 10.0.0.1, 10.0.0.2", got)
	}
	if d.Nearest[0].Used != 0.9 || d.Nearest[1].Used != 0.4 || d.Nearest[1].Remaining != 70 {
		t.Errorf("used %v, %v, remaining %d; want 0.9, 0.4, 70", d.Nearest[0].Used, d.Nearest[1].Used, d.Nearest[1].Remaining)
	}
	c.advance(30 * time.Second)
	admit(tr, "10.0.0.3", 50) // 0.5: takes the place of 10.0.0.2's 0.4
	c.advance(31 * time.Second)
	// 10.0.0.1's peak is 61 s old: gone.
	if got := values(t, oneDomain(t, tr).Nearest); !slices.Equal(got, []string{"10.0.0.3"}) {
		t.Fatalf("nearest after a minute = %v, want 10.0.0.3 alone", got)
	}
	admit(tr, "10.0.0.1", 95) // back, at its new share
	c.advance(time.Minute + time.Second)
	if got := oneDomain(t, tr).Nearest; len(got) != 0 {
		t.Fatalf("nearest after two idle minutes = %v, want none", values(t, got))
	}
}

// TestNearestIgnoresRefusals: a refused decision is in the refused list,
// not the nearest.
func TestNearestIgnoresRefusals(t *testing.T) {
	tr := New(Options{Now: newClock().now})
	refuse(tr, "10.0.0.1", 1)
	if d := oneDomain(t, tr); len(d.Nearest) != 0 || len(d.Refused) != 1 {
		t.Errorf("nearest %d, refused %d; want 0, 1", len(d.Nearest), len(d.Refused))
	}
}

// TestMaxDomains: decisions in domains past the bound are not tracked.
func TestMaxDomains(t *testing.T) {
	tr := New(Options{MaxDomains: 2, Now: newClock().now})
	for _, dom := range []string{"a", "b", "c", "a"} {
		tr.Observe(dom, counterKey(dom, "k", "v"), &Observation{Hits: 1, Refused: true, Limit: minuteLimit})
	}
	var names []string
	for _, d := range tr.View() {
		names = append(names, d.Name)
	}
	if !slices.Equal(names, []string{"a", "b"}) {
		t.Errorf("domains %v, want a, b", names)
	}
}

// TestDomainsLeaveTheRules: a domain no longer live is left out of View,
// and its place goes to a new domain once MaxDomains is reached.
func TestDomainsLeaveTheRules(t *testing.T) {
	live := map[string]bool{"a": true, "b": true, "c": true}
	tr := New(Options{MaxDomains: 2, Now: newClock().now, Live: func(d string) bool { return live[d] }})
	observe := func(dom string) {
		tr.Observe(dom, counterKey(dom, "k", "v"), &Observation{Hits: 1, Refused: true, Limit: minuteLimit})
	}
	names := func() (out []string) {
		for _, d := range tr.View() {
			out = append(out, d.Name)
		}
		return out
	}
	observe("a")
	observe("b")
	live["a"] = false // a reload removed it
	if got := names(); !slices.Equal(got, []string{"b"}) {
		t.Errorf("domains %v, want b", got)
	}
	observe("c")
	if got := names(); !slices.Equal(got, []string{"b", "c"}) {
		t.Errorf("domains %v after c came, want b, c", got)
	}
}

// TestLongKeys: a key over KeyBytes is held truncated, told apart from
// another with the same start, and decodes to its whole entries.
func TestLongKeys(t *testing.T) {
	tr := New(Options{Now: newClock().now})
	long := strings.Repeat("x", KeyBytes)
	for i, n := range []uint64{3, 1} {
		key := counterKey("edge", "path", "/a", "api_key", long+fmt.Sprint(i))
		tr.Observe("edge", key, &Observation{Hits: n, Refused: true, Limit: minuteLimit})
	}
	d := oneDomain(t, tr)
	if len(d.Refused) != 2 || d.Refused[0].Refused != 3 || d.Refused[1].Refused != 1 {
		t.Fatalf("refused = %+v, want two counters refused 3 and 1", d.Refused)
	}
	dom, parts, ok := DecodeKey(d.Refused[0].Key)
	if !d.Refused[0].Truncated || ok || dom != "edge" || len(parts) != 1 || parts[0] != (Part{Key: "path", Value: "/a"}) {
		t.Errorf("truncated %v; DecodeKey = %q, %v, %v", d.Refused[0].Truncated, dom, parts, ok)
	}
}

// TestDecodeKey decodes values and digests.
func TestDecodeKey(t *testing.T) {
	key := backend.AppendKeyPart(nil, "edge")
	key = backend.AppendKeyPart(key, "a:b")
	key = backend.AppendKeyPart(key, "12:34")
	key = backend.AppendKeyPart(key, "k")
	key = backend.AppendKeyDigest(key, "\x00\x01")
	dom, parts, ok := DecodeKey(key)
	want := []Part{{Key: "a:b", Value: "12:34"}, {Key: "k", Value: "\x00\x01", Digest: true}}
	if dom != "edge" || !ok || !slices.Equal(parts, want) {
		t.Errorf("DecodeKey = %q, %+v, %v; want edge, %+v, true", dom, parts, ok, want)
	}
	for _, bad := range []string{"", "x", "4:ed", "4:edge1:k", "4:edge1:k9:v"} {
		if _, _, ok := DecodeKey([]byte(bad)); ok {
			t.Errorf("DecodeKey(%q) is complete", bad)
		}
	}
}

// TestTableInvariants adds, replaces and drops random keys and checks
// that the index finds every held key and the heap stays ordered.
func TestTableInvariants(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	tb := newTable(16)
	for step := range 20_000 {
		key := []byte(fmt.Sprint(r.IntN(64)))
		h := uint64(r.IntN(8)) // few hashes: long probe runs and collisions
		h = h<<8 | uint64(len(key))
		switch s := tb.find(h, key); {
		case r.IntN(50) == 0:
			limit := uint64(r.IntN(20))
			tb.retain(func(sl *slot) bool { return sl.score > limit })
		case s >= 0 && r.IntN(4) == 0: // a score may fall, as a nearest peak leaving the window does
			tb.setScore(s, uint64(r.IntN(10)))
		case s >= 0:
			tb.setScore(s, tb.slots[s].score+uint64(r.IntN(5)))
		default:
			tb.add(h, key, uint64(r.IntN(10)))
		}
		checkTable(t, step, tb)
	}
}

func checkTable(t *testing.T, step int, tb *table) {
	t.Helper()
	for s := range tb.slots {
		sl := &tb.slots[s]
		if got := tb.find(sl.hash, sl.key[:sl.keyLen]); got != int32(s) {
			t.Fatalf("step %d: find(slot %d) = %d", step, s, got)
		}
		if it := tb.heap[tb.pos[s]]; it.slot != int32(s) || it.score != sl.score {
			t.Fatalf("step %d: pos[%d] = %d, heap holds %+v there, slot's score %d", step, s, tb.pos[s], it, sl.score)
		}
	}
	for i := 1; i < len(tb.heap); i++ {
		if tb.less(int32(i), int32((i-1)/2)) {
			t.Fatalf("step %d: heap out of order at %d", step, i)
		}
	}
	used := 0
	for _, s := range tb.index {
		if s >= 0 {
			used++
		}
	}
	if used != len(tb.slots) {
		t.Fatalf("step %d: index holds %d, table %d", step, used, len(tb.slots))
	}
}

// TestObserveAllocs: in steady state Observe allocates nothing, whether
// it adds, replaces or counts a counter.
func TestObserveAllocs(t *testing.T) {
	tr := New(Options{K: 4})
	keys := make([][]byte, 64)
	for i := range keys {
		keys[i] = counterKey("edge", "remote_address", fmt.Sprint(i))
	}
	o := &Observation{Hits: 1, Limit: minuteLimit, Remaining: 3}
	tr.Observe("edge", keys[0], o)
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		i++
		o.Refused = i%2 == 0
		o.Remaining = uint64(i % 100)
		tr.Observe("edge", keys[i%len(keys)], o)
	})
	if allocs != 0 {
		t.Errorf("Observe allocates %v times per call", allocs)
	}
}
