package rlqs

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratelimitd/ratelimitd/config"
	rlqsv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/wire/rlqs/v1"
	"github.com/ratelimitd/ratelimitd/server/rlqs/fairshare"
)

// stream is one client's StreamRateLimitQuotas: its run loop alone reads
// and writes its fields but wakeup.
type stream struct {
	s       *Service
	g       grpc.ServerStream
	client  string   // the fair-share core's name for the client
	accts   accounts // the accounts its buckets count in, against Bounds
	domain  string   // from the first report
	ruleset *config.Rules
	buckets map[string]*bucket // by bucket key
	rules   map[ruleLabels]int // buckets held, by rule, for the streams gauge
	wakeup  chan struct{}      // a rule set or a share changed: see wake

	mu    sync.Mutex             // guards dirty, all and views
	dirty map[string]struct{}    // buckets whose shares may have moved
	all   bool                   // every bucket: the rules changed
	views map[string]*bucketView // by bucket key: what View shows
}

// bucket is one bucket a stream holds.
type bucket struct {
	key      string
	id       map[string]string
	rule     *config.Rule // nil: no rule applies
	labels   ruleLabels
	labelled bool          // counted in the metrics under labels
	interval time.Duration // the client's reporting interval, last reported
	expires  time.Time     // when the assignment answering the last report expires
	sent     assignment    // the last assignment sent
	rate     float64       // of sent, in the assigned-rate gauge
}

// wake asks the stream's loop to recompute the assignment of the bucket
// key, or of every bucket for "" (new rules).
func (st *stream) wake(key string) {
	st.mu.Lock()
	if key == "" {
		st.all = true
	} else if !st.all {
		if st.dirty == nil {
			st.dirty = make(map[string]struct{})
		}
		st.dirty[key] = struct{}{}
	}
	st.mu.Unlock()
	select {
	case st.wakeup <- struct{}{}:
	default: // already asked
	}
}

// woken returns and clears what wake asked for.
func (st *stream) woken() (dirty map[string]struct{}, all bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	dirty, all = st.dirty, st.all
	st.dirty, st.all = nil, false
	return dirty, all
}

// run serves the stream until the client ends it or it fails.
func (st *stream) run() error {
	ctx := st.g.Context()
	reports := make(chan wireReports)
	errc := make(chan error, 1)
	go func() { // ends when RecvMsg fails, at the latest when the RPC ends
		for {
			m := new(rlqsv1.RateLimitQuotaUsageReports)
			if err := st.g.RecvMsg(m); err != nil {
				errc <- err
				return
			}
			select {
			case reports <- readReports(m):
			case <-ctx.Done():
				return
			}
		}
	}()
	st.ruleset = st.s.rules.Load()
	for {
		var err error
		select {
		case m := <-reports:
			err = st.report(m)
		case <-st.wakeup:
			err = st.refresh()
		case err = <-errc:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-st.s.stopped:
			return status.Error(codes.Unavailable, "ratelimitd is shutting down")
		}
		if err != nil {
			return err
		}
	}
}

// report records a client's usage reports and answers with the current
// assignment of every bucket reported, which renews its time to live.
func (st *stream) report(m wireReports) error {
	if d := m.domain; d != "" {
		if st.domain != "" && d != st.domain {
			return status.Errorf(codes.InvalidArgument, "domain %q differs from the stream's %q", d, st.domain)
		}
		st.domain = d
	}
	if st.domain == "" {
		return status.Error(codes.InvalidArgument, "domain: empty in the stream's first report, which must name it")
	}
	if st.ruleset != st.s.rules.Load() {
		if err := st.refresh(); err != nil {
			return err
		}
	}
	now := st.s.now()
	st.sweep(now)
	type reported struct {
		key  string
		b    *bucket
		ttl  time.Duration
		held bool
	}
	done := make([]reported, 0, len(m.usages))
	resp := &wireResponse{}
	resp.reserve(len(m.usages))
	d := st.ruleset.Domain(st.domain)
	if d == nil {
		st.s.unknown(st.domain)
	}
	usage := &tally{m: st.s.metrics}
	defer usage.count()
	var needs []fairshare.Need
	for i, u := range m.usages {
		id := u.id
		if len(id) == 0 {
			return status.Errorf(codes.InvalidArgument, "bucket_quota_usages[%d]: empty bucket_id", i)
		}
		key := bucketKey(st.domain, id)
		b := st.buckets[key]
		if b == nil {
			var a assignment
			if b, a = st.add(key, id, d, now, u, usage); b == nil {
				// Not held: answered from the rule, or refused.
				if a.kind != kindNone {
					resp.assign(id, a, ttlFor(cmp.Or(u.elapsed, DefaultReportingInterval)))
				}
				continue
			}
		}
		if u.elapsed > 0 {
			b.interval = u.elapsed
		}
		ttl := ttlFor(b.interval)
		b.expires = now.Add(ttl)
		held := st.s.shares.ReportFor(key, st.client, u.allowed, u.denied, ttl, now)
		if !held {
			st.s.metrics.refuse(boundTracker) // the tracker is full: the Fallback
		}
		usage.add(b.labels, u.allowed, u.denied)
		st.s.shifted(st, key)
		done = append(done, reported{key, b, ttl, held})
		if limit, ok := st.shared(b); ok && held {
			needs = append(needs, fairshare.Need{Bucket: key, Limit: limit, TTL: ttl})
		}
	}
	if len(needs) > 0 {
		// New buckets get their grant before their first answer, so that
		// it counts the other replicas' clients (within the pool's
		// timeout). A failure leaves them lapsed: decide gives them the
		// Fallback (counted in fallbacks); the pool counts the failed
		// call (in exchanges) and logs it at Warn once per outage.
		if err := st.s.shares.Exchange(st.g.Context(), needs); err != nil {
			st.s.log.Debug("RLQS report: store exchange failed; its new buckets get the failure mode's assignment", "buckets", len(needs), "err", err)
		}
	}
	for _, r := range done {
		if a := st.assign(r.key, r.b, now, !r.held, r.ttl); a.kind != kindNone {
			resp.assign(r.b.id, a, r.ttl)
		}
	}
	return st.send(resp)
}

// shared returns b's limit rate when the service shares it through the
// store (a pool, and a rule with a limit that is enforced).
func (st *stream) shared(b *bucket) (float64, bool) {
	if !st.s.shares.Shared() || st.s.shadow || b.rule == nil || b.rule.ShadowMode {
		return 0, false
	}
	limit, limited := limitRate(b.rule)
	return limit, limited && limit > 0
}

// refresh takes up a new rule set, abandoning the buckets that no rule
// matches any more, and pushes the assignments that changed.
func (st *stream) refresh() error {
	resp := &wireResponse{}
	reloaded := false
	if rs := st.s.rules.Load(); rs != st.ruleset {
		st.ruleset, reloaded = rs, true
		d := rs.Domain(st.domain)
		for key, b := range st.buckets {
			r := match(d, b.id)
			if r == nil && b.rule != nil {
				resp.abandon(b.id)
				st.drop(key, b, time.Time{})
				continue
			}
			st.relabel(b, r, labelsFor(d, r))
		}
	}
	now := st.s.now()
	st.sweep(now)
	dirty, all := st.woken()
	if all || reloaded {
		resp.reserve(len(st.buckets))
	} else {
		resp.reserve(len(dirty))
	}
	reassign := func(key string, b *bucket) {
		// A push lives only as long as the last report's assignment: the
		// tracker keeps the client that long, no longer.
		ttl := b.expires.Sub(now)
		a := st.decide(key, b, now, false, ttl)
		switch {
		case a.kind == kindNone:
			// The tracker dropped the client, which it does only once the
			// assignment last sent has expired at the client (see
			// fairshare.Tracker.ReportFor): there is nothing to take back, and the
			// gauge drops it.
			st.record(b, a)
		case ttl > 0 && worthPushing(b.sent, a):
			st.record(b, a)
			resp.assign(b.id, a, ttl)
		}
	}
	if all || reloaded {
		for key, b := range st.buckets {
			reassign(key, b)
		}
	} else {
		for key := range dirty {
			if b := st.buckets[key]; b != nil {
				reassign(key, b)
			}
		}
	}
	return st.send(resp)
}

// sweep drops the buckets not reported within their assignment's time to
// live at now: the client's assignment has expired, and so has the
// tracker's entry for it (see fairshare.Tracker.ReportFor). Nothing is sent: a client
// still using the bucket reports it again, as a new one.
func (st *stream) sweep(now time.Time) {
	for key, b := range st.buckets {
		if now.After(b.expires) {
			st.drop(key, b, time.Time{})
		}
	}
}

// send sends resp unless it is empty.
func (st *stream) send(resp *wireResponse) error {
	if resp.len() == 0 {
		return nil
	}
	if err := st.g.SendMsg(&resp.msg); err != nil {
		return fmt.Errorf("rlqs: send %d bucket actions: %w", resp.len(), err)
	}
	return nil
}

// add starts holding a bucket reported for the first time, with usage u,
// and returns it; or returns nil and what the bucket is answered, when it
// is not held. A bucket id past MaxBucketEntries or MaxBucketIDBytes is
// refused, and answered nothing. A bucket that no rule of d matches is
// answered ALLOW_ALL, as RLS answers OK, without being held: it costs no
// place under any bound, and after a reload its client gets the new
// rule's assignment at its next report. A bucket past Bounds is refused:
// a rule that needs no share (unlimited, a ban, shadow mode) answers it
// still, and a limited one gets the Fallback.
func (st *stream) add(key string, id map[string]string, d *config.DomainRules, now time.Time, u wireUsage, usage *tally) (*bucket, assignment) {
	if len(id) > MaxBucketEntries || idBytes(id) > MaxBucketIDBytes {
		st.s.metrics.refuse(boundBucketID)
		return nil, assignment{}
	}
	r := match(d, id)
	if r == nil {
		usage.add(labelsFor(d, nil), u.allowed, u.denied)
		return nil, assignment{kind: kindAllowAll}
	}
	bnd := boundStream
	if len(st.buckets) < st.s.bounds.PerStream {
		bnd = st.s.hold(st, key, now)
	}
	if bnd != "" {
		st.s.metrics.refuse(bnd)
		usage.add(labelsFor(d, r), u.allowed, u.denied)
		if a, ok := st.blanket(r); ok {
			return nil, a
		}
		return nil, st.s.fallback.assignment()
	}
	b := &bucket{key: key, id: id, interval: DefaultReportingInterval}
	st.buckets[key] = b
	st.relabel(b, r, labelsFor(d, r))
	return b, assignment{}
}

// blanket returns the assignment of a bucket of rule r that needs no
// share of a limit (unlimited, a ban, shadow mode), and false for a rule
// that limits.
func (st *stream) blanket(r *config.Rule) (assignment, bool) {
	limit, limited := limitRate(r)
	switch {
	case !limited || st.s.shadow || r.ShadowMode:
		return assignment{kind: kindAllowAll}, true
	case limit <= 0:
		return assignment{kind: kindDenyAll}, true
	}
	return assignment{}, false
}

// idBytes returns the bytes of id's keys and values together.
func idBytes(id map[string]string) int {
	n := 0
	for k, v := range id {
		n += len(k) + len(v)
	}
	return n
}

// relabel sets b's rule, moving b's metrics to the rule's labels l.
func (st *stream) relabel(b *bucket, r *config.Rule, l ruleLabels) {
	b.rule = r
	if b.labelled {
		if b.labels == l {
			return
		}
		st.unlabel(b)
	}
	b.labels, b.labelled = l, true
	st.rules[l]++
	st.s.metrics.bucketAdded(l, st.rules[l] == 1)
}

// unlabel removes b from the metrics of its labels.
func (st *stream) unlabel(b *bucket) {
	st.rules[b.labels]--
	last := st.rules[b.labels] == 0
	if last {
		delete(st.rules, b.labels)
	}
	st.s.metrics.bucketRemoved(b.labels, last, b.rate)
	b.rate, b.labelled = 0, false
}

// drop stops holding the bucket key; its place under the bounds is kept
// until departs (see Service.release).
func (st *stream) drop(key string, b *bucket, departs time.Time) {
	if departs.IsZero() {
		// The stream goes on without the bucket (its assignment expired,
		// or was abandoned): the tracker forgets its client there, so that
		// it holds no more clients than the service counts.
		st.s.shares.ForgetOn(key, st.client, st.s.now())
	}
	st.mu.Lock()
	delete(st.views, key)
	st.mu.Unlock()
	st.unlabel(b)
	delete(st.buckets, key)
	st.s.release(st, key, departs, st.s.now())
}

// assign computes b's assignment now, to live ttl, and records it as sent
// (see decide and record).
func (st *stream) assign(key string, b *bucket, now time.Time, refused bool, ttl time.Duration) assignment {
	a := st.decide(key, b, now, refused, ttl)
	st.record(b, a)
	return a
}

// decide returns b's assignment now, to live ttl. refused tells that the
// tracker refused the report just made (it holds as many clients as it
// may): a limited bucket then gets the Fallback, as a bucket past the
// service's Bounds does. A bucket the tracker no longer holds otherwise gets no assignment
// (kindNone): its client's entry expired, after the assignment it was sent
// (see ttlFor), so there is nothing to take back, and it gets a share at
// its next report. A limited bucket whose grant from the store has lapsed,
// or would before ttl, gets the Fallback.
func (st *stream) decide(key string, b *bucket, now time.Time, refused bool, ttl time.Duration) assignment {
	if a, ok := st.blanket(b.rule); ok {
		return a
	}
	limit, _ := limitRate(b.rule)
	st.s.metrics.limit(b.labels, limit)
	switch {
	case refused:
		return st.s.fallback.assignment()
	case st.s.shares.Lapsed(key, now, ttl):
		st.s.metrics.fallbacks.Inc()
		return st.s.fallback.assignment()
	}
	if share, ok := st.s.shares.Share(key, st.client, limit, now); ok {
		return bucketFor(b.rule, share, limit)
	}
	return assignment{}
}

// record records a as b's assignment sent, and keeps the assigned-rate
// gauge.
func (st *stream) record(b *bucket, a assignment) {
	rate := 0.0
	if a.kind == kindBucket {
		rate = a.rate()
	}
	st.s.metrics.assigned(b.labels, rate-b.rate)
	b.sent, b.rate = a, rate
	limit, limited := limitRate(b.rule)
	if !limited {
		limit = math.NaN()
	}
	st.mu.Lock()
	if st.views == nil {
		st.views = make(map[string]*bucketView)
	}
	v := st.views[b.key]
	if v == nil {
		v = &bucketView{id: b.id}
		st.views[b.key] = v
	}
	v.domain, v.rule, v.limit = b.labels.domain, b.labels.rule, limit
	v.sent, v.interval, v.expires = a, b.interval, b.expires
	st.mu.Unlock()
}

// pushRise is how much a bucket's share must grow, as a fraction, before
// the new one is pushed unasked: a client may refill its token bucket on
// every new assignment, so pushing each small rise that noisy demand
// brings would hand out a burst each time. The client gets the smaller
// rise with the answer to its next report.
const pushRise = 0.10

// worthPushing reports whether the assignment a, replacing old, is to be
// pushed unasked: when it differs in kind, or gives less, or more by over
// pushRise. A fall is always pushed, so that the shares in force never sum
// past the limit.
func worthPushing(old, a assignment) bool {
	switch {
	case a == old:
		return false
	case a.kind != kindBucket || old.kind != kindBucket:
		return true
	}
	return a.rate() < old.rate() || a.rate() > old.rate()*(1+pushRise)
}

// ttlFor returns the time to live of an assignment to a client reporting
// every interval: two intervals, so that one late report does not expire
// it, within MinTTL and MaxTTL.
func ttlFor(interval time.Duration) time.Duration {
	return min(max(2*interval, MinTTL), MaxTTL)
}
