package server

import (
	"encoding/base64"
	"slices"
	"testing"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/server/internal/engine"
)

// FuzzLeaseIDs: whatever bytes a caller sends as a lease, native or
// Envoy's, the server either refuses them as a bad request or reads
// stamps from them, never panicking; and the stamps it writes read back
// as themselves.
func FuzzLeaseIDs(f *testing.F) {
	f.Add([]byte{leaseVersion, 1, 5}, int64(1_700_000_000_000_000), int64(42))
	f.Add([]byte{leaseVersion, 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, int64(1), int64(2))
	f.Add([]byte{}, int64(0), int64(1<<62))
	f.Fuzz(func(t *testing.T, id []byte, a, b int64) {
		// Round trip: stamps are µs since the epoch, up to 2^62.
		stamps := []int64{a & (1<<62 - 1), b & (1<<62 - 1)}
		got, rest, ok := readStamps(appendStamps(nil, stamps), nil)
		if !ok || len(rest) != 0 || !slices.Equal(got, stamps) {
			t.Fatalf("readStamps(appendStamps(%v)) = %v, %x, %v", stamps, got, rest, ok)
		}

		// Any bytes as a native lease id, on a request of two descriptors.
		sc := new(scratch)
		sc.Req.Entries = []engine.Entry{{Key: "k", Value: "v"}, {Key: "k", Value: "w"}}
		sc.Req.Add(0, 1).Entries = [2]int{0, 1}
		sc.Req.Add(1, 1).Entries = [2]int{1, 2}
		if err := applyLeaseID(sc, id, backend.GiveBack); err != nil {
			if !engine.IsInvalid(err) {
				t.Fatalf("applyLeaseID(%x): %v, want a bad request", id, err)
			}
		} else {
			for _, d := range sc.Req.Descs {
				if !d.HasLease || d.Op != backend.GiveBack || d.Lease[0] > d.Lease[1] || d.Lease[1] > len(sc.Req.Leases) {
					t.Fatalf("applyLeaseID(%x) gave %+v", id, d)
				}
			}
		}

		// The same bytes as Envoy's lease entry, last on a give-back.
		sc = new(scratch)
		sc.Req.Entries = []engine.Entry{{Key: "k", Value: "v"}, {Key: LeaseEntryKey, Value: base64.RawURLEncoding.EncodeToString(id)}}
		d := sc.Req.Add(0, 1)
		d.Op = backend.GiveBack
		if err := envoyLease(sc, d, 0); err != nil {
			if !engine.IsInvalid(err) {
				t.Fatalf("envoyLease(%x): %v, want a bad request", id, err)
			}
		} else if d.Entries != [2]int{0, 1} || !d.HasLease {
			t.Fatalf("envoyLease(%x) left entries %v, lease %v", id, d.Entries, d.HasLease)
		}
	})
}
