package redis

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
)

// Circuit breakers, one per Redis node: "redis" on standalone Redis and
// Sentinel (whose master moves), the node's address on Cluster, and
// "cluster" for calls made while the Cluster's slot map is unknown.
//
// A breaker counts only the store's own failures. Every Redis call runs
// on a context of the store's (the caller's values, none of its
// cancellation, the store's timeout), and a caller whose deadline comes
// first stops waiting while the call goes on: a Redis slower than the
// store's timeout counts, whether or not anyone still waits, and a
// caller's short deadline (or an attacker's 1 ms grpc-timeout) never
// does.
//
// Probes are the store's too: while a breaker is not closed, a goroutine
// of the store's (see probe) probes the node every BreakerOpenDelay with
// a PING, until the breaker closes, the node leaves the topology (its
// breaker is then dropped), or the store closes. Callers never probe:
// while the breaker is open or half-open they fail at once.

// A node is a Redis node and its circuit breaker.
type node struct {
	name    string
	b       *gobreaker.TwoStepCircuitBreaker[struct{}]
	probing atomic.Bool // a probe goroutine runs for the node
	dropped atomic.Bool // the node left the topology; its breaker is gone
}

// guard runs f, a Redis call on node, under the node's circuit breaker.
// ctx must be the store's (see detach), not a caller's: every error of f
// counts as the node's failure.
func (s *Store) guard(name string, f func() error) error {
	tk, err := s.admit(name)
	if err != nil {
		return err
	}
	err = f()
	tk.done(err)
	return err
}

// A ticket is one call that a node's circuit breaker let through; done
// reports its outcome. (A struct, not a closure: no allocation per call.)
type ticket struct {
	s      *Store
	n      *node
	report func(error) // the breaker's; nil in the zero ticket
}

// done reports the call's outcome to the breaker (whose settings take
// nodeAnswered as their IsSuccessful), and starts a probe of the node if
// the failure opened it.
func (t ticket) done(err error) {
	t.report(err)
	if nodeAnswered(err) {
		t.s.answered()
	} else if t.n.b.State() != gobreaker.StateClosed {
		t.s.startProbe(t.n)
	}
}

// nodeAnswered reports whether a call that ended with err found its node
// up: it succeeded, or was redirected. A redirection (a slot that moves,
// or moved) is no failure of the node: it answered, and a node that
// serves other slots must not be shut off while one of its slots moves.
func nodeAnswered(err error) bool { return err == nil || redirected(err) }

// admit asks the circuit breaker of the node named name for one call: it
// fails with ErrUnavailable when the breaker is not closed, or returns
// the ticket that reports the call's outcome.
func (s *Store) admit(name string) (ticket, error) {
	n := s.node(name)
	if n.b.State() != gobreaker.StateClosed {
		s.startProbe(n)
		return ticket{}, fmt.Errorf("%w: %s", ErrUnavailable, name)
	}
	report, err := n.b.Allow()
	if err != nil {
		s.startProbe(n)
		return ticket{}, fmt.Errorf("%w: %s", ErrUnavailable, name)
	}
	return ticket{s: s, n: n, report: report}, nil
}

// node returns the node named name, with a closed breaker if new.
func (s *Store) node(name string) *node {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.breakers[name]
	if !ok {
		st := s.breakerSettings
		st.Name = name
		n = &node{name: name, b: gobreaker.NewTwoStepCircuitBreaker[struct{}](st)}
		s.breakers[name] = n
	}
	return n
}

// nodeOf names the Redis node that serves key, for its circuit breaker.
func (s *Store) nodeOf(ctx context.Context, key string) string {
	if s.cluster == nil {
		return "redis"
	}
	// The slot map is cached by go-redis; an error here (no slots yet)
	// falls back to one breaker for unknown nodes.
	c, err := s.cluster.MasterForKey(ctx, key)
	if err != nil {
		return clusterFallback
	}
	return c.Options().Addr
}

// clusterFallback names the breaker of calls made while the Cluster's slot
// map is unknown.
const clusterFallback = "cluster"

// startProbe starts n's probe goroutine unless it runs or the store is
// closed.
func (s *Store) startProbe(n *node) {
	if n.dropped.Load() || !n.probing.CompareAndSwap(false, true) {
		return
	}
	if !s.begin() {
		n.probing.Store(false)
		return
	}
	go s.probe(n)
}

// probe probes n every BreakerOpenDelay until its breaker closes, it is
// dropped, or the store closes.
func (s *Store) probe(n *node) {
	defer s.inflight.Done()
	t := time.NewTimer(s.openDelay)
	defer t.Stop()
	for {
		select {
		case <-s.base.Done():
			n.probing.Store(false)
			return
		case <-t.C:
		}
		if s.probeOnce(n) {
			n.probing.Store(false)
			// A call may have opened the breaker again after the probe
			// and found probing still set: then keep probing.
			if n.dropped.Load() || n.b.State() == gobreaker.StateClosed || !n.probing.CompareAndSwap(false, true) {
				return
			}
		}
		t.Reset(s.openDelay)
	}
}

// probeOnce probes n once it is half-open, and reports whether probing is
// over: the breaker is closed, or n was dropped.
func (s *Store) probeOnce(n *node) bool {
	ctx, cancel := context.WithTimeout(s.base, s.timeout)
	defer cancel()
	client, addr, inUse, topoErr := s.locate(ctx, n.name)
	if !inUse {
		return true // dropped
	}
	switch n.b.State() {
	case gobreaker.StateClosed:
		return true
	case gobreaker.StateOpen:
		return false
	}
	done, err := n.b.Allow()
	if err != nil {
		return false
	}
	err = topoErr
	if err == nil {
		err = ping(ctx, client, addr)
	}
	done(err)
	if err == nil {
		s.answered()
	}
	return err == nil
}

// reach probes Redis from the store's start until it first answers, at
// once and then every BreakerOpenDelay, with ping: a Redis that has never
// answered has opened no breaker (no call has failed on it yet), and
// State reports it "unreached" until it answers, to this probe or to any
// call.
func (s *Store) reach() {
	defer s.inflight.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	for failures := 0; ; failures++ {
		select {
		case <-s.base.Done():
			return
		case <-t.C:
		}
		if s.reached.Load() {
			return
		}
		ctx, cancel := context.WithTimeout(s.base, s.timeout)
		err := ping(ctx, s.client, s.addr)
		cancel()
		if err == nil {
			s.answered()
			return
		}
		if failures == 0 {
			s.log.Warn("counter store does not answer yet: the failure mode answers until it does, and /readyz says unreached", "err", err)
		}
		t.Reset(s.openDelay)
	}
}

// answered records that Redis answered once.
func (s *Store) answered() {
	if !s.reached.Load() && s.reached.CompareAndSwap(false, true) { // a load first: every call succeeding comes here
		s.log.Info("counter store answered")
	}
}

// ping checks a node: first on a connection of its own, when its address
// is known, then with a PING through the client's pool. go-redis's pool,
// after as many failed dials as it has connections, stops dialing and
// retries only once a second, which would hold decisions back for up to a
// second after Redis returns: dialing outside the pool first keeps its
// count of failed dials low during an outage.
func ping(ctx context.Context, client goredis.UniversalClient, addr string) error {
	if addr != "" {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		conn.Close()
	}
	return client.Ping(ctx).Err()
}

// locate finds the client and the address to probe for the node named
// name, and whether the node is still in use. On Cluster it reloads the
// slot map and drops the breakers of the nodes that are no longer
// masters, the fallback breaker among them, and their batchers; topoErr is set when the map
// could not be loaded (every node is then still in use).
func (s *Store) locate(ctx context.Context, name string) (client goredis.UniversalClient, addr string, inUse bool, topoErr error) {
	if s.cluster == nil {
		return s.client, s.addr, true, nil
	}
	masters, err := s.masters(ctx)
	if err != nil {
		return nil, "", true, err
	}
	keep := func(name string) bool { _, ok := masters[name]; return ok }
	s.prune(keep)
	s.pruneCross(keep)
	c, ok := masters[name]
	if !ok {
		// Not a master (any more), or the fallback breaker, which the
		// known slot map makes useless: calls go to the nodes' own.
		return nil, "", false, nil
	}
	return c, name, true, nil
}

// masters returns a Cluster's masters, by address, as go-redis knows
// them.
func (s *Store) masters(ctx context.Context) (map[string]*goredis.Client, error) {
	var mu sync.Mutex
	masters := map[string]*goredis.Client{}
	err := s.cluster.ForEachMaster(ctx, func(_ context.Context, c *goredis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		masters[c.Options().Addr] = c
		return nil
	})
	return masters, err
}

// prune drops the breakers of the nodes for which keep is false.
func (s *Store) prune(keep func(name string) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, n := range s.breakers {
		if !keep(name) {
			n.dropped.Store(true)
			delete(s.breakers, name)
		}
	}
}

// State reports the store's health: "open" or "half-open" for the worst
// circuit breaker of the nodes in use that is not closed; else
// "unreached" until Redis has answered once (see reach), then "ok". The
// breakers of nodes that left the topology (a Cluster's former masters,
// the fallback breaker of a start while the Cluster was unreachable) are
// dropped within one BreakerOpenDelay of their probe, and never count.
// With a PerSecond store, it is the worse of the two stores' states.
func (s *Store) State() string {
	own := s.ownState()
	if s.perSecond == nil {
		return own
	}
	other := s.perSecond.ownState()
	if stateRank(other) > stateRank(own) {
		return other
	}
	return own
}

// stateRank orders the states State reports, the worst highest.
func stateRank(state string) int {
	switch state {
	case "ok":
		return 0
	case "unreached":
		return 1
	case "half-open":
		return 2
	}
	return 3 // open
}

// ownState is State for s's own nodes.
func (s *Store) ownState() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	worst := gobreaker.StateClosed
	for _, n := range s.breakers {
		switch st := n.b.State(); {
		case st == gobreaker.StateOpen:
			worst = st
		case st == gobreaker.StateHalfOpen && worst == gobreaker.StateClosed:
			worst = st
		}
	}
	switch {
	case worst != gobreaker.StateClosed:
		return worst.String()
	case !s.reached.Load():
		return "unreached"
	}
	return "ok"
}

// Breakers calls yield with every Redis node in use that the store has
// called, by address ("redis" on standalone and Sentinel), and the state of
// its circuit breaker: "closed", "half-open" or "open". The nodes of its
// PerSecond store follow, named with perSecondNode before.
func (s *Store) Breakers(yield func(node, state string)) {
	s.ownBreakers(yield)
	if s.perSecond != nil {
		s.perSecond.ownBreakers(func(node, state string) { yield(perSecondNode+node, state) })
	}
}

// perSecondNode starts the names of a PerSecond store's nodes in
// Breakers, so that they differ from the main store's ("redis" on both
// standalone stores).
const perSecondNode = "per-second/"

// ownBreakers is Breakers for s's own nodes.
func (s *Store) ownBreakers(yield func(node, state string)) {
	s.mu.Lock()
	states := make(map[string]string, len(s.breakers))
	for name, n := range s.breakers {
		states[name] = n.b.State().String()
	}
	s.mu.Unlock()
	for name, state := range states {
		yield(name, state)
	}
}
