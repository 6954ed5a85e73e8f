package server

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler returns the server's HTTP endpoints, operators' and callers'
// on one handler:
//
//	GET  /healthz  200 while the process runs
//	GET  /readyz   200 once rules are loaded, 503 before and during shutdown,
//	               and while the store is down or has never answered (its
//	               backend.StateReporter says so) unless the failure mode is allow;
//	               the body names the store's state
//	GET  /config   the rules in force, as YAML (503 before any are loaded)
//	GET  /metrics  Prometheus metrics, when Options.Registry is set
//	POST /json     (unless Options.DisableJSON) a protojson
//	               envoy.service.ratelimit.v3.RateLimitRequest;
//	               answers the protojson response with 200 (OK) or 429
//	               (OVER_LIMIT), 400 for a bad request, 503 when the
//	               counters are unavailable
//	POST /explain  the /json body; answers, as JSON, the rules, limits
//	               and counters a decision would use, and what it would
//	               decide, without consuming anything (see engine.Engine.Explain)
//	GET  /rlqs     with Options.RLQS, the RLQS buckets held and their
//	               assignments, as JSON (rlqs.View)
//	GET  /ui/      the operator's page, and its JSON under /ui/api/ (see
//	               ui.go)
//	/v1/overrides, /v1/reset  the runtime overrides API (see package admin)
//	GET  /hotkeys  with Options.HotKeys, per domain the counters most
//	               refused and nearest their limits, as JSON (404 when off);
//	               ?value=V keeps those that hold V, and says how V shows
//
// and with Options.EnvoyproxyEndpoints, envoyproxy/ratelimit's
// /healthcheck and /rlconfig (see envoyproxy.go).
func (s *Server) Handler() http.Handler {
	return s.routes(false).public
}

// Handlers returns the server's HTTP endpoints split in two: public has
// those that callers and probes use (/healthz, /readyz, /json,
// /healthcheck); admin the operators' (/config, /metrics, /rlqs, /ui/,
// /hotkeys, /explain, /rlconfig: see operatorPaths), which show the
// rules, the counters and the traffic, for a listener that only
// operators reach. Either way, OperatorHosts guards the operators'
// endpoints against DNS rebinding.
func (s *Server) Handlers() (public, admin http.Handler) {
	mux := s.routes(true)
	return mux.public, mux.admin
}

// operatorPaths are the paths that Handlers serves on its admin handler
// rather than the public one: a path ending in "/" stands for every path
// under it. An endpoint added to routes is public unless its path is
// listed here.
var operatorPaths = []string{"/config", "/metrics", "/rlqs", "/ui/", "/hotkeys", "/explain", "/rlconfig", "/v1/"}

// routes registers every endpoint on a routeMux, split by operatorPaths
// if split.
func (s *Server) routes(split bool) *routeMux {
	mux := newRouteMux(split)
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
		fmt.Fprintf(w, "%s\nbackend: %s\nfailure_mode: %s\noverrides: %s\n", word, state, s.opts.FailureMode, s.overrides.State())
	})
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
	s.admin.Routes(mux) // /config, /explain, /hotkeys, /ui/
	s.envoyproxyRoutes(mux)
	return mux
}

// routeMux registers each route on public, or with split on admin when
// its path is one of operatorPaths. Without split, admin is nil.
type routeMux struct {
	public, admin *http.ServeMux
}

// newRouteMux returns an empty routeMux, split or not.
func newRouteMux(split bool) *routeMux {
	m := &routeMux{public: http.NewServeMux()}
	if split {
		m.admin = http.NewServeMux()
	}
	return m
}

// Handle registers h for pattern ("METHOD /path", as http.ServeMux's) on
// the mux that pattern's path belongs to.
func (m *routeMux) Handle(pattern string, h http.Handler) {
	if m.admin != nil && isOperatorPath(pattern) {
		m.admin.Handle(pattern, h)
		return
	}
	m.public.Handle(pattern, h)
}

// HandleFunc is Handle for a function.
func (m *routeMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(h))
}

// isOperatorPath reports whether the path of pattern ("METHOD /path" or
// "/path") is one of operatorPaths or under one of them.
func isOperatorPath(pattern string) bool {
	path := pattern
	if i := strings.IndexByte(pattern, ' '); i >= 0 {
		path = strings.TrimSpace(pattern[i+1:])
	}
	for _, p := range operatorPaths {
		if path == p || (strings.HasSuffix(p, "/") && strings.HasPrefix(path, p)) {
			return true
		}
	}
	return false
}

// OperatorHosts wraps h, a handler of Handler or Handlers, so that its
// operators' endpoints (operatorPaths) answer only requests whose Host
// names this server: an IP address, localhost, or one of names (compared
// without case, port or trailing dot). Other requests to them get 421
// Misdirected Request; the other paths pass through unchecked, for callers
// reach /json by whatever name they like.
//
// This stops DNS rebinding: a web page whose name its attacker points at
// the operators' listener loads it under the attacker's name, which is
// none of these, so the browser of an operator with a tunnel to the
// listener cannot be used to read the rules, the counters or the traffic.
// A request with no Host at all (HTTP/1.0) comes from no browser and is
// answered.
func OperatorHosts(h http.Handler, names ...string) http.Handler {
	allowed := make(map[string]bool, len(names)+1)
	allowed["localhost"] = true
	for _, n := range names {
		if n = normalHost(n); n != "" {
			allowed[n] = true
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if host := normalHost(r.Host); !knownHost(host, allowed) && isOperatorPath(r.URL.Path) {
			http.Error(w, "host "+strconv.Quote(host)+" is not a name of this server's operators' endpoints", http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// knownHost reports whether host, as normalHost returns it, is empty, an
// IP address or one of allowed.
func knownHost(host string, allowed map[string]bool) bool {
	if host == "" || allowed[host] {
		return true
	}
	_, err := netip.ParseAddr(host)
	return err == nil
}

// normalHost returns the host of hostport ("host", "host:port",
// "[v6]:port"), in lower case and without a trailing dot.
func normalHost(hostport string) string {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
	}
	return strings.TrimSuffix(strings.ToLower(host), ".")
}
