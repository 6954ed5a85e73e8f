package client

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	rlqsv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/wire/rlqs/v1"
)

// The Rate Limit Quota Service's messages (package
// envoy.service.rate_limit_quota.v3) are written and read here with the
// types of gen/ratelimit/wire/rlqs/v1, which ratelimitd's server uses
// too: a mirror of Envoy's rlqs.proto, ratelimit_strategy.proto and
// token_bucket.proto, field for field, whose strings are bytes. Envoy's
// own generated types would not do: bucket ids are protobuf strings,
// which protobuf-go refuses unless they are UTF-8, and a bucket id built
// from a request may hold any byte.

// rlqsMethod is the full name of the stream the Quota opens.
const rlqsMethod = "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas"

// rawCodec passes messages through as bytes: the Quota marshals and
// unmarshals them itself (appendReports, parseResponse). Its name is "proto", the content-subtype ratelimitd serves.
// It is an encoding.Codec, gRPC's first codec interface, rather than the
// CodecV2 of gRPC 1.66 and later, which gRPC still takes: so the client
// builds with gRPC 1.64, the oldest the generated stubs allow.
type rawCodec struct{}

// Marshal returns the bytes of v, a *[]byte.
func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("client: rlqs codec: cannot marshal %T", v)
	}
	return *b, nil
}

// Unmarshal copies data into v, a *[]byte: gRPC may reuse data's memory
// once Unmarshal returns.
func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("client: rlqs codec: cannot unmarshal into %T", v)
	}
	*b = append([]byte(nil), data...)
	return nil
}

// Name is the codec's content-subtype.
func (rawCodec) Name() string { return "proto" }

// usage is one BucketQuotaUsage of a report.
type usage struct {
	entries         []Entry
	elapsed         time.Duration
	allowed, denied uint64
}

// appendReports appends a RateLimitQuotaUsageReports of domain (omitted
// when empty) and usages to b.
func appendReports(b []byte, domain string, usages []usage) ([]byte, error) {
	m := &rlqsv1.RateLimitQuotaUsageReports{
		Domain:            []byte(domain),
		BucketQuotaUsages: make([]*rlqsv1.RateLimitQuotaUsageReports_BucketQuotaUsage, len(usages)),
	}
	for i, x := range usages {
		m.BucketQuotaUsages[i] = &rlqsv1.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           bucketID(x.entries),
			TimeElapsed:        durationpb.New(max(x.elapsed, 0)),
			NumRequestsAllowed: x.allowed,
			NumRequestsDenied:  x.denied,
		}
	}
	b, err := proto.MarshalOptions{}.MarshalAppend(b, m)
	if err != nil {
		return nil, fmt.Errorf("client: rlqs: marshal %d usage reports: %w", len(usages), err)
	}
	return b, nil
}

// bucketID returns a BucketId of entries (its map, one entry message per
// pair).
func bucketID(entries []Entry) *rlqsv1.BucketId {
	id := &rlqsv1.BucketId{Bucket: make([]*rlqsv1.BucketId_Entry, len(entries))}
	for i, e := range entries {
		id.Bucket[i] = &rlqsv1.BucketId_Entry{Key: []byte(e.Key), Value: []byte(e.Value)}
	}
	return id
}

// Kinds of assignment.
const (
	allowAll = iota
	denyAll
	tokenBucket
)

// action is one BucketAction of a RateLimitQuotaResponse.
type action struct {
	entries []Entry
	abandon bool
	// Of a quota assignment: the strategy (kind and, for a token bucket,
	// its parameters) and its time to live (0: none).
	kind                   int
	maxTokens, perFill     uint64
	fillInterval, lifetime time.Duration
	// unknown is set for a strategy the Quota does not know: the failure
	// policy applies, as with no assignment.
	unknown bool
}

// parseResponse reads the actions of a RateLimitQuotaResponse.
func parseResponse(b []byte) ([]action, error) {
	var m rlqsv1.RateLimitQuotaResponse
	if err := proto.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("client: rlqs: RateLimitQuotaResponse: %w", err)
	}
	as := make([]action, len(m.GetBucketAction()))
	for i, ba := range m.GetBucketAction() {
		a := action{unknown: true}
		for _, e := range ba.GetBucketId().GetBucket() {
			a.entries = append(a.entries, Entry{Key: string(e.GetKey()), Value: string(e.GetValue())})
		}
		switch x := ba.GetBucketAction().(type) {
		case *rlqsv1.RateLimitQuotaResponse_BucketAction_AbandonAction_:
			a.abandon = true
		case *rlqsv1.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_:
			a.lifetime = durationOf(x.QuotaAssignmentAction.GetAssignmentTimeToLive())
			if s := x.QuotaAssignmentAction.GetRateLimitStrategy(); s != nil {
				readStrategy(s, &a)
			}
		}
		as[i] = a
	}
	return as, nil
}

// Seconds per RateLimitUnit, from SECOND (1) to YEAR (6).
var unitSeconds = [...]int64{0, 1, 60, 3600, 86400, 30 * 86400, 365 * 86400}

// readStrategy reads a RateLimitStrategy into a. A strategy it cannot
// apply leaves a.unknown set.
func readStrategy(s *rlqsv1.RateLimitStrategy, a *action) {
	switch x := s.GetStrategy().(type) {
	case *rlqsv1.RateLimitStrategy_BlanketRule_:
		n := uint64(int64(x.BlanketRule)) // a negative one is unknown, as past DENY_ALL
		a.unknown = n > denyAll
		a.kind = int(min(n, denyAll))
	case *rlqsv1.RateLimitStrategy_RequestsPerTimeUnit_:
		rate, unit := x.RequestsPerTimeUnit.GetRequestsPerTimeUnit(), uint64(int64(x.RequestsPerTimeUnit.GetTimeUnit()))
		a.unknown = unit == 0 || unit >= uint64(len(unitSeconds))
		if !a.unknown {
			a.kind, a.maxTokens, a.perFill = tokenBucket, rate, rate
			a.fillInterval = time.Duration(unitSeconds[unit]) * time.Second
		}
	case *rlqsv1.RateLimitStrategy_TokenBucket:
		readTokenBucket(x.TokenBucket, a)
	}
}

// readTokenBucket reads a TokenBucket into a: tokens_per_fill defaults
// to 1; a fill_interval of 0 cannot be applied.
func readTokenBucket(tb *rlqsv1.TokenBucket, a *action) {
	a.kind, a.perFill = tokenBucket, 1
	a.maxTokens = uint64(tb.GetMaxTokens())
	if p := tb.GetTokensPerFill(); p != nil {
		a.perFill = uint64(p.GetValue())
	}
	a.fillInterval = durationOf(tb.GetFillInterval())
	a.unknown = a.fillInterval <= 0
}

// maxDuration caps the durations read: longer ones read as it.
const maxDuration = 100 * 365 * 24 * time.Hour

// durationOf reads a google.protobuf.Duration; a negative one (or none)
// reads as 0, one over maxDuration as maxDuration.
func durationOf(d *durationpb.Duration) time.Duration {
	secs, nanos := d.GetSeconds(), int64(d.GetNanos())
	switch {
	case secs < 0 || nanos < 0:
		return 0
	case secs >= int64(maxDuration/time.Second):
		return maxDuration
	}
	return time.Duration(secs)*time.Second + time.Duration(nanos)
}
