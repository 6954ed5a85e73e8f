package memory

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
)

// shareEntry is one replica's entry on a share bucket: what it was granted,
// its clients' demands, and when the entry lapses.
type shareEntry struct {
	replica string
	grant   float64
	demands []float64 // the store's own copy
	exp     int64     // µs from which the entry is expired
}

// ExchangeShares implements backend.ShareStore. A share bucket lives in the
// shard of its name's hash, under that shard's lock, apart from the
// counters: it counts neither towards MaxKeys nor in Len.
func (s *Store) ExchangeShares(ctx context.Context, reqs []backend.ShareRequest, res []backend.ShareResult) error {
	if len(res) != len(reqs) {
		return fmt.Errorf("memory: exchange shares: %d results for %d requests", len(res), len(reqs))
	}
	if s.closed.Load() {
		return backend.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: exchange shares: %w", err)
	}
	keys := make([]hkey, len(reqs))
	var locked [maxShards / 64]uint64
	for i := range reqs {
		keys[i] = hkey{maphash.String(s.seeds[0], reqs[i].Bucket), maphash.String(s.seeds[1], reqs[i].Bucket)}
		idx := keys[i][0] & s.mask
		locked[idx/64] |= 1 << (idx % 64)
	}
	s.lock(&locked, true)
	defer s.lock(&locked, false)

	now := backend.Micros(s.now())
	for i := range reqs {
		sh := &s.shards[keys[i][0]&s.mask]
		entries := exchange(sh.shares[keys[i]], &reqs[i], &res[i], now)
		if len(entries) == 0 {
			delete(sh.shares, keys[i])
		} else {
			sh.shares[keys[i]] = entries
		}
	}
	return nil
}

// exchange applies req to the entries of its bucket at now (µs), writes
// its answer into r, and returns the bucket's entries.
func exchange(entries []shareEntry, req *backend.ShareRequest, r *backend.ShareResult, now int64) []shareEntry {
	entries = slices.DeleteFunc(entries, func(e shareEntry) bool { return e.exp <= now })
	own, others := -1, 0.0
	for i := range entries {
		if entries[i].replica == req.Replica {
			own = i
			continue
		}
		others += entries[i].grant
		r.Others = append(r.Others, entries[i].demands...)
	}
	if req.TTL <= 0 {
		r.Granted = 0
		if own >= 0 {
			entries = slices.Delete(entries, own, own+1)
		}
		return entries
	}
	r.Granted = max(0, min(req.Want, req.Limit-others))
	if own < 0 {
		entries = append(entries, shareEntry{replica: req.Replica})
		own = len(entries) - 1
	}
	e := &entries[own]
	e.grant = r.Granted
	e.demands = append(e.demands[:0], req.Demands...)
	e.exp = now + int64(req.TTL/time.Microsecond)
	return entries
}

// Shares returns the number of share entries held, expired or not.
func (s *Store) Shares() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, entries := range sh.shares {
			n += len(entries)
		}
		sh.mu.Unlock()
	}
	return n
}

// sweepSharesLocked drops the expired share entries of sh, whose mu must
// be held, and the buckets left without entries.
func sweepSharesLocked(sh *shard, now int64) {
	for k, entries := range sh.shares {
		entries = slices.DeleteFunc(entries, func(e shareEntry) bool { return e.exp <= now })
		if len(entries) == 0 {
			delete(sh.shares, k)
		} else {
			sh.shares[k] = entries
		}
	}
}
