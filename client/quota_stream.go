package client

import (
	"context"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v5"
	"google.golang.org/grpc"
)

// Reconnection backoff of the reporting stream: doubling from
// quotaBackoffMin to quotaBackoffMax, each wait jittered by ±20%.
const (
	quotaBackoffMin = 100 * time.Millisecond
	quotaBackoffMax = 10 * time.Second
)

// newQuotaBackoff returns the reporting stream's reconnection backoff. It
// is cenkalti/backoff's, as the daemon's Redis share watch uses: gRPC's own
// connection backoff (google.golang.org/grpc/backoff) is only a Config,
// its computation being internal to gRPC, and it already paces the
// connection under a stream opened with WaitForReady; this one paces the
// streams themselves, which fail while the connection stays up.
func newQuotaBackoff() *backoff.ExponentialBackOff {
	return &backoff.ExponentialBackOff{
		InitialInterval:     quotaBackoffMin,
		RandomizationFactor: 0.2,
		Multiplier:          2,
		MaxInterval:         quotaBackoffMax,
	}
}

// rlqsStream describes StreamRateLimitQuotas.
var rlqsStream = &grpc.StreamDesc{
	StreamName:    "StreamRateLimitQuotas",
	ServerStreams: true,
	ClientStreams: true,
}

// run is the reporting goroutine: it keeps a stream open, reconnecting
// with backoff, until ctx ends.
func (q *Quota) run(ctx context.Context) {
	defer close(q.done)
	var gen uint64
	wait := newQuotaBackoff()
	for {
		gen++
		answered, err := q.stream(ctx, gen)
		if ctx.Err() != nil {
			return
		}
		if answered {
			wait.Reset()
		}
		retryIn := wait.NextBackOff()
		q.logger.Warn("ratelimitd quota: the RLQS stream failed; assignments keep until they expire, then the failure policy decides",
			"domain", q.domain, "retry_in", retryIn, "err", err)
		t := time.NewTimer(retryIn)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// stream runs one stream, generation gen, until it fails or ctx ends: it
// reports every bucket at once (the first report naming the domain), a
// new bucket as soon as it is used, and every bucket each interval, while
// a second goroutine applies the answers. answered reports whether
// ratelimitd answered at least once.
func (q *Quota) stream(ctx context.Context, gen uint64) (answered bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// WaitForReady: a stream waits for the connection, rather than
	// failing while it reconnects.
	cs, err := q.conn.NewStream(ctx, rlqsStream, rlqsMethod, grpc.ForceCodec(rawCodec{}), grpc.WaitForReady(true))
	if err != nil {
		return false, fmt.Errorf("opening the stream: %w", err)
	}
	recvd := make(chan struct{}, 1)
	errc := make(chan error, 1)
	ended := make(chan struct{})
	go func() { // ends with the stream, at the latest on cancel
		defer close(ended)
		errc <- q.receive(cs, recvd)
	}()
	defer func() {
		cancel()
		<-ended
		select {
		case <-recvd:
			answered = true
		default:
		}
	}()

	ticker := time.NewTicker(q.interval)
	defer ticker.Stop()
	domain := q.domain
	send := func(all bool) error {
		msg, err := appendReports(nil, domain, q.usages(gen, all))
		if err != nil {
			return err
		}
		if len(msg) == 0 {
			return nil
		}
		domain = ""
		if err := cs.SendMsg(&msg); err != nil {
			return fmt.Errorf("sending reports: %w", err)
		}
		return nil
	}
	if err := send(false); err != nil {
		return false, err
	}
	for {
		var err error
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case err = <-errc:
			return false, err
		case <-q.wake:
			err = send(false)
		case <-ticker.C:
			err = send(true)
		}
		if err != nil {
			return false, err
		}
	}
}

// receive applies the answers of cs until it ends, signalling recvd at
// each.
func (q *Quota) receive(cs grpc.ClientStream, recvd chan<- struct{}) error {
	for {
		var msg []byte
		if err := cs.RecvMsg(&msg); err != nil {
			return fmt.Errorf("receiving assignments: %w", err)
		}
		actions, err := parseResponse(msg)
		if err != nil {
			return fmt.Errorf("reading assignments: %w", err)
		}
		now := q.exactNanos()
		for _, a := range actions {
			q.apply(a, now)
		}
		select {
		case recvd <- struct{}{}:
		default:
		}
	}
}

// usages collects the usage of the buckets to report on stream gen: all
// of them when all is set, forgetting those idle for QuotaIdleIntervals
// intervals; else those not yet reported on gen (new buckets).
func (q *Quota) usages(gen uint64, all bool) []usage {
	now := q.exactNanos()
	var us []usage
	q.each(func(b *quotaBucket) {
		if !all && b.reportedOn == gen {
			return
		}
		u := usage{entries: b.entries, allowed: b.allowed.Swap(0), denied: b.denied.Swap(0)}
		// ratelimitd takes a bucket's last time_elapsed as the client's
		// reporting interval, and sizes the assignment's time to live
		// from it: a bucket's first report gives the interval itself.
		u.elapsed = q.interval
		if b.reportedOn != 0 {
			u.elapsed = time.Duration(now - b.lastReport)
		}
		if all {
			if b.used.Swap(false) {
				b.idle = 0
			} else {
				b.idle++
			}
			if b.idle >= QuotaIdleIntervals {
				q.remove(b)
				return
			}
		}
		b.reportedOn, b.lastReport = gen, now
		us = append(us, u)
	})
	return us
}
