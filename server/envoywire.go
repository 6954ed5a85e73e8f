package server

import (
	"context"
	"unsafe"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/internal/envoyunit"
	"github.com/ratelimitd/ratelimitd/server/internal/engine"
)

// Envoy copies request headers into descriptor values, and a header may
// carry bytes that are not UTF-8. Protobuf strings must be UTF-8, and
// grpc-go's codec refuses such a message before any handler runs
// (Internal), which Envoy by default takes as "allow": one byte 0xff in a
// header would switch the limit off. So ratelimitd decodes Envoy's
// RateLimitRequest itself, from the wire, taking every key and value as
// bytes: the request is decided, and counted under its own value.

// envoyWire is an Envoy RateLimitRequest as received: its bytes, which
// decodeEnvoy reads. The server's codec (see codec) fills it instead of
// unmarshalling an rlsv3.RateLimitRequest.
type envoyWire struct{ b string }

// codec is the gRPC server's codec: grpc-go's proto codec, but for
// envoyWire, which it fills with the message's bytes, copied once.
type codec struct{ encoding.CodecV2 }

// newCodec returns the server's codec.
func newCodec() codec { return codec{encoding.GetCodecV2(protocodec.Name)} }

// Unmarshal implements encoding.CodecV2.
func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	w, ok := v.(*envoyWire)
	if !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	b := data.Materialize()
	w.b = unsafe.String(unsafe.SliceData(b), len(b)) // b is never written again
	return nil
}

// envoyWireServer is what envoyServiceDesc serves: *Server.
type envoyWireServer interface {
	decideWire(ctx context.Context, w *envoyWire) (*rlsv3.RateLimitResponse, error)
}

// envoyServiceDesc is envoy.service.ratelimit.v3.RateLimitService as
// rlsv3 describes it (the same names, so reflection and Envoy see no
// difference), with a handler that takes the request as envoyWire.
var envoyServiceDesc = grpc.ServiceDesc{
	ServiceName: rlsv3.RateLimitService_ServiceDesc.ServiceName,
	HandlerType: (*envoyWireServer)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "ShouldRateLimit",
		Handler:    envoyWireHandler,
	}},
	Metadata: rlsv3.RateLimitService_ServiceDesc.Metadata,
}

func envoyWireHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(envoyWire)
	if err := dec(in); err != nil {
		return nil, err
	}
	s := srv.(envoyWireServer)
	if interceptor == nil {
		return s.decideWire(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: rlsv3.RateLimitService_ShouldRateLimit_FullMethodName}
	return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
		return s.decideWire(ctx, req.(*envoyWire))
	})
}

// decideWire decides an Envoy request received over gRPC.
func (s *Server) decideWire(ctx context.Context, w *envoyWire) (resp *rlsv3.RateLimitResponse, err error) {
	resp, err = s.decideEnvoy(ctx, apiEnvoy, func(sc *scratch) error { return decodeEnvoy(sc, w.b) })
	return resp, grpcError(err)
}

// Field numbers of Envoy's messages.
const (
	reqDomain      = 1 // RateLimitRequest.domain, string
	reqDescriptors = 2 // RateLimitRequest.descriptors, repeated RateLimitDescriptor
	reqHitsAddend  = 3 // RateLimitRequest.hits_addend, uint32

	descEntries    = 1 // RateLimitDescriptor.entries, repeated Entry
	descLimit      = 2 // RateLimitDescriptor.limit, RateLimitOverride
	descHitsAddend = 3 // RateLimitDescriptor.hits_addend, google.protobuf.UInt64Value
	descNegative   = 4 // RateLimitDescriptor.is_negative_hits, bool

	entryKey   = 1 // Entry.key, string
	entryValue = 2 // Entry.value, string

	overrideRequests   = 1 // RateLimitOverride.requests_per_unit, uint32
	overrideUnit       = 2 // RateLimitOverride.unit, envoy.type.v3.RateLimitUnit
	overrideMultiplier = 3 // RateLimitOverride.unit_multiplier, google.protobuf.UInt32Value

	wrapperValue = 1 // UInt64Value.value and UInt32Value.value
)

// An envoyDesc is what Envoy's wire says of one descriptor, before the
// request's hits_addend (which may come after it) is known.
type envoyDesc struct {
	entries  [2]int
	hits     uint64
	hasHits  bool // hits_addend is present: hits replaces the request's
	negative bool
	hasLimit bool
	rpu      uint32
	unit     int32
	mult     uint32
	hasMult  bool
}

// decodeEnvoy decodes the wire form of an Envoy RateLimitRequest into
// sc.Req, reading it as protobuf-go would (the last value of a scalar
// wins, messages merge, fields of an unexpected wire type and unknown
// fields are skipped), except that strings may hold any bytes. Keys and
// values point into b.
func decodeEnvoy(sc *scratch, b string) error {
	r := &sc.Req
	var hits uint64
	extra := 0 // descriptors past engine.MaxDescriptors
	err := fields(b, func(num protowire.Number, typ protowire.Type, v uint64, m string) error {
		switch {
		case num == reqDomain && typ == protowire.BytesType:
			r.Domain = m
		case num == reqHitsAddend && typ == protowire.VarintType:
			hits = uint64(uint32(v))
		case num == reqDescriptors && typ == protowire.BytesType:
			if len(sc.envoy) == engine.MaxDescriptors { // refused below: count, but keep no more
				extra++
				return nil
			}
			return decodeEnvoyDesc(sc, m)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if extra > 0 {
		return engine.CheckRequest(r.Domain, engine.MaxDescriptors+extra)
	}
	return envoyRequest(sc, hits)
}

func decodeEnvoyDesc(sc *scratch, b string) error {
	r := &sc.Req
	d := envoyDesc{entries: [2]int{len(r.Entries), len(r.Entries)}}
	extra := 0 // entries past engine.MaxEntries
	err := fields(b, func(num protowire.Number, typ protowire.Type, v uint64, m string) error {
		if typ == protowire.VarintType {
			if num == descNegative {
				d.negative = v != 0
			}
			return nil
		}
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case descEntries:
			if d.entries[1]-d.entries[0] == engine.MaxEntries { // refused below: count, but keep no more
				extra++
				return nil
			}
			var e engine.Entry
			err := fields(m, func(num protowire.Number, typ protowire.Type, _ uint64, m string) error {
				switch {
				case num == entryKey && typ == protowire.BytesType:
					e.Key = m
				case num == entryValue && typ == protowire.BytesType:
					e.Value = m
				}
				return nil
			})
			r.Entries = append(r.Entries, e)
			d.entries[1] = len(r.Entries)
			return err
		case descLimit:
			d.hasLimit = true
			return fields(m, func(num protowire.Number, typ protowire.Type, v uint64, m string) error {
				switch {
				case num == overrideRequests && typ == protowire.VarintType:
					d.rpu = uint32(v)
				case num == overrideUnit && typ == protowire.VarintType:
					d.unit = int32(v)
				case num == overrideMultiplier && typ == protowire.BytesType:
					d.hasMult = true
					return wrapper(m, func(v uint64) { d.mult = uint32(v) })
				}
				return nil
			})
		case descHitsAddend:
			d.hasHits = true
			return wrapper(m, func(v uint64) { d.hits = v })
		}
		return nil
	})
	if err != nil {
		return err
	}
	if extra > 0 {
		return engine.CheckEntryCount(len(sc.envoy), engine.MaxEntries+extra)
	}
	sc.envoy = append(sc.envoy, d)
	return nil
}

// wrapper decodes a google.protobuf.UInt64Value or UInt32Value, calling
// set with each value it holds.
func wrapper(b string, set func(uint64)) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v uint64, _ string) error {
		if num == wrapperValue && typ == protowire.VarintType {
			set(v)
		}
		return nil
	})
}

// fields calls f with each field of the message b: its number and wire
// type, and its value (a varint in v, bytes in m). Envoy's messages have
// no fixed-size fields: those, like groups, are skipped, whole. It
// returns an *invalidError for a malformed message, or f's first error.
func fields(b string, f func(num protowire.Number, typ protowire.Type, v uint64, m string) error) error {
	p := unsafe.Slice(unsafe.StringData(b), len(b)) // read only
	for off := 0; off < len(p); {
		num, typ, n := protowire.ConsumeTag(p[off:])
		if n < 0 {
			return malformed(n)
		}
		if !num.IsValid() { // ConsumeTag takes numbers up to 2^31-1
			return engine.Invalid("malformed RateLimitRequest: invalid field number %d", num)
		}
		off += n
		var v uint64
		var m string
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(p[off:])
		case protowire.BytesType:
			var bs []byte
			bs, n = protowire.ConsumeBytes(p[off:])
			if n >= 0 {
				start := off + n - len(bs)
				m = b[start : start+len(bs)]
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, p[off:])
		}
		if n < 0 {
			return malformed(n)
		}
		off += n
		if err := f(num, typ, v, m); err != nil {
			return err
		}
	}
	return nil
}

func malformed(n int) error {
	return engine.Invalid("malformed RateLimitRequest: %v", protowire.ParseError(n))
}

// envoyRequest checks what sc.envoy holds of an Envoy request's
// descriptors and turns them into sc.Req's, hits being the request's
// hits_addend. Shared by gRPC and /json.
func envoyRequest(sc *scratch, hits uint64) error {
	if hits == 0 {
		hits = 1
	}
	r := &sc.Req
	for i := range sc.envoy {
		ed := &sc.envoy[i]
		h := hits
		if ed.hasHits {
			h = ed.hits // 0 checks without consuming
		}
		op := backend.Take
		if ed.negative {
			op = backend.GiveBack // the descriptor's hits_addend, else the request's, given back
		}
		r.Descs = append(r.Descs, engine.Descriptor{Entries: ed.entries, Hits: h, Op: op})
		if !ed.hasLimit {
			continue
		}
		w, ok := envoyunit.OverrideWindow(ed.unit)
		if !ok {
			return engine.Invalid("descriptor %d: limit override has unit %v", i, envoyUnitName(ed.unit))
		}
		if ed.hasMult {
			if ed.mult == 0 {
				return engine.Invalid("descriptor %d: limit override unit_multiplier is 0", i)
			}
			if w, ok = multiply(w, ed.mult); !ok {
				return engine.Invalid("descriptor %d: limit override window of %d × %v is over the maximum of 100 years", i, ed.mult, envoyUnitName(ed.unit))
			}
		}
		d := &r.Descs[len(r.Descs)-1]
		d.HasLimit = true
		d.Limit = engine.Override{Requests: uint64(ed.rpu), Window: w}
	}
	return nil
}

// envoyUnitName names Envoy's unit u as the generated enum does.
func envoyUnitName(u int32) string { return typev3.RateLimitUnit(u).String() }
