package redis

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/backend"
)

// Batching, on standalone Redis and Sentinel: concurrent calls are queued,
// and a flusher takes what has queued up and decides it in one script
// run, one call after the other. A lone call goes out at once, in a
// batch of one; under load, the calls that arrive while a batch is on the
// wire go out together in the next (flush when idle). One command per
// batch instead of one per call saves most of the per-command cost on
// both sides: go-redis's command handling here, the script call in Redis.
//
// One flusher: fewer flushers make bigger batches, and Redis runs one
// script at a time anyway; a second batch on the wire would only overlap
// the network's round trip. (To compare more, set flushers and run make
// bench-load.)
//
// A script run cannot be partly cancelled: if it outlasts its deadline,
// every call in it fails. So that one call cannot fail others:
//
//   - Heavy calls (see heavy) are not batched: each runs in a script run
//     of its own, beside the flusher, and on a connection of its own. At
//     most half the connection pool serves heavy calls (Store.heavySlots),
//     so that a flood of them cannot starve the batches of connections; a
//     heavy call that finds no slot within the store's timeout fails with
//     ErrHeavyBusy.
//   - Each caller waits until its own deadline: the store's Timeout from
//     its Take, or its context's if sooner. A batch runs until the latest
//     deadline of its calls, and fails (and counts for the breaker) only
//     when Redis has not answered by then: no call in it could still be
//     answered in time.
//   - A call whose caller has gone (its deadline passed, its context
//     ended) before its batch is sent is dropped from the batch: it is
//     neither counted nor decided. Once its batch is on the wire the call
//     is decided and its hits counted, answered or not, as any call cut
//     short in flight.
//
// Redis runs one script at a time, so a heavy call that keeps Redis busy
// longer than the store's timeout still delays the calls sent after it:
// that is a Redis slower than the timeout, and counts as one.

const (
	// flushers is how many batches may be on the wire at once.
	flushers = 1
	// maxBatch bounds the calls of one batch.
	maxBatch = 128
	// heavyRequests is the most requests a batched call may have.
	heavyRequests = 16
)

// heavy reports whether a call is decided in a script run of its own
// rather than batched: it has more than heavyRequests requests. (A
// sliding log is not heavy: a call reads and writes a few of its
// entries, whatever its length, and each expired entry is read once:
// see take.lua.)
func heavy(reqs []backend.Request) bool {
	return len(reqs) > heavyRequests
}

// encode returns a call's share of a batched script run. The caller
// encodes it, so that the batch never reads the caller's requests.
func (s *Store) encode(reqs []backend.Request) *call {
	c := getCall()
	c.appendCall(s.prefix, reqs, nil, "", nil, nil)
	return c
}

// A pending call waits in the queue for its batch.
type pending struct {
	ctx      context.Context // the caller's
	deadline time.Time       // the store's Timeout after the call's Take
	call     *call           // the call's encoding, owned by the batcher once queued
	res      []backend.Result
	// idx picks the call's requests in res (all of res if nil), and
	// stamps, for a part of a call on Cluster (see cross.go), receives
	// their stamps: the part's results are stamped.
	idx    []int
	stamps []int64
	node   *goredis.Client // on Cluster, the master that serves the call's keys
	err    error
	done   chan struct{}
	// state is waiting until the batch claims the call to write its
	// results, or the caller abandons it (its context ended): res is then
	// the caller's again, and the batch must not touch it.
	state atomic.Int32
}

const (
	waiting int32 = iota
	claimed
	abandoned
)

// A batcher queues calls for a flusher that runs them in batches: on
// standalone Redis and Sentinel (runTake), and per Cluster node (see
// cross.go).
type batcher struct {
	s     *Store
	run   func(batch []*pending) // runs a batch and completes its calls
	queue chan *pending
	stop  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
	// gone is the error of the calls that the batcher, once stopped,
	// does not run: backend.ErrClosed when the store closes, errElsewhere
	// when a Cluster master leaves (see pruneCross). Set before stop
	// closes.
	gone error
}

// newBatcher returns a batcher whose flushers run batches with run, or
// with runTake if run is nil.
func newBatcher(s *Store, run func(batch []*pending)) *batcher {
	b := &batcher{s: s, run: run, queue: make(chan *pending, flushers*maxBatch), stop: make(chan struct{})}
	if b.run == nil {
		b.run = b.runTake
	}
	for range flushers {
		b.wg.Go(b.flush)
	}
	return b
}

// close stops the flushers, after the batch they run; calls still queued,
// and those queued later, fail with gone.
func (b *batcher) close(gone error) {
	b.once.Do(func() {
		b.gone = gone
		close(b.stop)
	})
	b.wg.Wait()
	b.drain()
}

// drain fails the calls in the queue of a stopped batcher with gone.
func (b *batcher) drain() {
	for {
		select {
		case p := <-b.queue:
			p.call.free()
			p.err = b.gone
			close(p.done)
		default:
			return
		}
	}
}

// take queues p, a call (its encoding, results and, on Cluster, node
// set), and waits for its batch until ctx ends or deadline passes.
func (b *batcher) take(ctx context.Context, deadline time.Time, p *pending) error {
	// The store's deadline is a pooled timer, not a context of its own:
	// one allocation and one timer less per call.
	t := timerPool.Get().(*time.Timer)
	t.Reset(time.Until(deadline))
	defer func() {
		t.Stop()
		timerPool.Put(t)
	}()
	p.ctx, p.deadline, p.done = ctx, deadline, make(chan struct{})
	if err := b.put(ctx, t.C, p); err != nil {
		return err
	}
	return b.await(ctx, t.C, p)
}

// put queues p until ctx ends or timeout ticks; on failure it frees p's
// call.
func (b *batcher) put(ctx context.Context, timeout <-chan time.Time, p *pending) error {
	select {
	case <-b.stop:
		p.call.free()
		return b.gone
	default:
	}
	select {
	case b.queue <- p:
		select {
		case <-b.stop:
			// Stopped meanwhile: close may have drained the queue
			// before p came, and no flusher may take p any more.
			b.drain()
		default:
		}
		return nil
	case <-b.stop:
		p.call.free()
		return b.gone
	case <-ctx.Done():
		p.call.free()
		return ctx.Err()
	case <-timeout:
		p.call.free()
		return context.DeadlineExceeded
	}
}

// await waits for p's batch until ctx ends or timeout ticks (nil: never),
// and returns p's error.
func (b *batcher) await(ctx context.Context, timeout <-chan time.Time, p *pending) error {
	var err error
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		err = ctx.Err()
	case <-timeout:
		err = context.DeadlineExceeded
	}
	if p.state.CompareAndSwap(waiting, abandoned) {
		return err // dropped if its batch has not gone yet; else counted, not written
	}
	<-p.done // claimed: the batch is writing res, without I/O
	return p.err
}

// timerPool holds stopped timers for take. (Since Go 1.23, a stopped or
// reset timer delivers no stale tick.)
var timerPool = sync.Pool{New: func() any { return time.NewTimer(time.Hour) }}

// flush runs batches until the batcher stops.
func (b *batcher) flush() {
	batch := make([]*pending, 0, maxBatch)
	for {
		var p *pending
		select {
		case p = <-b.queue:
		case <-b.stop:
			return
		}
		if len(batch) > 1 {
			// Under load (the last batch held several calls), let the
			// goroutines that are about to queue run first: a batch
			// that waits for them holds more calls.
			runtime.Gosched()
		}
		batch = append(batch[:0], p)
	fill:
		for len(batch) < maxBatch {
			select {
			case p := <-b.queue:
				batch = append(batch, p)
			default:
				break fill
			}
		}
		b.run(batch)
		clear(batch)
	}
}

// runTake decides batch in one script run, until the latest deadline of
// its calls, and completes its calls.
func (b *batcher) runTake(batch []*pending) {
	s := b.s
	c := getCall()
	defer c.free()
	c.header(opTake, s.nowMicros(), 0)
	live, deadline := gather(c, batch)
	if len(live) == 0 {
		return
	}
	c.setCalls(len(live))
	c.seal()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	err := s.guard("redis", func() error {
		reply, err := s.run(ctx, c)
		if err != nil {
			return err
		}
		format := replyFormat(c.arg[0])
		size := resultBytes(format)
		if len(reply) != size*len(c.keys) { // one key and one result per request
			return fmt.Errorf("script replied %d bytes for %d requests", len(reply), len(c.keys))
		}
		for _, p := range live {
			n := size * len(p.res)
			if p.state.CompareAndSwap(waiting, claimed) {
				p.err = decode(reply[:n], format, p.res, nil, nil)
			}
			reply = reply[n:]
		}
		return nil
	})
	cancel()
	for _, p := range live {
		if err != nil {
			p.err = err
		}
		close(p.done)
	}
}

// gather appends to c the calls of batch whose callers still wait, and
// returns them and their latest deadline; it completes the others.
func gather(c *call, batch []*pending) (live []*pending, deadline time.Time) {
	now := time.Now()
	live = batch[:0]
	for _, p := range batch {
		err := p.ctx.Err()
		if err == nil && !now.Before(p.deadline) {
			err = context.DeadlineExceeded
		}
		if err != nil || p.state.Load() != waiting {
			// The caller has gone: nothing to decide.
			p.call.free()
			p.err = cmp.Or(err, context.Canceled)
			close(p.done)
			continue
		}
		c.keys = append(c.keys, p.call.keys...)
		c.arg = append(c.arg, p.call.arg...)
		c.general = c.general || p.call.general
		c.leased = c.leased || p.call.leased
		p.call.free()
		if p.deadline.After(deadline) {
			deadline = p.deadline
		}
		live = append(live, p)
	}
	return live, deadline
}

// Abandoned calls are not written; a failed batch writes no results,
// only errors, which the caller reads only after done.
