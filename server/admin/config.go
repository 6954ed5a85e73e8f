package admin

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/ratelimitd/ratelimitd/config"
)

// serveConfig writes the rules in force as YAML, preceded by a comment
// that names their files.
func (a *Admin) serveConfig(w http.ResponseWriter, _ *http.Request) {
	rules := a.eng.Rules()
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
