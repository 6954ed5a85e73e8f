package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratelimitd/ratelimitd/server/internal/engine"
	"github.com/ratelimitd/ratelimitd/server/overrides"
)

// Options are what the operators' pages read besides the engine.
type Options struct {
	// Ready reports whether the server is ready, as /readyz says it, and
	// its store's state.
	Ready func() (ready bool, store string)
	// FailureMode, ReadyWithoutStore and ShadowMode are the server's, as
	// /ui/api/status shows them.
	FailureMode       engine.FailureMode
	ReadyWithoutStore bool
	ShadowMode        bool
	// Replica names the RLQS replica on /ui/api/status; empty: not shown.
	Replica string
	// HotKeysShowValues shows request values as they are on /hotkeys
	// rather than their keyed digests; HotKeysReplica names this replica
	// there, empty meaning the host name (see engine.HotKeysOptions).
	HotKeysShowValues bool
	HotKeysReplica    string
	// RuleCounts calls f with the cumulative hits within, over and over
	// but let through by shadow mode of every rule hit since the rules
	// were loaded, as the rule metrics count them (not the series of
	// rules whose metrics carry request values, whose number has no
	// bound): the rates of /ui/api/rates are their growth.
	RuleCounts func(f func(domain, rule string, within, over, shadow uint64))
	// Explain decodes an Envoy request as /json does and explains it
	// (engine.Engine.Explain): POST /explain's answer.
	Explain func(ctx context.Context, req *rlsv3.RateLimitRequest) (*engine.Explanation, error)
	// ReadRequest reads /json's body, an Envoy RateLimitRequest in JSON,
	// answering the caller itself when it cannot (ok false); HTTPStatus
	// maps the engine's errors to HTTP statuses, as /json does.
	ReadRequest func(w http.ResponseWriter, r *http.Request) (req *rlsv3.RateLimitRequest, ok bool)
	HTTPStatus  func(err error) int
	// Overrides, when set, serves the overrides API under /v1/ (see
	// overrides.go), and the page lists the overrides; Tokens are the
	// bearer tokens it takes (nil: reads need none, writes are refused).
	Overrides *overrides.Manager
	Tokens    *Tokens
}

// An Admin serves the operators' pages of one server.
type Admin struct {
	eng   *engine.Engine
	opts  Options
	rates rates // per-rule rates for /ui/, filled by SampleRates
}

// New returns the operators' pages of the server deciding with eng.
// Functions of opts left nil have these defaults, so that no page calls
// a nil function: Ready reports ready once eng has rules, its store's
// state "unknown"; RuleCounts counts nothing (the page shows no rates);
// without Explain or ReadRequest, POST /explain answers 501; HTTPStatus
// answers 400 for an invalid request and 503 otherwise.
func New(eng *engine.Engine, opts Options) *Admin {
	if opts.Ready == nil {
		opts.Ready = func() (bool, string) { return eng.Rules() != nil, "unknown" }
	}
	if opts.RuleCounts == nil {
		opts.RuleCounts = func(func(domain, rule string, within, over, shadow uint64)) {}
	}
	if opts.HTTPStatus == nil {
		opts.HTTPStatus = func(err error) int {
			if engine.IsInvalid(err) {
				return http.StatusBadRequest
			}
			return http.StatusServiceUnavailable
		}
	}
	return &Admin{eng: eng, opts: opts}
}

// A Mux is where the pages register: package server's, which sends
// them to the admin listener when there is one.
type Mux interface {
	Handle(pattern string, h http.Handler)
}

// Routes registers the operators' pages on mux but /rlconfig, which
// servers add only as envoyproxy/ratelimit's (see RLConfig):
//
//	GET  /config    the rules in force, as YAML
//	POST /explain   how the rules in force would decide a request
//	GET  /hotkeys   the hot keys (404 when off)
//	GET  /ui/...    the page and the JSON it reads (see uiRoutes)
//	/v1/overrides, /v1/reset  the overrides API (see overridesRoutes)
func (a *Admin) Routes(mux Mux) {
	mux.Handle("GET /config", http.HandlerFunc(a.serveConfig))
	mux.Handle("POST /explain", http.HandlerFunc(a.serveExplain))
	mux.Handle("GET /hotkeys", http.HandlerFunc(a.serveHotKeys))
	a.overridesRoutes(mux)
	a.uiRoutes(mux)
}

// SampleRates samples the rule counters once a second into the rates
// the page at /ui/ draws, until ctx is done. Without it, the page shows
// no rates. It returns nil.
func (a *Admin) SampleRates(ctx context.Context) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-tick.C:
			a.Sample(now)
		}
	}
}

// writeJSON writes v as JSON with status 200, and a newline: indented
// for answers people read from curl (/hotkeys, /explain), compact for
// those the page polls (/ui/api/). The answer is not to be cached, since
// it is the state of the moment, nor sniffed as anything else.
func writeJSON(w http.ResponseWriter, v any, indent bool) {
	var out []byte
	var err error
	if indent {
		out, err = json.MarshalIndent(v, "", "  ")
	} else {
		out, err = json.Marshal(v)
	}
	if err != nil {
		http.Error(w, "encoding JSON: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(append(out, '\n'))
}
