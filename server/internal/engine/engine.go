package engine

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math"
	"slices"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/config"
)

// Request bounds: larger requests get InvalidArgument. The rules share
// two of them: a rule deeper than config.MaxDepth, or whose key is over
// config.MaxKeyBytes, could never match.
const (
	MaxDomain      = 256
	MaxDescriptors = 64
	MaxEntries     = config.MaxDepth
	MaxEntryBytes  = config.MaxKeyBytes // of a key; a longer value is counted by its digest (see appendKeyPrefix)
	MaxHits        = math.MaxUint32
)

// An Answer is the engine's answer to one request, before a face renders
// it in its own messages. It lives in a pooled Scratch and must not be
// kept after the response is built.
type Answer struct {
	Over     bool // the request must not proceed
	Statuses []Verdict
	Headers  []Header
}

// A Verdict is the decision on one request descriptor.
type Verdict struct {
	Over      bool // reported code: OVER_LIMIT (false for a shadow-mode rule)
	OverLimit bool // the limit refused the hits, whatever the reported code
	Shadow    bool // not enforced: a shadow-mode rule, or the daemon in shadow mode
	Limited   bool // a limit applied: Limit, Name and the counts below are set
	Unlimited bool // the rule is unlimited: nothing was counted
	Named     bool // the rule names this limit (and the request does not override it)
	Cached    bool // the store answered from its local cache
	Limit     backend.Limit
	Name      string // the limit's name, or else the rule's key path
	Remaining uint64
	Reset     time.Duration
	Retry     time.Duration
}

// A Header is one HTTP response header field to send: the engine works
// out the values, each face carries them in its own message.
type Header struct{ Name, Value string }

// A desc is one request descriptor on its way through the engine.
type desc struct {
	rule     *config.Rule
	override bool                // ovr replaces rule's limits
	runtime  *RuntimeOverride    // an operator's override: replaces rule's limits, and ovr
	ovr      [1]config.RuleLimit // the request's limit, when override
	hits     uint64
	op       backend.Op // what the descriptor does to its counters (Descriptor.Op)
	hasLease bool       // it names a lease: it touches its concurrency limits only
	lease    []int64    // the lease's stamps, one per concurrency limit
	key      [2]int     // the counter key's prefix, sc.keys[key[0]:key[1]]
	first, n int        // the store requests of this descriptor, sc.reqs[first:first+n]
	shadow   bool       // the rule is in shadow mode: report OK when over
	path     string     // name for headers when the limit has none
	// metricPath is the rule label when the rule's metrics carry request
	// values (see metricPath), else "".
	metricPath string
	// statKey is, with metricPath and Options.StatKeys, the reference's
	// stat key of the request (see StatKey).
	statKey string
}

// unlimited reports whether ds passes uncounted: its rule is unlimited
// and the request did not override it.
func (d *desc) unlimited() bool {
	return d.rule != nil && d.rule.Unlimited && !d.override && d.runtime == nil
}

// limits returns the limits that apply to d: an operator's override, the
// request's, or its rule's.
func (d *desc) limits() []config.RuleLimit {
	if d.runtime != nil {
		return d.runtime.Limits
	}
	if d.override {
		return d.ovr[:]
	}
	if d.rule == nil {
		return nil
	}
	return d.rule.Limits
}

// A Scratch holds one request's working memory: the face decodes into
// Req, the engine decides into Dec. Faces pool them so the hot path
// allocates only what the response keeps. The zero value is ready.
type Scratch struct {
	Req      Request // what the face decoded
	Dec      Answer  // what the engine decided
	descs    []desc
	reqs     []backend.Request
	res      []backend.Result
	keys     []byte
	spans    [][3]int // each request's key, in keys after the prefixes: start, end of the descriptor part (its Tag), end
	replaced []string
	buf      []byte
	rules    *config.Rules // the rules in force when Decide matched Req
	// overrides are the operators' overrides in force when Decide
	// matched Req, loaded once so that every descriptor sees one set.
	overrides *RuntimeOverrides
}

// Reset empties sc for the next request, keeping its memory.
func (sc *Scratch) Reset() {
	sc.Req.reset()
	sc.rules, sc.overrides = nil, nil
	clear(sc.descs) // drop rule pointers so old rule sets can be collected
	sc.descs = sc.descs[:0]
	clear(sc.reqs)
	sc.reqs = sc.reqs[:0]
	sc.res = sc.res[:0]
	sc.keys = sc.keys[:0]
	sc.spans = sc.spans[:0]
	sc.replaced = sc.replaced[:0]
	clear(sc.Dec.Statuses)
	sc.Dec = Answer{Statuses: sc.Dec.Statuses[:0], Headers: sc.Dec.Headers[:0]}
}

// Oversized reports whether sc holds the memory of a huge request, which
// a pool should not keep. (Decoding stops past the bounds on descriptors
// and entries, which keep the others small.)
func (sc *Scratch) Oversized() bool {
	return cap(sc.keys) > 64<<10 || cap(sc.Req.Entries) > MaxDescriptors*MaxEntries
}

// Rule returns the rule that descriptor i of the request decided matched,
// nil if none did.
func (sc *Scratch) Rule(i int) *config.Rule { return sc.descs[i].rule }

// Rules returns the rules the request was matched against: the rules in
// force when Decide began, nil if none were.
func (sc *Scratch) Rules() *config.Rules { return sc.rules }

// RuleLimit returns the limit of descriptor i's rule that its verdict
// reports, nil when none does: no limit applied, no rule matched, or the
// request or an operator overrode the rule's limits (the verdict's limit
// is then theirs).
func (sc *Scratch) RuleLimit(i int) *config.RuleLimit {
	ds, v := &sc.descs[i], &sc.Dec.Statuses[i]
	if ds.override || ds.runtime != nil || ds.rule == nil || !v.Limited {
		return nil
	}
	for k := range ds.rule.Limits {
		if ds.rule.Limits[k].Limit == v.Limit {
			return &ds.rule.Limits[k]
		}
	}
	return nil
}

// CheckRequest checks the request-wide bounds; faces that stop decoding
// past a bound call it to refuse the request as the engine would.
func CheckRequest(domain string, descriptors int) error {
	switch {
	case domain == "":
		return Invalid("domain is empty")
	case len(domain) > MaxDomain:
		return Invalid("domain is %d bytes, over the maximum %d", len(domain), MaxDomain)
	case descriptors == 0:
		return Invalid("no descriptors")
	case descriptors > MaxDescriptors:
		return Invalid("%d descriptors, over the maximum %d", descriptors, MaxDescriptors)
	}
	return nil
}

// checkEntries checks one descriptor's entries.
func checkEntries(i int, entries []Entry) error {
	if err := CheckEntryCount(i, len(entries)); err != nil {
		return err
	}
	for j, e := range entries {
		switch {
		case e.Key == "":
			return Invalid("descriptor %d entry %d has an empty key", i, j)
		case len(e.Key) > MaxEntryBytes:
			return Invalid("descriptor %d entry %d: key is %d bytes, over the maximum %d", i, j, len(e.Key), MaxEntryBytes)
		}
	}
	return nil
}

// CheckEntryCount checks how many entries descriptor i has.
func CheckEntryCount(i, n int) error {
	switch {
	case n == 0:
		return Invalid("descriptor %d has no entries", i)
	case n > MaxEntries:
		return Invalid("descriptor %d has %d entries, over the maximum %d", i, n, MaxEntries)
	}
	return nil
}

func checkHits(i int, hits uint64) error {
	if hits > MaxHits {
		return Invalid("descriptor %d: hits %d over the maximum %d", i, hits, uint64(MaxHits))
	}
	return nil
}

// match checks sc.Req, matches each of its descriptors against the rules
// in force and appends them to sc.descs with their counter keys'
// prefixes. It reports whether the request's domain has rules.
func (e *Engine) match(sc *Scratch) (known bool, err error) {
	r := &sc.Req
	if err := CheckRequest(r.Domain, len(r.Descs)); err != nil {
		return false, err
	}
	sc.rules = e.rules.Load()
	d := sc.rules.Domain(r.Domain)
	if d != nil {
		sc.overrides = e.overrides.Load()
	}
	for i := range r.Descs {
		if err := e.addDescriptor(sc, d, &r.Descs[i]); err != nil {
			return false, err
		}
	}
	return d != nil, nil
}

// addDescriptor matches one request descriptor against d and appends it
// to sc.
func (e *Engine) addDescriptor(sc *Scratch, d *config.DomainRules, rd *Descriptor) error {
	i := len(sc.descs)
	entries := sc.Req.EntriesOf(rd)
	if err := checkEntries(i, entries); err != nil {
		return err
	}
	if err := checkHits(i, rd.Hits); err != nil {
		return err
	}
	if rd.Op == backend.Renew && !rd.HasLease {
		return Invalid("descriptor %d: a renew needs a lease", i)
	}
	rule := config.Match(d, entries)
	ds := desc{rule: rule, hits: rd.Hits, op: rd.Op, hasLease: rd.HasLease}
	if rd.HasLease {
		ds.lease = sc.Req.LeaseOf(rd)
	}
	if rule != nil {
		ds.shadow = rule.ShadowMode
		ds.path = rule.Path
		ds.metricPath = metricPath(rule, entries)
		if ds.metricPath != "" && e.opts.StatKeys {
			ds.statKey = StatKey(sc.Req.Domain, rule, entries)
		}
	}
	if rd.HasLimit {
		l, err := overrideLimit(rule, rd.Limit)
		if err != nil {
			return Invalid("descriptor %d: limit override: %v", i, err)
		}
		if d != nil { // overrides apply in a known domain only
			ds.override, ds.ovr[0] = true, l
			if ds.path == "" {
				ds.path = keyPath(entries)
			}
		}
	}
	ds.key = [2]int{len(sc.keys), 0}
	sc.keys = appendKeyPrefix(sc.keys, sc.Req.Domain, rule, entries)
	ds.key[1] = len(sc.keys)
	sc.applyOverride(&ds)
	if ds.unlimited() {
		sc.replaced = append(sc.replaced, ds.rule.Replaces...)
	}
	for _, l := range ds.limits() {
		sc.replaced = append(sc.replaced, l.Replaces...)
	}
	sc.descs = append(sc.descs, ds)
	return nil
}

// overrideLimit turns a request's limit for a descriptor that matched rule
// (nil if none) into the limit to apply: the rule's algorithm, and the
// name of its limit if it has just one (a rule with several limits names
// the override by its path). A sliding log's requests are capped at
// backend.MaxSlidingLog, the bound of a log's memory.
func overrideLimit(rule *config.Rule, o Override) (config.RuleLimit, error) {
	l := config.RuleLimit{Limit: backend.Limit{Requests: o.Requests, Window: o.Window}}
	if rule != nil && len(rule.Limits) > 0 {
		l.Algorithm = rule.Limits[0].Algorithm
		if len(rule.Limits) == 1 {
			l.Name = rule.Limits[0].Name
		}
	}
	if l.Algorithm == backend.SlidingLog && l.Requests > backend.MaxSlidingLog {
		l.Requests = backend.MaxSlidingLog
	}
	return l, l.Validate()
}

// appendKeyPrefix appends to b the prefix of the counter keys of a
// descriptor of domain made of entries that matched rule (nil if none):
// the domain, then each entry's key and value, each part length-prefixed
// (backend.AppendKeyPart), so that any bytes make a key of their own.
//
// A value counts as itself, except that: under a wildcard rule with
// share_threshold, the rule's pattern stands for every value it matches;
// under a rule with ip_prefix, an IP address counts by its network; and a
// value over MaxEntryBytes counts by its SHA-256 digest, in a part that
// no value can spell (backend.AppendKeyDigest), as does a digest the
// request sent in its place.
func appendKeyPrefix(b []byte, domain string, rule *config.Rule, entries []Entry) []byte {
	b = backend.AppendKeyPart(b, domain)
	for j, e := range entries {
		b = backend.AppendKeyPart(b, e.Key)
		v, digest := LevelValue(rule, j, e.Value, e.Digest)
		switch {
		case digest:
			b = backend.AppendKeyDigest(b, v)
		case len(v) > MaxEntryBytes:
			sum := sha256.Sum256([]byte(v)) // on the stack: a slice returned from a helper would not be
			b = backend.AppendKeyDigest(b, sum[:])
		default:
			b = backend.AppendKeyPart(b, v)
		}
	}
	return b
}

// LevelValue returns the value that rule counts a request's value v at
// its level j by: the level's own value under share_threshold (every
// matching value shares its counter), v's network under ip_prefix, else
// v. digest tells that v is the SHA-256 a request sent for its value, and
// whether the value returned is one.
func LevelValue(rule *config.Rule, j int, v string, digest bool) (string, bool) {
	if rule != nil && j < len(rule.Levels) {
		switch lv := rule.Levels[j]; {
		case lv.ShareThreshold && lv.Wildcard:
			return lv.Value, false
		case lv.IPPrefix.Set() && !digest:
			return lv.IPPrefix.Apply(v), false
		}
	}
	return v, digest
}

// Printable returns s as valid UTF-8 for the places that echo request
// bytes (responses, metric labels, trace attributes): s itself when it
// is, else "hex:" and its bytes in hex. (Counters never use this form:
// two values that print alike still count apart.)
func Printable(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return "hex:" + hex.EncodeToString([]byte(s))
}

// LabelValue returns the form of a request value in metric labels: the
// value itself (see Printable), or for a value over MaxEntryBytes, or one
// sent as a digest, the digest in hex.
func LabelValue(e Entry) string {
	switch {
	case e.Digest:
		return "sha256:" + hex.EncodeToString([]byte(e.Value))
	case len(e.Value) > MaxEntryBytes:
		sum := sha256.Sum256([]byte(e.Value))
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	return Printable(e.Value)
}

// keyPath names an unmatched descriptor by its keys, as Rule.Path does.
func keyPath(entries []Entry) string {
	var b []byte
	for j, e := range entries {
		if j > 0 {
			b = append(b, '.')
		}
		b = append(b, e.Key...)
	}
	return Printable(string(b))
}

// Decide decides sc.Req: it matches its descriptors, takes their hits
// from the store and fills sc.Dec. It returns an *InvalidError for a
// request it refuses to decide, ErrStoreUnavailable or ErrShuttingDown
// when the store cannot decide and the failure mode does not answer, or
// the caller's context error.
func (e *Engine) Decide(ctx context.Context, sc *Scratch) error {
	known, err := e.match(sc)
	if err != nil {
		return err
	}
	if !known {
		e.unknown.observe(sc.Req.Domain) // answered OK, as the reference does, but counted
	}
	bans := e.storeRequests(sc)
	var refused bool
	switch {
	case len(sc.reqs) == 0:
	case bans == len(sc.reqs):
		refused = e.decideBans(sc) // a ban needs no counter: no store call
	default:
		start := time.Now()
		err := e.take(ctx, sc)
		e.metrics.StoreTook(time.Since(start))
		if err != nil {
			return e.storeFailed(ctx, sc, err)
		}
		refused = backend.Refused(sc.reqs, sc.res)
	}
	e.verdicts(sc, refused)
	e.appendHeaders(sc)
	return nil
}

// storeRequests builds sc.reqs from the matched sc.descs: one store
// request per limit that applies and was not replaced, its key the
// descriptor's prefix and the limit's suffix, appended after every
// prefix. It returns how many of them are bans. decide and explain share
// it, so that explain reads the very counters a decision would take.
func (e *Engine) storeRequests(sc *Scratch) (bans int) {
	keysFrom := len(sc.keys)
	for i := range sc.descs {
		ds := &sc.descs[i]
		ds.first = len(sc.reqs)
		if ds.unlimited() {
			continue
		}
		mode := backend.Enforce
		switch {
		case e.opts.ShadowMode || ds.shadow:
			mode = backend.Shadow
		case ds.rule != nil && ds.rule.QuotaMode:
			mode = backend.Quota
		}
		leases := ds.lease
		for _, l := range ds.limits() {
			if l.Name != "" && slices.Contains(sc.replaced, l.Name) {
				continue
			}
			var lease int64
			if ds.hasLease {
				// A lease's stamps name its concurrency limits in
				// order; a limit it has no stamp for (the rules
				// changed since) is left alone: its slots lapse.
				if l.Algorithm != backend.Concurrency || len(leases) == 0 {
					continue
				}
				lease, leases = leases[0], leases[1:]
				if lease <= 0 {
					continue
				}
			}
			if l.Ban() && ds.op == backend.Take {
				bans++ // a give-back or renew of a ban goes to the store, which answers it within
			}
			start := len(sc.keys) - keysFrom
			sc.keys = append(sc.keys, sc.keys[ds.key[0]:ds.key[1]]...)
			sc.keys = backend.AppendKeySuffix(sc.keys, l.Limit)
			sc.spans = append(sc.spans, [3]int{start, start + ds.key[1] - ds.key[0], len(sc.keys) - keysFrom})
			sc.reqs = append(sc.reqs, backend.Request{
				Limit:           l.Limit,
				Hits:            ds.hits,
				Group:           i,
				Mode:            mode,
				ConsumeWhenOver: ds.rule != nil && ds.rule.ConsumeWhenOver && ds.op == backend.Take,
				Op:              ds.op,
				Lease:           lease,
			})
		}
		ds.n = len(sc.reqs) - ds.first
	}
	if len(sc.reqs) > 0 {
		keys := string(sc.keys[keysFrom:]) // one allocation for every key of the request, prefixes left out
		for i := range sc.reqs {
			sc.reqs[i].Key = keys[sc.spans[i][0]:sc.spans[i][2]]
			sc.reqs[i].Tag = keys[sc.spans[i][0]:sc.spans[i][1]] // the descriptor's part
		}
		sc.res = slices.Grow(sc.res[:0], len(sc.reqs))[:len(sc.reqs)]
	}
	return bans
}

// decideBans writes into sc.res the result of every ban of sc.reqs, and
// an empty result for the other requests; it reports whether the bans
// alone refuse the call, whatever the other requests' results would be.
// Bans are decided without the store, so that they hold when it is down.
func (e *Engine) decideBans(sc *Scratch) (refused bool) {
	now := backend.Micros(e.now())
	for i, rq := range sc.reqs {
		sc.res[i] = backend.Result{}
		if rq.Limit.Ban() {
			var st backend.State // a ban reads no state
			sc.res[i] = st.Result(rq.Limit, now, rq.Hits, true)
		}
	}
	// With every other request within its limits, the call is refused
	// only when a ban refuses it: an enforced one, or bans on every quota
	// group.
	return backend.Refused(sc.reqs, sc.res)
}

// verdicts fills sc.Dec's overall code and statuses from sc.res (refused
// is the overall Verdict), and counts them in the rule metrics.
func (e *Engine) verdicts(sc *Scratch, refused bool) {
	dec := &sc.Dec
	dec.Over = !e.opts.ShadowMode && refused
	shadowed := false // a descriptor that the global shadow mode let through
	for i := range sc.descs {
		ds := &sc.descs[i]
		v := e.descVerdict(sc, i)
		if ds.op == backend.Take {
			e.observeHot(sc, ds, &v) // a hot key is one asked for work, not one given back
		}
		e.countRule(sc.Req.Domain, ds, v, dec.Over)
		dec.Statuses = append(dec.Statuses, v)
		shadowed = shadowed || v.OverLimit && !ds.shadow
	}
	if shadowed && e.opts.ShadowMode {
		e.metrics.GlobalShadowMode()
	}
}

// descVerdict is the verdict on sc.descs[i] from sc.res: it reports the
// limit that refused, else the one with the least remaining.
func (e *Engine) descVerdict(sc *Scratch, i int) Verdict {
	ds := &sc.descs[i]
	if ds.n == 0 {
		return Verdict{Unlimited: ds.unlimited()}
	}
	pick := ds.first
	for k := ds.first; k < ds.first+ds.n; k++ {
		if r := sc.res[k]; r.OverLimit {
			pick = k
			break
		} else if r.Remaining < sc.res[pick].Remaining {
			pick = k
		}
	}
	return e.limitVerdict(ds, sc.reqs[pick].Limit, sc.res[pick])
}

// limitVerdict is the verdict of ds reporting limit l, whose result is r.
func (e *Engine) limitVerdict(ds *desc, l backend.Limit, r backend.Result) Verdict {
	own := ds.ownName(l)
	return Verdict{
		Over:      r.OverLimit && !ds.shadow,
		OverLimit: r.OverLimit,
		Shadow:    ds.shadow || e.opts.ShadowMode,
		Limited:   true,
		Limit:     l,
		Name:      cmp.Or(own, ds.path),
		Named:     own != "" && !ds.override, // the reference names no override's limit
		Cached:    r.Cached,
		Remaining: r.Remaining,
		Reset:     r.ResetAfter,
		Retry:     r.RetryAfter,
	}
}

// take calls the store with sc's requests, in a span of its own when
// the request is traced.
func (e *Engine) take(ctx context.Context, sc *Scratch) error {
	if e.opts.Tracer == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return e.store.Take(ctx, sc.reqs, sc.res)
	}
	ctx, span := e.opts.Tracer.Start(ctx, "ratelimitd.backend.Take", trace.WithAttributes(
		attribute.String("ratelimitd.domain", Printable(sc.Req.Domain)),
		attribute.Int("ratelimitd.descriptors", len(sc.descs)),
		attribute.Int("ratelimitd.counters", len(sc.reqs)),
	))
	defer span.End()
	err := e.store.Take(ctx, sc.reqs, sc.res)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(otelcodes.Error, "counter store failed")
	} else {
		span.SetAttributes(attribute.Bool("ratelimitd.over_limit", backend.Refused(sc.reqs, sc.res)))
	}
	return err
}

// limitName returns the name of d's limit l: its name, or else the
// descriptor's key path.
func (d *desc) limitName(l backend.Limit) string {
	return cmp.Or(d.ownName(l), d.path)
}

// ownName returns the name the rule gives d's limit l, "" if none.
func (d *desc) ownName(l backend.Limit) string {
	for _, rl := range d.limits() {
		if rl.Limit == l && rl.Name != "" {
			return rl.Name
		}
	}
	return ""
}

// storeFailed answers a call whose store failed with err: the caller's
// context error if the caller gave up, ErrShuttingDown if the store is
// closed, else the failure mode's answer (nil, with sc.Dec filled) or
// ErrStoreUnavailable. Bans are decided all the same: a ban refuses
// under every failure mode, and a call that bans alone refuse is
// answered OVER_LIMIT even under FailError. The store's error, which may
// name internal addresses, goes to the log and never to the caller.
func (e *Engine) storeFailed(ctx context.Context, sc *Scratch, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if errors.Is(err, backend.ErrClosed) {
		return ErrShuttingDown
	}
	e.warnStore(err)
	e.metrics.StoreFailed(storeErrorKind(err), e.opts.FailureMode)
	refused := e.decideBans(sc)
	if e.opts.FailureMode == FailError && !refused {
		return ErrStoreUnavailable
	}
	e.failures.Add(1)
	e.failureAnswer(sc, refused)
	return nil
}

// failureAnswer fills sc.Dec when the store failed, from the bans'
// results in sc.res (refused: the bans alone refuse the call). A
// descriptor with a ban reports it; the others answer by the failure
// mode, without counts: under FailAllow OK with no limit; under FailDeny
// OVER_LIMIT when a limit applies (but in shadow mode).
func (e *Engine) failureAnswer(sc *Scratch, refused bool) {
	dec := &sc.Dec
	deny := e.opts.FailureMode == FailDeny && !e.opts.ShadowMode
	dec.Over = !e.opts.ShadowMode && refused
	for i := range sc.descs {
		ds := &sc.descs[i]
		v := Verdict{Unlimited: ds.unlimited()}
		for k := ds.first; k < ds.first+ds.n; k++ {
			if l := sc.reqs[k].Limit; l.Ban() {
				v = e.limitVerdict(ds, l, sc.res[k]) // a ban's result is over, with nothing remaining
				break
			}
		}
		if !v.Limited && deny && ds.n > 0 && !ds.shadow {
			v.Over = true
			dec.Over = true
		}
		if v.Limited {
			e.countRule(sc.Req.Domain, ds, v, dec.Over)
		}
		dec.Statuses = append(dec.Statuses, v)
	}
	e.appendHeaders(sc)
}
