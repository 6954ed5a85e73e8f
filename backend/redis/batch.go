package redis

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ratelimitd/ratelimitd/backend"
)

// Batching, on standalone Redis and Sentinel: concurrent calls are queued,
// and a flusher takes what has queued up and decides it in one script run
// ("multi"), one call after the other. A lone call goes out at once, in a
// batch of one; under load, the calls that arrive while a batch is on the
// wire go out together in the next (flush when idle). One command per
// batch instead of one per call saves most of the per-command cost on
// both sides: go-redis's command handling here, the script call in Redis.
//
// On the load benchmark (32 callers, loopback), one flusher beat two and
// four: 14.5k against 13.7k and 13.0k decisions/s, at 56, 60 and 66 µs of
// CPU per decision, since fewer flushers make bigger batches. Redis runs
// one script at a time anyway; a second batch on the wire would only
// overlap the network's round trip.

const (
	// flushers is how many batches may be on the wire at once.
	flushers = 1
	// maxBatch bounds the calls of one batch.
	maxBatch = 128
)

// A pending call waits in the queue for its batch.
type pending struct {
	ctx  context.Context
	reqs []backend.Request
	res  []backend.Result
	err  error
	done chan struct{}
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

type batcher struct {
	s     *Store
	queue chan *pending
	stop  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
}

func newBatcher(s *Store) *batcher {
	b := &batcher{s: s, queue: make(chan *pending, flushers*maxBatch), stop: make(chan struct{})}
	for range flushers {
		b.wg.Go(b.flush)
	}
	return b
}

// close stops the flushers; calls still queued fail with ErrClosed.
func (b *batcher) close() {
	b.once.Do(func() { close(b.stop) })
	b.wg.Wait()
	for {
		select {
		case p := <-b.queue:
			p.err = backend.ErrClosed
			close(p.done)
		default:
			return
		}
	}
}

// take queues a call and waits for its batch, or for ctx.
func (b *batcher) take(ctx context.Context, reqs []backend.Request, res []backend.Result) error {
	select {
	case <-b.stop:
		return backend.ErrClosed
	default:
	}
	p := &pending{ctx: ctx, reqs: reqs, res: res, done: make(chan struct{})}
	select {
	case b.queue <- p:
	case <-b.stop:
		return backend.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		if p.state.CompareAndSwap(waiting, abandoned) {
			return ctx.Err() // the batch may still count it, but writes nothing
		}
		<-p.done // claimed: the batch is writing res, without I/O
		return p.err
	}
}

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

// run decides batch in one script run and completes its calls.
func (b *batcher) run(batch []*pending) {
	s := b.s
	live := batch[:0:0]
	for _, p := range batch {
		if err := p.ctx.Err(); err != nil {
			p.err = err // the caller has gone: nothing to decide
			close(p.done)
			continue
		}
		live = append(live, p)
	}
	if len(live) == 0 {
		return
	}
	c := callPool.Get().(*call)
	c.keys, c.args = c.keys[:0], append(c.args[:0], s.nowArg(), "multi", len(live))
	for _, p := range live {
		c.args = append(c.args, len(p.reqs))
		c.appendRequests(s, p.reqs, nil, "", nil, nil)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	err := s.guard(ctx, s.nodeOf(ctx, ""), func() error {
		vals, err := takeScript.Run(ctx, s.client, c.keys, c.args...).Int64Slice()
		if err != nil {
			return err
		}
		if len(vals) != 4*len(c.keys) { // one key and 4 numbers per request
			return fmt.Errorf("script returned %d numbers for %d requests", len(vals), len(c.keys))
		}
		for _, p := range live {
			if p.state.CompareAndSwap(waiting, claimed) {
				p.err = parse(vals[:4*len(p.reqs)], 4, p.reqs, p.res, nil, nil)
			}
			vals = vals[4*len(p.reqs):]
		}
		return nil
	})
	cancel()
	c.free()
	for _, p := range live {
		if err != nil {
			p.err = err
		}
		close(p.done)
	}
}

// Abandoned calls are not written; a failed batch writes no results,
// only errors, which the caller reads only after done.
