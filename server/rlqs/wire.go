package rlqs

import (
	"errors"
	"fmt"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Envoy builds bucket ids from request headers, which may carry bytes
// that are not UTF-8. Protobuf strings must be UTF-8, and grpc-go's codec
// would refuse such a report and end the stream; so the service reads its
// reports, and writes the bucket ids of its answers, from and to the wire
// itself, keys and values as bytes, as the RateLimitService does. The
// message types below implement the legacy Marshal and Unmarshal methods
// that protobuf's codec calls, and so pass through any gRPC codec.

// wireReports is an envoy.service.rate_limit_quota.v3
// RateLimitQuotaUsageReports as read from the wire.
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

// Reset, String and ProtoMessage make wireReports a protobuf message for
// gRPC's codec, which then calls Unmarshal.
func (w *wireReports) Reset() { *w = wireReports{} }
func (w *wireReports) String() string {
	return fmt.Sprintf("RateLimitQuotaUsageReports{domain: %q, %d usages}", w.domain, len(w.usages))
}
func (w *wireReports) ProtoMessage() {}

// errWire is what a malformed message gets.
var errWire = errors.New("malformed protobuf")

// Unmarshal reads a RateLimitQuotaUsageReports from b.
func (w *wireReports) Unmarshal(b []byte) error {
	return eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			w.domain = string(v)
		case num == 2 && typ == protowire.BytesType:
			var u wireUsage
			if err := u.unmarshal(v); err != nil {
				return fmt.Errorf("bucket_quota_usages[%d]: %w", len(w.usages), err)
			}
			w.usages = append(w.usages, u)
		}
		return nil
	})
}

// unmarshal reads a BucketQuotaUsage from b.
func (u *wireUsage) unmarshal(b []byte) error {
	return eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			if u.id == nil {
				u.id = make(map[string]string)
			}
			return unmarshalBucketID(v, u.id)
		case num == 2 && typ == protowire.BytesType:
			d, err := unmarshalDuration(v)
			if err != nil {
				return fmt.Errorf("time_elapsed: %w", err)
			}
			u.elapsed = d
		case num == 3 && typ == protowire.VarintType:
			u.allowed = n
		case num == 4 && typ == protowire.VarintType:
			u.denied = n
		}
		return nil
	})
}

// unmarshalBucketID adds the entries of a BucketId read from b to id.
func unmarshalBucketID(b []byte, id map[string]string) error {
	return eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num != 1 || typ != protowire.BytesType {
			return nil
		}
		var key, value string
		err := eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
			switch {
			case num == 1 && typ == protowire.BytesType:
				key = string(v)
			case num == 2 && typ == protowire.BytesType:
				value = string(v)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("bucket_id: %w", err)
		}
		id[key] = value
		return nil
	})
}

// unmarshalDuration reads a google.protobuf.Duration from b; a negative one
// reads as 0, one over MaxTTL as MaxTTL (a reporting interval that long
// gives the longest assignment already).
func unmarshalDuration(b []byte) (time.Duration, error) {
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
	if err != nil || secs < 0 || nanos < 0 {
		return 0, err
	}
	if secs >= int64(MaxTTL/time.Second) {
		return MaxTTL, nil
	}
	return time.Duration(secs)*time.Second + time.Duration(nanos), nil
}

// eachField calls f with each field of the message b: for a bytes field
// its contents, for a varint its value; other types only skipped.
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

// wireResponse is a RateLimitQuotaResponse whose bucket ids are written
// as bytes: each action's BucketId is nil, and ids holds it.
type wireResponse struct {
	actions []*rlqsv3.RateLimitQuotaResponse_BucketAction
	ids     []map[string]string
	// last is the assignment and lifetime of the last action assign
	// added (see assign).
	last struct {
		a   assignment
		ttl time.Duration
	}
}

// assign adds the assignment a, living ttl, for bucket id. A bucket given
// the same assignment as the one added before it shares its action
// message, which Marshal writes for each: a report of many buckets
// answered alike (those no rule matches come one after another) costs one
// message, not one each.
func (w *wireResponse) assign(id map[string]string, a assignment, ttl time.Duration) {
	if n := len(w.actions); n > 0 && w.last.a == a && w.last.ttl == ttl {
		w.add(id, w.actions[n-1])
		return
	}
	w.last.a, w.last.ttl = a, ttl
	w.add(id, assignAction(a, ttl))
}

// Reset, String and ProtoMessage make wireResponse a protobuf message for
// gRPC's codec, which then calls Marshal.
func (w *wireResponse) Reset() { *w = wireResponse{} }
func (w *wireResponse) String() string {
	return fmt.Sprintf("RateLimitQuotaResponse{%d actions}", len(w.actions))
}
func (w *wireResponse) ProtoMessage() {}

// add adds the action for bucket id.
func (w *wireResponse) add(id map[string]string, a *rlqsv3.RateLimitQuotaResponse_BucketAction) {
	w.actions = append(w.actions, a)
	w.ids = append(w.ids, id)
}

// Marshal writes the RateLimitQuotaResponse: each BucketAction is its
// bucket_id, written here, followed by the rest, which protobuf writes
// (fields may come in any order).
func (w *wireResponse) Marshal() ([]byte, error) {
	var b, action []byte
	for i, a := range w.actions {
		action = appendBucketID(action[:0], w.ids[i])
		var err error
		if action, err = (proto.MarshalOptions{}).MarshalAppend(action, a); err != nil {
			return nil, fmt.Errorf("rlqs: marshal bucket_action[%d]: %w", i, err)
		}
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, action)
	}
	return b, nil
}

// appendBucketID appends field 1, a BucketId holding id, to b.
func appendBucketID(b []byte, id map[string]string) []byte {
	var body []byte
	var kbuf [smallID]string
	for _, k := range sortedKeys(id, kbuf[:0]) {
		v := id[k]
		body = protowire.AppendTag(body, 1, protowire.BytesType)
		body = protowire.AppendVarint(body, uint64(protowire.SizeTag(1)*2+protowire.SizeBytes(len(k))+protowire.SizeBytes(len(v))))
		body = protowire.AppendTag(body, 1, protowire.BytesType)
		body = protowire.AppendString(body, k)
		body = protowire.AppendTag(body, 2, protowire.BytesType)
		body = protowire.AppendString(body, v)
	}
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	return protowire.AppendBytes(b, body)
}
