package memory

import (
	"context"
	"slices"
	"sync"

	"github.com/ratelimitd/ratelimitd/backend"
)

var (
	_ backend.OverrideStore = (*Store)(nil)
	_ backend.Resetter      = (*Store)(nil)
)

// overrides is a Store's set of runtime overrides: in the process, so
// only a single replica sees them, and they end with it.
type overrides struct {
	mu      sync.Mutex
	recs    map[string][]byte // the store's own copies; requires that mu is held
	version uint64            // raised by every change; requires that mu is held
}

// PutOverride implements backend.OverrideStore. The store keeps its own
// copy of rec.
func (s *Store) PutOverride(ctx context.Context, id string, rec []byte, max int) (uint64, error) {
	if err := s.usable(ctx, "put override"); err != nil {
		return 0, err
	}
	o := &s.overrides
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.recs[id]; !ok && len(o.recs) >= max {
		return 0, backend.ErrTooManyOverrides
	}
	if o.recs == nil {
		o.recs = make(map[string][]byte)
	}
	o.recs[id] = slices.Clone(rec)
	o.version++
	return o.version, nil
}

// DeleteOverride implements backend.OverrideStore.
func (s *Store) DeleteOverride(ctx context.Context, id string) (bool, uint64, error) {
	if err := s.usable(ctx, "delete override"); err != nil {
		return false, 0, err
	}
	o := &s.overrides
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.recs[id]; !ok {
		return false, o.version, nil
	}
	delete(o.recs, id)
	o.version++
	return true, o.version, nil
}

// Overrides implements backend.OverrideStore. The records returned are
// copies: the caller may keep and change them.
func (s *Store) Overrides(ctx context.Context, since uint64) (map[string][]byte, uint64, error) {
	if err := s.usable(ctx, "overrides"); err != nil {
		return nil, 0, err
	}
	o := &s.overrides
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.version == since {
		return nil, since, nil
	}
	recs := make(map[string][]byte, len(o.recs))
	for id, rec := range o.recs {
		recs[id] = slices.Clone(rec)
	}
	return recs, o.version, nil
}

// Reset implements backend.Resetter: it forgets each request's counter
// (a window's counts, a sliding log, a bucket, the leases held), as
// eviction does, so that its next call starts from a fresh state. The
// key's place in the admission statistics (how often it was asked for)
// stays. Requests name their counters by Key alone: the memory store
// keeps one counter per Key, whose suffix names the algorithm and window.
func (s *Store) Reset(ctx context.Context, reqs []backend.Request) error {
	if err := s.usable(ctx, "reset"); err != nil {
		return err
	}
	keys, locked := s.hashAll(len(reqs), func(i int) string { return reqs[i].Key })
	s.lock(&locked, true)
	defer s.lock(&locked, false)
	for _, k := range keys {
		sh := &s.shards[k[0]&s.mask]
		if b, ok := sh.m[k]; ok {
			drop(sh, k, b)
		}
	}
	return nil
}
