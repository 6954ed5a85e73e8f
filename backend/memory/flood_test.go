package memory_test

import (
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/backendtest"
	"github.com/ratelimitd/ratelimitd/backend/memory"
)

// appendAddressKey appends the counter key of remote_address addr under
// l to b, as the engine builds it for a descriptor of that one entry in
// domain edge.
func appendAddressKey(b []byte, addr netip.Addr, l backend.Limit) []byte {
	b = backend.AppendKeyPart(b, "edge")
	b = backend.AppendKeyPart(b, "remote_address")
	b = backend.AppendKeyPart(b, addr.String())
	return backend.AppendKeySuffix(b, l)
}

// TestFloodOfNewKeys is the flood of issue 21, item 5: on a store of the
// default size (1M keys), 30,000 requests of 64 new remote_address values
// each, in one minute, while victims that stand over their 5/min limit
// keep asking. No victim may be admitted again within the minute, and
// counters with some history (3 of 5) must keep it. There are 100 victims
// and 100 such counters, not one of each, so that a policy that lets a
// flood evict them at random cannot pass by luck: before this store's
// frequency-aware admission, each victim was evicted with a chance of
// about one in two.
//
// Clients new to the store also come while it is full (see newcomers): a
// new client is limited from its first call, and keeps its counter once
// it has been asked for more often than the flood's keys.
func TestFloodOfNewKeys(t *testing.T) {
	const (
		requests   = floodRequests
		perRequest = 64
		victims    = 100
		tries      = 100 // per victim, spread over the flood
	)
	clock := backendtest.NewClock(backendtest.T0)
	s := newStore(t, memory.Options{Now: clock.Now})
	l := backend.Limit{Algorithm: backend.SlidingWindow, Requests: 5, Window: time.Minute}

	take1 := func(key string, hits uint64) backend.Result {
		t.Helper()
		return take(t, s, key, l, hits)
	}
	victim := func(i int) string {
		return string(appendAddressKey(nil, netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), l))
	}
	known := func(i int) string {
		return string(appendAddressKey(nil, netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), l))
	}
	for i := range victims {
		for range 6 { // the sixth is refused: over its limit
			take1(victim(i), 1)
		}
		if r := take1(victim(i), 1); !r.OverLimit {
			t.Fatalf("victim %d admitted before the flood: %+v", i, r)
		}
		for range 3 {
			take1(known(i), 1)
		}
	}

	nc := newNewcomers(t, s, l)

	reqs := make([]backend.Request, perRequest)
	res := make([]backend.Result, perRequest)
	// The flood's keys are appendAddressKey's for 10.0.0.0 on, built
	// from its parts without formatting each address anew, so that the
	// race detector's cost stays with the store. The store keeps no
	// key's bytes: each request's key is a view of a reused buffer.
	prefix := appendAddressKey(nil, netip.MustParseAddr("10.0.0.0"), l)
	suffix := backend.AppendKeySuffix(nil, l)
	prefix = prefix[:len(prefix)-len(suffix)-len("8:10.0.0.0")]
	bufs := make([][]byte, perRequest)
	var addr []byte
	n := uint32(0)
	admitted := 0
	for r := range requests {
		clock.Set(backendtest.T0.Add(time.Duration(r) * time.Minute / requests))
		for j := range reqs {
			addr = append(addr[:0], "10."...)
			addr = strconv.AppendUint(addr, uint64(n>>16&255), 10)
			addr = strconv.AppendUint(append(addr, '.'), uint64(n>>8&255), 10)
			addr = strconv.AppendUint(append(addr, '.'), uint64(n&255), 10)
			bufs[j] = append(bufs[j][:0], prefix...)
			bufs[j] = strconv.AppendInt(bufs[j], int64(len(addr)), 10)
			bufs[j] = append(append(append(bufs[j], ':'), addr...), suffix...)
			b := bufs[j]
			reqs[j] = backend.Request{Key: unsafe.String(&b[0], len(b)), Limit: l, Hits: 1, Group: j}
			if r == requests-1 { // the last request's keys: 10.29.75.192 to 10.29.75.255
				want := appendAddressKey(nil, netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)}), l)
				if string(b) != string(want) {
					t.Fatalf("flood key %q, want %q", b, want)
				}
			}
			n++
		}
		if err := s.Take(t.Context(), reqs, res); err != nil {
			t.Fatal(err)
		}
		if r%(requests/tries) == 0 {
			for i := range victims {
				if !take1(victim(i), 1).OverLimit {
					admitted++
				}
			}
		}
		nc.after(r)
	}
	nc.check()
	if admitted > 0 {
		t.Errorf("victims over their limit were admitted %d times during the flood, want 0", admitted)
	}
	for i := range victims {
		if r := take1(known(i), 0); r.Remaining != 2 {
			t.Errorf("counter %d at 3 of 5 before the flood has %d remaining after it, want 2", i, r.Remaining)
		}
	}
	if got := s.Len(); got > memory.DefaultMaxKeys {
		t.Errorf("Len() = %d after the flood, over the bound %d", got, memory.DefaultMaxKeys)
	}
	if got := s.RefusingEvictions(); got != 0 {
		t.Errorf("RefusingEvictions() = %d, want 0", got)
	}
	if s.Declined() == 0 {
		t.Errorf("Declined() = 0: the flood did not reach the bound")
	}
	t.Logf("after %d new keys: %d held, %d evicted, %d declined", requests*perRequest, s.Len(), s.Evictions(), s.Declined())
}

// newcomers are the clients new to the store that TestFloodOfNewKeys
// brings while the flood keeps it full, each on the flood's 5/min limit,
// 100 of each kind:
//
//   - fast ones make 6 calls 10 flood requests (20 ms) apart: the sixth
//     must be refused, as it would be without the flood. Before the
//     admission window, all 6 were admitted: a new key was not counted
//     until it had been asked for more often than the counter it would
//     replace.
//   - slow ones make 7 calls 1,000 flood requests (2 s) apart, so that the
//     flood pushes each out of the window between its calls: the first
//     call's count may be lost, no more, so the seventh must be refused.
//   - probes make one call: each must be held (counted) right after it,
//     and evicted before the flood ends, having been asked for no more
//     often than the flood's keys; how long each stays is logged.
type newcomers struct {
	t     *testing.T
	s     *memory.Store
	l     backend.Limit
	calls map[int][]newcomerCall // by the flood request they follow
	over  map[string][]bool      // each client's calls, refused or not
	since map[string]int         // flood request of each probe's call, while it is held
	lived []int                  // flood requests each evicted probe stayed
}

type newcomerKind int

const (
	fastNewcomer newcomerKind = iota
	slowNewcomer
	probe
)

type newcomerCall struct {
	key  string
	kind newcomerKind
}

const (
	// floodRequests is the number of TestFloodOfNewKeys's requests, in one
	// minute.
	floodRequests = 30_000
	// newcomersFrom is the flood request after which newcomers come: the
	// store is full from about the 15,500th on.
	newcomersFrom = 16_000
)

func newNewcomers(t *testing.T, s *memory.Store, l backend.Limit) *newcomers {
	nc := &newcomers{t: t, s: s, l: l, calls: map[int][]newcomerCall{}, over: map[string][]bool{}, since: map[string]int{}}
	add := func(r int, c newcomerCall) {
		nc.calls[r] = append(nc.calls[r], c)
	}
	key := func(a [4]byte) string { return string(appendAddressKey(nil, netip.AddrFrom4(a), l)) }
	for i := range 100 {
		for c := range 6 {
			add(newcomersFrom+1000+100*i+10*c, newcomerCall{key([4]byte{203, 0, 113, byte(i)}), fastNewcomer})
		}
		for c := range 7 {
			add(newcomersFrom+10*i+1000*c, newcomerCall{key([4]byte{198, 18, 0, byte(i)}), slowNewcomer})
		}
		add(newcomersFrom+1050+100*i, newcomerCall{key([4]byte{198, 19, 0, byte(i)}), probe})
	}
	return nc
}

// after makes the calls that follow flood request r, and watches the
// probes in the store.
func (nc *newcomers) after(r int) {
	for key, from := range nc.since {
		if !memory.Holds(nc.s, key) {
			nc.lived = append(nc.lived, r-from)
			delete(nc.since, key)
		}
	}
	for _, c := range nc.calls[r] {
		res := take(nc.t, nc.s, c.key, nc.l, 1)
		nc.over[c.key] = append(nc.over[c.key], res.OverLimit)
		if c.kind == probe {
			if !memory.Holds(nc.s, c.key) {
				nc.t.Errorf("new key %q not held after its call: it was not counted", c.key)
				continue
			}
			nc.since[c.key] = r
		}
	}
}

func (nc *newcomers) check() {
	t := nc.t
	kinds := map[string]newcomerKind{}
	for _, calls := range nc.calls {
		for _, c := range calls {
			kinds[c.key] = c.kind
		}
	}
	for key, kind := range kinds {
		over := nc.over[key]
		switch kind {
		case fastNewcomer:
			if want := []bool{false, false, false, false, false, true}; !slices.Equal(over, want) {
				t.Errorf("fast newcomer %q over limit on calls 1 to 6 = %v, want %v", key, over, want)
			}
			if r := take(t, nc.s, key, nc.l, 1); !r.OverLimit {
				t.Errorf("fast newcomer %q admitted after the flood: its counter was evicted", key)
			}
		case slowNewcomer:
			if len(over) != 7 || !over[6] {
				t.Errorf("slow newcomer %q over limit on calls 1 to 7 = %v, want the seventh refused", key, over)
			}
		}
	}
	if len(kinds) != 300 {
		t.Fatalf("%d newcomers, want 300", len(kinds))
	}
	// A probe is asked for once, as every flood key is, and must leave.
	// The frequency sketch's counts can only err upward (a count-min
	// sketch, under seeds random per process): a probe whose counters
	// collide with others' can look asked for more often than the key it
	// would evict, and stay a while: one of the hundred did, once in about
	// ten runs; more than two would be a window or sketch that keeps
	// newcomers it should not.
	if len(nc.since) > 2 {
		t.Errorf("%d of 100 probes asked for once still held after the flood, want at most 2", len(nc.since))
	} else if len(nc.since) > 0 {
		t.Logf("%d of 100 probes asked for once still held after the flood (the sketch over-counted them)", len(nc.since))
	}
	slices.Sort(nc.lived)
	if len(nc.lived) > 0 {
		n := len(nc.lived)
		t.Logf("%d probes asked for once stayed %d flood requests (min) / %d (median) / %d (max): %v / %v / %v", n,
			nc.lived[0], nc.lived[n/2], nc.lived[n-1], flood(nc.lived[0]), flood(nc.lived[n/2]), flood(nc.lived[n-1]))
		if nc.lived[0] < 20 {
			t.Errorf("a probe stayed %d flood requests, want at least 20: the window is smaller than it should be", nc.lived[0])
		}
	}
}

// flood returns how long n of TestFloodOfNewKeys's requests take.
func flood(n int) time.Duration { return time.Duration(n) * time.Minute / floodRequests }
