package memory

import (
	"context"
	"fmt"
	"slices"
	"sync"
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
	if err := s.usable(ctx, "exchange shares"); err != nil {
		return err
	}
	keys, locked := s.hashAll(len(reqs), func(i int) string { return reqs[i].Bucket })
	var notes []shareNote
	s.lock(&locked, true)
	now := backend.Micros(s.now())
	for i := range reqs {
		sh := &s.shards[keys[i][0]&s.mask]
		entries, changed := exchange(sh.shares[keys[i]], &reqs[i], &res[i], now)
		if len(entries) == 0 {
			delete(sh.shares, keys[i])
		} else {
			sh.shares[keys[i]] = entries
		}
		if changed {
			for _, e := range entries {
				if e.replica != reqs[i].Replica {
					notes = append(notes, shareNote{e.replica, reqs[i].Bucket})
				}
			}
		}
	}
	s.lock(&locked, false)
	s.watchers.notify(notes)
	return nil
}

// exchange applies req to the entries of its bucket at now (µs), writes
// its answer into r, and returns the bucket's entries, and whether req
// changed its replica's entry: added or removed it, changed its grant or
// demands, or made it expire sooner.
func exchange(entries []shareEntry, req *backend.ShareRequest, r *backend.ShareResult, now int64) ([]shareEntry, bool) {
	entries = slices.DeleteFunc(entries, func(e shareEntry) bool { return e.exp <= now })
	own, others := -1, 0.0
	soonest := int64(0)
	for i := range entries {
		if entries[i].replica == req.Replica {
			own = i
			continue
		}
		others += entries[i].grant
		r.Others = append(r.Others, entries[i].demands...)
		if soonest == 0 || entries[i].exp < soonest {
			soonest = entries[i].exp
		}
	}
	if soonest > 0 {
		r.OthersExpire = time.Duration(soonest-now) * time.Microsecond
	}
	if req.TTL <= 0 {
		r.Granted = 0
		if own >= 0 {
			return slices.Delete(entries, own, own+1), true
		}
		return entries, false
	}
	r.Granted = max(0, min(req.Want, req.Limit-others))
	changed := own < 0
	if own < 0 {
		entries = append(entries, shareEntry{replica: req.Replica})
		own = len(entries) - 1
	}
	e := &entries[own]
	exp := now + int64(req.TTL/time.Microsecond)
	// An entry that expires sooner than it did frees its grant sooner:
	// the others are told too.
	changed = changed || e.grant != r.Granted || !slices.Equal(e.demands, req.Demands) || exp < e.exp
	e.grant = r.Granted
	e.demands = append(e.demands[:0], req.Demands...)
	e.exp = exp
	return entries, changed
}

// shareNote is a notification for WatchShares: replica's entry on bucket
// may be out of date.
type shareNote struct{ replica, bucket string }

// shareWatchers are the replicas watching for changes (WatchShares).
type shareWatchers struct {
	mu sync.Mutex
	m  map[string]map[*func(string)]struct{} // by replica; requires that mu is held
}

// WatchShares implements backend.ShareStore: the replicas sharing the
// store live in this process, and are told at once, by the exchanging
// goroutine.
func (s *Store) WatchShares(ctx context.Context, replica string, changed func(bucket string)) error {
	w := &s.watchers
	f := &changed
	w.mu.Lock()
	if w.m == nil {
		w.m = make(map[string]map[*func(string)]struct{})
	}
	if w.m[replica] == nil {
		w.m[replica] = make(map[*func(string)]struct{})
	}
	w.m[replica][f] = struct{}{}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.m[replica], f)
		if len(w.m[replica]) == 0 {
			delete(w.m, replica)
		}
		w.mu.Unlock()
	}()
	changed("") // nothing was watched before
	<-ctx.Done()
	return nil
}

// notify calls the watchers of each note's replica, one at a time.
func (w *shareWatchers) notify(notes []shareNote) {
	if len(notes) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, n := range notes {
		for f := range w.m[n.replica] {
			(*f)(n.bucket)
		}
	}
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
