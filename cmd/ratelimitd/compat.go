package main

import (
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/ratelimitd/ratelimitd/cmd/ratelimitd/internal/compat"
)

// compatEnvoyproxy is the --compat value for envoyproxy/ratelimit's
// environment.
const compatEnvoyproxy = "envoyproxy"

// applyCompat reads, with --compat envoyproxy, the reference's variables
// through lookup and gives each flag they decide its value, unless the
// command line or its RATELIMITD_* variable set it (set names those). A
// variable that cannot be honoured fails, unless such a flag replaces
// what it asks for; so do rule files in the reference's directory that
// ratelimitd would not read.
func applyCompat(fs *flag.FlagSet, f *flags, set map[string]bool, lookup lookupEnv) error {
	switch f.compat {
	case "":
		return nil
	case compatEnvoyproxy:
	default:
		return fmt.Errorf("--compat %q: want %s (or nothing)", f.compat, compatEnvoyproxy)
	}
	res, err := compat.Envoyproxy(compat.Lookup(lookup))
	explicit := func(flag string) bool { return set[flag] }
	if err := compat.Moot(err, explicit); err != nil {
		return fmt.Errorf("--compat envoyproxy: the environment cannot be honoured:\n%w", err)
	}
	// The rules source is one setting of two flags: one set by the
	// command line or RATELIMITD_* keeps the reference's other out.
	source := set["config"] || set["xds-server"]
	for _, name := range slices.Sorted(maps.Keys(res.Flags)) {
		fl := fs.Lookup(name)
		if fl == nil {
			return fmt.Errorf("--compat envoyproxy: no flag --%s for the reference's settings", name)
		}
		if set[name] || source && (name == "config" || name == "xds-server") {
			continue
		}
		if err := fl.Value.Set(res.Flags[name]); err != nil {
			return fmt.Errorf("--compat envoyproxy: --%s %q (from the reference's variables): %w", name, res.Flags[name], err)
		}
	}
	// Only the reference's own rules directory is checked: a --config of
	// the command line or RATELIMITD_* is read as ratelimitd reads it.
	if !source && f.config != "" {
		if err := compat.CheckRuleFiles(f.config); err != nil {
			return fmt.Errorf("--compat envoyproxy: %w", err)
		}
	}
	f.compatResult = &res
	return nil
}

// logCompat logs, with --compat, the reference's variables honoured and
// those ignored, each with its reason.
func logCompat(log *slog.Logger, f *flags) {
	res := f.compatResult
	if res == nil {
		return
	}
	log.Info("compat envoyproxy: reading envoyproxy/ratelimit's variables", "honoured", strings.Join(res.Set, ","))
	if len(res.Ignored) > 0 {
		ignored := make([]string, len(res.Ignored))
		for i, ig := range res.Ignored {
			ignored[i] = ig.Name + " (" + ig.Reason + ")"
		}
		log.Warn("compat envoyproxy: variables set but not supported, ignored", "ignored", strings.Join(ignored, "; "))
	}
}
