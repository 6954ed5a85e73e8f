package server

import (
	"context"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/envoyunit"
	"github.com/ratelimitd/ratelimitd/server/internal/engine"
)

// envoyService is envoy.service.ratelimit.v3.RateLimitService.
type envoyService struct {
	rlsv3.UnimplementedRateLimitServiceServer
	s *Server
}

// ShouldRateLimit implements rlsv3.RateLimitServiceServer, for callers
// that hold a decoded request (the gRPC server decodes Envoy's wire itself:
// see decideWire).
func (e envoyService) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, err := e.s.decideEnvoy(ctx, apiEnvoy, func(sc *scratch) error { return envoyFromProto(sc, req) })
	return resp, grpcError(err)
}

// decideEnvoy runs an Envoy request through the engine, fill decoding it
// into the scratch: shared by the gRPC face and /json. Its errors are the
// engine's; each face maps them.
func (s *Server) decideEnvoy(ctx context.Context, a api, fill func(*scratch) error) (resp *rlsv3.RateLimitResponse, err error) {
	defer func(start time.Time) {
		s.metrics.decided(a, start, resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT, err)
		if a == apiEnvoy {
			s.metrics.envoyCall(err)
		}
	}(time.Now())
	sc := s.getScratch()
	defer s.putScratch(sc)
	if err := fill(sc); err != nil {
		return nil, err
	}
	s.logRequest(sc)
	if err := s.eng.Decide(ctx, &sc.Scratch); err != nil {
		return nil, err
	}
	return envoyResponse(sc, s.opts.EnvoyproxyAnswers, s.decidedBy.Load()), nil
}

// envoyFromProto fills sc.Req from a decoded Envoy request, whose strings
// are valid UTF-8 (/json's, or a Go caller's).
func envoyFromProto(sc *scratch, req *rlsv3.RateLimitRequest) error {
	r := &sc.Req
	r.Domain = req.GetDomain()
	for i, rd := range req.GetDescriptors() {
		if i == engine.MaxDescriptors {
			return engine.CheckRequest(r.Domain, len(req.GetDescriptors()))
		}
		if n := len(rd.GetEntries()); n > engine.MaxEntries {
			return engine.CheckEntryCount(i, n)
		}
		d := envoyDesc{entries: [2]int{len(r.Entries), len(r.Entries)}, negative: rd.GetIsNegativeHits()}
		for _, e := range rd.GetEntries() {
			r.Entries = append(r.Entries, engine.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		d.entries[1] = len(r.Entries)
		if h := rd.GetHitsAddend(); h != nil {
			d.hasHits, d.hits = true, h.GetValue()
		}
		if lo := rd.GetLimit(); lo != nil {
			d.hasLimit, d.rpu, d.unit = true, lo.GetRequestsPerUnit(), int32(lo.GetUnit())
			if m := lo.GetUnitMultiplier(); m != nil {
				d.hasMult, d.mult = true, m.GetValue()
			}
		}
		sc.envoy = append(sc.envoy, d)
	}
	return envoyRequest(sc, uint64(req.GetHitsAddend()))
}

// multiply returns w times m, false past backend.MaxWindow.
func multiply(w time.Duration, m uint32) (time.Duration, bool) {
	if time.Duration(m) > backend.MaxWindow/w {
		return 0, false
	}
	return w * time.Duration(m), true
}

// envoyUnit returns the unit whose length is w, or UNKNOWN.
func envoyUnit(w time.Duration) rlsv3.RateLimitResponse_RateLimit_Unit {
	u, _ := envoyunit.ByWindow(w) // the zero Unit's number is UNKNOWN's
	return rlsv3.RateLimitResponse_RateLimit_Unit(u.Envoy)
}

// envoyStatus holds the messages of one descriptor's status, allocated
// together.
type envoyStatus struct {
	st  rlsv3.RateLimitResponse_DescriptorStatus
	lim rlsv3.RateLimitResponse_RateLimit
	dur durationpb.Duration
}

// envoyResponse renders sc's decision as Envoy's response. With
// reference, it answers as envoyproxy/ratelimit does (see
// Options.EnvoyproxyAnswers): a current_limit named only by the rule's
// name, and duration_until_reset in whole seconds. A refusal names the
// rule that refused under DecidedByKey, from the cache by when not
// reference.
func envoyResponse(sc *scratch, reference bool, by *decidedByCache) *rlsv3.RateLimitResponse {
	dec := &sc.Dec
	resp := &rlsv3.RateLimitResponse{OverallCode: envoyCode(dec.Over)}
	arena := make([]envoyStatus, len(dec.Statuses))
	resp.Statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(dec.Statuses))
	for i, v := range dec.Statuses {
		a := &arena[i]
		resp.Statuses[i] = &a.st
		a.st.Code = envoyCode(v.Over)
		switch {
		case v.Unlimited:
			a.st.LimitRemaining = math.MaxUint32
		case v.Limited:
			a.lim.Name = v.Name
			a.lim.RequestsPerUnit = uint32(v.Limit.Requests)
			a.lim.Unit = envoyUnit(v.Limit.Window)
			a.st.CurrentLimit = &a.lim
			a.st.LimitRemaining = uint32(min(v.Remaining, math.MaxUint32))
			if reference {
				if !v.Named {
					a.lim.Name = ""
				}
				a.dur.Seconds = wholeSeconds(v.Reset)
			} else {
				setDuration(&a.dur, v.Reset)
			}
			a.st.DurationUntilReset = &a.dur
		}
	}
	if len(dec.Headers) > 0 {
		resp.ResponseHeadersToAdd = pointers[corev3.HeaderValue](len(dec.Headers))
		for i, h := range dec.Headers {
			resp.ResponseHeadersToAdd[i].Key, resp.ResponseHeadersToAdd[i].Value = h.Name, h.Value
		}
	}
	resp.DynamicMetadata = metadata(sc)
	if !reference {
		if i := refusing(dec); i >= 0 {
			resp.DynamicMetadata = by.withDecidedBy(resp.DynamicMetadata, sc, i)
		} else if !dec.Over {
			resp.DynamicMetadata = withLeases(resp.DynamicMetadata, sc)
		}
	}
	return resp
}

// DecidedByKey is the key of Envoy's dynamic metadata under which a
// refusal names the rule that refused (see withDecidedBy). Rules'
// metadata goes under the key "metadata", so no rule can write it. Its
// value is built once per limit and descriptor index under the rules in
// force, and shared by the answers (see decidedByCache).
const DecidedByKey = "decided_by"

// refusing returns, when dec refuses the request, its first descriptor
// that a limit refused with OVER_LIMIT, or -1. (A shadow-mode descriptor
// reports OK; --failure-mode=deny refuses with no limit; and quota-mode
// descriptors over their limits refuse nothing while another admits.)
func refusing(dec *engine.Answer) int {
	if !dec.Over {
		return -1
	}
	for i, v := range dec.Statuses {
		if v.Over && v.Limited {
			return i
		}
	}
	return -1
}

// decidedBy holds the messages of the decided_by value, allocated
// together.
type decidedBy struct {
	val  structpb.Value
	sv   structpb.Value_StructValue
	st   structpb.Struct
	n    int // of vals used
	vals [decidedByFields]structpb.Value
	strs [decidedByFields]structpb.Value_StringValue
	nums [decidedByFields]structpb.Value_NumberValue
}

// decidedByFields is how many fields the decided_by value has: no more
// than 8, which a Go map holds in one group.
const decidedByFields = 8

// str returns the next value of d, the string s. A protobuf string must
// be UTF-8: rules come from UTF-8 YAML, and a domain with rules is one of
// theirs, but file names need not be.
func (d *decidedBy) str(s string) *structpb.Value {
	v := &d.vals[d.n]
	d.strs[d.n].StringValue = strings.ToValidUTF8(s, "\uFFFD")
	v.Kind = &d.strs[d.n]
	d.n++
	return v
}

// num returns the next value of d, the number f.
func (d *decidedBy) num(f float64) *structpb.Value {
	v := &d.vals[d.n]
	d.nums[d.n].NumberValue = f
	v.Kind = &d.nums[d.n]
	d.n++
	return v
}

// withDecidedBy adds to md, nil or the rules' merged metadata, the key
// DecidedByKey: what refused descriptor i of sc, a struct of
//
//	name               the limit's name, "" if it has none
//	domain             the request's domain
//	rule               where the rule is defined, "file:line" ("" when
//	                   no rule matched: a request's limit override)
//	descriptor         the descriptor's index in the request, from 0
//	algorithm          the limit's algorithm ("sliding_window", ...)
//	requests_per_unit  and unit, the limit as current_limit reports it
//	                   (unit UNKNOWN when the window is no whole unit)
//	window             the limit's window, a Go duration ("1m0s", "30s")
//
// Only refusals carry it, so that an admitted request's answer costs no
// more than before. The value comes from c when c holds it (see
// decidedByCache), shared with other answers; the dynamic metadata that
// holds it is always this answer's own (md, or a Struct made here), so
// that a caller adding a key to it writes nothing shared.
func (c *decidedByCache) withDecidedBy(md *structpb.Struct, sc *scratch, i int) *structpb.Struct {
	d := c.get(sc, i)
	if md == nil {
		return &structpb.Struct{Fields: map[string]*structpb.Value{DecidedByKey: &d.val}}
	}
	md.Fields[DecidedByKey] = &d.val
	return md
}

// newDecidedBy builds the decided_by value of descriptor i of sc (see
// withDecidedBy).
func newDecidedBy(sc *scratch, i int) *decidedBy {
	v := &sc.Dec.Statuses[i]
	var name, where string
	if v.Named {
		name = v.Name
	}
	if r := sc.Rule(i); r != nil {
		where = r.File
		if r.Line > 0 {
			where = r.File + ":" + strconv.Itoa(r.Line)
		}
	}
	d := new(decidedBy)
	d.st.Fields = map[string]*structpb.Value{
		"name":              d.str(name),
		"domain":            d.str(sc.Req.Domain),
		"rule":              d.str(where),
		"descriptor":        d.num(float64(i)),
		"algorithm":         d.str(v.Limit.Algorithm.String()),
		"requests_per_unit": d.num(float64(v.Limit.Requests)),
		"unit":              d.str(envoyUnit(v.Limit.Window).String()),
		"window":            d.str(v.Limit.Window.String()),
	}
	d.sv.StructValue = &d.st
	d.val.Kind = &d.sv
	return d
}

// A decidedByCache holds the decided_by values of one rule set's
// refusals, built on a limit's first refusal and shared by the answers
// after it: every field comes from the rule, its limit and the
// descriptor's index (the domain is the rule's), none from the request.
// Server.SetRules replaces the cache, so that a reload serves the new
// rules' file:line and names, and the old rules' values are collected.
//
// Its size is bounded by the rules, not by requests: at most
// decidedByCached values for each limit of the rules. A request's own
// limit (an override) and a descriptor past the first decidedByCached
// get a value of their own, which is not kept; and so does a request
// matched under other rules than the cache's (one that raced a reload),
// so that no value of old rules enters the new cache. Being fixed by the
// rules, the bound has no flag nor metric.
type decidedByCache struct {
	rules  *config.Rules
	limits sync.Map // *config.RuleLimit of rules → *decidedBySlots
}

// decidedByCached is how many descriptors of a request, from the first,
// have their decided_by values cached: refusals name mostly one of the
// first few.
const decidedByCached = 8

// decidedBySlots are one limit's decided_by values, by descriptor index.
type decidedBySlots [decidedByCached]atomic.Pointer[decidedBy]

// get returns the decided_by value of descriptor i of sc: c's, or one
// built for this answer alone when c cannot hold it (c may be nil).
func (c *decidedByCache) get(sc *scratch, i int) *decidedBy {
	l := sc.RuleLimit(i)
	if c == nil || l == nil || i >= decidedByCached || sc.Rules() != c.rules {
		return newDecidedBy(sc, i)
	}
	slots, ok := c.limits.Load(l)
	if !ok {
		slots, _ = c.limits.LoadOrStore(l, new(decidedBySlots))
	}
	slot := &slots.(*decidedBySlots)[i]
	if d := slot.Load(); d != nil {
		return d
	}
	d := newDecidedBy(sc, i)
	if !slot.CompareAndSwap(nil, d) {
		return slot.Load() // another answer's, the same value
	}
	return d
}

// metadata merges the metadata of the matched rules of the descriptors
// within their limits, in request order, the first value of a key
// winning (maps merge key by key), under the field "metadata" of Envoy's
// dynamic metadata. It returns nil when no such rule has metadata.
func metadata(sc *scratch) *structpb.Struct {
	var merged map[string]any
	for i := range sc.Dec.Statuses {
		r := sc.Rule(i)
		if r == nil || len(r.Metadata) == 0 || sc.Dec.Statuses[i].Over {
			continue
		}
		if merged == nil {
			merged = make(map[string]any)
		}
		mergeInto(merged, r.Metadata)
	}
	if merged == nil {
		return nil
	}
	st, err := structpb.NewStruct(map[string]any{"metadata": merged})
	if err != nil {
		return nil // config.Parse accepts only values a Struct holds
	}
	return st
}

// mergeInto adds src's keys that dst lacks, merging nested maps.
func mergeInto(dst, src map[string]any) {
	for k, v := range src {
		old, ok := dst[k]
		if !ok {
			if m, isMap := v.(map[string]any); isMap {
				cp := make(map[string]any, len(m))
				mergeInto(cp, m)
				v = cp
			}
			dst[k] = v
			continue
		}
		if om, ok := old.(map[string]any); ok {
			if m, ok := v.(map[string]any); ok {
				mergeInto(om, m)
			}
		}
	}
}

// pointers returns pointers to n new values of T, allocated together.
func pointers[T any](n int) []*T {
	vals, ptrs := make([]T, n), make([]*T, n)
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	return ptrs
}

func envoyCode(over bool) rlsv3.RateLimitResponse_Code {
	if over {
		return rlsv3.RateLimitResponse_OVER_LIMIT
	}
	return rlsv3.RateLimitResponse_OK
}

// wholeSeconds returns d in seconds, rounded up: the reference's
// duration_until_reset, the window's length less the whole seconds since
// its start, which is the time to the end of a fixed window rounded up.
func wholeSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

func setDuration(d *durationpb.Duration, v time.Duration) {
	d.Seconds = int64(v / time.Second)
	d.Nanos = int32(v % time.Second)
}
