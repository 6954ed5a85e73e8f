package rlqs

import (
	"time"
	"unsafe"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	rlqsv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/wire/rlqs/v1"
)

// Envoy builds bucket ids from request headers, which may carry bytes
// that are not UTF-8. Protobuf strings must be UTF-8, and grpc-go's codec
// would refuse such a report and end the stream; so the service reads its
// reports, and writes its answers, with the types of
// gen/ratelimit/wire/rlqs/v1: a mirror of Envoy's RLQS messages, field for
// field, whose strings are bytes (the Go client uses the same). Keys and
// values are then bytes, as in the RateLimitService.

// wireReports is an envoy.service.rate_limit_quota.v3
// RateLimitQuotaUsageReports as the service reads it: see readReports.
type wireReports struct {
	domain string
	usages []wireUsage
}

// wireUsage is one BucketQuotaUsage of a wireReports.
type wireUsage struct {
	id              map[string]string
	elapsed         time.Duration
	allowed, denied uint64
}

// readReports returns the reports of m, which it takes over (m's bytes
// must never be written again): each bucket id as a map (a key given twice
// keeps its last value), each time_elapsed as elapsedOf reads it.
func readReports(m *rlqsv1.RateLimitQuotaUsageReports) wireReports {
	w := wireReports{domain: string(m.GetDomain()), usages: make([]wireUsage, len(m.GetBucketQuotaUsages()))}
	for i, u := range m.GetBucketQuotaUsages() {
		var id map[string]string
		if entries := u.GetBucketId().GetBucket(); len(entries) > 0 {
			id = make(map[string]string, len(entries))
			for _, e := range entries {
				// The keys and values are strings over m's bytes, which
				// protobuf copied out of the wire for m alone (no
				// aliasing) and nothing writes: two copies fewer per
				// entry on every report.
				id[bytesString(e.GetKey())] = bytesString(e.GetValue())
			}
		}
		w.usages[i] = wireUsage{
			id:      id,
			elapsed: elapsedOf(u.GetTimeElapsed()),
			allowed: u.GetNumRequestsAllowed(),
			denied:  u.GetNumRequestsDenied(),
		}
	}
	return w
}

// bytesString returns b as a string without copying it: b must never be
// written again.
func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// elapsedOf reads a time_elapsed: a negative one (or none) reads as 0, one
// over MaxTTL as MaxTTL (a reporting interval that long gives the longest
// assignment already).
func elapsedOf(d *durationpb.Duration) time.Duration {
	secs, nanos := d.GetSeconds(), int64(d.GetNanos())
	switch {
	case secs < 0 || nanos < 0:
		return 0
	case secs >= int64(MaxTTL/time.Second):
		return MaxTTL
	}
	return time.Duration(secs)*time.Second + time.Duration(nanos)
}

// wireResponse is a RateLimitQuotaResponse being built. Its actions and
// bucket ids are cut from slabs (see cut), so that an answer naming n
// buckets costs a few allocations, not a few per bucket.
type wireResponse struct {
	msg rlqsv1.RateLimitQuotaResponse
	// last is the assignment and lifetime of the last action assign
	// added (see assign).
	last struct {
		a   assignment
		ttl time.Duration
	}
	hint    int // how many buckets the answer may name (reserve)
	actions []rlqsv1.RateLimitQuotaResponse_BucketAction
	ids     []rlqsv1.BucketId
	ptrs    []*rlqsv1.BucketId_Entry
	entries []rlqsv1.BucketId_Entry
	bytes   []byte
}

// reserve tells that the answer may name about n buckets: the slabs are
// refilled for that many, at most maxSlab (an answer may name far fewer
// than it might: a push after new rules).
func (w *wireResponse) reserve(n int) { w.hint = min(n, maxSlab) }

// maxSlab bounds the buckets a slab of wireResponse is made for.
const maxSlab = 256

// cut returns n elements from the slab *s, which it refills first, with
// at least atLeast elements, when it has fewer than n.
func cut[T any](s *[]T, n, atLeast int) []T {
	if len(*s) < n {
		*s = make([]T, max(n, atLeast))
	}
	r := (*s)[:n:n]
	*s = (*s)[n:]
	return r
}

// assign adds the assignment a, living ttl, for the bucket id. A bucket given
// the same assignment as the one added before it shares its action
// message, which protobuf writes for each: a report of many buckets
// answered alike (those no rule matches come one after another) builds
// one message, not one each.
func (w *wireResponse) assign(id map[string]string, a assignment, ttl time.Duration) {
	if n := len(w.msg.BucketAction); n > 0 && w.last.a == a && w.last.ttl == ttl {
		prev := w.msg.BucketAction[n-1]
		w.add(id).BucketAction = prev.BucketAction
		return
	}
	w.last.a, w.last.ttl = a, ttl
	w.add(id).BucketAction = assignAction(a, ttl)
}

// abandon adds the action that abandons the bucket id.
func (w *wireResponse) abandon(id map[string]string) {
	w.add(id).BucketAction = &rlqsv1.RateLimitQuotaResponse_BucketAction_AbandonAction_{
		AbandonAction: &rlqsv1.RateLimitQuotaResponse_BucketAction_AbandonAction{},
	}
	w.last.a, w.last.ttl = assignment{}, -1 // no assignment shares an abandon's action
}

// add adds an action for the bucket id, and returns it for its caller to
// set what it does.
func (w *wireResponse) add(id map[string]string) *rlqsv1.RateLimitQuotaResponse_BucketAction {
	hint := max(w.hint, 1)
	if w.msg.BucketAction == nil {
		w.msg.BucketAction = make([]*rlqsv1.RateLimitQuotaResponse_BucketAction, 0, hint)
	}
	a := &cut(&w.actions, 1, hint)[0]
	a.BucketId = w.bucketID(id, hint)
	w.msg.BucketAction = append(w.msg.BucketAction, a)
	return a
}

// len returns the number of actions added.
func (w *wireResponse) len() int { return len(w.msg.BucketAction) }

// bucketID returns id as a BucketId, its keys in byte order, cut from
// w's slabs, refilled for hint buckets like it when short. (Keeping it
// with each bucket held would save building it at each answer, for some
// 200 bytes more per bucket held: reports come every few seconds, the
// buckets held stay.)
func (w *wireResponse) bucketID(id map[string]string, hint int) *rlqsv1.BucketId {
	var kbuf [smallID]string
	keys := sortedKeys(id, kbuf[:0])
	size := idBytes(id)
	buf := cut(&w.bytes, size, hint*size)[:0]
	entries := cut(&w.entries, len(keys), hint*len(keys))
	out := &cut(&w.ids, 1, hint)[0]
	out.Bucket = cut(&w.ptrs, len(keys), hint*len(keys))
	for i, k := range keys {
		n := len(buf)
		buf = append(buf, k...)
		buf = append(buf, id[k]...)
		e := &entries[i]
		e.Key, e.Value = buf[n:n+len(k):n+len(k)], buf[n+len(k):len(buf):len(buf)]
		out.Bucket[i] = e
	}
	return out
}

// assignAction returns a's action living ttl.
func assignAction(a assignment, ttl time.Duration) *rlqsv1.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_ {
	return &rlqsv1.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
		QuotaAssignmentAction: &rlqsv1.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
			AssignmentTimeToLive: durationpb.New(ttl),
			RateLimitStrategy:    a.strategy(),
		},
	}
}

// strategy returns a as Envoy's RateLimitStrategy; nil for kindNone.
func (a assignment) strategy() *rlqsv1.RateLimitStrategy {
	switch a.kind {
	case kindAllowAll:
		return &rlqsv1.RateLimitStrategy{Strategy: &rlqsv1.RateLimitStrategy_BlanketRule_{BlanketRule: rlqsv1.RateLimitStrategy_BLANKET_RULE_ALLOW_ALL}}
	case kindDenyAll:
		return &rlqsv1.RateLimitStrategy{Strategy: &rlqsv1.RateLimitStrategy_BlanketRule_{BlanketRule: rlqsv1.RateLimitStrategy_BLANKET_RULE_DENY_ALL}}
	case kindBucket:
		return &rlqsv1.RateLimitStrategy{Strategy: &rlqsv1.RateLimitStrategy_TokenBucket{TokenBucket: &rlqsv1.TokenBucket{
			MaxTokens:     a.maxTokens,
			TokensPerFill: wrapperspb.UInt32(a.perFill),
			FillInterval:  durationpb.New(a.fill),
		}}}
	}
	return nil
}
