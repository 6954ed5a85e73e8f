package server

import (
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
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
			GiveBack: d.Op == backend.GiveBack,
		}
		if d.Op == backend.Renew {
			rec.Descriptors[i].Hits = 0 // a renew takes nothing: replayed as a check
		}
	}
	return rec
}
