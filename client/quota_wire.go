package client

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// The Rate Limit Quota Service's messages (package
// envoy.service.rate_limit_quota.v3) are written and read here with
// protowire rather than generated types: bucket ids are protobuf strings,
// which protobuf-go refuses unless they are UTF-8, and a bucket id built
// from a request may hold any byte. Field numbers are those of Envoy's
// rlqs.proto, ratelimit_strategy.proto and token_bucket.proto.

// rlqsMethod is the full name of the stream the Quota opens.
const rlqsMethod = "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas"

// rawCodec passes messages through as bytes: the Quota writes and reads
// them itself. Its name is "proto", the content-subtype ratelimitd serves.
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
func appendReports(b []byte, domain string, usages []usage) []byte {
	if domain != "" {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, domain)
	}
	var u []byte
	for _, x := range usages {
		u = appendBucketID(u[:0], x.entries)
		u = protowire.AppendTag(u, 2, protowire.BytesType)
		u = protowire.AppendBytes(u, appendDuration(nil, x.elapsed))
		if x.allowed != 0 {
			u = protowire.AppendTag(u, 3, protowire.VarintType)
			u = protowire.AppendVarint(u, x.allowed)
		}
		if x.denied != 0 {
			u = protowire.AppendTag(u, 4, protowire.VarintType)
			u = protowire.AppendVarint(u, x.denied)
		}
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, u)
	}
	return b
}

// appendBucketID appends field 1, a BucketId of entries (its map, one
// entry message per pair), to b.
func appendBucketID(b []byte, entries []Entry) []byte {
	var body []byte
	for _, e := range entries {
		body = protowire.AppendTag(body, 1, protowire.BytesType)
		body = protowire.AppendVarint(body, uint64(2*protowire.SizeTag(1)+protowire.SizeBytes(len(e.Key))+protowire.SizeBytes(len(e.Value))))
		body = protowire.AppendTag(body, 1, protowire.BytesType)
		body = protowire.AppendString(body, e.Key)
		body = protowire.AppendTag(body, 2, protowire.BytesType)
		body = protowire.AppendString(body, e.Value)
	}
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	return protowire.AppendBytes(b, body)
}

// appendDuration appends the fields of a google.protobuf.Duration of d to b.
func appendDuration(b []byte, d time.Duration) []byte {
	d = max(d, 0)
	if s := int64(d / time.Second); s != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(s))
	}
	if n := int64(d % time.Second); n != 0 {
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(n))
	}
	return b
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

// errWire is what a malformed message gets.
var errWire = errors.New("malformed protobuf")

// parseResponse reads the actions of a RateLimitQuotaResponse.
func parseResponse(b []byte) ([]action, error) {
	var as []action
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num != 1 || typ != protowire.BytesType {
			return nil
		}
		a, err := parseAction(v)
		if err != nil {
			return fmt.Errorf("bucket_action[%d]: %w", len(as), err)
		}
		as = append(as, a)
		return nil
	})
	return as, err
}

// parseAction reads a BucketAction.
func parseAction(b []byte) (action, error) {
	a := action{unknown: true}
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1:
			return parseBucketID(v, &a.entries)
		case 2:
			return parseAssignment(v, &a)
		case 3:
			a.abandon = true
		}
		return nil
	})
	return a, err
}

// parseBucketID appends the entries of a BucketId to entries.
func parseBucketID(b []byte, entries *[]Entry) error {
	return eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num != 1 || typ != protowire.BytesType {
			return nil
		}
		var e Entry
		err := eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
			switch {
			case num == 1 && typ == protowire.BytesType:
				e.Key = string(v)
			case num == 2 && typ == protowire.BytesType:
				e.Value = string(v)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("bucket_id: %w", err)
		}
		*entries = append(*entries, e)
		return nil
	})
}

// parseAssignment reads a QuotaAssignmentAction into a.
func parseAssignment(b []byte, a *action) error {
	return eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 2:
			d, err := parseDuration(v)
			if err != nil {
				return fmt.Errorf("assignment_time_to_live: %w", err)
			}
			a.lifetime = d
		case 3:
			return parseStrategy(v, a)
		}
		return nil
	})
}

// Seconds per RateLimitUnit, from SECOND (1) to YEAR (6).
var unitSeconds = [...]int64{0, 1, 60, 3600, 86400, 30 * 86400, 365 * 86400}

// parseStrategy reads a RateLimitStrategy into a. A strategy it cannot
// apply leaves a.unknown set.
func parseStrategy(b []byte, a *action) error {
	return eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == 1 && typ == protowire.VarintType: // blanket_rule
			a.unknown = n > denyAll
			a.kind = int(min(n, denyAll))
		case num == 2 && typ == protowire.BytesType: // requests_per_time_unit
			var rate, unit uint64
			err := eachField(v, func(num protowire.Number, typ protowire.Type, _ []byte, n uint64) error {
				switch {
				case num == 1 && typ == protowire.VarintType:
					rate = n
				case num == 2 && typ == protowire.VarintType:
					unit = n
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("requests_per_time_unit: %w", err)
			}
			a.unknown = unit == 0 || unit >= uint64(len(unitSeconds))
			if !a.unknown {
				a.kind, a.maxTokens, a.perFill = tokenBucket, rate, rate
				a.fillInterval = time.Duration(unitSeconds[unit]) * time.Second
			}
		case num == 3 && typ == protowire.BytesType: // token_bucket
			return parseTokenBucket(v, a)
		}
		return nil
	})
}

// parseTokenBucket reads a TokenBucket into a: tokens_per_fill defaults
// to 1; a fill_interval of 0 cannot be applied.
func parseTokenBucket(b []byte, a *action) error {
	a.kind, a.perFill = tokenBucket, 1
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			a.maxTokens = n
		case num == 2 && typ == protowire.BytesType:
			a.perFill = 0
			return eachField(v, func(num protowire.Number, typ protowire.Type, _ []byte, n uint64) error {
				if num == 1 && typ == protowire.VarintType {
					a.perFill = n
				}
				return nil
			})
		case num == 3 && typ == protowire.BytesType:
			d, err := parseDuration(v)
			if err != nil {
				return fmt.Errorf("fill_interval: %w", err)
			}
			a.fillInterval = d
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("token_bucket: %w", err)
	}
	a.unknown = a.fillInterval <= 0
	return nil
}

// maxDuration caps the durations read: longer ones read as it.
const maxDuration = 100 * 365 * 24 * time.Hour

// parseDuration reads a google.protobuf.Duration; a negative one reads as
// 0, one over maxDuration as maxDuration.
func parseDuration(b []byte) (time.Duration, error) {
	var secs, nanos int64
	err := eachField(b, func(num protowire.Number, typ protowire.Type, _ []byte, n uint64) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			secs = int64(n)
		case num == 2 && typ == protowire.VarintType:
			nanos = int64(int32(n))
		}
		return nil
	})
	switch {
	case err != nil:
		return 0, err
	case secs < 0 || nanos < 0:
		return 0, nil
	case secs >= int64(maxDuration/time.Second):
		return maxDuration, nil
	}
	return time.Duration(secs)*time.Second + time.Duration(nanos), nil
}

// eachField calls f with each field of the message b: for a bytes field
// its contents, for a varint its value; other types are only skipped.
func eachField(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errWire
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return errWire
		}
		b = b[n:]
		if err := f(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}
