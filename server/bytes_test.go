package server_test

import (
	"context"
	"crypto/sha256"
	"strconv"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/server"
)

// wire is an Envoy RateLimitRequest already encoded, sent as it is: the
// way to send what Envoy sends for a header that is not UTF-8, which
// protobuf-go refuses to marshal.
type wire []byte

// wireCodec sends a wire as it is and everything else as protobuf.
type wireCodec struct{ encoding.CodecV2 }

func (c wireCodec) Marshal(v any) (mem.BufferSlice, error) {
	if w, ok := v.(wire); ok {
		return mem.BufferSlice{mem.SliceBuffer(w)}, nil
	}
	return c.CodecV2.Marshal(v)
}

// sendWire calls Envoy's ShouldRateLimit on h with the request w.
func (h *harness) sendWire(ctx context.Context, w wire) (*rlsv3.RateLimitResponse, error) {
	resp := new(rlsv3.RateLimitResponse)
	err := h.conn.Invoke(ctx, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, w, resp,
		grpc.ForceCodecV2(wireCodec{encoding.GetCodecV2(protocodec.Name)}))
	return resp, err
}

// envoyWire encodes an Envoy request of domain with the descriptors
// descs (see wireDesc).
func envoyWire(domain string, descs ...[]byte) wire {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, domain)
	for _, d := range descs {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, d)
	}
	return b
}

// wireDesc encodes an Envoy descriptor of the key, value pairs kv,
// whatever bytes they hold.
func wireDesc(kv ...string) []byte {
	var d []byte
	for i := 0; i+1 < len(kv); i += 2 {
		var e []byte
		e = protowire.AppendTag(e, 1, protowire.BytesType)
		e = protowire.AppendString(e, kv[i])
		e = protowire.AppendTag(e, 2, protowire.BytesType)
		e = protowire.AppendString(e, kv[i+1])
		d = protowire.AppendTag(d, 1, protowire.BytesType)
		d = protowire.AppendBytes(d, e)
	}
	return d
}

// withLimit adds to the descriptor d a limit override of rpu per unit.
func withLimit(d []byte, rpu uint64, unit typev3.RateLimitUnit) []byte {
	var o []byte
	o = protowire.AppendTag(o, 1, protowire.VarintType)
	o = protowire.AppendVarint(o, rpu)
	o = protowire.AppendTag(o, 2, protowire.VarintType)
	o = protowire.AppendVarint(o, uint64(unit))
	d = protowire.AppendTag(d, 2, protowire.BytesType)
	return protowire.AppendBytes(d, o)
}

const bytesRules = `
domain: b
descriptors:
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: path
    value: /items/*
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: user
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 1}
`

// TestEnvoyBytes: Envoy copies headers into values, and a header may hold
// bytes that are not UTF-8. Such a request is decided, not refused
// before the handler (which Envoy, failing open by default, would let
// through unlimited): limit 1 an hour, the second request is refused, and
// every distinct value has a counter of its own.
func TestEnvoyBytes(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHarness(t, parseRules(t, bytesRules), server.Options{Registry: reg})
	for _, tt := range []struct {
		name string
		kv   []string
	}{
		{"value", []string{"api_key", "k\xff"}},
		{"other value", []string{"api_key", "k\xfe"}},
		{"the digest marker of old", []string{"api_key", "\xff" + strings.Repeat("a", 32)}},
		{"wildcard", []string{"path", "/items/\xff"}},
		{"detailed metric", []string{"user", "\xc3\x28"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for i, want := range []rlsv3.RateLimitResponse_Code{ok, over} {
				resp, err := h.sendWire(t.Context(), envoyWire("b", wireDesc(tt.kv...)))
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				if got := resp.GetOverallCode(); got != want {
					t.Errorf("call %d: %v, want %v", i, got, want)
				}
				if resp.GetStatuses()[0].GetCurrentLimit() == nil {
					t.Errorf("call %d: no limit applied, want the rule's", i)
				}
			}
		})
	}
	// The metric label shows the value in hex, valid UTF-8 for Prometheus.
	scrape(t, httpServer(t, h)).Want(t, map[string]float64{
		"ratelimitd_rule_over_limit_total{domain=b,rule=user=hex:c328}": 1,
	})
}

// TestEnvoyBytesEcho: what a response echoes of a request (an unmatched
// descriptor's key path, when the request overrides its limit) is valid
// UTF-8, or the response could not be marshalled.
func TestEnvoyBytesEcho(t *testing.T) {
	h := newHarness(t, parseRules(t, bytesRules), server.Options{})
	resp, err := h.sendWire(t.Context(), envoyWire("b", withLimit(wireDesc("k\xff", "v"), 1, typev3.RateLimitUnit_MINUTE)))
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	name := resp.GetStatuses()[0].GetCurrentLimit().GetName()
	if name != "hex:6bff" {
		t.Errorf("limit name %q, want the key in hex, hex:6bff", name)
	}
}

// TestNativeBytes: the native API takes a value that is not UTF-8 in
// raw_value, and a long value's digest in value_sha256; each counts with
// the same value sent otherwise.
func TestNativeBytes(t *testing.T) {
	h := newHarness(t, parseRules(t, bytesRules), server.Options{})
	entry := func(e *ratelimitv1.Entry) *ratelimitv1.ShouldRateLimitRequest {
		return &ratelimitv1.ShouldRateLimitRequest{Domain: "b", Descriptors: []*ratelimitv1.Descriptor{{Entries: []*ratelimitv1.Entry{e}}}}
	}
	code := func(e *ratelimitv1.Entry) ratelimitv1.Code { return h.shouldNative(t, entry(e)).GetCode() }

	if got := code(&ratelimitv1.Entry{Key: "api_key", RawValue: []byte("k\xff")}); got != nok {
		t.Errorf("raw_value k\\xff, first call: %v, want OK", got)
	}
	// The same bytes over Envoy's API are the same counter.
	if resp, err := h.sendWire(t.Context(), envoyWire("b", wireDesc("api_key", "k\xff"))); err != nil || resp.GetOverallCode() != over {
		t.Errorf("Envoy k\\xff after native: %v %v, want OVER_LIMIT", resp.GetOverallCode(), err)
	}
	if got := code(&ratelimitv1.Entry{Key: "api_key", RawValue: []byte("plain")}); got != nok {
		t.Errorf("raw_value plain: %v, want OK", got)
	}
	if got := code(&ratelimitv1.Entry{Key: "api_key", Value: "plain"}); got != nover {
		t.Errorf("value plain after raw_value plain: %v, want OVER_LIMIT (one counter)", got)
	}
	long := strings.Repeat("x", 5000)
	sum := sha256.Sum256([]byte(long))
	if got := code(&ratelimitv1.Entry{Key: "api_key", ValueSha256: sum[:]}); got != nok {
		t.Errorf("value_sha256, first call: %v, want OK", got)
	}
	if got := code(&ratelimitv1.Entry{Key: "api_key", Value: long}); got != nover {
		t.Errorf("the long value after its digest: %v, want OVER_LIMIT (one counter)", got)
	}
	// A value that spells a digest is a value, not the digest.
	if got := code(&ratelimitv1.Entry{Key: "api_key", RawValue: sum[:]}); got != nok {
		t.Errorf("raw_value of the digest's bytes: %v, want OK (a counter of its own)", got)
	}

	for _, e := range []*ratelimitv1.Entry{
		{Key: "api_key", Value: "a", RawValue: []byte("a")},
		{Key: "api_key", RawValue: []byte("a"), ValueSha256: sum[:]},
		{Key: "api_key", ValueSha256: sum[:5]},
	} {
		_, err := h.native.ShouldRateLimit(t.Context(), entry(e))
		wantCode(t, "native ShouldRateLimit("+brief(e)+")", err, codes.InvalidArgument)
	}
}

// FuzzEnvoyWire sends arbitrary bytes as an Envoy request through the
// real gRPC server: every input gets a decision or InvalidArgument, never
// Internal, never a panic (the recovery interceptor would turn one into
// Internal).
func FuzzEnvoyWire(f *testing.F) {
	seeds := []wire{
		envoyWire("b", wireDesc("api_key", "k\xff")),
		envoyWire("b", wireDesc("path", "/items/1"), withLimit(wireDesc("user", "u"), 3, typev3.RateLimitUnit_HOUR)),
		envoyWire("", wireDesc("k", "v")),
		envoyWire("b"),
	}
	for _, r := range []*rlsv3.RateLimitRequest{
		request("b", hits(0, desc("api_key", "a")), override(5, typev3.RateLimitUnit_MINUTE, 3, desc("user", "u"))),
		{Domain: "b", HitsAddend: 7, Descriptors: request("b", desc("user", "x", "path", "y")).Descriptors},
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, b)
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	h := newHarness(f, parseRules(f, bytesRules), server.Options{})
	f.Fuzz(func(t *testing.T, b []byte) {
		resp, err := h.sendWire(t.Context(), b)
		switch status.Code(err) {
		case codes.OK:
			if resp.GetOverallCode() == rlsv3.RateLimitResponse_UNKNOWN {
				t.Errorf("answer without a code: %v", resp)
			}
		case codes.InvalidArgument:
		default:
			t.Errorf("ShouldRateLimit(%x): %v, want a decision or InvalidArgument", b, err)
		}
	})
}

// TestNativeDigestMatching: a value sent as its digest matches only the
// rules that match any value (the server never saw the value), and under
// share_threshold it shares the rule's counter like the value would.
func TestNativeDigestMatching(t *testing.T) {
	h := newHarness(t, parseRules(t, `
domain: d
descriptors:
  - key: path
    value: a*
    rate_limit: {name: a_prefix, unit: hour, requests_per_unit: 100}
  - key: path
    rate_limit: {name: any_path, unit: hour, requests_per_unit: 100}
  - key: shared
    value: "*"
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 1}
`), server.Options{})
	// A digest whose first byte is 'a' must not match "a*".
	var sum [32]byte
	for i := 0; ; i++ {
		if sum = sha256.Sum256([]byte(strings.Repeat("v", 2000) + strconv.Itoa(i))); sum[0] == 'a' {
			break
		}
	}
	resp := h.shouldNative(t, &ratelimitv1.ShouldRateLimitRequest{Domain: "d", Descriptors: []*ratelimitv1.Descriptor{
		{Entries: []*ratelimitv1.Entry{{Key: "path", ValueSha256: sum[:]}}},
	}})
	if got := resp.GetStatuses()[0].GetLimit().GetName(); got != "any_path" {
		t.Errorf("a digest beginning with 'a' applied limit %q, want the key-only rule's any_path", got)
	}
	long := strings.Repeat("x", 5000)
	sum = sha256.Sum256([]byte(long))
	for i, e := range []*ratelimitv1.Entry{
		{Key: "shared", Value: "x"},
		{Key: "shared", Value: long},
		{Key: "shared", ValueSha256: sum[:]},
	} {
		want := nover
		if i == 0 {
			want = nok
		}
		req := &ratelimitv1.ShouldRateLimitRequest{Domain: "d", Descriptors: []*ratelimitv1.Descriptor{{Entries: []*ratelimitv1.Entry{e}}}}
		if got := h.shouldNative(t, req).GetCode(); got != want {
			t.Errorf("share_threshold call %d (%s): %v, want %v: one counter for every value", i, brief(e), got, want)
		}
	}
}
