package requestlog

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

var at = time.Date(2026, 11, 24, 5, 52, 51, 123456789, time.UTC)

// entries returns the entries of the key, value pairs kv.
func entries(kv ...string) []Entry {
	var es []Entry
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, Entry{Key: kv[i], Value: kv[i+1]})
	}
	return es
}

// records are records that every part of the line format says.
var records = map[string]Record{
	"plain": {Time: at, Domain: "edge", Descriptors: []Descriptor{
		{Entries: entries("remote_address", "10.0.0.1"), Hits: 1},
		{Entries: entries("tenant", "acme", "path", "/v1/search"), Hits: 1},
	}},
	"hits": {Time: at, Domain: "edge", Descriptors: []Descriptor{
		{Entries: entries("a", "1"), Hits: 0},
		{Entries: entries("b", "2"), Hits: 1 << 40},
	}},
	"escapes": {Time: at, Domain: `d"\`, Descriptors: []Descriptor{
		{Entries: entries("k\n\t\r", "v\x01\"\\é😀"), Hits: 1},
	}},
	"overrides": {Time: at, Domain: "edge", Descriptors: []Descriptor{
		{Entries: entries("a", "1"), Hits: 1, HasLimit: true, Limit: Limit{Requests: 10, Window: time.Minute}},
		{Entries: entries("b", "2"), Hits: 1, HasLimit: true, Limit: Limit{Requests: 7, Window: 90 * time.Second}},
		{Entries: entries("c", "3"), Hits: 1, HasLimit: true, Limit: Limit{Requests: 0, Window: 2 * 24 * time.Hour}},
	}},
	"sub-second window": {Time: at, Domain: "edge", Descriptors: []Descriptor{
		{Entries: entries("a", "1"), Hits: 1, HasLimit: true, Limit: Limit{Requests: 3, Window: 1500 * time.Millisecond}},
		{Entries: entries("b", "2"), Hits: 1, HasLimit: true, Limit: Limit{Requests: 3, Window: time.Hour}},
	}},
	"give-backs": {Time: at, Domain: "edge", Descriptors: []Descriptor{
		{Entries: entries("exports", "acme"), Hits: 1, GiveBack: true},
		{Entries: entries("exports", "globex"), Hits: 3, GiveBack: true, HasLimit: true, Limit: Limit{Requests: 10, Window: time.Minute}},
		{Entries: entries("a", "1"), Hits: 1},
	}},
	"not UTF-8": {Time: at, Domain: "e\xffdge", Descriptors: []Descriptor{
		{Entries: entries("ok", "fine", "user", "u\xff"), Hits: 1},
		{Entries: entries("k\xfe", "v"), Hits: 1},
	}},
	"long control bytes": {Time: at, Domain: "edge", Descriptors: []Descriptor{
		{Entries: entries("header", strings.Repeat("\x01\x7f", 20), "quoted", strings.Repeat(`"\`, 8)+"x"), Hits: 1},
	}},
	"digest": {Time: at, Domain: "edge", Descriptors: []Descriptor{
		{Entries: []Entry{{Key: "api_key", Value: strings.Repeat("\x9f", 32), Digest: true}}, Hits: 1},
	}},
}

// TestRoundTrip: each record's line decodes to the record, the general
// way and (for the lines it takes) the fast way.
func TestRoundTrip(t *testing.T) {
	for name, rec := range records {
		t.Run(name, func(t *testing.T) {
			line := AppendLine(nil, &rec)
			if !bytes.HasSuffix(line, []byte("}\n")) || bytes.Count(line, []byte("\n")) != 1 {
				t.Fatalf("line %q: want one line", line)
			}
			line = line[:len(line)-1]
			if !json.Valid(line) {
				t.Fatalf("line %s: not JSON", line)
			}
			var d Decoder
			var general Record
			if err := d.decodeGeneral(line, &general); err != nil {
				t.Fatalf("decodeGeneral(%s): %v", line, err)
			}
			if diff := cmp.Diff(rec, general); diff != "" {
				t.Errorf("decodeGeneral(%s) (-want +got):\n%s", line, diff)
			}
			var fast Record
			if decodeFast(line, &fast, &d.intern) {
				if diff := cmp.Diff(rec, fast); diff != "" {
					t.Errorf("decodeFast(%s) (-want +got):\n%s", line, diff)
				}
			}
			var got Record
			if err := d.Decode(line, &got); err != nil || !cmp.Equal(rec, got) {
				t.Errorf("Decode(%s) = %+v, %v; want %+v", line, got, err, rec)
			}
		})
	}
}

// TestFastPathTaken: the lines the log writes most are read without
// protojson, and the others are not.
func TestFastPathTaken(t *testing.T) {
	for name, want := range map[string]bool{"plain": true, "hits": true, "overrides": true, "escapes": false, "long control bytes": false, "not UTF-8": false, "digest": false, "sub-second window": false} {
		rec := records[name]
		line := bytes.TrimSuffix(AppendLine(nil, &rec), []byte("\n"))
		var got Record
		if decodeFast(line, &got, new(interner)) != want {
			t.Errorf("decodeFast(%s) = %v, want %v", line, !want, want)
		}
	}
}

// TestRequestIsJSONBody: the request of a line is the /json body of the
// record, whose values and hits protojson reads as Envoy's request.
func TestRequestIsJSONBody(t *testing.T) {
	rec := records["overrides"]
	rec.Descriptors = append(rec.Descriptors, Descriptor{Entries: entries("d", "4"), Hits: 0})
	var line struct{ Request json.RawMessage }
	if err := json.Unmarshal(AppendLine(nil, &rec), &line); err != nil {
		t.Fatal(err)
	}
	var got rlsv3.RateLimitRequest
	if err := protojson.Unmarshal(line.Request, &got); err != nil {
		t.Fatalf("protojson.Unmarshal(%s): %v", line.Request, err)
	}
	entry := func(k, v string) []*rlv3.RateLimitDescriptor_Entry {
		return []*rlv3.RateLimitDescriptor_Entry{{Key: k, Value: v}}
	}
	want := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: entry("a", "1"), Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 10, Unit: typev3.RateLimitUnit_MINUTE}},
		{Entries: entry("b", "2"), Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 7, Unit: typev3.RateLimitUnit_SECOND, UnitMultiplier: wrapperspb.UInt32(90)}},
		{Entries: entry("c", "3"), Limit: &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 0, Unit: typev3.RateLimitUnit_DAY, UnitMultiplier: wrapperspb.UInt32(2)}},
		{Entries: entry("d", "4"), HitsAddend: wrapperspb.UInt64(0)},
	}}
	if diff := cmp.Diff(want, &got, protocmp.Transform()); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
}

// TestDecodeErrors: a bad line is an error that says what is wrong.
func TestDecodeErrors(t *testing.T) {
	req := `"request":{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`
	for _, tc := range []struct{ line, want string }{
		{`[]`, "cannot unmarshal array"},
		{`{` + req + `}`, `no "time"`},
		{`{"time":"2026-11-24T05:52:51Z"}`, `no "request"`},
		{`{"time":"2026-11-24T05:52:51Z","request":{"domain":"d","descriptors":[{"limit":{"requestsPerUnit":1,"unit":"UNKNOWN"}}]}}`, "unit UNKNOWN"},
		{`{"time":"2026-11-24T05:52:51Z",` + req + `,"bytes":[{"descriptor":0,"entry":0,"value":"%%%"}]}`, "bytes: value: illegal base64"},
		{`{"time":"2026-11-24T05:52:51Z",` + req + `,"limits":[{"descriptor":3,"requests":1,"window":"1s"}]}`, "limits: descriptor 3: no such descriptor"},
		{`{"time":"2026-11-24T05:52:51Z",` + req + `,"limits":[{"descriptor":0,"requests":1,"window":"soon"}]}`, "limits: descriptor 0: window"},
	} {
		var d Decoder
		var r Record
		if err := d.Decode([]byte(tc.line), &r); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Decode(%s) = %v, want an error containing %q", tc.line, err, tc.want)
		}
	}
}

// TestShownForm: a string that is not plain text shows, in the request,
// the hex of its first 16 bytes, "..." after them when it has more; its
// bytes are in "bytes".
func TestShownForm(t *testing.T) {
	rec := records["long control bytes"]
	var line struct {
		Request struct {
			Descriptors []struct {
				Entries []struct{ Key, Value string }
			}
		}
		Bytes []struct {
			Descriptor, Entry int
			Value             string
		}
	}
	if err := json.Unmarshal(AppendLine(nil, &rec), &line); err != nil {
		t.Fatal(err)
	}
	got := line.Request.Descriptors[0].Entries
	if want := "hex:" + strings.Repeat("017f", 8) + "..."; got[0].Value != want {
		t.Errorf("request shows %q, want %q", got[0].Value, want)
	}
	if want := "hex:" + strings.Repeat("225c", 8) + "..."; got[1].Value != want {
		t.Errorf("request shows %q, want %q (16 quotes and backslashes escape to more than its base64)", got[1].Value, want)
	}
	if len(line.Bytes) != 2 {
		t.Errorf("bytes = %+v, want both entries", line.Bytes)
	}
}

// FuzzDecode: no line makes Decode panic, and a record it reads is
// written back as a line that reads as the same record.
func FuzzDecode(f *testing.F) {
	for _, rec := range records {
		f.Add(bytes.TrimSuffix(AppendLine(nil, &rec), []byte("\n")))
	}
	f.Add(bytes.TrimSuffix(appendOmitted(nil, &Record{Time: at}, 300000), []byte("\n")))
	f.Add([]byte(`{"time":"2026-11-24T05:52:51Z","request":{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"\u0001"}]}]}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		var d Decoder
		var r Record
		if d.Decode(line, &r) != nil {
			return
		}
		again := AppendLine(nil, &r)
		var back Record
		if err := d.Decode(again[:len(again)-1], &back); err != nil || cmp.Diff(r, back) != "" {
			t.Errorf("Decode(%q) = %+v, whose line %q decodes to %+v, %v", line, r, again, back, err)
		}
	})
}
