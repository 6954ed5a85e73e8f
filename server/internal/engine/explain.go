package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
)

// An Explanation says how the rules in force would decide a request, and
// on which counters, without deciding it: POST /explain's answer, and
// the native Explain RPC's (see nativeExplanation).
type Explanation struct {
	Domain string `json:"domain"`
	// Overall is the call's code, "OK" or "OVER_LIMIT", as a decision
	// made now would report it.
	Overall string `json:"overall"`
	// ShadowMode: the daemon runs in shadow mode and refuses nothing.
	ShadowMode  bool                    `json:"shadow_mode"`
	Descriptors []DescriptorExplanation `json:"descriptors"`
}

// A DescriptorExplanation is one request descriptor's part of an
// Explanation.
type DescriptorExplanation struct {
	Entries []ExplainEntry `json:"entries"`
	// Rule is the rule that matched, nil when none did.
	Rule       *ExplainRule `json:"rule"`
	Unlimited  bool         `json:"unlimited"`
	ShadowMode bool         `json:"shadow_mode"`
	QuotaMode  bool         `json:"quota_mode"`
	// Replaces names the limits this descriptor removes from the call
	// (an unlimited rule's replaces, and its limits' replaces).
	Replaces []string `json:"replaces,omitempty"`
	// Override: the request gave its own limit, which replaces the rule's.
	Override bool `json:"override,omitempty"`
	// GiveBack: the descriptor gives its hits back (is_negative_hits).
	GiveBack bool `json:"give_back,omitempty"`
	// RuntimeOverride, when set, is the operator's override whose limits
	// replace the rule's for this descriptor (see RuntimeOverride).
	RuntimeOverride *ExplainOverride `json:"runtime_override,omitempty"`
	// Decision is "OK", "OVER_LIMIT", "UNLIMITED" or "NO_RULE".
	Decision string         `json:"decision"`
	Hits     uint64         `json:"hits"`
	Limits   []ExplainLimit `json:"limits"`
}

// An ExplainEntry is one entry as the request sent it (a value over
// 1024 bytes by its digest, bytes that are not UTF-8 in hex).
type ExplainEntry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// An ExplainRule names a rule and where it is defined.
type ExplainRule struct {
	Path string `json:"path"`
	File string `json:"file"`
	Line int    `json:"line"`
}

// An ExplainLimit is one limit of a descriptor, its counter and what the
// descriptor's hits would do to it.
type ExplainLimit struct {
	Name            string `json:"name"`
	Algorithm       string `json:"algorithm"`
	RequestsPerUnit uint64 `json:"requests_per_unit"`
	Window          string `json:"window"`
	Burst           uint64 `json:"burst"`
	// Replaced: another limit of the call replaces this one by name, so
	// that it is not applied; the fields below are then empty.
	Replaced bool `json:"replaced,omitempty"`
	// Counter identifies the counter: "sha256:" and the first 8 bytes, in
	// hex, of the SHA-256 of the counter key the store is given.
	Counter   string `json:"counter,omitempty"`
	Remaining uint64 `json:"remaining"`
	Reset     string `json:"reset,omitempty"`
	// WouldAdmit: the limit admits the descriptor's hits now, on top of
	// those of the call's earlier descriptors on the same counter.
	WouldAdmit bool `json:"would_admit"`
	// RetryAfter is the time until the limit would admit those hits, when
	// it does not now and the counter's state as read tells it (see
	// retryAfter).
	RetryAfter string `json:"retry_after,omitempty"`
	// Held is, for a concurrency limit, how many slots its leases hold,
	// and NextExpiry the time until the oldest of them lapses unless
	// released (empty when none is held).
	Held       *uint64 `json:"held,omitempty"`
	NextExpiry string  `json:"next_lease_expiry,omitempty"`

	// For the native rendering, out of the JSON: the limit, and the
	// durations of Reset and RetryAfter (when HasRetry).
	Lim      backend.Limit `json:"-"`
	ResetIn  time.Duration `json:"-"`
	RetryIn  time.Duration `json:"-"`
	HasRetry bool          `json:"-"`
}

// Explain explains sc.Req: it matches it and builds its store requests
// as decide does, reads their counters with zero hits, which checks
// without consuming, and works out from what it read what a decision
// made now would answer. It returns decide's errors, but answers no
// failure mode: a store that cannot be read is ErrStoreUnavailable.
func (e *Engine) Explain(ctx context.Context, sc *Scratch) (*Explanation, error) {
	if _, err := e.match(sc); err != nil {
		return nil, err
	}
	bans := e.storeRequests(sc)
	hits := make([]uint64, len(sc.reqs))
	ops := make([]backend.Op, len(sc.reqs))
	for i := range sc.reqs {
		hits[i], ops[i] = sc.reqs[i].Hits, sc.reqs[i].Op
		sc.reqs[i].Hits = 0
		sc.reqs[i].ConsumeWhenOver = false
		sc.reqs[i].Op, sc.reqs[i].Lease = backend.Take, 0 // a read: a check of zero hits
	}
	switch {
	case len(sc.reqs) == 0:
	case bans == len(sc.reqs):
		e.decideBans(sc)
	default:
		if err := e.store.Take(ctx, sc.reqs, sc.res); err != nil {
			return nil, e.explainFailed(ctx, err)
		}
	}
	read := slices.Clone(sc.res)
	for i := range sc.reqs {
		sc.reqs[i].Hits, sc.reqs[i].Op = hits[i], ops[i]
		sc.res[i].OverLimit = !admits(sc, read, i)
	}
	ex := &Explanation{
		Domain:      Printable(sc.Req.Domain),
		Overall:     codeName(!e.opts.ShadowMode && backend.Refused(sc.reqs, sc.res)),
		ShadowMode:  e.opts.ShadowMode,
		Descriptors: make([]DescriptorExplanation, len(sc.descs)),
	}
	for i := range sc.descs {
		ex.Descriptors[i] = e.explainDescriptor(sc, read, i)
	}
	return ex, nil
}

// explainFailed maps a store error of explain: the caller's context
// error if the caller gave up, ErrShuttingDown if the store is closed,
// else ErrStoreUnavailable (the error itself goes to the log).
func (e *Engine) explainFailed(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if errors.Is(err, backend.ErrClosed) {
		return ErrShuttingDown
	}
	e.warnStore(err)
	return ErrStoreUnavailable
}

// admits reports whether sc.reqs[i]'s limit admits its hits on the state
// read (read[i], a zero-hit result), as backend.Decide's first rule has
// it: on top of the hits of the call's earlier requests on the same
// counter that are admitted (sc.res[j].OverLimit, already worked out).
//
// For every algorithm, a limit admits h > 0 hits exactly when h is at
// most the Remaining a zero-hit check reports (and zero hits when that
// check is not over), so the state read decides without the store.
//
// A give-back is never over, and a renew is taken to hold: whether its
// lease is still held is not in a zero-hit result.
func admits(sc *Scratch, read []backend.Result, i int) bool {
	if sc.reqs[i].Op != backend.Take {
		return true
	}
	h := cumulativeHits(sc, i)
	return !read[i].OverLimit && h <= read[i].Remaining
}

// cumulativeHits returns sc.reqs[i]'s hits plus those of the earlier
// requests of the call on the same counter that are not over.
func cumulativeHits(sc *Scratch, i int) uint64 {
	h := sc.reqs[i].Hits
	for j := range i {
		if sc.reqs[j].Key == sc.reqs[i].Key && !sc.res[j].OverLimit && sc.reqs[j].Op == backend.Take {
			h = addSat(h, sc.reqs[j].Hits)
		}
	}
	return h
}

// addSat returns a+b, saturated.
func addSat(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return ^uint64(0)
}

// explainDescriptor explains sc.descs[i], whose counters read as read.
func (e *Engine) explainDescriptor(sc *Scratch, read []backend.Result, i int) DescriptorExplanation {
	ds := &sc.descs[i]
	entries := sc.Req.EntriesOf(&sc.Req.Descs[i])
	de := DescriptorExplanation{
		Entries:         make([]ExplainEntry, len(entries)),
		Unlimited:       ds.unlimited(),
		Override:        ds.override,
		RuntimeOverride: explainOverride(ds.runtime),
		GiveBack:        ds.op == backend.GiveBack,
		Hits:            ds.hits,
		Limits:          []ExplainLimit{},
	}
	for j, ent := range entries {
		de.Entries[j] = ExplainEntry{Key: Printable(ent.Key), Value: LabelValue(ent)}
	}
	if r := ds.rule; r != nil {
		de.Rule = &ExplainRule{Path: Printable(r.Path), File: r.File, Line: r.Line}
		de.ShadowMode, de.QuotaMode = r.ShadowMode, r.QuotaMode
		if de.Unlimited {
			de.Replaces = append(de.Replaces, r.Replaces...)
		}
	}
	k := ds.first
	for _, l := range ds.limits() {
		de.Replaces = append(de.Replaces, l.Replaces...)
		el := ExplainLimit{
			Name:            Printable(ds.limitName(l.Limit)),
			Algorithm:       l.Algorithm.String(),
			RequestsPerUnit: l.Requests,
			Window:          l.Window.String(),
			Burst:           l.Capacity(),
			Lim:             l.Limit,
		}
		if l.Name != "" && slices.Contains(sc.replaced, l.Name) {
			el.Replaced = true
			de.Limits = append(de.Limits, el)
			continue
		}
		e.explainCounter(sc, read, k, &el)
		k++
		de.Limits = append(de.Limits, el)
	}
	switch v := e.descVerdict(sc, i); {
	case ds.rule == nil && !ds.override:
		de.Decision = "NO_RULE"
	case v.Unlimited:
		de.Decision = "UNLIMITED"
	default:
		de.Decision = codeName(v.Over)
	}
	return de
}

// explainCounter fills el's counter fields from store request k.
func (e *Engine) explainCounter(sc *Scratch, read []backend.Result, k int, el *ExplainLimit) {
	rq, st := &sc.reqs[k], read[k]
	sum := sha256.Sum256([]byte(rq.Key))
	el.Counter = "sha256:" + hex.EncodeToString(sum[:8])
	el.Remaining = st.Remaining
	el.ResetIn = st.ResetAfter
	el.Reset = st.ResetAfter.String()
	el.WouldAdmit = !sc.res[k].OverLimit
	if l := rq.Limit; l.Algorithm == backend.Concurrency && !l.Ban() {
		held := l.Requests - min(st.Remaining, l.Requests)
		el.Held = &held
		if held > 0 {
			el.NextExpiry = st.ResetAfter.String()
		}
	}
	if !el.WouldAdmit {
		if d, ok := retryAfter(rq.Limit, cumulativeHits(sc, k), st); ok {
			el.RetryIn, el.HasRetry = d, true
			el.RetryAfter = d.String()
		}
	}
}

// retryAfter returns the time until limit l would admit hits, from a
// zero-hit check's result st on its counter, when st tells it: for a ban
// and a fixed window, the counter's reset; for GCRA, the reset less the
// room that hits need; for hits that l can never admit at once, l's
// window (as backend.Result says). The other algorithms' state is not in
// a result (a sliding window's two counts, a log's entries, a bucket's
// fractional tokens): ok is false.
func retryAfter(l backend.Limit, hits uint64, st backend.Result) (time.Duration, bool) {
	switch {
	case l.Ban():
		return st.ResetAfter, true
	case hits > l.Capacity():
		return l.Window, true
	case l.Algorithm == backend.FixedWindow:
		return st.ResetAfter, true
	case l.Algorithm == backend.GCRA:
		room := time.Duration(l.Capacity()-hits) * time.Duration(l.Interval()) * time.Microsecond
		return max(st.ResetAfter-room, time.Microsecond), true
	}
	return 0, false
}

// codeName names a code as Envoy's JSON does.
func codeName(over bool) string {
	if over {
		return "OVER_LIMIT"
	}
	return "OK"
}
