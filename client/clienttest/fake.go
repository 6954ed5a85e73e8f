// Package clienttest provides a fake rate limiter for the tests of code
// that uses package client: Fake answers ShouldRateLimit by a script, with
// no ratelimitd, and records the calls, so that a test can check what its
// code asked and how it handled each answer.
//
// A Fake is a client.RateLimiter: pass it where the code under test takes
// one, including client.UnaryServerInterceptor (and the other
// interceptors), client.NewLimiter and client.HTTPMiddleware.
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

// A Call is one ShouldRateLimit call a Fake received, and what it
// answered.
type Call struct {
	Domain      string
	Descriptors []client.Descriptor // a copy of the caller's
	Decision    client.Decision
	Err         error
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
}

var _ client.RateLimiter = (*Fake)(nil)

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

// Reset forgets the calls, the queued answers and the default answer.
func (f *Fake) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queue, f.def, f.calls = nil, nil, nil
}

// ShouldRateLimit implements client.RateLimiter. The Answer runs without
// f's lock held, so an Answer may block (other calls go on meanwhile) or
// use f itself (Calls, Push); each call is recorded once answered.
func (f *Fake) ShouldRateLimit(ctx context.Context, domain string, descriptors ...client.Descriptor) (client.Decision, error) {
	call := Call{Domain: domain, Descriptors: cloneDescriptors(descriptors)}
	switch err := client.Validate(domain, descriptors...); {
	case err != nil:
		call.Err = err
	case ctx.Err() != nil:
		call.Err = fmt.Errorf("clienttest: ShouldRateLimit: %w", ctx.Err())
	default:
		call.Decision, call.Err = f.next()(domain, call.Descriptors)
		if call.Err != nil {
			call.Decision = client.Decision{}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
	return call.Decision, call.Err
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
