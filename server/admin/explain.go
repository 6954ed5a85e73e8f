package admin

import "net/http"

// serveExplain answers POST /explain: the body is /json's, the answer an
// explanation as JSON (see docs/operations.md).
func (a *Admin) serveExplain(w http.ResponseWriter, r *http.Request) {
	if a.opts.ReadRequest == nil || a.opts.Explain == nil {
		http.Error(w, "explain: this server decodes no requests for it", http.StatusNotImplemented)
		return
	}
	req, ok := a.opts.ReadRequest(w, r)
	if !ok {
		return
	}
	ex, err := a.opts.Explain(r.Context(), req)
	if err != nil {
		http.Error(w, err.Error(), a.opts.HTTPStatus(err))
		return
	}
	writeJSON(w, ex, true)
}
