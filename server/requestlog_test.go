package server_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/server"
	"github.com/ratelimitd/ratelimitd/server/requestlog"
)

// readLog returns the records of the request log at path.
func readLog(t *testing.T, path string) []requestlog.Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []requestlog.Record
	var dec requestlog.Decoder
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		var r requestlog.Record
		if err := dec.Decode(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s:%d: %v", path, n, err)
		}
		out = append(out, r)
	}
	return out
}

// TestRequestLogEveryFace: the request log holds the requests of every
// face, at the server's clock, exactly as the engine decoded them: a
// value that is not UTF-8 over Envoy's gRPC, a raw value, a digest, a
// descriptor's own hits and a window of no whole seconds over the native
// API, hits_addend and a unit multiplier over /json.
func TestRequestLogEveryFace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "requests.log")
	l, err := requestlog.Open(path, requestlog.Options{Sample: 1})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, parseRules(t, bytesRules), server.Options{RequestLog: l})

	h.at(time.Second)
	if _, err := h.sendWire(t.Context(), envoyWire("b", wireDesc("api_key", "k\xff", "path", "/items/\xfe"))); err != nil {
		t.Fatal(err)
	}
	h.at(2 * time.Second)
	sum := sha256.Sum256([]byte("a long value"))
	zero := uint64(0)
	h.shouldNative(t, &ratelimitv1.ShouldRateLimitRequest{Domain: "b", Hits: 2, Descriptors: []*ratelimitv1.Descriptor{
		{Entries: []*ratelimitv1.Entry{{Key: "api_key", RawValue: []byte("r\xc3")}}},
		{Entries: []*ratelimitv1.Entry{{Key: "api_key", ValueSha256: sum[:]}}, Hits: &zero},
		{Entries: []*ratelimitv1.Entry{{Key: "user", Value: "u"}}, Limit: &ratelimitv1.LimitOverride{Requests: 5, Window: durationpb.New(1500 * time.Millisecond)}},
	}})
	h.at(3 * time.Second)
	ts := httpServer(t, h)
	body := `{"domain":"b","hitsAddend":3,"descriptors":[{"entries":[{"key":"user","value":"é"}],"limit":{"requestsPerUnit":4,"unit":"MINUTE","unitMultiplier":2}}]}`
	if code, resp, _ := do(t, ts, "POST", "/json", body); code != 200 {
		t.Fatalf("POST /json: %d %s", code, resp)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	e := func(k, v string) requestlog.Entry { return requestlog.Entry{Key: k, Value: v} }
	want := []requestlog.Record{
		{Time: t0.Add(time.Second), Domain: "b", Descriptors: []requestlog.Descriptor{
			{Entries: []requestlog.Entry{e("api_key", "k\xff"), e("path", "/items/\xfe")}, Hits: 1},
		}},
		{Time: t0.Add(2 * time.Second), Domain: "b", Descriptors: []requestlog.Descriptor{
			{Entries: []requestlog.Entry{e("api_key", "r\xc3")}, Hits: 2},
			{Entries: []requestlog.Entry{{Key: "api_key", Value: string(sum[:]), Digest: true}}, Hits: 0},
			{Entries: []requestlog.Entry{e("user", "u")}, Hits: 2, HasLimit: true, Limit: requestlog.Limit{Requests: 5, Window: 1500 * time.Millisecond}},
		}},
		{Time: t0.Add(3 * time.Second), Domain: "b", Descriptors: []requestlog.Descriptor{
			{Entries: []requestlog.Entry{e("user", "é")}, Hits: 3, HasLimit: true, Limit: requestlog.Limit{Requests: 4, Window: 2 * time.Minute}},
		}},
	}
	got := readLog(t, path)
	for i := range got {
		got[i].Time = got[i].Time.In(t0.Location())
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("request log (-want +got):\n%s", diff)
	}
}

// TestRequestLogSampleZero: a sample of 0 logs nothing, and an invalid
// request that no face could decode is not logged either.
func TestRequestLogSampleZero(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		sample float64
		want   int
	}{{0, 0}, {1, 1}} {
		path := filepath.Join(dir, "requests.log")
		os.Remove(path)
		l, err := requestlog.Open(path, requestlog.Options{Sample: tc.sample})
		if err != nil {
			t.Fatal(err)
		}
		h := newHarness(t, parseRules(t, bytesRules), server.Options{RequestLog: l})
		h.should(t, request("b", desc("user", "u")))
		if _, err := h.sendWire(t.Context(), wire{0xff}); err == nil {
			t.Fatal("a malformed request: no error")
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if got := len(readLog(t, path)); got != tc.want {
			t.Errorf("sample %v: %d lines, want %d", tc.sample, got, tc.want)
		}
	}
}

// TestLargestRequestFitsLine: the record of the largest request the
// server takes (MaxRecvMsgSize, in as many entries as it takes, every key
// and value of control bytes, which go in base64) fits in
// requestlog.MaxLine, the longest line replay reads; under the default
// bound it is a marker.
func TestLargestRequestFitsLine(t *testing.T) {
	const descs, entries = 64, 15
	per := (server.MaxRecvMsgSize-64*descs)/(descs*entries) - 9 // an entry's wire overhead
	var ds [][]byte
	for range descs {
		var kv []string
		for range entries {
			kv = append(kv, "\x02", strings.Repeat("\x01", per))
		}
		ds = append(ds, wireDesc(kv...))
	}
	w := envoyWire("b", ds...)
	if len(w) > server.MaxRecvMsgSize || len(w) < server.MaxRecvMsgSize-4096 {
		t.Fatalf("request of %d bytes, want just under %d", len(w), server.MaxRecvMsgSize)
	}
	for _, tc := range []struct {
		maxRecord int
		omitted   bool
	}{{requestlog.MaxLine, false}, {0, true}} {
		path := filepath.Join(t.TempDir(), "requests.log")
		l, err := requestlog.Open(path, requestlog.Options{Sample: 1, MaxRecord: tc.maxRecord})
		if err != nil {
			t.Fatal(err)
		}
		h := newHarness(t, parseRules(t, bytesRules), server.Options{RequestLog: l})
		if _, err := h.sendWire(t.Context(), w); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > requestlog.MaxLine || bytes.Count(data, []byte("\n")) != 1 {
			t.Fatalf("max record %d: the log holds %d bytes in %d lines, want one line of at most %d", tc.maxRecord, len(data), bytes.Count(data, []byte("\n")), requestlog.MaxLine)
		}
		t.Logf("max record %d: a request of %d bytes took a line of %d (%.2f bytes per byte)", tc.maxRecord, len(w), len(data), float64(len(data))/float64(len(w)))
		var dec requestlog.Decoder
		var got requestlog.Record
		err = dec.Decode(data[:len(data)-1], &got)
		_, omitted := errors.AsType[*requestlog.OmittedError](err)
		switch {
		case tc.omitted && !omitted:
			t.Errorf("default bound: Decode = %v, want an OmittedError", err)
		case !tc.omitted && (err != nil || len(got.Descriptors) != descs || got.Descriptors[descs-1].Entries[entries-1].Value != strings.Repeat("\x01", per)):
			t.Errorf("max record %d: Decode = %v, want the request whole", tc.maxRecord, err)
		}
	}
}
