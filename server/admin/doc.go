// Package admin is ratelimitd's operators' pages, in one place: the page
// at /ui/ and the JSON it reads, GET /hotkeys, GET /config, POST /explain's
// handler and envoyproxy/ratelimit's GET /rlconfig. They read the decision
// engine (package engine) and what the server hands them in Options, and
// change nothing; a runtime overrides API would go here too.
//
// Where things live:
//
//	admin.go     Admin, Options, Routes, SampleRates
//	ui.go, ui/   the page (hand-written HTML, CSS and JavaScript) and /ui/api/
//	rates.go     the per-rule rates the page charts
//	hotkeys.go   GET /hotkeys
//	explain.go   POST /explain (the engine explains; server decodes the request)
//	config.go    GET /config; rlconfig.go: GET /rlconfig
//
// Package server builds an Admin and registers its routes with its own,
// on the admin listener when operators have one (see server.Handlers):
// a page's request walks server's mux, this package, the engine, and back.
package admin
