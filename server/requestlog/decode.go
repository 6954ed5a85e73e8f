package requestlog

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ratelimitd/ratelimitd/internal/envoyunit"
)

// line is a log line as encoding/json reads it; the request is read by
// protojson, as POST /json reads its body.
type line struct {
	Time    string          `json:"time"`
	Request json.RawMessage `json:"request"`
	Domain  *string         `json:"domain_base64"`
	Bytes   []lineBytes     `json:"bytes"`
	Limits  []lineLimit     `json:"limits"`
	Omitted *lineOmitted    `json:"omitted"`
}

// lineOmitted is the marker that stands for a record over the log's bound.
type lineOmitted struct {
	Bytes       int `json:"bytes"`
	Descriptors int `json:"descriptors"`
}

// An OmittedError is what Decode returns for the marker that stands for
// a record whose line was over the log's bound (Options.MaxRecord): the
// line tells when the request was decided, and how large it was, but not
// what it asked.
type OmittedError struct {
	// Time is when the request was decided.
	Time time.Time
	// Bytes is the length its line would have had, and Descriptors its
	// number of descriptors.
	Bytes, Descriptors int
}

func (e *OmittedError) Error() string {
	return fmt.Sprintf("request of %d descriptors omitted: its record of %d bytes was over the log's bound", e.Descriptors, e.Bytes)
}

// lineBytes is an entry of "bytes".
type lineBytes struct {
	Descriptor  int     `json:"descriptor"`
	Entry       int     `json:"entry"`
	Key         *string `json:"key"`
	Value       *string `json:"value"`
	ValueSHA256 *string `json:"value_sha256"`
}

// lineLimit is an entry of "limits".
type lineLimit struct {
	Descriptor int    `json:"descriptor"`
	Requests   uint64 `json:"requests"`
	Window     string `json:"window"`
}

// A Decoder reads lines into Records, reusing its memory from one line to
// the next.
type Decoder struct {
	line   line
	req    rlsv3.RateLimitRequest
	opts   protojson.UnmarshalOptions
	intern interner
}

// Decode reads one line (without its newline) into r, whose slices it
// reuses. The strings of r do not point into b. For the marker of a
// record over the log's bound, it returns an *OmittedError.
func (d *Decoder) Decode(b []byte, r *Record) error {
	if decodeFast(b, r, &d.intern) {
		return nil
	}
	return d.decodeGeneral(b, r)
}

// decodeGeneral is Decode for any line: the envelope read by
// encoding/json, the request by protojson.
func (d *Decoder) decodeGeneral(b []byte, r *Record) error {
	d.line = line{Bytes: d.line.Bytes[:0], Limits: d.line.Limits[:0]}
	if err := json.Unmarshal(b, &d.line); err != nil {
		return err
	}
	if d.line.Time == "" {
		return errors.New(`no "time"`)
	}
	t, err := time.Parse(time.RFC3339Nano, d.line.Time)
	if err != nil {
		return fmt.Errorf("time: %w", err)
	}
	if o := d.line.Omitted; o != nil && len(d.line.Request) == 0 {
		return &OmittedError{Time: t, Bytes: o.Bytes, Descriptors: o.Descriptors}
	}
	if len(d.line.Request) == 0 {
		return errors.New(`no "request"`)
	}
	d.req.Reset()
	if err := d.opts.Unmarshal(d.line.Request, &d.req); err != nil {
		return fmt.Errorf("request: %w", err)
	}
	if err := fromEnvoy(r, &d.req); err != nil {
		return fmt.Errorf("request: %w", err)
	}
	r.Time = t
	if d.line.Domain != nil {
		if r.Domain, err = decodeBase64("domain_base64", *d.line.Domain); err != nil {
			return err
		}
	}
	if err := applyBytes(r, d.line.Bytes); err != nil {
		return fmt.Errorf("bytes: %w", err)
	}
	if err := applyLimits(r, d.line.Limits); err != nil {
		return fmt.Errorf("limits: %w", err)
	}
	return nil
}

// fromEnvoy fills r from an Envoy request, resolving each descriptor's
// hits and limit override as the server does.
func fromEnvoy(r *Record, req *rlsv3.RateLimitRequest) error {
	hits := uint64(req.GetHitsAddend())
	if hits == 0 {
		hits = 1
	}
	r.Domain = req.GetDomain()
	n := 0
	for _, rd := range req.GetDescriptors() {
		n += len(rd.GetEntries())
	}
	entries := make([]Entry, 0, n) // the descriptors' entries, back to back
	r.Descriptors = r.Descriptors[:0]
	for i, rd := range req.GetDescriptors() {
		from := len(entries)
		for _, e := range rd.GetEntries() {
			entries = append(entries, Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		d := Descriptor{Entries: entries[from:len(entries):len(entries)], Hits: hits, GiveBack: rd.GetIsNegativeHits()}
		if h := rd.GetHitsAddend(); h != nil {
			d.Hits = h.GetValue()
		}
		if lo := rd.GetLimit(); lo != nil {
			w, ok := envoyunit.OverrideWindow(int32(lo.GetUnit()))
			if !ok {
				return fmt.Errorf("descriptor %d: limit override has unit %v", i, lo.GetUnit())
			}
			if m := lo.GetUnitMultiplier(); m != nil {
				if m.GetValue() == 0 {
					return fmt.Errorf("descriptor %d: limit override unit_multiplier is 0", i)
				}
				w *= time.Duration(m.GetValue())
			}
			d.HasLimit, d.Limit = true, Limit{Requests: uint64(lo.GetRequestsPerUnit()), Window: w}
		}
		r.Descriptors = append(r.Descriptors, d)
	}
	return nil
}

// applyBytes replaces the keys and values that "bytes" gives.
func applyBytes(r *Record, bs []lineBytes) error {
	for _, b := range bs {
		e, err := entryAt(r, b.Descriptor, b.Entry)
		if err != nil {
			return err
		}
		if b.Key != nil {
			if e.Key, err = decodeBase64("key", *b.Key); err != nil {
				return err
			}
		}
		switch {
		case b.ValueSHA256 != nil:
			if e.Value, err = decodeBase64("value_sha256", *b.ValueSHA256); err != nil {
				return err
			}
			e.Digest = true
		case b.Value != nil:
			if e.Value, err = decodeBase64("value", *b.Value); err != nil {
				return err
			}
		}
	}
	return nil
}

// entryAt returns descriptor i's entry j of r.
func entryAt(r *Record, i, j int) (*Entry, error) {
	if i < 0 || i >= len(r.Descriptors) || j < 0 || j >= len(r.Descriptors[i].Entries) {
		return nil, fmt.Errorf("descriptor %d entry %d: no such entry in the request", i, j)
	}
	return &r.Descriptors[i].Entries[j], nil
}

// decodeBase64 decodes the standard base64 of the field name.
func decodeBase64(name, s string) (string, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return string(b), nil
}

// applyLimits sets the limit overrides that "limits" gives.
func applyLimits(r *Record, ls []lineLimit) error {
	for _, l := range ls {
		if l.Descriptor < 0 || l.Descriptor >= len(r.Descriptors) {
			return fmt.Errorf("descriptor %d: no such descriptor in the request", l.Descriptor)
		}
		w, err := time.ParseDuration(l.Window)
		if err != nil {
			return fmt.Errorf("descriptor %d: window: %w", l.Descriptor, err)
		}
		d := &r.Descriptors[l.Descriptor]
		d.HasLimit, d.Limit = true, Limit{Requests: l.Requests, Window: w}
	}
	return nil
}
