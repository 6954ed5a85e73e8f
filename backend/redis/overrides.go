package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/backend"
)

// Overrides (backend.OverrideStore) live in Redis, so that every replica
// sees them and they outlive the daemons: a hash of the records by id and
// the set's version, under one hash tag (one Cluster slot), after the
// store's prefix (see overrideKeys). They carry no TTL, so that no
// eviction policy but allkeys-* drops them. overrides.lua changes and
// reads them, atomically; a poll whose version has not changed is one
// GET. The PerSecond store holds none.
//
// Reset (backend.Resetter) deletes the Redis keys of each request's
// counter, as take.lua names them, with reset.lua: on Cluster one run per
// hash tag, the runs in one pipeline. Then it notes the reset beside the
// overrides (a list of the last maxResetNotes resets' counter keys, under
// a new version of the set), so that every replica's store, at its next
// poll of the overrides, forgets what its local cache remembers of those
// counters: else a replica would go on refusing a reset counter from its
// cache until the refusal's retry_after.
//
// Each call runs under its node's circuit breaker, on a context of the
// store's (the caller's values; the caller's deadline, or without one the
// store's Timeout), as an exchange of shares does: an operator's call, or
// a replica's poll, is off the decision path. An unreachable Redis is an
// error, never an empty set: the caller keeps the overrides it last saw.

var (
	_ backend.OverrideStore = (*Store)(nil)
	_ backend.Resetter      = (*Store)(nil)
)

var (
	//go:embed overrides.lua
	overridesSource string
	overridesScript = goredis.NewScript(overridesSource)
	//go:embed reset.lua
	resetSource string
	resetScript = goredis.NewScript(resetSource)
)

// overridesTag is the hash tag of the overrides' keys.
const overridesTag = "{overrides}"

// maxResetNotes is how many resets Redis keeps the note of. A replica
// that finds notes dropped since it last read them (more resets than
// this between two of its polls) forgets its whole local cache.
const maxResetNotes = 1024

// overrideKeys returns the Redis keys of the overrides' records, of their
// version and of the reset notes under prefix, in overrides.lua's order.
func overrideKeys(prefix string) []string {
	return []string{prefix + overridesTag + ":records", prefix + overridesTag + ":version", prefix + overridesTag + ":resets"}
}

// resetNotes is what a Store has applied of the reset notes to its local
// cache (see applyNotes).
type resetNotes struct {
	mu   sync.Mutex
	seen uint64 // the version of the last note applied, 0 for none; requires that mu is held
}

// PutOverride implements backend.OverrideStore.
func (s *Store) PutOverride(ctx context.Context, id string, rec []byte, max int) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("redis: put override: %w", err)
	}
	stored, v, err := s.changeOverride(ctx, "put", id, rec, max)
	switch {
	case err != nil:
		return 0, fmt.Errorf("redis: put override: %w", err)
	case !stored:
		return 0, fmt.Errorf("redis: put override: %w (%d)", backend.ErrTooManyOverrides, max)
	}
	return v, nil
}

// DeleteOverride implements backend.OverrideStore.
func (s *Store) DeleteOverride(ctx context.Context, id string) (bool, uint64, error) {
	if err := ctx.Err(); err != nil {
		return false, 0, fmt.Errorf("redis: delete override: %w", err)
	}
	found, v, err := s.changeOverride(ctx, "delete", id)
	if err != nil {
		return false, 0, fmt.Errorf("redis: delete override: %w", err)
	}
	return found, v, nil
}

// changeOverride runs overrides.lua's op put or delete with args, and
// returns whether it changed the set, and the set's version after it.
func (s *Store) changeOverride(ctx context.Context, op string, args ...any) (bool, uint64, error) {
	keys := overrideKeys(s.prefix)
	type change struct {
		done bool
		v    uint64
	}
	c, err := admin(ctx, s, keys[0], func(rctx context.Context) (change, error) {
		reply, err := overridesScript.Run(rctx, s.client, keys, append([]any{op}, args...)...).Slice()
		if err != nil {
			return change{}, err
		}
		if len(reply) != 2 {
			return change{}, fmt.Errorf("overrides.lua replied %d values to %s, want 2", len(reply), op)
		}
		done, err1 := replyInt(reply[0])
		v, err2 := replyVersion(reply[1])
		return change{done == 1, v}, errors.Join(err1, err2)
	})
	return c.done, c.v, err
}

// Overrides implements backend.OverrideStore: one GET of the version,
// and, when it is not since, one run of overrides.lua that reads the
// records, the version and the reset notes together. The local cache
// then forgets its refusals on the counters of the notes it had not seen.
func (s *Store) Overrides(ctx context.Context, since uint64) (map[string][]byte, uint64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, fmt.Errorf("redis: overrides: %w", err)
	}
	keys := overrideKeys(s.prefix)
	type set struct {
		recs  map[string][]byte
		v     uint64
		notes []any
	}
	got, err := admin(ctx, s, keys[0], func(rctx context.Context) (set, error) {
		cur, err := s.client.Get(rctx, keys[1]).Result()
		switch {
		case errors.Is(err, goredis.Nil):
			cur = "0"
		case err != nil:
			return set{}, err
		}
		v, err := strconv.ParseUint(cur, 10, 64)
		if err != nil {
			return set{}, fmt.Errorf("version %q: %w", cur, err)
		}
		if v == since {
			return set{v: since}, nil
		}
		reply, err := overridesScript.Run(rctx, s.client, keys, "read").Slice()
		if err != nil {
			return set{}, err
		}
		if len(reply) != 3 {
			return set{}, fmt.Errorf("overrides.lua replied %d values to read, want 3", len(reply))
		}
		if v, err = replyVersion(reply[0]); err != nil {
			return set{}, err
		}
		pairs, ok := reply[1].([]any)
		if !ok || len(pairs)%2 != 0 {
			return set{}, fmt.Errorf("overrides.lua replied %T to read, want id and record pairs", reply[1])
		}
		recs := make(map[string][]byte, len(pairs)/2)
		for k := 0; k < len(pairs); k += 2 {
			id, ok1 := pairs[k].(string)
			rec, ok2 := pairs[k+1].(string)
			if !ok1 || !ok2 {
				return set{}, fmt.Errorf("overrides.lua replied %T, %T as a record, want strings", pairs[k], pairs[k+1])
			}
			recs[id] = []byte(rec)
		}
		notes, ok := reply[2].([]any)
		if !ok {
			return set{}, fmt.Errorf("overrides.lua replied %T as the reset notes, want a list", reply[2])
		}
		return set{recs, v, notes}, nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("redis: overrides: %w", err)
	}
	if got.recs != nil {
		if err := s.applyNotes(got.notes); err != nil {
			return nil, 0, fmt.Errorf("redis: overrides: %w", err)
		}
	}
	return got.recs, got.v, nil
}

// applyNotes has the local cache forget the counters of the reset notes
// it has not applied yet ("VERSION KEYS", KEYS each a length-prefixed
// counter key, oldest first), or its whole content when notes it has not
// seen may have been dropped (Redis keeps the last maxResetNotes). A
// store's first read applies every note Redis keeps: its cache holds
// little yet.
func (s *Store) applyNotes(notes []any) error {
	n := &s.notes
	n.mu.Lock()
	defer n.mu.Unlock()
	var forget []string
	seen, all := n.seen, false
	for k, note := range notes {
		text, ok := note.(string)
		if !ok {
			return fmt.Errorf("reset note %d is a %T, want a string", k, note)
		}
		head, keys, ok := strings.Cut(text, " ")
		v, err := strconv.ParseUint(head, 10, 64)
		if !ok || err != nil {
			return fmt.Errorf("reset note %.40q: want VERSION KEYS", text)
		}
		if v <= n.seen {
			continue
		}
		if k == 0 && len(notes) >= maxResetNotes {
			all = true // the notes after n.seen may have been dropped
		}
		seen = max(seen, v)
		for !all && keys != "" {
			key, rest, err := cutKeyPart(keys)
			if err != nil {
				return fmt.Errorf("reset note of version %d: %w", v, err)
			}
			forget, keys = append(forget, key), rest
		}
	}
	n.seen = seen
	switch {
	case s.cache == nil:
	case all:
		s.cache.clear()
	case len(forget) > 0:
		s.cache.forget(forget)
	}
	return nil
}

// appendKeyPart appends k, length-prefixed, to a reset note.
func appendKeyPart(b []byte, k string) []byte {
	b = strconv.AppendInt(b, int64(len(k)), 10)
	b = append(b, ':')
	return append(b, k...)
}

// cutKeyPart reads the first length-prefixed key of s (see
// appendKeyPart), and returns it and the rest.
func cutKeyPart(s string) (key, rest string, err error) {
	n, after, ok := strings.Cut(s, ":")
	size, err := strconv.Atoi(n)
	if !ok || err != nil || size < 0 || size > len(after) {
		return "", "", fmt.Errorf("bad key length %q", n)
	}
	return after[:size], after[size:], nil
}

// replyInt reads an integer from a script's reply.
func replyInt(v any) (int64, error) {
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("script replied %T, want an integer", v)
	}
	return n, nil
}

// replyVersion reads a version from a script's reply.
func replyVersion(v any) (uint64, error) {
	n, err := replyInt(v)
	if err == nil && n < 0 {
		err = fmt.Errorf("version %d below zero", n)
	}
	return uint64(n), err
}

// admin runs f, an operator's or a poll's Redis work on the node that
// serves key, under the node's circuit breaker, off the caller's
// goroutine (see offload), on a context with the caller's values and
// deadline (or the store's Timeout when it has none).
func admin[T any](ctx context.Context, s *Store, key string, f func(rctx context.Context) (T, error)) (T, error) {
	return offload(ctx, s, []*Store{s}, func() (T, error) {
		rctx, cancel := s.adminContext(ctx)
		defer cancel()
		var v T
		err := retryRedirected(rctx, func() error {
			//nolint:contextcheck // a probe that guard may start runs on the store's context, never a call's
			return s.guard(s.nodeOf(rctx, key), func() error {
				var err error
				v, err = f(rctx)
				return err
			})
		})
		return v, err
	})
}

// redirectTries bounds the attempts of an operator's or a poll's call
// that Redis Cluster redirected (a slot that moves, or moved): go-redis,
// which never follows a redirection itself (see NewClient), reloads its
// slot map then, and a redirected command did not run, so that the next
// attempt applies it once.
const redirectTries = 3

// retryRedirected calls f until it succeeds, fails otherwise than by a
// redirection, has been tried redirectTries times, or ctx ends, pausing
// 10 ms more before each attempt.
func retryRedirected(ctx context.Context, f func() error) error {
	for try := 1; ; try++ {
		err := f()
		if err == nil || !redirected(err) || try == redirectTries {
			return err
		}
		t := time.NewTimer(time.Duration(try) * 10 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// adminContext returns the context of an operator's or a poll's Redis
// work: ctx's values and deadline, without its cancellation, or the
// store's Timeout when ctx has no deadline.
func (s *Store) adminContext(ctx context.Context) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(s.timeout)
	}
	return context.WithDeadline(context.WithoutCancel(ctx), deadline)
}

// Reset implements backend.Resetter. With a PerSecond store, the
// counters of one-second limits are reset there. The local cache forgets
// its refusals on those counters at once; the other replicas' caches at
// their next poll of the overrides (see applyNotes), which a daemon makes
// every 250 ms. A reset that fails may have reset some counters, or not
// noted them for the other replicas: trying it again is safe.
func (s *Store) Reset(ctx context.Context, reqs []backend.Request) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redis: reset: %w", err)
	}
	if len(reqs) == 0 {
		return nil
	}
	var own, second []backend.Request
	for _, r := range reqs {
		// By window alone: a ban touches no counter, but names the one
		// its key would count on under a limit of the same window.
		if s.perSecond != nil && r.Limit.Window == time.Second {
			second = append(second, r)
		} else {
			own = append(own, r)
		}
	}
	stores := []*Store{}
	var runs [][]*scriptRun
	if len(own) > 0 {
		stores, runs = append(stores, s), append(runs, s.resetRuns(own))
	}
	if len(second) > 0 {
		stores, runs = append(stores, s.perSecond), append(runs, s.perSecond.resetRuns(second))
	}
	_, err := offload(ctx, s, stores, func() (struct{}, error) {
		rctx, cancel := s.adminContext(ctx)
		defer cancel()
		var errs []error
		for k, st := range stores {
			// A reset deletes: trying it again whole does no harm.
			if err := retryRedirected(rctx, func() error { return st.runResets(rctx, runs[k]) }); err != nil {
				errs = append(errs, s.sideError(st, err))
			}
		}
		return struct{}{}, errors.Join(errs...)
	})
	if err == nil {
		err = s.noteReset(ctx, reqs)
	}
	if s.cache != nil {
		forget := make([]string, len(reqs))
		for i := range reqs {
			forget[i] = reqs[i].Key
		}
		s.cache.forget(forget)
	}
	if err != nil {
		return fmt.Errorf("redis: reset: %w", err)
	}
	return nil
}

// noteReset notes beside the overrides that reqs' counters were reset,
// under a new version, for the other replicas' caches (see applyNotes).
func (s *Store) noteReset(ctx context.Context, reqs []backend.Request) error {
	var b []byte
	for i := range reqs {
		b = appendKeyPart(b, reqs[i].Key)
	}
	keys := overrideKeys(s.prefix)
	_, err := admin(ctx, s, keys[0], func(rctx context.Context) (struct{}, error) {
		return struct{}{}, overridesScript.Run(rctx, s.client, keys, "reset", b, maxResetNotes).Err()
	})
	if err != nil {
		return fmt.Errorf("noting the reset for the other replicas: %w", err)
	}
	return nil
}

// resetRuns returns the runs of reset.lua that forget reqs' counters in
// s: one per hash tag on Cluster, in order of first use, else one. A
// run's arguments are now µs, then the window µs of each key.
func (s *Store) resetRuns(reqs []backend.Request) []*scriptRun {
	now := strconv.FormatInt(s.nowMicros(), 10)
	var runs []*scriptRun
	byTag := make(map[string]*scriptRun)
	for i := range reqs {
		r := &reqs[i]
		tag := ""
		if s.cluster != nil {
			tag = tagOf(r)
		}
		run := byTag[tag]
		if run == nil {
			run = &scriptRun{args: []any{now}}
			byTag[tag] = run
			runs = append(runs, run)
		}
		run.keys = append(run.keys, key(s.prefix, tag, r.Key))
		run.args = append(run.args, strconv.FormatInt(int64(r.Limit.Window/time.Microsecond), 10))
	}
	return runs
}

// runResets sends runs in one pipeline (see pipelineRuns), and returns
// the runs' errors; a call that finds a node's breaker open fails at
// once, sending nothing.
func (s *Store) runResets(ctx context.Context, runs []*scriptRun) error {
	errs, err := s.pipelineRuns(ctx, resetScript, len(runs), func(p int) *scriptRun { return runs[p] }, nil)
	if err != nil {
		return err
	}
	return errors.Join(errs...)
}
