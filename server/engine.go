package server

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
	maxDomain      = 256
	maxDescriptors = 64
	maxEntries     = config.MaxDepth
	maxEntryBytes  = config.MaxKeyBytes // of a key; a longer value is counted by its digest (see appendKeyPrefix)
	maxHits        = math.MaxUint32
)

// A decision is the engine's answer to one request, before a face renders
// it in its own messages. It lives in a pooled scratch and must not be
// kept after the response is built.
type decision struct {
	over     bool // the request must not proceed
	statuses []verdict
	headers  []header
}

// A verdict is the decision on one request descriptor.
type verdict struct {
	over      bool // reported code: OVER_LIMIT (false for a shadow-mode rule)
	overLimit bool // the limit refused the hits, whatever the reported code
	shadow    bool // not enforced: a shadow-mode rule, or the daemon in shadow mode
	limited   bool // a limit applied: limit, name and the counts below are set
	unlimited bool // the rule is unlimited: nothing was counted
	named     bool // the rule names this limit (and the request does not override it)
	cached    bool // the store answered from its local cache
	limit     backend.Limit
	name      string // the limit's name, or else the rule's key path
	remaining uint64
	reset     time.Duration
	retry     time.Duration
}

// A header is one HTTP response header field to send.
type header struct{ name, value string }

// A desc is one request descriptor on its way through the engine.
type desc struct {
	rule     *config.Rule
	override bool                // ovr replaces rule's limits
	ovr      [1]config.RuleLimit // the request's limit, when override
	hits     uint64
	key      [2]int // the counter key's prefix, sc.keys[key[0]:key[1]]
	first, n int    // the store requests of this descriptor, sc.reqs[first:first+n]
	shadow   bool   // the rule is in shadow mode: report OK when over
	path     string // name for headers when the limit has none
	// metricPath is the rule label when the rule's metrics carry request
	// values (see metricPath), else "".
	metricPath string
	// statKey is, with metricPath and Options.Statsd, the reference's
	// stat key of the request (see statKey).
	statKey string
}

// unlimited reports whether ds passes uncounted: its rule is unlimited
// and the request did not override it.
func (d *desc) unlimited() bool { return d.rule != nil && d.rule.Unlimited && !d.override }

// limits returns the limits that apply to d: the request's override, or
// its rule's.
func (d *desc) limits() []config.RuleLimit {
	if d.override {
		return d.ovr[:]
	}
	if d.rule == nil {
		return nil
	}
	return d.rule.Limits
}

// scratch holds one request's working memory; Server pools them so the
// hot path allocates only what the response keeps.
type scratch struct {
	req      request     // what the face decoded
	envoy    []envoyDesc // Envoy's descriptors, while an Envoy face decodes
	descs    []desc
	reqs     []backend.Request
	res      []backend.Result
	keys     []byte
	spans    [][3]int // each request's key, in keys after the prefixes: start, end of the descriptor part (its Tag), end
	replaced []string
	buf      []byte
	dec      decision
	statsd   bool // the server sends statsd: compute each request's statKey
}

func (sc *scratch) reset() {
	sc.req.reset()
	sc.envoy = sc.envoy[:0]
	clear(sc.descs) // drop rule pointers so old rule sets can be collected
	sc.descs = sc.descs[:0]
	clear(sc.reqs)
	sc.reqs = sc.reqs[:0]
	sc.res = sc.res[:0]
	sc.keys = sc.keys[:0]
	sc.spans = sc.spans[:0]
	sc.replaced = sc.replaced[:0]
	clear(sc.dec.statuses)
	sc.dec = decision{statuses: sc.dec.statuses[:0], headers: sc.dec.headers[:0]}
}

// checkRequest checks the request-wide bounds.
func checkRequest(domain string, descriptors int) error {
	switch {
	case domain == "":
		return invalid("domain is empty")
	case len(domain) > maxDomain:
		return invalid("domain is %d bytes, over the maximum %d", len(domain), maxDomain)
	case descriptors == 0:
		return invalid("no descriptors")
	case descriptors > maxDescriptors:
		return invalid("%d descriptors, over the maximum %d", descriptors, maxDescriptors)
	}
	return nil
}

// checkEntries checks one descriptor's entries.
func checkEntries(i int, entries []entry) error {
	if err := checkEntryCount(i, len(entries)); err != nil {
		return err
	}
	for j, e := range entries {
		switch {
		case e.key == "":
			return invalid("descriptor %d entry %d has an empty key", i, j)
		case len(e.key) > maxEntryBytes:
			return invalid("descriptor %d entry %d: key is %d bytes, over the maximum %d", i, j, len(e.key), maxEntryBytes)
		}
	}
	return nil
}

// checkEntryCount checks how many entries descriptor i has.
func checkEntryCount(i, n int) error {
	switch {
	case n == 0:
		return invalid("descriptor %d has no entries", i)
	case n > maxEntries:
		return invalid("descriptor %d has %d entries, over the maximum %d", i, n, maxEntries)
	}
	return nil
}

func checkHits(i int, hits uint64) error {
	if hits > maxHits {
		return invalid("descriptor %d: hits %d over the maximum %d", i, hits, uint64(maxHits))
	}
	return nil
}

// match checks sc.req, matches each of its descriptors against the rules
// in force and appends them to sc.descs with their counter keys'
// prefixes. It reports whether the request's domain has rules.
func (s *Server) match(sc *scratch) (known bool, err error) {
	r := &sc.req
	if err := checkRequest(r.domain, len(r.descs)); err != nil {
		return false, err
	}
	d := s.rules.Load().Domain(r.domain)
	for i := range r.descs {
		if err := addDescriptor(sc, d, &r.descs[i]); err != nil {
			return false, err
		}
	}
	return d != nil, nil
}

// addDescriptor matches one request descriptor against d and appends it
// to sc.
func addDescriptor(sc *scratch, d *config.DomainRules, rd *descriptor) error {
	i := len(sc.descs)
	entries := sc.req.entriesOf(rd)
	if err := checkEntries(i, entries); err != nil {
		return err
	}
	if err := checkHits(i, rd.hits); err != nil {
		return err
	}
	rule := config.Match(d, entries)
	ds := desc{rule: rule, hits: rd.hits}
	if rule != nil {
		ds.shadow = rule.ShadowMode
		ds.path = rule.Path
		ds.metricPath = metricPath(rule, entries)
		if ds.metricPath != "" && sc.statsd {
			ds.statKey = statKey(sc.req.domain, rule, entries)
		}
	}
	if rd.hasLimit {
		l, err := overrideLimit(rule, rd.limit)
		if err != nil {
			return invalid("descriptor %d: limit override: %v", i, err)
		}
		if d != nil { // overrides apply in a known domain only
			ds.override, ds.ovr[0] = true, l
			if ds.path == "" {
				ds.path = keyPath(entries)
			}
		}
	}
	ds.key = [2]int{len(sc.keys), 0}
	sc.keys = appendKeyPrefix(sc.keys, sc.req.domain, rule, entries)
	ds.key[1] = len(sc.keys)
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
func overrideLimit(rule *config.Rule, o override) (config.RuleLimit, error) {
	l := config.RuleLimit{Limit: backend.Limit{Requests: o.requests, Window: o.window}}
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
// value over maxEntryBytes counts by its SHA-256 digest, in a part that
// no value can spell (backend.AppendKeyDigest), as does a digest the
// request sent in its place.
func appendKeyPrefix(b []byte, domain string, rule *config.Rule, entries []entry) []byte {
	b = backend.AppendKeyPart(b, domain)
	for j, e := range entries {
		b = backend.AppendKeyPart(b, e.key)
		v, digest := levelValue(rule, j, e.value, e.digest)
		switch {
		case digest:
			b = backend.AppendKeyDigest(b, v)
		case len(v) > maxEntryBytes:
			sum := sha256.Sum256([]byte(v)) // on the stack: a slice returned from a helper would not be
			b = backend.AppendKeyDigest(b, sum[:])
		default:
			b = backend.AppendKeyPart(b, v)
		}
	}
	return b
}

// levelValue returns the value that rule counts a request's value v at
// its level j by: the level's own value under share_threshold (every
// matching value shares its counter), v's network under ip_prefix, else
// v. digest tells that v is the SHA-256 a request sent for its value, and
// whether the value returned is one.
func levelValue(rule *config.Rule, j int, v string, digest bool) (string, bool) {
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

// printable returns s as valid UTF-8 for the places that echo request
// bytes (responses, metric labels, trace attributes): s itself when it
// is, else "hex:" and its bytes in hex. (Counters never use this form:
// two values that print alike still count apart.)
func printable(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return "hex:" + hex.EncodeToString([]byte(s))
}

// labelValue returns the form of a request value in metric labels: the
// value itself (see printable), or for a value over maxEntryBytes, or one
// sent as a digest, the digest in hex.
func labelValue(e entry) string {
	switch {
	case e.digest:
		return "sha256:" + hex.EncodeToString([]byte(e.value))
	case len(e.value) > maxEntryBytes:
		sum := sha256.Sum256([]byte(e.value))
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	return printable(e.value)
}

// keyPath names an unmatched descriptor by its keys, as Rule.Path does.
func keyPath(entries []entry) string {
	var b []byte
	for j, e := range entries {
		if j > 0 {
			b = append(b, '.')
		}
		b = append(b, e.key...)
	}
	return printable(string(b))
}

// decide decides sc.req: it matches its descriptors, takes their hits
// from the store and fills sc.dec. It returns an *invalidError for a
// request it refuses to decide, errStoreUnavailable or errShuttingDown
// when the store cannot decide and the failure mode does not answer, or
// the caller's context error.
func (s *Server) decide(ctx context.Context, sc *scratch) error {
	known, err := s.match(sc)
	if err != nil {
		return err
	}
	if !known {
		s.unknown.observe(sc.req.domain) // answered OK, as the reference does, but counted
	}
	bans := s.storeRequests(sc)
	var refused bool
	switch {
	case len(sc.reqs) == 0:
	case bans == len(sc.reqs):
		refused = s.decideBans(sc) // a ban needs no counter: no store call
	default:
		start := time.Now()
		err := s.take(ctx, sc)
		s.metrics.storeDuration.Observe(time.Since(start).Seconds())
		if err != nil {
			return s.storeFailed(ctx, sc, err)
		}
		refused = backend.Refused(sc.reqs, sc.res)
	}
	s.verdicts(sc, refused)
	s.appendHeaders(sc)
	return nil
}

// storeRequests builds sc.reqs from the matched sc.descs: one store
// request per limit that applies and was not replaced, its key the
// descriptor's prefix and the limit's suffix, appended after every
// prefix. It returns how many of them are bans. decide and explain share
// it, so that explain reads the very counters a decision would take.
func (s *Server) storeRequests(sc *scratch) (bans int) {
	keysFrom := len(sc.keys)
	for i := range sc.descs {
		ds := &sc.descs[i]
		ds.first = len(sc.reqs)
		if ds.unlimited() {
			continue
		}
		mode := backend.Enforce
		switch {
		case s.opts.ShadowMode || ds.shadow:
			mode = backend.Shadow
		case ds.rule != nil && ds.rule.QuotaMode:
			mode = backend.Quota
		}
		for _, l := range ds.limits() {
			if l.Name != "" && slices.Contains(sc.replaced, l.Name) {
				continue
			}
			if l.Ban() {
				bans++
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
				ConsumeWhenOver: ds.rule != nil && ds.rule.ConsumeWhenOver,
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
func (s *Server) decideBans(sc *scratch) (refused bool) {
	now := backend.Micros(s.now())
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

// verdicts fills sc.dec's overall code and statuses from sc.res (refused
// is the overall verdict), and counts them in the rule metrics.
func (s *Server) verdicts(sc *scratch, refused bool) {
	dec := &sc.dec
	dec.over = !s.opts.ShadowMode && refused
	shadowed := false // a descriptor that the global shadow mode let through
	for i := range sc.descs {
		ds := &sc.descs[i]
		v := s.descVerdict(sc, i)
		s.observeHot(sc, ds, &v)
		s.countRule(sc.req.domain, ds, v, dec.over)
		dec.statuses = append(dec.statuses, v)
		shadowed = shadowed || v.overLimit && !ds.shadow
	}
	if shadowed && s.opts.ShadowMode && s.metrics.ref != nil {
		s.metrics.ref.globalShadowMode.Inc()
	}
}

// descVerdict is the verdict on sc.descs[i] from sc.res: it reports the
// limit that refused, else the one with the least remaining.
func (s *Server) descVerdict(sc *scratch, i int) verdict {
	ds := &sc.descs[i]
	if ds.n == 0 {
		return verdict{unlimited: ds.unlimited()}
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
	return s.limitVerdict(ds, sc.reqs[pick].Limit, sc.res[pick])
}

// limitVerdict is the verdict of ds reporting limit l, whose result is r.
func (s *Server) limitVerdict(ds *desc, l backend.Limit, r backend.Result) verdict {
	own := ds.ownName(l)
	return verdict{
		over:      r.OverLimit && !ds.shadow,
		overLimit: r.OverLimit,
		shadow:    ds.shadow || s.opts.ShadowMode,
		limited:   true,
		limit:     l,
		name:      cmp.Or(own, ds.path),
		named:     own != "" && !ds.override, // the reference names no override's limit
		cached:    r.Cached,
		remaining: r.Remaining,
		reset:     r.ResetAfter,
		retry:     r.RetryAfter,
	}
}

// take calls the store with sc's requests, in a span of its own when
// the request is traced.
func (s *Server) take(ctx context.Context, sc *scratch) error {
	if s.tracer == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return s.store.Take(ctx, sc.reqs, sc.res)
	}
	ctx, span := s.tracer.Start(ctx, "ratelimitd.backend.Take", trace.WithAttributes(
		attribute.String("ratelimitd.domain", printable(sc.req.domain)),
		attribute.Int("ratelimitd.descriptors", len(sc.descs)),
		attribute.Int("ratelimitd.counters", len(sc.reqs)),
	))
	defer span.End()
	err := s.store.Take(ctx, sc.reqs, sc.res)
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
// context error if the caller gave up, errShuttingDown if the store is
// closed, else the failure mode's answer (nil, with sc.dec filled) or
// errStoreUnavailable. Bans are decided all the same: a ban refuses
// under every failure mode, and a call that bans alone refuse is
// answered OVER_LIMIT even under FailError. The store's error, which may
// name internal addresses, goes to the log and never to the caller.
func (s *Server) storeFailed(ctx context.Context, sc *scratch, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if errors.Is(err, backend.ErrClosed) {
		return errShuttingDown
	}
	s.warnStore(err)
	s.metrics.storeFailed(err)
	s.metrics.failureAnswers.WithLabelValues(s.opts.FailureMode.String()).Inc()
	refused := s.decideBans(sc)
	if s.opts.FailureMode == FailError && !refused {
		return errStoreUnavailable
	}
	s.failures.Add(1)
	s.failureAnswer(sc, refused)
	return nil
}

// failureAnswer fills sc.dec when the store failed, from the bans'
// results in sc.res (refused: the bans alone refuse the call). A
// descriptor with a ban reports it; the others answer by the failure
// mode, without counts: under FailAllow OK with no limit; under FailDeny
// OVER_LIMIT when a limit applies (but in shadow mode).
func (s *Server) failureAnswer(sc *scratch, refused bool) {
	dec := &sc.dec
	deny := s.opts.FailureMode == FailDeny && !s.opts.ShadowMode
	dec.over = !s.opts.ShadowMode && refused
	for i := range sc.descs {
		ds := &sc.descs[i]
		v := verdict{unlimited: ds.unlimited()}
		for k := ds.first; k < ds.first+ds.n; k++ {
			if l := sc.reqs[k].Limit; l.Ban() {
				v = s.limitVerdict(ds, l, sc.res[k]) // a ban's result is over, with nothing remaining
				break
			}
		}
		if !v.limited && deny && ds.n > 0 && !ds.shadow {
			v.over = true
			dec.over = true
		}
		if v.limited {
			s.countRule(sc.req.domain, ds, v, dec.over)
		}
		dec.statuses = append(dec.statuses, v)
	}
	s.appendHeaders(sc)
}
