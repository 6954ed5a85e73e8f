package server

import (
	"io"
	"net/http"
)

// envoyproxyRoutes adds to mux, with Options.EnvoyproxyEndpoints, the
// endpoints that envoyproxy/ratelimit serves on its HTTP port and that
// its users' probes and tools call:
//
//	GET /healthcheck  200 "OK" while ready (as /readyz), 500 otherwise
//	GET /rlconfig     the rules in force, one line per rule (see RLConfig)
func (s *Server) envoyproxyRoutes(mux *routeMux) {
	if !s.opts.EnvoyproxyEndpoints {
		return
	}
	mux.HandleFunc("GET /healthcheck", s.serveHealthcheck)
	mux.Handle("GET /rlconfig", s.RLConfig())
}

// RLConfig returns the handler of envoyproxy/ratelimit's /rlconfig (see
// admin.Admin.RLConfig).
func (s *Server) RLConfig() http.Handler { return s.admin.RLConfig() }

// serveHealthcheck answers as envoyproxy/ratelimit's /healthcheck does:
// 200 and "OK" while healthy, 500 with an empty body otherwise. Healthy
// is ready, as /readyz reports it: rules loaded, not shutting down, and
// the store usable unless the failure mode is allow or
// Options.ReadyWithoutStore is set.
func (s *Server) serveHealthcheck(w http.ResponseWriter, _ *http.Request) {
	if ready, _ := s.ready(); !ready {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	io.WriteString(w, "OK")
}
