package server

import (
	"context"
	"errors"
	"time"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/server/requestlog"
)

// logRequest hands a sample of the decoded requests to the request log,
// when there is one.
func (s *Server) logRequest(sc *scratch) {
	if l := s.opts.RequestLog; l.Sample() {
		l.Log(recordOf(&sc.req, s.now()))
	}
}

// recordOf returns r as a record of the request log at t. Its strings are
// r's, which point into the decoded message: Go strings never change, so
// the record may outlive the scratch.
func recordOf(r *request, t time.Time) *requestlog.Record {
	rec := &requestlog.Record{Time: t, Domain: r.domain, Descriptors: make([]requestlog.Descriptor, len(r.descs))}
	entries := make([]requestlog.Entry, len(r.entries))
	for i, e := range r.entries {
		entries[i] = requestlog.Entry{Key: e.key, Value: e.value, Digest: e.digest}
	}
	for i := range r.descs {
		d := &r.descs[i]
		rec.Descriptors[i] = requestlog.Descriptor{
			Entries:  entries[d.entries[0]:d.entries[1]:d.entries[1]],
			Hits:     d.hits,
			HasLimit: d.hasLimit,
			Limit:    requestlog.Limit{Requests: d.limit.requests, Window: d.limit.window},
		}
	}
	return rec
}

// A Decision is the server's decision on a request of the request log
// (see DecideRecord).
type Decision struct {
	// Over is the overall code: OVER_LIMIT when true.
	Over bool
	// Descriptors are the decisions on each descriptor, in request order.
	Descriptors []DescriptorDecision
}

// A DescriptorDecision is the decision on one descriptor.
type DescriptorDecision struct {
	// Rule is the rule the descriptor matched, nil if none.
	Rule *config.Rule
	// Over is the descriptor's code: OVER_LIMIT when true.
	Over bool
}

// DecideRecord decides the request of rec as the faces decide theirs,
// consuming what it asks, and writes the decision into d, reusing its
// memory. It returns the error the faces would map to their codes
// (invalid request, store unavailable). It is for replaying a request log
// (`ratelimitd replay`), with the decisions exactly the daemon's; it does
// not log rec.
func (s *Server) DecideRecord(ctx context.Context, rec *requestlog.Record, d *Decision) error {
	sc := s.getScratch()
	defer s.putScratch(sc)
	r := &sc.req
	r.domain = rec.Domain
	for i := range rec.Descriptors {
		rd := &rec.Descriptors[i]
		from := len(r.entries)
		for _, e := range rd.Entries {
			r.entries = append(r.entries, entry{key: e.Key, value: e.Value, digest: e.Digest})
		}
		desc := r.add(from, rd.Hits)
		if rd.HasLimit {
			desc.hasLimit = true
			desc.limit = override{requests: rd.Limit.Requests, window: rd.Limit.Window}
		}
	}
	d.Over = false
	d.Descriptors = d.Descriptors[:0]
	if err := s.decide(ctx, sc); err != nil {
		return err
	}
	d.Over = sc.dec.over
	for i, v := range sc.dec.statuses {
		d.Descriptors = append(d.Descriptors, DescriptorDecision{Rule: sc.descs[i].rule, Over: v.over})
	}
	return nil
}

// IsInvalid reports whether err, from DecideRecord, means the request is
// invalid: one the faces answer with InvalidArgument or 400.
func IsInvalid(err error) bool {
	_, ok := errors.AsType[*invalidError](err)
	return ok
}
