// Package clienttest provides a fake rate limiter for the tests of code
// that uses package client: Fake answers ShouldRateLimit by a script, with
// no ratelimitd, and records the calls, so that a test can check what its
// code asked and how it handled each answer.
//
// A Fake is a client.RateLimiter: pass it where the code under test takes
// one, including client.UnaryServerInterceptor (and the other
// interceptors), client.NewLimiter and client.HTTPMiddleware. It is a
// client.Acquirer too, for code that holds slots (client.WithConcurrency,
// client.WithHTTPConcurrency): Held tells how many it holds.
package clienttest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratelimitd/ratelimitd/client"
)

// An Answer decides one call to a Fake, given the call's domain and
// descriptors. Allow, Refuse, FailOpen, FailClosed, Fail and Decide make
// the usual ones.
type Answer func(domain string, descriptors []client.Descriptor) (client.Decision, error)

// A Call is one ShouldRateLimit (or Acquire) call a Fake received, and
// what it answered.
type Call struct {
	Domain      string
	Descriptors []client.Descriptor // a copy of the caller's
	Decision    client.Decision
	Err         error
	// Acquire reports a call of Acquire.
	Acquire bool
}

// A Fake is a client.RateLimiter answering by a script, for tests. The
// zero Fake allows every well-formed request.
//
// Like a client.Client, a Fake answers a malformed request (one
// client.Validate refuses) with its codes.InvalidArgument error, and a
// call whose ctx has ended with an error wrapping ctx.Err(), before any
// Answer; other calls take the next queued Answer (see Push), else the
// default one (see SetDefault), else Allow. Every call is recorded (see
// Calls) once answered.
//
// A Fake is safe for concurrent use by multiple goroutines.
type Fake struct {
	mu    sync.Mutex
	queue []Answer // guarded by mu
	def   Answer   // guarded by mu; nil means Allow
	calls []Call   // guarded by mu
	held  int      // slots Acquired and not released; guarded by mu
}

var (
	_ client.RateLimiter = (*Fake)(nil)
	_ client.Acquirer    = (*Fake)(nil)
)

// Push queues answers: each of the next calls takes the first one left,
// in order, before the default answer applies again.
func (f *Fake) Push(answers ...Answer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queue = append(f.queue, answers...)
}

// SetDefault sets the answer of calls when no queued answer is left. nil
// restores Allow.
func (f *Fake) SetDefault(a Answer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.def = a
}

// Calls returns the calls f has answered, in the order it answered them.
func (f *Fake) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// Reset forgets the calls, the queued answers and the default answer
// (slots held stay held until released).
func (f *Fake) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queue, f.def, f.calls = nil, nil, nil
}

// ShouldRateLimit implements client.RateLimiter. The Answer runs without
// f's lock held, so an Answer may block (other calls go on meanwhile) or
// use f itself (Calls, Push); each call is recorded once answered.
func (f *Fake) ShouldRateLimit(ctx context.Context, domain string, descriptors ...client.Descriptor) (client.Decision, error) {
	call := f.answer(ctx, Call{Domain: domain, Descriptors: cloneDescriptors(descriptors)}, client.Validate(domain, descriptors...))
	return call.Decision, call.Err
}

// Acquire implements client.Acquirer, answering from the same script as
// ShouldRateLimit (a malformed request is one client.ValidateAcquire
// refuses), and recording the call with Acquire set. A decision of
// ratelimitd that allows holds a slot until release is called (see
// Held); release is never nil, and does something only once.
func (f *Fake) Acquire(ctx context.Context, domain string, descriptors ...client.Descriptor) (release func(), d client.Decision, err error) {
	call := f.answer(ctx, Call{Domain: domain, Descriptors: cloneDescriptors(descriptors), Acquire: true},
		client.ValidateAcquire(domain, descriptors...))
	if call.Err != nil || !call.Decision.Allowed || call.Decision.Err != nil {
		return func() {}, call.Decision, call.Err
	}
	f.mu.Lock()
	f.held++
	f.mu.Unlock()
	return sync.OnceFunc(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.held--
	}), call.Decision, nil
}

// Held returns how many slots Acquire handed out that are not released.
func (f *Fake) Held() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held
}

// answer answers call, malformed when invalid is not nil, and records it.
func (f *Fake) answer(ctx context.Context, call Call, invalid error) Call {
	method := "ShouldRateLimit"
	if call.Acquire {
		method = "Acquire"
	}
	switch {
	case invalid != nil:
		call.Err = invalid
	case ctx.Err() != nil:
		call.Err = fmt.Errorf("clienttest: %s: %w", method, ctx.Err())
	default:
		call.Decision, call.Err = f.next()(call.Domain, call.Descriptors)
		if call.Err != nil {
			call.Decision = client.Decision{}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
	return call
}

// next takes the Answer of the next call: the first queued one, else the
// default, else Allow.
func (f *Fake) next() Answer {
	f.mu.Lock()
	defer f.mu.Unlock()
	answer := f.def
	if len(f.queue) > 0 {
		answer, f.queue = f.queue[0], f.queue[1:]
	}
	if answer == nil {
		answer = Allow()
	}
	return answer
}

// cloneDescriptors copies ds deeply enough that the caller may reuse it.
func cloneDescriptors(ds []client.Descriptor) []client.Descriptor {
	out := make([]client.Descriptor, len(ds))
	for i, d := range ds {
		d.Entries = slices.Clone(d.Entries)
		if d.Limit != nil {
			l := *d.Limit
			d.Limit = &l
		}
		out[i] = d
	}
	return out
}

// Allow answers allowed, with one Status per descriptor and no headers.
func Allow() Answer {
	return func(_ string, ds []client.Descriptor) (client.Decision, error) {
		return client.Decision{Allowed: true, Statuses: make([]client.Status, len(ds))}, nil
	}
}

// Refuse answers refused, as ratelimitd does: every descriptor over its
// limit, named by its keys joined by dots (such as "tenant.path"), with
// retryAfter (at least 1 s in the Retry-After header).
func Refuse(retryAfter time.Duration) Answer {
	return func(_ string, ds []client.Descriptor) (client.Decision, error) {
		d := client.Decision{RetryAfter: retryAfter, Statuses: make([]client.Status, len(ds))}
		for i, desc := range ds {
			keys := make([]string, len(desc.Entries))
			for j, e := range desc.Entries {
				keys[j] = e.Key
			}
			d.Statuses[i] = client.Status{
				OverLimit:  true,
				Limit:      client.Limit{Name: strings.Join(keys, ".")},
				ResetAfter: retryAfter,
				RetryAfter: retryAfter,
			}
		}
		secs := max(int64((retryAfter+time.Second-1)/time.Second), 1)
		d.Headers = []client.Header{{Name: "Retry-After", Value: strconv.FormatInt(secs, 10)}}
		return d, nil
	}
}

// FailOpen answers as a Client failing open does when ratelimitd failed
// with err: allowed, Decision.Err set. err nil means Unavailable.
func FailOpen(err error) Answer { return failed(true, err) }

// FailClosed answers as a Client failing closed (client.WithFailClosed)
// does when ratelimitd failed with err: refused, Decision.Err set. err
// nil means Unavailable.
func FailClosed(err error) Answer { return failed(false, err) }

func failed(allowed bool, err error) Answer {
	if err == nil {
		err = status.Error(codes.Unavailable, "clienttest: rate limit service unavailable")
	}
	return func(string, []client.Descriptor) (client.Decision, error) {
		return client.Decision{Allowed: allowed, Err: err}, nil
	}
}

// Fail answers with err and no decision, as a Client does for a malformed
// request (codes.InvalidArgument) or a call whose ctx ended.
func Fail(err error) Answer {
	return func(string, []client.Descriptor) (client.Decision, error) { return client.Decision{}, err }
}

// Decide answers d, whatever the call.
func Decide(d client.Decision) Answer {
	return func(string, []client.Descriptor) (client.Decision, error) { return d, nil }
}
