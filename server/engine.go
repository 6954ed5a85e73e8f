package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/config"
)

// Request bounds: larger requests get InvalidArgument.
const (
	maxDomain      = 256
	maxDescriptors = 64
	maxEntries     = 32
	maxEntryBytes  = 1024 // of a key; a longer value is counted by its hash (see keyValue)
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
	shadow    bool // not enforced: a shadow-mode rule, or the daemon in shadow mode
	limited   bool // a limit applied: limit, name and the counts below are set
	unlimited bool // the rule is unlimited: nothing was counted
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
	domain   string
	descs    []desc
	reqs     []backend.Request
	res      []backend.Result
	keys     []byte
	spans    [][2]int // each request's key, in keys after the prefixes
	replaced []string
	buf      []byte
	dec      decision
}

func (sc *scratch) reset() {
	clear(sc.descs) // drop rule pointers so old rule sets can be collected
	sc.domain = ""
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

// invalid returns an InvalidArgument status error.
func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
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
func checkEntries[E config.Entry](i int, entries []E) error {
	switch {
	case len(entries) == 0:
		return invalid("descriptor %d has no entries", i)
	case len(entries) > maxEntries:
		return invalid("descriptor %d has %d entries, over the maximum %d", i, len(entries), maxEntries)
	}
	for j, e := range entries {
		k := e.GetKey()
		switch {
		case k == "":
			return invalid("descriptor %d entry %d has an empty key", i, j)
		case len(k) > maxEntryBytes:
			return invalid("descriptor %d entry %d: key is %d bytes, over the maximum %d", i, j, len(k), maxEntryBytes)
		}
	}
	return nil
}

func checkHits(i int, hits uint64) error {
	if hits > maxHits {
		return invalid("descriptor %d: hits %d over the maximum %d", i, hits, uint64(maxHits))
	}
	return nil
}

// addDescriptor matches one request descriptor against d and appends it
// to sc. ovr, when override is set, is the request's own limit for it.
func addDescriptor[E config.Entry](sc *scratch, d *config.DomainRules, domain string, entries []E, hits uint64, ovr *backend.Limit) error {
	i := len(sc.descs)
	if err := checkEntries(i, entries); err != nil {
		return err
	}
	if err := checkHits(i, hits); err != nil {
		return err
	}
	rule := config.Match(d, entries)
	ds := desc{rule: rule, hits: hits}
	if rule != nil {
		ds.shadow = rule.ShadowMode
		ds.path = rule.Path
		ds.metricPath = metricPath(rule, entries)
	}
	sc.domain = domain
	if ovr != nil {
		// The request's limit replaces the rule's limits, keeping the
		// rule's algorithm, and the name of its limit if it has one; a
		// rule with several limits names the override by its path.
		ds.override = true
		o := &ds.ovr[0]
		o.Limit = *ovr
		if rule != nil && len(rule.Limits) > 0 {
			o.Algorithm = rule.Limits[0].Algorithm
			if len(rule.Limits) == 1 {
				o.Name = rule.Limits[0].Name
			}
		}
		if o.Algorithm == backend.SlidingLog && o.Requests > backend.MaxSlidingLog {
			o.Requests = backend.MaxSlidingLog // the cap on a log's memory
		}
		if err := o.Validate(); err != nil {
			return invalid("descriptor %d: limit override: %v", i, err)
		}
		if ds.path == "" {
			ds.path = keyPath(entries)
		}
	}
	// The counter key's prefix: domain and every entry; a wildcard rule
	// with share_threshold puts its pattern in place of the value, so
	// every matching value shares one counter.
	start := len(sc.keys)
	sc.keys = backend.AppendKeyPart(sc.keys, domain)
	for j, e := range entries {
		v := e.GetValue()
		if rule != nil && j < len(rule.Levels) {
			if lv := rule.Levels[j]; lv.ShareThreshold && lv.Wildcard {
				v = lv.Value
			}
		}
		sc.keys = backend.AppendKeyPart(sc.keys, e.GetKey())
		if len(v) > maxEntryBytes {
			sum := sha256.Sum256([]byte(v))
			v = longValueMark + string(sum[:])
		}
		sc.keys = backend.AppendKeyPart(sc.keys, v)
	}
	ds.key = [2]int{start, len(sc.keys)}
	if ds.unlimited() {
		sc.replaced = append(sc.replaced, ds.rule.Replaces...)
	}
	for _, l := range ds.limits() {
		sc.replaced = append(sc.replaced, l.Replaces...)
	}
	sc.descs = append(sc.descs, ds)
	return nil
}

// A request value over maxEntryBytes is counted under its SHA-256 digest,
// marked with a byte that no request value holds (protobuf strings are
// valid UTF-8, and 0xff never is), so that it shares no counter with a
// value that reads like a digest. Values come from clients (Envoy copies
// request headers into them): refusing long ones would make every request
// carrying a 2 KiB header an error, which Envoy by default lets through
// unlimited.
const longValueMark = "\xff"

// labelValue returns the form of a request value in metric labels: the
// value itself, or for a value over maxEntryBytes its digest in hex.
func labelValue(v string) string {
	if len(v) <= maxEntryBytes {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// keyPath names an unmatched descriptor by its keys, as Rule.Path does.
func keyPath[E config.Entry](entries []E) string {
	var b []byte
	for j, e := range entries {
		if j > 0 {
			b = append(b, '.')
		}
		b = append(b, e.GetKey()...)
	}
	return string(b)
}

// decide takes the hits of sc's descriptors from the store and fills
// sc.dec. It returns a status error when the store cannot decide.
func (s *Server) decide(ctx context.Context, sc *scratch) error {
	// Build one store request per limit that applies and was not replaced;
	// its key is the descriptor's prefix and the limit's suffix, appended
	// after every prefix.
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
			start := len(sc.keys) - keysFrom
			sc.keys = append(sc.keys, sc.keys[ds.key[0]:ds.key[1]]...)
			sc.keys = backend.AppendKeySuffix(sc.keys, l.Limit)
			sc.spans = append(sc.spans, [2]int{start, len(sc.keys) - keysFrom})
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
			sc.reqs[i].Key = keys[sc.spans[i][0]:sc.spans[i][1]]
		}
		sc.res = slices.Grow(sc.res[:0], len(sc.reqs))[:len(sc.reqs)]
		start := time.Now()
		err := s.take(ctx, sc)
		s.metrics.storeDuration.Observe(time.Since(start).Seconds())
		if err != nil {
			if err := s.storeError(ctx, err); err != nil {
				return err
			}
			s.failureAnswer(sc)
			return nil
		}
	}

	dec := &sc.dec
	dec.over = !s.opts.ShadowMode && backend.Refused(sc.reqs, sc.res)
	for i := range sc.descs {
		ds := &sc.descs[i]
		v := verdict{unlimited: ds.unlimited()}
		if ds.n == 0 {
			s.countRule(sc.domain, ds, false, false, false, false, backend.Limit{}, backend.Result{})
		} else {
			// Report the limit that refused, else the one with the least
			// remaining.
			pick, over := ds.first, false
			for k := ds.first; k < ds.first+ds.n; k++ {
				if r := sc.res[k]; r.OverLimit {
					pick, over = k, true
					break
				} else if r.Remaining < sc.res[pick].Remaining {
					pick = k
				}
			}
			r := sc.res[pick]
			v = verdict{
				over:      over && !ds.shadow,
				shadow:    ds.shadow || s.opts.ShadowMode,
				limited:   true,
				limit:     sc.reqs[pick].Limit,
				name:      ds.limitName(sc.reqs[pick].Limit),
				remaining: r.Remaining,
				reset:     r.ResetAfter,
				retry:     r.RetryAfter,
			}
			s.countRule(sc.domain, ds, true, over, v.shadow, dec.over, v.limit, r)
		}
		dec.statuses = append(dec.statuses, v)
	}
	s.appendHeaders(sc)
	return nil
}

// take calls the store with sc's requests, in a span of its own when
// the request is traced.
func (s *Server) take(ctx context.Context, sc *scratch) error {
	if s.tracer == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return s.store.Take(ctx, sc.reqs, sc.res)
	}
	ctx, span := s.tracer.Start(ctx, "ratelimitd.backend.Take", trace.WithAttributes(
		attribute.String("ratelimitd.domain", sc.domain),
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
	for _, rl := range d.limits() {
		if rl.Limit == l && rl.Name != "" {
			return rl.Name
		}
	}
	return d.path
}

// storeError turns a store failure into a status error, or nil when the
// failure mode answers instead (see failureAnswer).
func (s *Server) storeError(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return status.FromContextError(ctxErr).Err()
	}
	if errors.Is(err, backend.ErrClosed) {
		return status.Error(codes.Unavailable, "shutting down")
	}
	s.warnStore(err)
	s.metrics.storeFailed(err)
	s.metrics.failureAnswers.WithLabelValues(s.opts.FailureMode.String()).Inc()
	if s.opts.FailureMode == FailError {
		return status.Error(codes.Unavailable, fmt.Sprintf("counter store unavailable: %v", err))
	}
	s.failures.Add(1)
	return nil
}

// failureAnswer fills sc.dec without counts, by the failure mode: under
// FailAllow every descriptor is OK with no limit; under FailDeny every
// descriptor a limit applies to is OVER_LIMIT (but shadow ones).
func (s *Server) failureAnswer(sc *scratch) {
	dec := &sc.dec
	deny := s.opts.FailureMode == FailDeny && !s.opts.ShadowMode
	for i := range sc.descs {
		ds := &sc.descs[i]
		v := verdict{unlimited: ds.unlimited()}
		if deny && ds.n > 0 && !ds.shadow {
			v.over = true
			dec.over = true
		}
		dec.statuses = append(dec.statuses, v)
	}
}
