package requestlog

import (
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
)

// sizeCase is a request as Envoy sends it, to compare its size with its
// line's.
type sizeCase struct {
	name                 string
	descriptors, entries int    // entries per descriptor
	key                  string // every entry's
	value                func(d, e int) string
}

// sizeCases are requests from ordinary ones to the hostile ones whose
// records grew the log six times faster than the requests came: 64
// descriptors of 15 entries, each 1 KiB of control bytes (the most a
// request may carry, 1 MiB).
var sizeCases = []sizeCase{
	{"ordinary: 1 descriptor, an address", 1, 1, "remote_address", func(d, e int) string { return "10.0.0.1" }},
	{"ordinary: 3 descriptors, 2 entries each", 3, 2, "header_match", func(d, e int) string { return "/v1/search?q=shoes" }},
	{"1 KiB text values (64 x 15)", 64, 15, "k", func(d, e int) string { return strings.Repeat("a", 1024) }},
	{"hostile: 1 KiB control-byte values (64 x 15)", 64, 15, "k", func(d, e int) string { return strings.Repeat("\x01", 1024) }},
	{"hostile: 1 KiB of quotes (64 x 15)", 64, 15, "k", func(d, e int) string { return strings.Repeat(`"`, 1024) }},
	{"hostile: 1 KiB not UTF-8 (64 x 15)", 64, 15, "k", func(d, e int) string { return strings.Repeat("\xff", 1024) }},
	{"hostile: 1 KiB, 1 control byte in 16 (64 x 15)", 64, 15, "k", func(d, e int) string { return strings.Repeat("abcdefghijklmno\x01", 64) }},
}

// build returns the request of c as Envoy sends it and as a record.
func (c sizeCase) build() (*rlsv3.RateLimitRequest, *Record) {
	req := &rlsv3.RateLimitRequest{Domain: "edge"}
	rec := &Record{Time: at, Domain: "edge"}
	for d := range c.descriptors {
		rd := &rlv3.RateLimitDescriptor{}
		var es []Entry
		for e := range c.entries {
			v := c.value(d, e)
			rd.Entries = append(rd.Entries, &rlv3.RateLimitDescriptor_Entry{Key: c.key, Value: v})
			es = append(es, Entry{Key: c.key, Value: v})
		}
		req.Descriptors = append(req.Descriptors, rd)
		rec.Descriptors = append(rec.Descriptors, Descriptor{Entries: es, Hits: 1})
	}
	return req, rec
}

// TestRecordSize: a request that carries large values takes at most 1.5
// bytes of the log per byte of its own (Envoy's message), whatever its
// bytes are: control bytes, quotes and bytes that are not UTF-8 go in
// base64. (Small requests take more per byte: a line's time and its
// field names cost about a hundred bytes whatever the request.)
func TestRecordSize(t *testing.T) {
	for _, c := range sizeCases {
		t.Run(c.name, func(t *testing.T) {
			req, rec := c.build()
			size := proto.Size(req)
			if size < 1<<10 {
				t.Skipf("%d bytes: the line's fixed part outweighs the request", size)
			}
			line := AppendLine(nil, rec)
			if ratio := float64(len(line)) / float64(size); ratio > 1.5 {
				t.Errorf("a request of %d bytes takes a line of %d: %.2f bytes per byte, want at most 1.5", size, len(line), ratio)
			}
			var d Decoder
			var got Record
			if err := d.Decode(line[:len(line)-1], &got); err != nil || cmp.Diff(*rec, got) != "" {
				t.Errorf("Decode(its line) = %v, want the record back", err)
			}
		})
	}
}

// BenchmarkRecordSize reports, for each of sizeCases, the bytes of the
// log per byte of the request (Envoy's message), and the writer's time to
// encode it.
func BenchmarkRecordSize(b *testing.B) {
	for _, c := range sizeCases {
		b.Run(c.name, func(b *testing.B) {
			req, rec := c.build()
			size := proto.Size(req)
			var line []byte
			b.ReportAllocs()
			for b.Loop() {
				line = AppendLine(line[:0], rec)
			}
			b.ReportMetric(float64(size), "request-bytes")
			b.ReportMetric(float64(len(line)), "line-bytes")
			b.ReportMetric(float64(len(line))/float64(size), "line-bytes/request-byte")
		})
	}
}
