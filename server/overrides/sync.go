package overrides

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"maps"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/ratelimitd/ratelimitd/server/internal/engine"
)

// maxExpiredDeletes bounds the expired overrides one sync deletes from
// the store; the next syncs delete the rest.
const maxExpiredDeletes = 100

// seed hashes records to tell which changed between two reads.
var seed = maphash.MakeSeed()

// Run polls the store every Options.Interval (and once at once) and
// applies what it reads (see Sync), until ctx is done; it returns nil.
// While the store cannot be read, the overrides in force stay, State
// says so and a warning is logged at most every 10 seconds.
func (m *Manager) Run(ctx context.Context) error {
	if m.store == nil {
		return nil
	}
	tick := time.NewTicker(m.opts.Interval) // tests run Run in a synctest bubble
	defer tick.Stop()
	warn := rate.Sometimes{First: 1, Interval: 10 * time.Second}
	for {
		if err := m.pollOnce(ctx); err != nil && ctx.Err() == nil {
			warn.Do(func() {
				m.log.Warn("cannot read the overrides from the store; keeping the last ones", "err", err)
			})
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// pollOnce syncs within a timeout of a few intervals.
func (m *Manager) pollOnce(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 4*m.opts.Interval)
	defer cancel()
	return m.Sync(ctx)
}

// syncNow syncs after a change made through this replica, so that it
// applies before the change's answer; a failure leaves it to Run.
func (m *Manager) syncNow(ctx context.Context) {
	if err := m.Sync(ctx); err != nil {
		m.log.Warn("cannot read the overrides back from the store", "err", err)
	}
}

// Sync reads the overrides from the store, when their version changed
// since the last read, and puts them in force in the engine; it also
// takes the expired ones out of force, and deletes them from the store.
// On an error the overrides in force stay as they were.
func (m *Manager) Sync(ctx context.Context) error {
	if m.store == nil {
		return nil
	}
	m.syncMu.Lock()
	defer m.syncMu.Unlock()
	st := *m.state.Load()
	since := st.version
	if !st.synced {
		since = 0
	}
	recs, version, err := m.store.Overrides(ctx, since)
	if err != nil {
		m.metrics.syncFailures.Inc()
		m.metrics.stale.Set(1)
		if st.failed == nil {
			st.since = m.opts.Now()
		}
		st.failed = err
		m.state.Store(&st)
		return fmt.Errorf("overrides: read the store: %w", err)
	}
	m.metrics.stale.Set(0)
	now := m.opts.Now()
	if !st.synced || version != since || recs != nil {
		m.apply(recs, now)
		st.version, st.synced = version, true
	}
	m.expire(ctx, now)
	st.failed, st.count = nil, len(m.inForce)
	m.state.Store(&st)
	return nil
}

// apply puts recs, the store's records, in force; m.syncMu is held.
// The records of overrides in force that did not change since the last
// read (RuntimeOverride.Sum) are not parsed again. Unreadable records
// are skipped, counted and logged in one line.
func (m *Manager) apply(recs map[string][]byte, now time.Time) {
	keys := slices.Collect(maps.Keys(recs))
	skipped := 0
	if len(keys) > m.opts.Max { // stored by replicas with a larger --max-overrides
		slices.Sort(keys)
		skipped += len(keys) - m.opts.Max
		m.log.Warn("more overrides stored than --max-overrides: applying the first ones", "stored", len(keys), "max", m.opts.Max)
		keys = keys[:m.opts.Max]
	}
	inForce := make(map[string]*engine.RuntimeOverride, len(keys))
	var next time.Time
	unreadable, firstErr := 0, error(nil)
	for _, k := range keys {
		rec := recs[k]
		sum := maphash.Bytes(seed, rec)
		ov, known := m.inForce[k]
		if !known || ov.Sum != sum {
			var err error
			if ov, err = m.parse(k, rec, sum); err != nil {
				if unreadable++; firstErr == nil {
					firstErr = fmt.Errorf("key %s: %w", engine.Printable(k), err)
				}
				continue
			}
		}
		if !ov.Expires.IsZero() {
			if !now.Before(ov.Expires) {
				continue
			}
			if next.IsZero() || ov.Expires.Before(next) {
				next = ov.Expires
			}
		}
		inForce[k] = ov
	}
	if unreadable > 0 {
		m.log.Warn("skipping unreadable override records", "records", unreadable, "first", firstErr)
	}
	m.inForce, m.nextExpiry = inForce, next
	m.eng.SetOverrides(engine.NewRuntimeOverrides(inForce))
	m.metrics.inForce.Set(float64(len(inForce)))
	m.metrics.skipped.Set(float64(skipped + unreadable))
}

// parse decodes and compiles the record of key k.
func (m *Manager) parse(k string, rec []byte, sum uint64) (*engine.RuntimeOverride, error) {
	var o Override
	if err := json.Unmarshal(rec, &o); err != nil {
		return nil, err
	}
	limits, err := o.Compile(time.Time{}, m.opts.Config...)
	if err != nil {
		return nil, err
	}
	if key(o.Domain, o.Entries) != k {
		return nil, fmt.Errorf("the record's descriptor is not its key's")
	}
	ov := &engine.RuntimeOverride{Limits: limits, Reason: o.Reason, SetBy: internName(o.SetBy), Version: o.Version, Sum: sum}
	if o.ExpiresAt != nil {
		ov.Expires = *o.ExpiresAt
	}
	return ov, nil
}

// maxNames bounds the names internName keeps.
const maxNames = 1024

// names are the token names of the overrides read, for internName.
var names = struct {
	sync.Mutex
	m map[string]string // requires that the mutex is held
}{m: make(map[string]string)}

// internName returns s, shared with the earlier overrides set by the
// same token: there are few names, and many overrides.
func internName(s string) string {
	names.Lock()
	defer names.Unlock()
	if n, ok := names.m[s]; ok {
		return n
	}
	if len(names.m) < maxNames {
		names.m[s] = s
	}
	return s
}

// expire takes the overrides whose expiry passed out of force, and
// deletes up to maxExpiredDeletes of them from the store; m.syncMu is
// held.
func (m *Manager) expire(ctx context.Context, now time.Time) {
	if m.nextExpiry.IsZero() || now.Before(m.nextExpiry) {
		return
	}
	var gone []string
	inForce := make(map[string]*engine.RuntimeOverride, len(m.inForce))
	var next time.Time
	for k, ov := range m.inForce {
		switch {
		case ov.Expires.IsZero():
		case !now.Before(ov.Expires):
			gone = append(gone, k)
			continue
		case next.IsZero() || ov.Expires.Before(next):
			next = ov.Expires
		}
		inForce[k] = ov
	}
	m.inForce, m.nextExpiry = inForce, next
	m.eng.SetOverrides(engine.NewRuntimeOverrides(inForce))
	m.metrics.inForce.Set(float64(len(inForce)))
	for _, k := range gone[:min(len(gone), maxExpiredDeletes)] {
		found, setVersion, err := m.store.DeleteOverride(ctx, k)
		switch {
		case err != nil:
			m.log.Warn("cannot delete an expired override from the store", "err", err)
			return
		case found: // the replica that deletes it logs it
			m.metrics.changes.WithLabelValues(opExpire).Inc()
			m.log.Info("override expire", "op", opExpire, "by", "expiry", "key", engine.Printable(k), "set_version", setVersion)
		}
	}
}

// current returns the override in force under key k, nil if none.
func (m *Manager) current(k string) *engine.RuntimeOverride { return m.eng.Overrides().Get(k) }

// State describes the overrides in force for /readyz: "ok", "off" when
// the store keeps none, or "stale" with since when and why the store
// cannot be read, and what stays in force meanwhile.
func (m *Manager) State() string {
	if m.store == nil {
		return "off"
	}
	st := m.state.Load()
	switch {
	case st.failed != nil:
		return fmt.Sprintf("stale since %s: cannot read the store (%v); keeping %d overrides of version %d",
			st.since.UTC().Format(time.RFC3339), st.failed, st.count, st.version)
	case !st.synced:
		return "not read yet"
	}
	return fmt.Sprintf("ok (%d in force, version %d)", st.count, st.version)
}
