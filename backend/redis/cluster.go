package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/ratelimitd/ratelimitd/backend"
)

// takeCluster decides a call on Redis Cluster. The keys of one descriptor
// share a hash tag (see tagOf), so one descriptor's limits are decided in
// one slot, atomically. A call over one tag runs one script, as on
// standalone; a call over several is decided in parts (see takeSides).
func (s *Store) takeCluster(ctx context.Context, reqs []backend.Request, res []backend.Result) error {
	tags := make([]string, len(reqs))
	return s.takeSides(ctx, reqs, res, tags, []side{{s: s, parts: s.partsOf(reqs, nil, tags)}})
}

// A side is one store's share of a call: the request indices of each of
// its parts, the requests that one script run decides (see partsOf).
type side struct {
	s     *Store
	parts [][]int
}

// partsOf divides the requests idx of reqs (all of them if idx is nil)
// among s's script runs: on Cluster one part per hash tag, in order of
// first use, writing each request's tag into tags; elsewhere one part,
// whose keys carry no tag.
func (s *Store) partsOf(reqs []backend.Request, idx []int, tags []string) [][]int {
	n := picked(len(reqs), idx)
	if s.cluster == nil {
		all := make([]int, n)
		for k := range n {
			all[k] = at(idx, k)
		}
		return [][]int{all}
	}
	var parts [][]int
	for k := range n {
		i := at(idx, k)
		tags[i] = tagOf(&reqs[i])
		if p := slices.IndexFunc(parts, func(part []int) bool { return tags[part[0]] == tags[i] }); p >= 0 {
			parts[p] = append(parts[p], i)
		} else {
			parts = append(parts, []int{i})
		}
	}
	return parts
}

// takeSides decides a call whose requests are divided in parts, on one
// store (a Cluster's slots) or two (the main store and its PerSecond
// store): s is the store the call came to. A call of one part runs one
// script, as on standalone; a call of several runs one opPart script per
// part, each deciding as if the call were admitted: on each store all of
// them in one pipeline (one round trip per node, the nodes in parallel),
// the stores in parallel, each part under its store's timeout and its
// node's breaker. If the call is refused after all (a part failed, or
// the parts' results refuse it), an opRefund gives back what the
// admitted parts took. Admitted hits never exceed a limit, and a refused
// call leaves no lasting consumption, but a concurrent call may see the
// hits of a call being refunded. (A group over several parts is decided
// as several parts, and refunded likewise.)
//
// ctx carries the caller's values; each store bounds its own work by its
// Timeout.
func (s *Store) takeSides(ctx context.Context, reqs []backend.Request, res []backend.Result, tags []string, sides []side) error {
	if len(sides) == 1 && len(sides[0].parts) == 1 {
		return sides[0].s.runParts(ctx, opTake, reqs, res, sides[0].parts, tags, nil, nil, true)[0]
	}
	if len(sides) > 1 {
		// A store whose node is known to be down fails the call: the
		// other store need not decide, then give back, its share.
		for _, sd := range sides {
			if err := sd.s.open(ctx, reqs, sd.parts, tags); err != nil {
				return s.sideError(sd.s, err)
			}
		}
	}
	stamps := make([]int64, len(reqs))
	errs := make([][]error, len(sides))
	eachSide(sides, func(k int, sd side) {
		sctx, cancel := context.WithTimeout(ctx, sd.s.timeout)
		defer cancel()
		errs[k] = sd.s.runParts(sctx, opPart, reqs, res, sd.parts, tags, stamps, nil, true)
	})
	var failed []error
	for k, sd := range sides {
		for _, err := range errs[k] {
			if err != nil {
				failed = append(failed, s.sideError(sd.s, err))
			}
		}
	}
	refused := len(failed) > 0 || backend.Refused(reqs, res)
	// Give back what a part took but the whole call does not: all of a
	// refused call (but consume_when_over usage), and a group over in
	// another part. A refund runs on a context of its own (the call's may
	// have run out) and outside the breakers: it is no news of a node's
	// health. It reports the results of its whole part afresh.
	var extra []uint8
	back := make([][][]int, len(sides))
	refund := false
	for k, sd := range sides {
		for p, idx := range sd.parts {
			if errs[k][p] != nil {
				continue
			}
			give := false
			for _, i := range idx {
				r := &reqs[i]
				// (Give-backs and renews apply whatever the verdict:
				// never refunded.)
				took := r.Op == backend.Take && !r.ConsumeWhenOver && r.Hits > 0 && !r.Limit.Ban() && !groupOver(reqs, res, idx, i)
				if took && !backend.Consumes(reqs, res, refused, i) {
					if extra == nil {
						extra = make([]uint8, len(reqs))
					}
					extra[i] = flagGiveBack
					res[i].Lease = 0 // given back: no lease to hold
					give = true
				}
			}
			if !give {
				continue
			}
			for _, i := range idx {
				if res[i].OverLimit {
					extra[i] |= flagWasOver
				}
			}
			back[k] = append(back[k], idx)
			refund = true
		}
	}
	if refund {
		s.refunds.Add(1)
		eachSide(sides, func(k int, sd side) {
			if len(back[k]) == 0 {
				return
			}
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sd.s.timeout)
			defer cancel()
			for _, err := range sd.s.refundRetry(rctx, reqs, res, back[k], tags, stamps, extra) {
				if err != nil {
					// The hits stay counted until their window ends (or
					// the bucket refills); the call's decision stands.
					s.refundFailures.Add(1)
					s.log.Warn("redis refund failed: the refused call's hits on this part stay counted", "err", s.sideError(sd.s, err))
				}
			}
		})
	}
	return errors.Join(failed...)
}

// open returns ErrUnavailable, wrapped, if the breaker of a node that
// serves one of parts is not closed (and has the node probed), else nil.
func (s *Store) open(ctx context.Context, reqs []backend.Request, parts [][]int, tags []string) error {
	for _, idx := range parts {
		name := s.nodeOf(ctx, key(s.prefix, tags[idx[0]], reqs[idx[0]].Key))
		if n := s.node(name); n.b.State() != gobreaker.StateClosed {
			s.startProbe(n) //nolint:contextcheck // the probe runs on the store's context, never a call's
			return fmt.Errorf("%w: %s", ErrUnavailable, name)
		}
	}
	return nil
}

// eachSide runs f on every side, the sides after the first on goroutines
// of their own, and returns once all have.
func eachSide(sides []side, f func(k int, sd side)) {
	var wg sync.WaitGroup
	for k := 1; k < len(sides); k++ {
		wg.Go(func() { f(k, sides[k]) })
	}
	f(0, sides[0])
	wg.Wait()
}

// runParts runs op on every part (see partsOf), and returns each part's
// error. With guarded, each part runs under its node's circuit breaker.
// On Cluster, guarded opPart parts go through the masters' batchers (see
// cross.go); the others as runPartsEach runs them.
func (s *Store) runParts(ctx context.Context, op byte, reqs []backend.Request, res []backend.Result, parts [][]int, tags []string, stamps []int64, extra []uint8, guarded bool) []error {
	if op == opPart && guarded && s.crossing() {
		return s.runPartsCross(ctx, reqs, res, parts, tags, stamps)
	}
	return s.runPartsEach(ctx, op, reqs, res, parts, tags, stamps, extra, guarded)
}

// runPartsEach runs op on every part, and returns each part's error: on
// Cluster in one pipeline, which go-redis sends to each node in one round
// trip, the nodes in parallel. With guarded, each part runs under its
// node's circuit breaker.
func (s *Store) runPartsEach(ctx context.Context, op byte, reqs []backend.Request, res []backend.Result, parts [][]int, tags []string, stamps []int64, extra []uint8, guarded bool) []error {
	errs := make([]error, len(parts))
	calls := make([]*call, len(parts))
	tickets := make(map[string]ticket, len(parts)) // by node; the zero ticket where the breaker refused
	nodes := make([]string, len(parts))
	now := s.nowMicros()
	for p, idx := range parts {
		c := getCall()
		defer c.free()
		c.header(op, now, 1)
		c.appendCall(s.prefix, reqs, idx, tags[idx[0]], stamps, extra)
		c.seal()
		calls[p] = c
		if !guarded {
			continue
		}
		nodes[p] = s.nodeOf(ctx, c.keys[0])
		if _, ok := tickets[nodes[p]]; ok {
			continue
		}
		tk, err := s.admit(nodes[p]) //nolint:contextcheck // a probe that admit may start runs on the store's context, never a call's
		tickets[nodes[p]] = tk
		if err != nil {
			errs[p] = err
		}
	}
	if guarded {
		for p := range parts {
			if errs[p] == nil && tickets[nodes[p]].report == nil {
				errs[p] = fmt.Errorf("%w: %s", ErrUnavailable, nodes[p])
			}
		}
	}
	replies := s.send(ctx, calls, errs)
	for p, idx := range parts {
		if errs[p] == nil {
			errs[p] = decode(replies[p], replyFormat(calls[p].arg[0]), res, idx, stamps)
		}
	}
	reportTickets(tickets, nodes, errs) //nolint:contextcheck // a probe that done may start runs on the store's context, never a call's
	return errs
}

// send runs the calls whose errs are nil, and returns their replies,
// setting errs of those that failed: on Cluster in one pipeline, else one
// after the other (a standalone or Sentinel store's share of a call is
// one part).
func (s *Store) send(ctx context.Context, calls []*call, errs []error) []string {
	replies := make([]string, len(calls))
	if s.cluster == nil {
		for p, c := range calls {
			if errs[p] == nil {
				replies[p], errs[p] = s.run(ctx, c)
			}
		}
		return replies
	}
	cmds := s.pipeline(ctx, calls, errs)
	for p := range calls {
		if errs[p] == nil {
			replies[p], errs[p] = cmds[p].Text()
		}
	}
	return replies
}

// How a pipeline runs a call's script.
const (
	fcall   = iota // FCALL of the function library
	evalsha        // EVALSHA: Redis before 7.0, or a user without FCALL or FUNCTION LOAD
	eval           // EVAL: the node lacks the script
)

// pipeline sends the calls whose errs are nil in one Cluster pipeline, and
// returns their commands. It loads the function library on the master of
// each call whose node lacked it and sends it again; on Redis before 7.0
// it runs the script with EVALSHA, and EVAL where the node lacks it.
func (s *Store) pipeline(ctx context.Context, calls []*call, errs []error) []*goredis.Cmd {
	how := make([]int, len(calls))
	send := make([]bool, len(calls))
	for p := range calls {
		send[p] = errs[p] == nil
	}
	cmds := make([]*goredis.Cmd, len(calls))
	for round := range 3 { // at most: FCALL, then EVALSHA, then EVAL
		_, _ = s.cluster.Pipelined(ctx, func(pipe goredis.Pipeliner) error {
			for p, c := range calls {
				if !send[p] {
					continue
				}
				if how[p] == fcall && s.evalOnly.Load() {
					how[p] = evalsha
				}
				switch how[p] {
				case fcall:
					cmds[p] = pipe.FCall(ctx, takeFunction, c.keys, c.arg)
				case evalsha:
					cmds[p] = takeScript.EvalSha(ctx, pipe, c.keys, c.arg)
				default:
					cmds[p] = takeScript.Eval(ctx, pipe, c.keys, c.arg)
				}
			}
			return nil
		})
		again := false
		var load []int // the calls whose node lacks the library
		for p := range calls {
			// Only this round's commands: one of an earlier round either
			// succeeded or was sent again.
			if !send[p] {
				continue
			}
			send[p] = false
			switch err := cmds[p].Err(); {
			case how[p] == fcall && noFunction(err):
				send[p] = true
				load = append(load, p)
			case how[p] == fcall && noFCall(err):
				s.evalOnly.Store(true)
				send[p], how[p] = true, evalsha
			case how[p] == evalsha && goredis.HasErrorPrefix(err, "NOSCRIPT"):
				send[p], how[p] = true, eval
			}
			again = again || send[p]
		}
		if round > 0 && len(load) > 0 {
			// Loaded on a call's master, and still not found there: the
			// slot moved (to a new master, maybe), and the client's map
			// of slots lags. Load on every master it knows.
			_ = s.cluster.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
				return c.FunctionLoadReplace(ctx, takeLibrary).Err()
			})
		}
		s.loadLibrary(ctx, calls, load, how, send, errs)
		if !again {
			break
		}
	}
	return cmds
}

// loadLibrary loads the function library on the masters of the calls
// load, once per master, and fails (errs, no longer to send) the calls
// whose master it could not load: a master that is down or slow fails
// only its own calls. A master that refuses FUNCTION LOAD (see denied)
// has its calls, and all later ones, run with EVALSHA.
func (s *Store) loadLibrary(ctx context.Context, calls []*call, load []int, how []int, send []bool, errs []error) {
	loaded := make(map[string]error, len(load))
	for _, p := range load {
		c, err := s.cluster.MasterForKey(ctx, calls[p].keys[0])
		name := clusterFallback
		if err == nil {
			name = c.Options().Addr
		}
		lerr, done := loaded[name]
		if !done {
			if err == nil {
				err = c.FunctionLoadReplace(ctx, takeLibrary).Err()
			}
			lerr, loaded[name] = err, err
		}
		switch {
		case denied(lerr):
			s.evalOnly.Store(true)
			how[p] = evalsha
		case lerr != nil:
			send[p], errs[p] = false, fmt.Errorf("loading the function library: %w", lerr)
		}
	}
}

// refundBackoff is the pause between two attempts at a refund.
const refundBackoff = 5 * time.Millisecond

// refundRetry runs the refunds of the parts back until each succeeds,
// fails in a way that may have run the script, or ctx ends, and returns
// each part's last error. A refund is not idempotent (run twice, it gives
// back twice), so it is retried only after errors that say the script did
// not run: see unsent.
func (s *Store) refundRetry(ctx context.Context, reqs []backend.Request, res []backend.Result, back [][]int, tags []string, stamps []int64, extra []uint8) []error {
	errs := make([]error, len(back))
	todo := slices.Clone(back)
	at := make([]int, len(back)) // todo's index in back
	for k := range at {
		at[k] = k
	}
	t := time.NewTimer(refundBackoff)
	defer t.Stop()
	for {
		got := s.runParts(ctx, opRefund, reqs, res, todo, tags, stamps, extra, false)
		n := 0
		for k, err := range got {
			errs[at[k]] = err
			if err != nil && unsent(err) {
				todo[n], at[n] = todo[k], at[k]
				n++
			}
		}
		todo, at = todo[:n], at[:n]
		if n == 0 {
			return errs
		}
		t.Reset(refundBackoff)
		select {
		case <-ctx.Done():
			return errs
		case <-t.C:
		}
	}
}

// reportTickets tells each node's breaker ticket how its part of a call
// went: the first error of the parts sent to it (nodes[p] is part p's
// node, errs[p] its error), or nil.
func reportTickets(tickets map[string]ticket, nodes []string, errs []error) {
	for name, tk := range tickets {
		if tk.report == nil {
			continue
		}
		var err error
		for p, node := range nodes {
			if node == name && errs[p] != nil {
				err = errs[p]
				break
			}
		}
		tk.done(err) //nolint:contextcheck // a probe that done may start runs on the store's context, never a call's
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
	if redirected(err) {
		return true
	}
	if _, ok := errors.AsType[goredis.Error](err); ok {
		for _, prefix := range []string{"CLUSTERDOWN ", "LOADING ", "BUSY ", "MASTERDOWN "} {
			if strings.HasPrefix(err.Error(), prefix) {
				return true
			}
		}
	}
	return false
}

// redirected reports whether err is a Cluster node's redirection of a
// command it did not run: MOVED or ASK (the slot is, or is being moved,
// elsewhere) or TRYAGAIN (its keys are split by a move in progress).
func redirected(err error) bool {
	if _, ok := errors.AsType[goredis.Error](err); !ok {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "MOVED ") || strings.HasPrefix(msg, "ASK ") || strings.HasPrefix(msg, "TRYAGAIN ")
}

// groupOver reports whether a request of reqs[i]'s group among idx (the
// requests of one part) is over.
func groupOver(reqs []backend.Request, res []backend.Result, idx []int, i int) bool {
	for _, j := range idx {
		if reqs[j].Group == reqs[i].Group && res[j].OverLimit && reqs[j].Op == backend.Take {
			return true
		}
	}
	return false
}
