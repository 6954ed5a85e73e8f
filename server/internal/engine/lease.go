package engine

import "github.com/ratelimitd/ratelimitd/backend"

// AppendLease appends to dst the stamps of the slots that sc's decision
// took or renewed on descriptor i's concurrency limits, in the order of
// its rule's limits: what a Release or Renew of that descriptor names
// (Descriptor.Lease); a renew that failed keeps its old stamp. It returns, with them, when the first of them
// lapses, in µs since the Unix epoch, and 0 when it holds none (the
// descriptor has no concurrency limit, or was refused).
func (sc *Scratch) AppendLease(dst []int64, i int) (_ []int64, expires int64) {
	ds := &sc.descs[i]
	for k := ds.first; k < ds.first+ds.n; k++ {
		rq, r := &sc.reqs[k], &sc.res[k]
		if rq.Limit.Algorithm != backend.Concurrency || rq.Op == backend.GiveBack {
			continue
		}
		if r.Lease == 0 {
			if rq.Op == backend.Renew {
				// A renew that failed keeps its place, so that the
				// stamps still line up with the limits; its lease
				// frees nothing when released.
				dst = append(dst, rq.Lease)
			}
			continue
		}
		dst = append(dst, r.Lease)
		if end := r.Lease + rq.Limit.Window.Microseconds(); expires == 0 || end < expires {
			expires = end
		}
	}
	return dst, expires
}
