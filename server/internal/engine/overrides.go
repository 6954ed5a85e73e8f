package engine

import (
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/config"
)

// A RuntimeOverride is an operator's override of one descriptor's limits
// (see package server/overrides): when a rule matches a request
// descriptor whose domain and entries are exactly the override's, the
// override's Limits replace the rule's for that descriptor only. It is
// shared by every decision it applies to and must not be modified.
type RuntimeOverride struct {
	// Limits replace the matched rule's; never empty.
	Limits []config.RuleLimit
	// Reason, SetBy, Expires and Version say where the limits come from,
	// for explanations: why and by whom they were set, when they lapse
	// (zero: never), and the override's version.
	Reason, SetBy string
	Expires       time.Time
	Version       uint64
	// Sum is for the set's owner: a digest of the record the override was
	// read from, to tell a changed record at the next read without
	// keeping the records. The engine does not read it.
	Sum uint64
}

// RuntimeOverrides are the operators' overrides in force: an immutable
// set that SetOverrides swaps in whole. The zero value is an empty set.
type RuntimeOverrides struct {
	// m holds the overrides by OverrideKey: the counter-key prefix that a
	// request of the override's domain and entries has under a rule that
	// counts each value as itself, which is what addDescriptor looks up.
	m map[string]*RuntimeOverride
}

// NewRuntimeOverrides returns the set of overrides m holds by their
// OverrideKey. The set keeps m, which must not be modified afterwards.
func NewRuntimeOverrides(m map[string]*RuntimeOverride) *RuntimeOverrides {
	return &RuntimeOverrides{m: m}
}

// Len returns how many overrides o holds; o may be nil.
func (o *RuntimeOverrides) Len() int {
	if o == nil {
		return 0
	}
	return len(o.m)
}

// Get returns the override of key (see OverrideKey), nil if none; o
// may be nil.
func (o *RuntimeOverrides) Get(key string) *RuntimeOverride {
	if o == nil {
		return nil
	}
	return o.m[key]
}

// OverrideKey returns the key of the overrides of domain and entries:
// the counter-key prefix of a request descriptor made of them (see
// appendKeyPrefix), so that a decision finds its override with the
// prefix it builds anyway. Under a rule with ip_prefix or
// share_threshold, a request counts by its network or the rule's
// pattern: the override's value must then be that network or pattern.
func OverrideKey(domain string, entries []Entry) string {
	return string(appendKeyPrefix(nil, domain, nil, entries))
}

// SetOverrides replaces the overrides in force (nil: none). Decisions
// in flight finish with the set they started with (match loads it once
// per request); readers never wait.
func (e *Engine) SetOverrides(o *RuntimeOverrides) { e.overrides.Store(o) }

// Overrides returns the overrides in force, nil if none were set.
func (e *Engine) Overrides() *RuntimeOverrides { return e.overrides.Load() }

// applyOverride sets ds's runtime override from the overrides that
// match loaded for the request: the one whose key is ds's counter-key
// prefix, when a rule matched. One map lookup, with no allocation (the
// compiler does not copy the bytes of a string conversion that only
// indexes a map).
func (sc *Scratch) applyOverride(ds *desc) {
	if ds.rule == nil || sc.overrides.Len() == 0 {
		return
	}
	ds.runtime = sc.overrides.m[string(sc.keys[ds.key[0]:ds.key[1]])]
}

// ResetRequests returns the store requests that name the counters of the
// request descriptor of domain and entries: one per limit of the rule
// that matches it, and per limit of the override in force for it if any,
// whose hits and other fields are zero, for backend.Resetter. It returns
// an *InvalidError for a descriptor the engine would refuse, and no
// requests when no rule matches it or its rule is unlimited.
func (e *Engine) ResetRequests(domain string, entries []Entry) ([]backend.Request, error) {
	sc := e.scratches.Get().(*Scratch)
	defer func() {
		sc.Reset()
		e.scratches.Put(sc)
	}()
	from := len(sc.Req.Entries)
	sc.Req.Domain = domain
	sc.Req.Entries = append(sc.Req.Entries, entries...)
	sc.Req.Add(from, 0)
	if _, err := e.match(sc); err != nil {
		return nil, err
	}
	ds := &sc.descs[0]
	rule := ds.rule
	if rule == nil {
		return nil, nil
	}
	limits := rule.Limits
	if ds.runtime != nil {
		limits = append(append([]config.RuleLimit(nil), rule.Limits...), ds.runtime.Limits...)
	}
	prefix := string(sc.keys[ds.key[0]:ds.key[1]])
	reqs := make([]backend.Request, 0, len(limits))
	for _, l := range limits {
		key := string(backend.AppendKeySuffix([]byte(prefix), l.Limit))
		reqs = append(reqs, backend.Request{Key: key, Tag: key[:len(prefix)], Limit: l.Limit})
	}
	return reqs, nil
}

// An ExplainOverride names the operator's override that is the source of
// a descriptor's limits in an Explanation.
type ExplainOverride struct {
	Reason string `json:"reason"`
	SetBy  string `json:"set_by"`
	// ExpiresAt is when the override lapses, RFC 3339; "" for never.
	ExpiresAt string `json:"expires_at,omitempty"`
	Version   uint64 `json:"version"`
	// Expires is ExpiresAt as a time, for the native rendering.
	Expires time.Time `json:"-"`
}

// explainOverride returns o's part of an explanation, nil for nil.
func explainOverride(o *RuntimeOverride) *ExplainOverride {
	if o == nil {
		return nil
	}
	ex := &ExplainOverride{Reason: Printable(o.Reason), SetBy: Printable(o.SetBy), Version: o.Version}
	if !o.Expires.IsZero() {
		ex.ExpiresAt, ex.Expires = o.Expires.UTC().Format(time.RFC3339), o.Expires
	}
	return ex
}
