package redis

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/backend"
)

// takeCluster decides a call on Redis Cluster. The keys of one descriptor
// share a hash tag, so one descriptor's limits are decided in one slot,
// atomically. A call over one tag runs one script, as on standalone; a call
// over several runs one "part" script per tag, in parallel, each deciding
// as if the call were admitted; if the call is refused after all, a
// "refund" gives back what the admitted parts took. Admitted hits never
// exceed a limit, and a refused call leaves no lasting consumption, but a
// concurrent call may see the hits of a call being refunded. (A
// descriptor's limits share a tag when their keys share the descriptor
// part, as the engine's keys do; a group over several tags is decided as
// several parts, and refunded likewise.)
func (s *Store) takeCluster(ctx context.Context, reqs []backend.Request, res []backend.Result) error {
	tags := make([]string, len(reqs))
	var parts [][]int // request indices per tag, in order of first use
	for i := range reqs {
		tags[i] = tagOf(reqs[i].Key)
		found := false
		for p, idx := range parts {
			if tags[idx[0]] == tags[i] {
				parts[p] = append(idx, i)
				found = true
				break
			}
		}
		if !found {
			parts = append(parts, []int{i})
		}
	}
	if len(parts) == 1 {
		return s.runPart(ctx, "take", reqs, res, parts[0], tags[0], nil)
	}

	stamps := make([]int64, len(reqs))
	errs := s.runParts(ctx, reqs, res, parts, tags, stamps)
	failed := errors.Join(errs...)
	refused := failed != nil || backend.Refused(reqs, res)
	// Give back what a part took but the whole call does not: all of a
	// refused call (but consume_when_over usage), and a group over in
	// another part. A refund runs on a context of its own (the call's may
	// have run out) and outside the breakers: it is no news of a node's
	// health. It reports the results of its whole part afresh.
	var back [][]int
	var extra []int64
	for p, idx := range parts {
		if errs[p] != nil {
			continue
		}
		give := false
		for _, i := range idx {
			r := &reqs[i]
			took := !r.ConsumeWhenOver && r.Hits > 0 && !r.Limit.Ban() && !groupOver(reqs, res, idx, i)
			if took && !backend.Consumes(reqs, res, refused, i) {
				if extra == nil {
					extra = make([]int64, len(reqs))
				}
				extra[i] = 64 // give back
				give = true
			}
		}
		if give {
			back = append(back, idx)
		}
	}
	if len(back) > 0 {
		s.refunds.Add(1)
		for _, idx := range back {
			for _, i := range idx {
				if res[i].OverLimit {
					extra[i] += 128 // was over
				}
			}
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
		defer cancel()
		errs := make([]error, len(back))
		var wg sync.WaitGroup
		for k, idx := range back {
			wg.Go(func() { errs[k] = s.refundRetry(rctx, reqs, res, idx, tags[idx[0]], stamps, extra) })
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				// The hits stay counted until their window ends (or the
				// bucket refills); the call's decision stands.
				s.refundFailures.Add(1)
				s.log.Warn("redis cluster refund failed: the refused call's hits on this slot stay counted", "err", err)
			}
		}
	}
	return failed
}

// runParts runs "part" on every part in parallel and returns each one's
// error.
func (s *Store) runParts(ctx context.Context, reqs []backend.Request, res []backend.Result, parts [][]int, tags []string, stamps []int64) []error {
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for p, idx := range parts[1:] {
		wg.Go(func() { errs[p+1] = s.runPart(ctx, "part", reqs, res, idx, tags[idx[0]], stamps) })
	}
	errs[0] = s.runPart(ctx, "part", reqs, res, parts[0], tags[parts[0][0]], stamps)
	wg.Wait()
	return errs
}

// runPart runs op ("take" or "part") over the requests idx, which share
// tag, under the circuit breaker of their node.
func (s *Store) runPart(ctx context.Context, op string, reqs []backend.Request, res []backend.Result, idx []int, tag string, stamps []int64) error {
	c := s.newCall(op, reqs, idx, tag)
	defer c.free()
	per := 4
	if op == "part" {
		per = 5
	}
	//nolint:contextcheck // a probe that guard may start runs on the store's context, never a call's
	return s.guard(s.nodeOf(ctx, c.keys[0]), func() error {
		vals, err := takeScript.Run(ctx, s.client, c.keys, c.args...).Int64Slice()
		if err != nil {
			return err
		}
		return parse(vals, per, res, idx, stamps)
	})
}

// refundBackoff is the pause between two attempts at a refund.
const refundBackoff = 5 * time.Millisecond

// refundRetry runs refund until it succeeds, fails in a way that may have
// run the script, or ctx ends. A refund is not idempotent (run twice, it
// gives back twice), so it is retried only after errors that say the
// script did not run: see unsent.
func (s *Store) refundRetry(ctx context.Context, reqs []backend.Request, res []backend.Result, idx []int, tag string, stamps, extra []int64) error {
	t := time.NewTimer(refundBackoff)
	defer t.Stop()
	for {
		err := s.refund(ctx, reqs, res, idx, tag, stamps, extra)
		if err == nil || !unsent(err) {
			return err
		}
		t.Reset(refundBackoff)
		select {
		case <-ctx.Done():
			return err
		case <-t.C:
		}
	}
}

// unsent reports whether err says that a command surely did not run: it
// was never sent whole (a failed dial or write: Redis runs no half-sent
// command), no connection was free, or Redis refused it before running
// it (redirected, cluster down, loading, busy with another script).
func unsent(err error) bool {
	if ne, ok := errors.AsType[*net.OpError](err); ok {
		return ne.Op == "dial" || ne.Op == "write"
	}
	if errors.Is(err, goredis.ErrPoolTimeout) {
		return true
	}
	if _, ok := errors.AsType[goredis.Error](err); ok {
		for _, prefix := range []string{"MOVED ", "ASK ", "TRYAGAIN ", "CLUSTERDOWN ", "LOADING ", "BUSY ", "MASTERDOWN "} {
			if strings.HasPrefix(err.Error(), prefix) {
				return true
			}
		}
	}
	return false
}

// refund gives back the hits of the requests of idx flagged in extra, and
// reads the results of all of idx again.
func (s *Store) refund(ctx context.Context, reqs []backend.Request, res []backend.Result, idx []int, tag string, stamps, extra []int64) error {
	c := callPool.Get().(*call)
	defer c.free()
	c.keys, c.args = c.keys[:0], append(c.args[:0], s.nowArg(), "refund")
	c.appendRequests(s, reqs, idx, tag, stamps, extra)
	vals, err := takeScript.Run(ctx, s.client, c.keys, c.args...).Int64Slice()
	if err != nil {
		return err
	}
	return parse(vals, 4, res, idx, nil)
}

// groupOver reports whether a request of reqs[i]'s group among idx (the
// requests of one part) is over.
func groupOver(reqs []backend.Request, res []backend.Result, idx []int, i int) bool {
	for _, j := range idx {
		if reqs[j].Group == reqs[i].Group && res[j].OverLimit {
			return true
		}
	}
	return false
}

// tagOf returns the hash tag of a counter key: a hash of its descriptor
// part, the key without its "|algorithm|window" suffix, so that every
// limit of a descriptor lands in one slot and descriptors spread evenly.
func tagOf(key string) string {
	desc := key
	if i := strings.LastIndexByte(desc, '|'); i >= 0 {
		if j := strings.LastIndexByte(desc[:i], '|'); j >= 0 {
			desc = desc[:j]
		}
	}
	// FNV-1a, 64 bits.
	h := uint64(14695981039346656037)
	for k := 0; k < len(desc); k++ {
		h ^= uint64(desc[k])
		h *= 1099511628211
	}
	return strconv.FormatUint(h, 36)
}
