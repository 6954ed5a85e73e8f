package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/ratelimitd/ratelimitd/server/overrides"
)

// A descriptorRequest is the body of DELETE /v1/overrides and POST
// /v1/reset: a descriptor, and optionally a reason for the audit log.
type descriptorRequest struct {
	Domain  string            `json:"domain"`
	Entries []overrides.Entry `json:"entries"`
	Reason  string            `json:"reason,omitempty"`
}

// overridesRoutes registers the overrides API (see docs/operations.md):
//
//	GET    /v1/overrides[?domain=D]  {"overrides": [...]}
//	PUT    /v1/overrides             an Override; answers it as stored
//	DELETE /v1/overrides             {"domain", "entries"}; 404 when none
//	POST   /v1/reset                 {"domain", "entries"}: resets its counters
//
// Each needs a bearer token of Options.Tokens (GET none without a token
// file); errors answer {"error": "..."} with 400 (bad input), 401, 403
// (no token file), 404, 409 (--max-overrides reached), 501 (the store
// keeps no overrides) or 503 (the store failed).
func (a *Admin) overridesRoutes(mux Mux) {
	mux.Handle("GET /v1/overrides", a.authorized(false, a.serveListOverrides))
	mux.Handle("PUT /v1/overrides", a.authorized(true, a.serveSetOverride))
	mux.Handle("DELETE /v1/overrides", a.authorized(true, a.serveDeleteOverride))
	mux.Handle("POST /v1/reset", a.authorized(true, a.serveReset))
}

// byKey is the context key of the token's name.
type byKey struct{}

// authorized wraps h with the bearer token check of Options.Tokens.
func (a *Admin) authorized(write bool, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, err := a.opts.Tokens.Authorize(r.Header.Get("Authorization"), write)
		switch {
		case errors.Is(err, ErrNoTokens):
			writeError(w, http.StatusForbidden, err.Error())
			return
		case err != nil:
			w.Header().Set("WWW-Authenticate", `Bearer realm="ratelimitd"`)
			writeError(w, http.StatusUnauthorized, err.Error())
			return
		case a.opts.Overrides == nil:
			writeError(w, http.StatusNotImplemented, "this server has no overrides")
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), byKey{}, name)))
	})
}

func by(r *http.Request) string {
	s, _ := r.Context().Value(byKey{}).(string)
	return s
}

func (a *Admin) serveListOverrides(w http.ResponseWriter, r *http.Request) {
	list, err := a.opts.Overrides.List(r.Context(), r.URL.Query().Get("domain"))
	if err != nil {
		writeOverridesError(w, err)
		return
	}
	writeJSON(w, overrides.File{Overrides: list}, true)
}

func (a *Admin) serveSetOverride(w http.ResponseWriter, r *http.Request) {
	o, err := overrides.Decode[overrides.Override](r.Body)
	if err == nil {
		o, err = a.opts.Overrides.Set(r.Context(), o, by(r))
	}
	if err != nil {
		writeOverridesError(w, err)
		return
	}
	writeJSON(w, o, true)
}

func (a *Admin) serveDeleteOverride(w http.ResponseWriter, r *http.Request) {
	d, err := overrides.Decode[descriptorRequest](r.Body)
	if err == nil {
		err = a.opts.Overrides.Delete(r.Context(), d.Domain, d.Entries, d.Reason, by(r))
	}
	if err != nil {
		writeOverridesError(w, err)
		return
	}
	writeJSON(w, struct {
		Domain  string            `json:"domain"`
		Entries []overrides.Entry `json:"entries"`
		Deleted bool              `json:"deleted"`
	}{d.Domain, d.Entries, true}, true)
}

func (a *Admin) serveReset(w http.ResponseWriter, r *http.Request) {
	d, err := overrides.Decode[descriptorRequest](r.Body)
	var n int
	if err == nil {
		n, err = a.opts.Overrides.Reset(r.Context(), d.Domain, d.Entries, d.Reason, by(r))
	}
	if err != nil {
		writeOverridesError(w, err)
		return
	}
	writeJSON(w, struct {
		Domain   string            `json:"domain"`
		Entries  []overrides.Entry `json:"entries"`
		Counters int               `json:"counters"`
	}{d.Domain, d.Entries, n}, true)
}

// OverridesHTTPStatus maps an error of the overrides API to its HTTP
// status. Any other error, a context's end included (a store that timed
// out; a caller that gave up reads no answer), is the store's: 503.
func OverridesHTTPStatus(err error) int {
	switch {
	case overrides.IsInvalid(err):
		return http.StatusBadRequest
	case errors.Is(err, overrides.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, overrides.ErrFull):
		return http.StatusConflict
	case errors.Is(err, overrides.ErrUnsupported):
		return http.StatusNotImplemented
	}
	return http.StatusServiceUnavailable
}

// writeOverridesError answers err. A store's error, which may name
// internal addresses, is not shown: only that the store failed.
func writeOverridesError(w http.ResponseWriter, err error) {
	code := OverridesHTTPStatus(err)
	msg := err.Error()
	if code == http.StatusServiceUnavailable {
		msg = "the counter store failed; see the daemon's log"
	}
	writeError(w, code, msg)
}

// writeError answers {"error": msg} with code.
func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	out, _ := json.Marshal(struct { //nolint:errchkjson // a struct of one string
		Error string `json:"error"`
	}{msg})
	w.Write(append(out, '\n'))
}

// uiOverrides is how many runtime overrides the page lists at most.
const uiOverrides = 100

// serveUIOverrides answers GET /ui/api/overrides: the first uiOverrides
// overrides (by domain, then entries) and their total, as the page
// shows them; 404 when the server has none. Like the rest of the page,
// it is for whoever reaches the operators' listener.
func (a *Admin) serveUIOverrides(w http.ResponseWriter, r *http.Request) {
	if a.opts.Overrides == nil {
		http.NotFound(w, r)
		return
	}
	list, err := a.opts.Overrides.List(r.Context(), "")
	if err != nil {
		writeOverridesError(w, err)
		return
	}
	writeJSON(w, struct {
		Overrides []overrides.Override `json:"overrides"`
		Total     int                  `json:"total"`
	}{list[:min(len(list), uiOverrides)], len(list)}, false)
}
