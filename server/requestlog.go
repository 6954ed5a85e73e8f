package server

import (
	"context"
	"time"

	"github.com/ratelimitd/ratelimitd/server/internal/engine"
	"github.com/ratelimitd/ratelimitd/server/requestlog"
)

// logRequest hands a sample of the decoded requests to the request log,
// when there is one.
func (s *Server) logRequest(sc *scratch) {
	if l := s.opts.RequestLog; l.Sample() {
		l.Log(recordOf(&sc.Req, s.now()))
	}
}

// recordOf returns r as a record of the request log at t. Its strings are
// r's, which point into the decoded message: Go strings never change, so
// the record may outlive the scratch.
func recordOf(r *engine.Request, t time.Time) *requestlog.Record {
	rec := &requestlog.Record{Time: t, Domain: r.Domain, Descriptors: make([]requestlog.Descriptor, len(r.Descs))}
	entries := make([]requestlog.Entry, len(r.Entries))
	for i, e := range r.Entries {
		entries[i] = requestlog.Entry{Key: e.Key, Value: e.Value, Digest: e.Digest}
	}
	for i := range r.Descs {
		d := &r.Descs[i]
		rec.Descriptors[i] = requestlog.Descriptor{
			Entries:  entries[d.Entries[0]:d.Entries[1]:d.Entries[1]],
			Hits:     d.Hits,
			HasLimit: d.HasLimit,
			Limit:    requestlog.Limit{Requests: d.Limit.Requests, Window: d.Limit.Window},
		}
	}
	return rec
}

// DecideRecord decides rec as the server would have decided it with the
// rules in force, against the server's store and clock, without logging
// it again, and writes the decision into d (reusing its memory). It
// returns the engine's errors: IsInvalid tells a request the server
// refuses to decide. (The decision itself is the engine's: see
// engine.Engine.DecideRequest, which replay can call with a fill of its own.)
func (s *Server) DecideRecord(ctx context.Context, rec *requestlog.Record, d *Decision) error {
	return s.eng.DecideRequest(ctx, func(r *engine.Request) error { fillRequest(r, rec); return nil }, d)
}

// fillRequest writes rec into r, an empty engine request.
func fillRequest(r *engine.Request, rec *requestlog.Record) {
	r.Domain = rec.Domain
	for i := range rec.Descriptors {
		rd := &rec.Descriptors[i]
		from := len(r.Entries)
		for _, e := range rd.Entries {
			r.Entries = append(r.Entries, engine.Entry{Key: e.Key, Value: e.Value, Digest: e.Digest})
		}
		desc := r.Add(from, rd.Hits)
		if rd.HasLimit {
			desc.HasLimit = true
			desc.Limit = engine.Override{Requests: rd.Limit.Requests, Window: rd.Limit.Window}
		}
	}
}
