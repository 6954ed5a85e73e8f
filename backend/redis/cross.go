package redis

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/backend"
)

// Batching on Redis Cluster, per node. A script declares its keys, and
// Cluster runs it only if they are all in one slot; so without more, a
// call runs one script per slot (one per descriptor), and concurrent
// calls cannot share a run. On Redis 7.0 and later, take.lua registers a
// second function, cross, with the allow-cross-slot-keys flag: its keys
// come as arguments, not declared, and the store sends it to the master
// that serves them all, where a run may then decide calls over any of
// that node's slots. Each Cluster master gets a batcher (see batch.go)
// that runs the calls queued for it, as the standalone batcher does:
//
//   - A compact call (see compactBit) whose keys one master serves is
//     queued to that master's batcher whole, and decided there as on
//     standalone Redis: one call, one atomic decision.
//   - A call over several masters is decided in parts, as before (see
//     takeSides): each master's share of it, compact, is queued to that
//     master's batcher as a part (partCallBit), decided as opPart decides
//     and refunded by opRefund when the call is refused.
//   - Anything else (a call that is not compact, Redis before 7.0, a node
//     that will not load the library) goes per slot, as before.
//
// Slots move. go-redis's map of slots may be stale, and a run's node may
// no longer serve (or be migrating) a slot of a call: Redis checks every
// command of a script, and refuses one on a key that is not local, but
// keeps what the script wrote before. So a call that meets such a
// refusal in a cross run gives back what it raised before (its keys of
// slots the node does serve), and is answered crossElsewhere, having
// written nothing that lasts: the store then decides it (or its part) per
// slot, where go-redis follows the redirections. Nothing moves a slot
// during a run: Redis runs one script at a time. (Checking ownership
// thus costs no command: see fast in take.lua.)

// maxCrossNodes bounds the store's batchers on Cluster, one per master:
// past it, calls to a new master go per slot. The batchers of masters
// that left are dropped (see pruneCross), so that it is reached only by
// a Cluster of as many masters. It has no flag and no metric of its own:
// Redis Cluster itself is documented to scale to 1000 nodes, so the bound
// only guards against a corrupt map of slots, and a call past it is still
// decided (per slot, in ratelimitd_backend_* as any other call).
const maxCrossNodes = 1000

// errElsewhere is a cross run's answer to a call whose keys its node did
// not serve: the call wrote nothing, and is decided again per slot.
var errElsewhere = errors.New("redis: the node does not serve the call's keys")

// errNoCross is a cross run's answer when its node cannot run cross (an
// older Redis, an ACL): its calls are decided again per slot, and the
// store no longer batches on Cluster.
var errNoCross = errors.New("redis: the node cannot run the cross-slot function")

// crossBatchers holds a Cluster store's batchers, by master address.
type crossBatchers struct {
	mu      sync.Mutex
	nodes   map[string]*batcher // requires mu
	closed  bool                // requires mu
	pruning atomic.Bool         // a call is reloading the slot map to prune nodes
}

// crossBatcher returns the batcher of the master named name, or nil when
// the store is closed or has maxCrossNodes batchers already. A master it
// has no batcher for is news of the Cluster's topology: it first drops the
// batchers of the masters that left (see pruneCross), and returns nil if
// name is one of them (a call routed on a stale map of slots).
func (s *Store) crossBatcher(ctx context.Context, name string) *batcher {
	x := &s.cross
	x.mu.Lock()
	b, ok := x.nodes[name]
	closed := x.closed
	x.mu.Unlock()
	if ok || closed {
		return b
	}
	if x.pruning.CompareAndSwap(false, true) { // one reload of the slot map at a time is enough
		masters, err := s.masters(ctx)
		x.pruning.Store(false)
		if err == nil {
			s.pruneCross(func(name string) bool { _, ok := masters[name]; return ok })
			if _, ok := masters[name]; !ok {
				return nil // a stale map's master, gone already: per slot
			}
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return nil
	}
	b, ok = x.nodes[name]
	if !ok {
		if len(x.nodes) >= maxCrossNodes {
			return nil
		}
		if x.nodes == nil {
			x.nodes = make(map[string]*batcher)
		}
		b = newBatcher(s, func(batch []*pending) { s.runCross(name, batch) }) //nolint:contextcheck // its flusher runs on the store's context, never a call's
		x.nodes[name] = b
	}
	return b
}

// pruneCross stops the batchers of the masters for which keep is false,
// on a goroutine of the store's (a batch may be running). A call they
// hold, or that comes to them meanwhile, fails with errElsewhere: it is
// decided again per slot, where go-redis finds its master.
func (s *Store) pruneCross(keep func(name string) bool) {
	x := &s.cross
	var gone []*batcher
	x.mu.Lock()
	for name, b := range x.nodes {
		if !keep(name) {
			gone = append(gone, b)
			delete(x.nodes, name)
		}
	}
	x.mu.Unlock()
	if len(gone) == 0 {
		return
	}
	if !s.begin() {
		// Closing: closeCross no longer sees them, so stop them here.
		for _, b := range gone {
			b.close(backend.ErrClosed)
		}
		return
	}
	go func() {
		defer s.inflight.Done()
		for _, b := range gone {
			b.close(errElsewhere)
		}
	}()
}

// closeCross stops the batchers; calls still queued fail with ErrClosed.
func (s *Store) closeCross() {
	x := &s.cross
	x.mu.Lock()
	x.closed = true
	nodes := x.nodes
	x.nodes = nil
	x.mu.Unlock()
	for _, b := range nodes {
		b.close(backend.ErrClosed)
	}
}

// crossing reports whether the store batches calls per Cluster master.
func (s *Store) crossing() bool {
	return s.cluster != nil && !s.noBatch && !s.evalOnly.Load()
}

// crossCall encodes the requests idx of reqs (all of them if nil) as one
// call of a cross run, a part if part, and returns it with the master
// that serves every one of their keys; nil if they are not compact, or
// not all on one master (as far as go-redis knows), or its slot map is
// unknown.
func (s *Store) crossCall(ctx context.Context, reqs []backend.Request, idx []int, tags []string, part bool) (*call, *goredis.Client) {
	n := picked(len(reqs), idx)
	if !compact(reqs, idx, windowsOnly) {
		return nil, nil
	}
	c := getCall()
	var master *goredis.Client
	for k := range n {
		i := at(idx, k)
		tag := ""
		if tags != nil {
			tag = tags[i]
		} else {
			tag = tagOf(&reqs[i])
		}
		key := key(s.prefix, tag, reqs[i].Key)
		m, err := s.cluster.MasterForKey(ctx, key)
		if err != nil || (master != nil && m != master) {
			c.free()
			return nil, nil
		}
		master = m
		c.keys = append(c.keys, key)
	}
	start := len(c.arg)
	c.appendCompact(reqs, idx)
	if part {
		binary.LittleEndian.PutUint32(c.arg[start:], binary.LittleEndian.Uint32(c.arg[start:])|partCallBit)
	}
	return c, master
}

// decideCross decides a compact call whose keys one master serves in
// that master's batch, and reports whether it did: false leaves the call
// to the per-slot path, untouched (another shape, several masters, or a
// node that did not serve its keys and wrote nothing).
func (s *Store) decideCross(ctx context.Context, reqs []backend.Request, res []backend.Result) (bool, error) {
	if heavy(reqs) {
		return false, nil
	}
	c, master := s.crossCall(ctx, reqs, nil, nil, false)
	if c == nil {
		return false, nil
	}
	b := s.crossBatcher(ctx, master.Options().Addr)
	if b == nil {
		c.free()
		return false, nil
	}
	err := b.take(ctx, time.Now().Add(s.timeout), &pending{call: c, res: res, node: master})
	if errors.Is(err, errElsewhere) || errors.Is(err, errNoCross) {
		return false, nil
	}
	return true, err
}

// runPartsCross runs opPart on parts (see runParts) through the masters'
// batchers: each master's share of them, compact, as one part of a cross
// run. Shares of another shape, and those whose node did not serve their
// keys, run per slot.
func (s *Store) runPartsCross(ctx context.Context, reqs []backend.Request, res []backend.Result, parts [][]int, tags []string, stamps []int64) []error {
	errs := make([]error, len(parts))
	type share struct {
		name  string
		parts []int // indices in parts
		idx   []int // their requests
		p     *pending
		b     *batcher
	}
	var shares []share
	var rest []int // parts to run per slot
	for p, idx := range parts {
		m, err := s.cluster.MasterForKey(ctx, key(s.prefix, tags[idx[0]], reqs[idx[0]].Key))
		if err != nil {
			rest = append(rest, p)
			continue
		}
		name := m.Options().Addr
		k := 0
		for k < len(shares) && shares[k].name != name {
			k++
		}
		if k == len(shares) {
			shares = append(shares, share{name: name})
		}
		shares[k].parts = append(shares[k].parts, p)
		shares[k].idx = append(shares[k].idx, idx...)
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(s.timeout)
	}
	for k := range shares {
		sh := &shares[k]
		c, master := s.crossCall(ctx, reqs, sh.idx, tags, true)
		if c != nil && master.Options().Addr == sh.name {
			sh.b = s.crossBatcher(ctx, sh.name)
		}
		if sh.b == nil {
			if c != nil {
				c.free()
			}
			rest = append(rest, sh.parts...)
			continue
		}
		sh.p = &pending{ctx: ctx, deadline: deadline, call: c, res: res, idx: sh.idx, stamps: stamps, node: master, done: make(chan struct{})}
		if err := sh.b.put(ctx, nil, sh.p); err != nil {
			sh.p = nil
			if errors.Is(err, errElsewhere) { // a master that left
				rest = append(rest, sh.parts...)
				continue
			}
			for _, p := range sh.parts {
				errs[p] = err
			}
		}
	}
	for _, sh := range shares {
		if sh.p == nil {
			continue
		}
		err := sh.b.await(ctx, nil, sh.p)
		if errors.Is(err, errElsewhere) || errors.Is(err, errNoCross) {
			rest = append(rest, sh.parts...)
			continue
		}
		for _, p := range sh.parts {
			errs[p] = err
		}
	}
	if len(rest) > 0 {
		sub := make([][]int, len(rest))
		for k, p := range rest {
			sub[k] = parts[p]
		}
		for k, err := range s.runPartsEach(ctx, opPart, reqs, res, sub, tags, stamps, nil, true) {
			errs[rest[k]] = err
		}
	}
	return errs
}

// runCross decides a batch of calls queued for the master named name in
// one cross run, until the latest deadline of its calls, and completes
// its calls.
func (s *Store) runCross(name string, batch []*pending) {
	c := getCall()
	defer c.free()
	c.header(opFast, s.nowMicros(), 0)
	live, deadline := gather(c, batch)
	if len(live) == 0 {
		return
	}
	c.setCalls(len(live))
	master := live[0].node
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	var reply string
	noCross := false
	err := s.guard(name, func() error {
		var err error
		reply, err = s.fcallCross(ctx, master, c)
		if errors.Is(err, errNoCross) {
			noCross = true // the node answered: no failure of its
			return nil
		}
		return err
	})
	cancel()
	if noCross {
		err = errNoCross
	}
	for _, p := range live {
		if err != nil {
			p.err = err
			close(p.done)
			continue
		}
		var perr error
		reply, perr = decodeCross(reply, p)
		if perr != nil {
			p.err = perr
		}
		if errors.Is(perr, errElsewhere) {
			s.elsewhere.Add(1)
		}
		close(p.done)
	}
}

// fcallCross runs c, a cross run, on master: its argument, then its keys,
// as FCALL's arguments. It loads the function library on a master that
// lacks it; errNoCross means the master cannot run it (Redis before 7.0,
// or an ACL).
func (s *Store) fcallCross(ctx context.Context, master *goredis.Client, c *call) (string, error) {
	args := make([]any, 0, 1+len(c.keys))
	args = append(args, c.arg)
	for _, k := range c.keys {
		args = append(args, k)
	}
	reply, err := master.FCall(ctx, crossFunction, nil, args...).Text()
	switch {
	case noFunction(err):
		err := master.FunctionLoadReplace(ctx, takeLibrary).Err()
		if denied(err) {
			s.evalOnly.Store(true)
			return "", errNoCross
		}
		if err != nil {
			return "", fmt.Errorf("loading the function library: %w", err)
		}
		return master.FCall(ctx, crossFunction, nil, args...).Text()
	case noFCall(err):
		s.evalOnly.Store(true)
		return "", errNoCross
	}
	return reply, err
}

// decodeCross reads p's reply from the start of reply, a cross run's,
// writes p's results unless its caller has gone, and returns the rest of
// reply and p's error.
func decodeCross(reply string, p *pending) (string, error) {
	if len(reply) < statusSize {
		return "", fmt.Errorf("script replied %d bytes for a call's status", len(reply))
	}
	status := reply[0]
	reply = reply[statusSize:]
	if status == crossElsewhere {
		if len(reply) < reasonSize {
			return "", fmt.Errorf("script replied %d bytes for a reason's length", len(reply))
		}
		n := int(binary.LittleEndian.Uint32([]byte(reply[:reasonSize])))
		reply = reply[reasonSize:]
		if len(reply) < n {
			return "", fmt.Errorf("script replied %d bytes for a reason of %d", len(reply), n)
		}
		return reply[n:], fmt.Errorf("%w: %s", errElsewhere, reply[:n])
	}
	format := fmtResult
	if p.stamps != nil {
		format = fmtStamped
	}
	size := resultBytes(format)
	n := size * picked(len(p.res), p.idx)
	if status != crossDone || len(reply) < n {
		return "", fmt.Errorf("script replied status %d and %d bytes for %d bytes of results", status, len(reply), n)
	}
	var err error
	if p.state.CompareAndSwap(waiting, claimed) {
		err = decode(reply[:n], format, p.res, p.idx, p.stamps)
	}
	return reply[n:], err
}
