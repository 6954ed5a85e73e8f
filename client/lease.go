package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

// ReleaseTimeout bounds how long a Release waits for ratelimitd (and for
// the connection): a release runs even once the caller's context has
// ended, so that it needs a bound of its own. A release that fails or
// times out leaves the slots held until their lease expires.
const ReleaseTimeout = time.Second

// ErrLeaseLost is the error of Lease.Renew when the lease has expired or
// was released: its slots may be held by others now, and the work that
// held them should stop, or Acquire again.
var ErrLeaseLost = errors.New("client: lease expired or released")

// An Acquirer holds slots of concurrency limits for the duration of some
// work: *Client does. UnaryServerInterceptor, StreamServerInterceptor and
// HTTPMiddleware take one through their RateLimiter, with WithConcurrency
// and WithHTTPConcurrency.
//
// Acquire's contract is Client.Acquire's: release is never nil, and must
// be called once the work is done (calling it again does nothing).
type Acquirer interface {
	Acquire(ctx context.Context, domain string, descriptors ...Descriptor) (release func(), d Decision, err error)
}

var _ Acquirer = (*Client)(nil)

// A Lease holds the slots that one AcquireLease took, until Release gives
// them back or the lease expires (ExpiresAt); Renew extends it. A Lease
// that holds nothing (refused, decided by the failure policy, or admitted
// where no concurrency limit applies) releases and renews nothing.
//
// A Lease is safe for concurrent use by multiple goroutines.
type Lease struct {
	c      *Client
	domain string
	ds     []*ratelimitv1.Descriptor // as Acquire sent them; read only

	// released is done once Release is called: it stops KeepAlive, and
	// cancels its Renew in flight, which Release would wait for.
	released     context.Context
	markReleased context.CancelFunc

	// op serializes Release and Renew, so that a Release never sends an
	// id that a Renew in flight is replacing.
	op         sync.Mutex
	ended      bool  // released, or lost; requires op
	releaseErr error // the result of the Release that ended it; requires op

	mu        sync.Mutex
	id        []byte    // nil when nothing is held; requires mu
	expiresAt time.Time // requires mu
}

// Acquire takes slots of the concurrency limits of domain's rules that
// descriptors match (an `algorithm: concurrency` limit admits at most
// its requests held at once) and counts on their other limits, as
// ShouldRateLimit does, and returns release, which gives the slots back.
// Call release once the work is done, typically deferred:
//
//	release, d, err := c.Acquire(ctx, "api", client.D("tenant", t))
//	if err != nil {
//		return err
//	}
//	defer release()
//	if !d.Allowed {
//		return fmt.Errorf("busy, retry in %v", d.RetryAfter)
//	}
//
// release is never nil: it does nothing when nothing is held (refused,
// the failure policy decided, or no concurrency limit applied), and
// nothing when called again. It runs even after ctx ended (with ctx's
// values, a deadline of its own of ReleaseTimeout), and logs its failure
// at Warn (see WithLogger): the slots then free themselves when their
// lease expires (the limit's window), which bounds what a caller that
// dies leaks too. For work that may outlive the lease, use AcquireLease
// and renew it, or WithAutoRenew.
//
// The decision and the error are ShouldRateLimit's: over a limit is
// Decision.Allowed false (nothing is then held), and a failure of
// ratelimitd is decided by the failure policy (Decision.Err set), with
// nothing held; err is non-nil only for a malformed request (a
// descriptor with GiveBack among them) or when ctx ends first. The
// Client's memory of refusals is neither read nor written: a slot may
// free at any time. WithDecisionHook's hook sees the call as one of
// ShouldRateLimit.
func (c *Client) Acquire(ctx context.Context, domain string, descriptors ...Descriptor) (release func(), d Decision, err error) {
	l, d, err := c.AcquireLease(ctx, domain, descriptors...)
	if err != nil || l.held() == nil {
		return func() {}, d, err
	}
	kept := make(chan struct{})
	if c.opts.autoRenew {
		go func() {
			defer close(kept)
			if err := l.KeepAlive(context.WithoutCancel(ctx)); err != nil {
				c.logger().WarnContext(ctx, "ratelimitd client: a lease held was lost; its slots may be held by others",
					"domain", domain, "err", err)
			}
		}()
	} else {
		close(kept)
	}
	return func() {
		exp := l.ExpiresAt() // Release forgets it
		if err := l.Release(ctx); err != nil {
			c.logger().WarnContext(ctx, "ratelimitd client: release failed; the slots free themselves when their lease expires",
				"domain", domain, "expires_at", exp, "err", err)
		}
		<-kept // KeepAlive ends with the release
	}, d, nil
}

// AcquireLease is Acquire returning the Lease itself: to renew it, for
// work that may outlive it, or to learn when it expires. The Lease is
// never nil; release it once the work is done.
func (c *Client) AcquireLease(ctx context.Context, domain string, descriptors ...Descriptor) (*Lease, Decision, error) {
	l := &Lease{c: c, domain: domain}
	l.released, l.markReleased = context.WithCancel(context.Background())
	if c.opts.hook == nil {
		d, err := l.acquire(ctx, descriptors)
		return l, d, err
	}
	start := time.Now()
	d, err := l.acquire(ctx, descriptors)
	c.opts.hook(ctx, Observation{Domain: domain, Descriptors: descriptors, Decision: d, Err: err, Duration: time.Since(start)})
	return l, d, err
}

// acquire asks for l's slots.
func (l *Lease) acquire(ctx context.Context, descriptors []Descriptor) (Decision, error) {
	if err := checkAcquire(l.domain, descriptors); err != nil {
		return Decision{}, err
	}
	req, err := request(l.domain, descriptors)
	if err != nil {
		return Decision{}, err
	}
	l.ds = req.Descriptors
	var resp *ratelimitv1.AcquireResponse
	failed, err := l.c.send(ctx, "Acquire", l.c.opts.timeout, func(ctx context.Context) (err error) {
		resp, err = l.c.rls.Acquire(ctx, &ratelimitv1.AcquireRequest{Domain: l.domain, Descriptors: l.ds})
		return err
	})
	switch {
	case err != nil:
		return Decision{}, err
	case failed != nil:
		return l.c.policy(failed), nil
	}
	d := decision(resp.GetCode(), resp.GetStatuses(), resp.GetHeaders())
	if d.Allowed {
		l.hold(resp.GetLease())
	}
	return d, nil
}

// hold records lease as l's (nil: nothing held).
func (l *Lease) hold(lease *ratelimitv1.Lease) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.id = lease.GetId()
	l.expiresAt = time.Time{}
	if t := lease.GetExpiresAt(); t != nil {
		l.expiresAt = t.AsTime()
	}
}

// held returns the id of the lease l holds, nil when none.
func (l *Lease) held() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.id
}

// ExpiresAt returns when the lease's slots free themselves unless renewed
// (the earliest expiry of its limits, on ratelimitd's clock), or the zero
// Time when the Lease holds nothing.
func (l *Lease) ExpiresAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiresAt
}

// Release gives the lease's slots back, exactly those: once released, or
// expired, a lease frees nothing more. It runs once: later calls return
// the first one's result without asking again. It runs even when ctx has
// ended: it keeps only ctx's values, with a deadline of ReleaseTimeout.
// A non-nil error means ratelimitd could not be told (unreachable, timed
// out); the slots then free themselves when the lease expires.
func (l *Lease) Release(ctx context.Context) error {
	l.markReleased() // before op: a KeepAlive's Renew in flight gives up
	l.op.Lock()
	defer l.op.Unlock()
	if l.ended {
		return l.releaseErr
	}
	l.ended = true
	id := l.held()
	if id == nil {
		return nil
	}
	l.hold(nil)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
	defer cancel()
	failed, err := l.c.send(ctx, "Release", 0, func(ctx context.Context) error {
		_, err := l.c.rls.Release(ctx, &ratelimitv1.ReleaseRequest{Domain: l.domain, Descriptors: l.ds, LeaseId: id})
		return err
	})
	if failed != nil {
		err = fmt.Errorf("client: Release: %w", failed)
	}
	l.releaseErr = err
	return err
}

// Renew extends the lease to a full lease from now (the limit's window),
// for work that outlives it; ExpiresAt then reports the new expiry. It
// returns ErrLeaseLost when the lease has expired or was released (its
// slots may be held by others now; the Lease then holds nothing), and
// ratelimitd's failure, wrapped, when it could not be asked (within the
// Client's budget, see WithTimeout): the lease then still ends at
// ExpiresAt. Renewing a Lease that never held anything does nothing.
// Renew should be called well before ExpiresAt, such as halfway.
func (l *Lease) Renew(ctx context.Context) error {
	l.op.Lock()
	defer l.op.Unlock()
	if l.ended {
		return ErrLeaseLost
	}
	id := l.held()
	if id == nil {
		return nil
	}
	var resp *ratelimitv1.RenewResponse
	failed, err := l.c.send(ctx, "Renew", l.c.opts.timeout, func(ctx context.Context) (err error) {
		resp, err = l.c.rls.Renew(ctx, &ratelimitv1.RenewRequest{Domain: l.domain, Descriptors: l.ds, LeaseId: id})
		return err
	})
	switch {
	case err != nil:
		return err
	case failed != nil:
		return fmt.Errorf("client: Renew: %w", failed)
	case resp.GetCode() == ratelimitv1.Code_CODE_OVER_LIMIT || resp.GetLease() == nil:
		l.ended = true
		l.hold(nil)
		return ErrLeaseLost
	}
	l.hold(resp.GetLease())
	return nil
}

// minRenewWait is the least KeepAlive waits between renewals, so that a
// lease about to expire, or a ratelimitd that fails at once, does not
// make it spin.
const minRenewWait = 100 * time.Millisecond

// KeepAlive renews the lease halfway to its expiry, again and again,
// until it is released (KeepAlive then returns nil), ctx ends (it returns
// ctx.Err()), or the lease is lost: refused renewal, or no renewal
// succeeded before it expired (ErrLeaseLost, wrapping the last failure).
// A renewal that fails is tried again halfway to the expiry still in
// force (no sooner than 100 ms). It returns nil at once for a Lease that
// never held anything.
//
// KeepAlive blocks: run it in a goroutine of its own, which ends with the
// lease's release:
//
//	go lease.KeepAlive(ctx)
//	defer lease.Release(ctx)
//
// A kept lease never lapses while the process lives: work that hangs
// holds its slots until released. Expiries are ratelimitd's, compared
// with the Client's clock (WithClock). WithAutoRenew makes Acquire keep
// its leases alive.
func (l *Lease) KeepAlive(ctx context.Context) error {
	if l.held() == nil {
		return nil // never held, or over already
	}
	var last error
	for {
		exp := l.ExpiresAt()
		switch {
		case l.released.Err() != nil:
			return nil
		case exp.IsZero(): // lost to another Renew
			return ErrLeaseLost
		}
		now := l.c.opts.now()
		if last != nil && !now.Before(exp) {
			return fmt.Errorf("%w (no renewal before it expired: %w)", ErrLeaseLost, last)
		}
		wake, stop := l.c.timer(max(exp.Sub(now)/2, minRenewWait))
		select {
		case <-ctx.Done():
			stop()
			return ctx.Err()
		case <-l.released.Done():
			stop()
			return nil
		case <-wake:
		}
		err := l.renewUnlessReleased(ctx)
		switch {
		case err == nil:
			last = nil
		case l.released.Err() != nil:
			return nil
		case errors.Is(err, ErrLeaseLost):
			return err
		case ctx.Err() != nil:
			return ctx.Err()
		default:
			last = err
		}
	}
}

// renewUnlessReleased is Renew, given up when Release is called.
func (l *Lease) renewUnlessReleased(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// l.released is no context to inherit values or a deadline from: it
	// only signals the release.
	stop := context.AfterFunc(l.released, cancel) //nolint:contextcheck // see above
	defer stop()
	return l.Renew(ctx)
}

// logger returns the logger of warnings.
func (c *Client) logger() *slog.Logger {
	if c.opts.logger == nil {
		return slog.Default()
	}
	return c.opts.logger
}
