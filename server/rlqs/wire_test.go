package rlqs

import (
	"bytes"
	"maps"
	"strings"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	rlqsv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/wire/rlqs/v1"
)

// rawMsg is a message sent and received as its bytes.
type rawMsg struct{ b []byte }

func (*rawMsg) Reset()                     {}
func (*rawMsg) String() string             { return "raw" }
func (*rawMsg) ProtoMessage()              {}
func (r *rawMsg) Marshal() ([]byte, error) { return r.b, nil }
func (r *rawMsg) Unmarshal(b []byte) error { r.b = bytes.Clone(b); return nil }

// TestNotUTF8: a bucket id whose value is not UTF-8 is matched and
// answered, with its own bytes, as RLS would decide such a descriptor.
func TestNotUTF8(t *testing.T) {
	_, conn, _ := serve(t, rulesOf(t, oneRule))
	report, err := proto.Marshal(&rlqsv3.RateLimitQuotaUsageReports{Domain: "web", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"path": "@@"}}, NumRequestsAllowed: 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	report = bytes.ReplaceAll(report, []byte("@@"), []byte("\xff\xfe"))

	st, err := conn.NewStream(t.Context(), &grpc.StreamDesc{ServerStreams: true, ClientStreams: true},
		rlqsv3.RateLimitQuotaService_StreamRateLimitQuotas_FullMethodName)
	if err != nil {
		t.Fatalf("NewStream: %v", err)
	}
	if err := st.SendMsg(&rawMsg{b: report}); err != nil {
		t.Fatalf("SendMsg: %v", err)
	}
	var resp rawMsg
	if err := st.RecvMsg(&resp); err != nil {
		t.Fatalf("RecvMsg: %v", err)
	}
	if !bytes.Contains(resp.b, []byte("\xff\xfe")) {
		t.Fatalf("the answer does not carry the bucket id's bytes: %q", resp.b)
	}
	var got rlqsv3.RateLimitQuotaResponse
	if err := proto.Unmarshal(bytes.ReplaceAll(resp.b, []byte("\xff\xfe"), []byte("@@")), &got); err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	a := got.GetBucketAction()
	if len(a) != 1 || a[0].GetBucketId().GetBucket()["path"] != "@@" ||
		a[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket().GetTokensPerFill().GetValue() != 100 {
		t.Errorf("got %v, want the path bucket's token bucket of 100 per second", &got)
	}
}

// TestWireRoundTrip: what the service reads is what protobuf wrote.
func TestWireRoundTrip(t *testing.T) {
	b, err := proto.Marshal(&rlqsv3.RateLimitQuotaUsageReports{Domain: "d", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"a": "1", "b": ""}}, NumRequestsAllowed: 7, NumRequestsDenied: 3},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var m rlqsv1.RateLimitQuotaUsageReports
	if err := proto.Unmarshal(b, &m); err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	w := readReports(&m)
	if w.domain != "d" || len(w.usages) != 1 || w.usages[0].allowed != 7 || w.usages[0].denied != 3 ||
		len(w.usages[0].id) != 2 || w.usages[0].id["a"] != "1" {
		t.Errorf("read %+v", w)
	}
}

// FuzzWireReports: no input makes the decoder (protobuf's, then
// readReports) panic.
func FuzzWireReports(f *testing.F) {
	b, _ := proto.Marshal(&rlqsv3.RateLimitQuotaUsageReports{Domain: "d", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"a": "1"}}, NumRequestsAllowed: 7},
	}})
	f.Add(b)
	f.Fuzz(func(_ *testing.T, b []byte) {
		var m rlqsv1.RateLimitQuotaUsageReports
		if proto.Unmarshal(b, &m) == nil {
			_ = readReports(&m)
		}
	})
}

// TestLongElapsedClamped: a time_elapsed over MaxTTL reads as MaxTTL, not
// as none, and a negative one as none.
func TestLongElapsedClamped(t *testing.T) {
	for _, c := range []struct {
		in   time.Duration
		want time.Duration
	}{{time.Hour, MaxTTL}, {MaxTTL, MaxTTL}, {5 * time.Second, 5 * time.Second}, {-time.Second, 0}} {
		b, err := proto.Marshal(durationpb.New(c.in))
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		var d durationpb.Duration
		err = proto.Unmarshal(b, &d)
		if got := elapsedOf(&d); err != nil || got != c.want {
			t.Errorf("time_elapsed %v: read %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

// TestWireResponseIDs: an answer's bucket ids, cut from slabs refilled
// as they run out, each carry their own keys and values, whatever the
// slab they came from, and buckets answered alike share one action.
func TestWireResponseIDs(t *testing.T) {
	ids := []map[string]string{
		{"a": "1", "bb": "22"}, {"c": ""}, {"dddd": "4444", "e": "5", "f": "\xff"}, {"g": "7"},
	}
	var w wireResponse
	w.reserve(2) // the slabs run out at the third bucket
	for i, id := range ids {
		w.assign(id, assignment{kind: kindBucket, maxTokens: uint32(i/2 + 1), perFill: 1, fill: time.Second}, time.Minute)
	}
	b, err := proto.Marshal(&w.msg)
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.ReplaceAll(b, []byte("\xff"), []byte("@"))
	var got rlqsv3.RateLimitQuotaResponse
	if err := proto.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.GetBucketAction()) != len(ids) {
		t.Fatalf("%d actions, want %d", len(got.GetBucketAction()), len(ids))
	}
	for i, a := range got.GetBucketAction() {
		want := maps.Clone(ids[i])
		for k, v := range want {
			want[k] = strings.ReplaceAll(v, "\xff", "@")
		}
		if !maps.Equal(a.GetBucketId().GetBucket(), want) {
			t.Errorf("action %d: bucket id %v, want %v", i, a.GetBucketId().GetBucket(), want)
		}
		if m := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket().GetMaxTokens(); m != uint32(i/2+1) {
			t.Errorf("action %d: max_tokens %d, want %d", i, m, i/2+1)
		}
	}
	if w.msg.BucketAction[0].BucketAction != w.msg.BucketAction[1].BucketAction ||
		w.msg.BucketAction[1].BucketAction == w.msg.BucketAction[2].BucketAction {
		t.Error("actions alike are not shared, or actions that differ are")
	}
}
