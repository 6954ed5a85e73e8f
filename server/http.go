package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ratelimitd/ratelimitd/config"
)

// Handler returns the server's HTTP endpoints:
//
//	GET  /healthz  200 while the process runs
//	GET  /readyz   200 once rules are loaded, 503 before and during shutdown,
//	               and while the store is down unless the failure mode is
//	               allow; the body names the store's state
//	GET  /config   the rules in force, as YAML (503 before any are loaded)
//	GET  /metrics  Prometheus metrics, when Options.Registry is set
//	POST /json     (unless Options.DisableJSON) a protojson
//	               envoy.service.ratelimit.v3.RateLimitRequest;
//	               answers the protojson response with 200 (OK) or 429
//	               (OVER_LIMIT), 400 for a bad request, 503 when the
//	               counters are unavailable
//	GET  /rlqs     with Options.RLQS, the RLQS buckets held and their
//	               assignments, as JSON (rlqs.View)
//	GET  /hotkeys  with Options.HotKeys, per domain the counters most
//	               refused and nearest their limits, as JSON (404 when off)
//
// and with Options.EnvoyproxyEndpoints, envoyproxy/ratelimit's
// /healthcheck and /rlconfig (see envoyproxy.go).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		ready, state := s.ready()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		word := "ready"
		if !ready {
			word = "not ready"
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintf(w, "%s\nbackend: %s\nfailure_mode: %s\n", word, state, s.opts.FailureMode)
	})
	mux.HandleFunc("GET /config", s.serveConfig)
	if s.opts.Registry != nil {
		mux.Handle("GET /metrics", promhttp.InstrumentMetricHandler(s.opts.Registry,
			promhttp.HandlerFor(s.opts.Registry, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelError)})))
	}
	if !s.opts.DisableJSON {
		mux.HandleFunc("POST /json", s.serveJSON)
	}
	if s.rlqs != nil {
		mux.Handle("GET /rlqs", s.rlqs)
	}
	mux.HandleFunc("GET /hotkeys", s.serveHotKeys)
	s.envoyproxyRoutes(mux)
	return mux
}

// serveConfig writes the rules in force as YAML, preceded by a comment
// that names their files.
func (s *Server) serveConfig(w http.ResponseWriter, _ *http.Request) {
	rules := s.rules.Load()
	if rules == nil {
		http.Error(w, "no rules loaded", http.StatusServiceUnavailable)
		return
	}
	out, err := config.Marshal(rules.Domains())
	if err != nil {
		http.Error(w, "encoding rules: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/yaml; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	fmt.Fprintf(w, "# the rules in force, loaded from %s\n", strings.Join(rules.Files(), ", "))
	w.Write(out)
}

func (s *Server) serveJSON(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRecvMsgSize))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			http.Error(w, "request body over 1 MiB", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "reading request: "+err.Error(), http.StatusBadRequest)
		return
	}
	var req rlsv3.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		http.Error(w, "invalid RateLimitRequest: "+err.Error(), http.StatusBadRequest)
		return
	}
	resp, err := s.decideEnvoy(r.Context(), apiJSON, func(sc *scratch) error { return envoyFromProto(sc, &req) })
	if err != nil {
		var inv *invalidError
		code := http.StatusInternalServerError
		switch {
		case errors.As(err, &inv):
			code = http.StatusBadRequest
		case errors.Is(err, errStoreUnavailable), errors.Is(err, errShuttingDown):
			code = http.StatusServiceUnavailable
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			code = http.StatusGatewayTimeout
		}
		http.Error(w, err.Error(), code)
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		http.Error(w, "encoding response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	w.Write(out)
}
