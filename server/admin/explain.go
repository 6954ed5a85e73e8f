package admin

import "net/http"

// serveExplain answers POST /explain: the body is /json's, the answer an
// explanation as JSON (see docs/operations.md).
func (a *Admin) serveExplain(w http.ResponseWriter, r *http.Request) {
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
