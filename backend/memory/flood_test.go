package memory_test

import (
	"net/netip"
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
func TestFloodOfNewKeys(t *testing.T) {
	const (
		requests   = 30_000
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
	}
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
