package server

import (
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimitd/ratelimitd/server/internal/engine"
)

// FuzzDecodeEnvoy checks decodeEnvoy against protobuf-go: any message
// protobuf-go reads as a RateLimitRequest, decodeEnvoy reads the same
// (as envoyFromProto turns the decoded message), and it refuses nothing
// protobuf-go accepts.
func FuzzDecodeEnvoy(f *testing.F) {
	for _, r := range []*rlsv3.RateLimitRequest{
		{Domain: "d"},
		{Domain: "d", HitsAddend: 3},
		{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{{
			Entries:    []*rlv3.RateLimitDescriptor_Entry{{Key: "a", Value: "b"}, {Key: "c"}},
			HitsAddend: wrapperspb.UInt64(0),
			Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{
				RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_HOUR, UnitMultiplier: wrapperspb.UInt32(2),
			},
		}, {IsNegativeHits: true}}},
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var msg rlsv3.RateLimitRequest
		protoErr := proto.Unmarshal(b, &msg)
		var got, want scratch
		gotErr := decodeEnvoy(&got, string(b))
		if protoErr != nil {
			// decodeEnvoy accepts strings of any bytes, and refuses what
			// protobuf-go refuses for any other reason.
			if gotErr == nil && !strings.Contains(protoErr.Error(), "UTF-8") {
				t.Errorf("decodeEnvoy accepted what protobuf-go refuses: %v", protoErr)
			}
			return
		}
		wantErr := envoyFromProto(&want, &msg)
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("decodeEnvoy: %v; from protobuf-go's message: %v", gotErr, wantErr)
		}
		if gotErr != nil {
			if gotErr.Error() != wantErr.Error() {
				t.Errorf("decodeEnvoy: %v, want %v", gotErr, wantErr)
			}
			return
		}
		if diff := cmp.Diff(want.Req, got.Req); diff != "" {
			t.Errorf("decodeEnvoy mismatch (-protobuf-go +decodeEnvoy):\n%s", diff)
		}
	})
}

// BenchmarkDecodeEnvoy compares the two ways to read an Envoy request of
// three descriptors: protobuf-go's (which a stock gRPC server runs, and
// which refuses bytes that are not UTF-8) into the message and then into
// the engine's request, and decodeEnvoy's, straight from the wire.
func BenchmarkDecodeEnvoy(b *testing.B) {
	msg := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}}},
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "acme"}, {Key: "path", Value: "/v1/search"}}},
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "api_key", Value: "k-123"}}},
	}}
	wire, err := proto.Marshal(msg)
	if err != nil {
		b.Fatal(err)
	}
	var sc scratch
	b.Run("protobuf-go", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var m rlsv3.RateLimitRequest
			if err := proto.Unmarshal(wire, &m); err != nil {
				b.Fatal(err)
			}
			sc.reset()
			if err := envoyFromProto(&sc, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decodeEnvoy", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sc.reset()
			if err := decodeEnvoy(&sc, string(wire)); err != nil { // the copy the codec makes
				b.Fatal(err)
			}
		}
	})
}

// TestDecodeEnvoyBounded: a request of many descriptors, or of many
// entries, is refused without keeping them: decoding stops keeping them
// past the bounds, so that a 1 MiB request cannot leave tens of
// megabytes in the scratch pool.
func TestDecodeEnvoyBounded(t *testing.T) {
	for _, tt := range []struct {
		name string
		msg  []byte
		want string
	}{
		{"descriptors", func() []byte {
			b := protowire.AppendString(protowire.AppendTag(nil, reqDomain, protowire.BytesType), "d")
			for range 100_000 {
				b = protowire.AppendBytes(protowire.AppendTag(b, reqDescriptors, protowire.BytesType), nil)
			}
			return b
		}(), "100000 descriptors, over the maximum 64"},
		{"entries", func() []byte {
			var d []byte
			for range 100_000 {
				d = protowire.AppendBytes(protowire.AppendTag(d, descEntries, protowire.BytesType), nil)
			}
			b := protowire.AppendString(protowire.AppendTag(nil, reqDomain, protowire.BytesType), "d")
			return protowire.AppendBytes(protowire.AppendTag(b, reqDescriptors, protowire.BytesType), d)
		}(), "descriptor 0 has 100000 entries, over the maximum 32"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var sc scratch
			err := decodeEnvoy(&sc, string(tt.msg))
			if err == nil || err.Error() != tt.want {
				t.Errorf("decodeEnvoy = %v, want %q", err, tt.want)
			}
			if cap(sc.envoy) > engine.MaxDescriptors || cap(sc.Req.Entries) > engine.MaxDescriptors*engine.MaxEntries {
				t.Errorf("decodeEnvoy kept %d descriptors and %d entries", cap(sc.envoy), cap(sc.Req.Entries))
			}
		})
	}
}
