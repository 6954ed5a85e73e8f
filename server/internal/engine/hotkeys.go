package engine

import (
	"time"

	"github.com/ratelimitd/ratelimitd/server/hotkeys"
)

// HotKeysOptions configures the hot keys: per domain, the counters most
// refused and those nearest their limits, served at GET /hotkeys. The
// zero value turns them off.
type HotKeysOptions struct {
	// Enabled tracks the hot keys and serves /hotkeys.
	Enabled bool
	// K is how many counters each list of a domain holds; zero means
	// hotkeys.DefaultK.
	K int
	// Window is how far back the lists look; zero means
	// hotkeys.DefaultWindow.
	Window time.Duration
	// ShowValues shows request values as they are; otherwise /hotkeys
	// shows each value's keyed digest, "hmac:" and the first 16 hex
	// digits of its HMAC-SHA256 under DigestKey, so that values that are
	// personal data (IP addresses, API keys) are not on view and cannot be
	// recovered by trying every value, while an operator can still find
	// a value they know (GET /hotkeys?value=).
	ShowValues bool
	// DigestKey is the key of the digests, at least
	// hotkeys.MinDigestKeyBytes long (hotkeys.ReadDigestKey reads one
	// from a file): replicas given the same key show the same digests.
	// Empty means a random key drawn by New, so that each process shows
	// digests of its own.
	DigestKey []byte
	// Replica names this replica in /hotkeys: each replica sees only the
	// decisions it made. Empty means the host name.
	Replica string
}

// newHotKeys returns the hot keys tracker of e's options and the
// digester of their values, nils when off. A domain that leaves the
// rules leaves the hot keys.
func (e *Engine) newHotKeys() (*hotkeys.Tracker, *hotkeys.Digester) {
	o := e.opts.HotKeys
	if !o.Enabled {
		return nil, nil
	}
	return hotkeys.New(hotkeys.Options{
		K: o.K, Window: o.Window, Now: e.opts.Now,
		Live: func(domain string) bool { return e.rules.Load().Domain(domain) != nil },
	}), hotkeys.NewDigester(o.DigestKey)
}

// HotKeys returns the hot keys tracker and the digester of their values,
// for the operators' view of them; nils when they are off.
func (e *Engine) HotKeys() (*hotkeys.Tracker, *hotkeys.Digester) { return e.hot, e.digests }

// observeHot records the verdict v on ds in the hot keys, if tracked. It
// is the engine's one call into them: for a decision that changes
// neither list it costs a hash and a few atomic loads.
func (e *Engine) observeHot(sc *Scratch, ds *desc, v *Verdict) {
	if e.hot == nil || !v.Limited {
		return
	}
	e.hot.Observe(sc.Req.Domain, sc.keys[ds.key[0]:ds.key[1]], &hotkeys.Observation{
		Rule:      ds.rule,
		Path:      ds.path,
		Hits:      ds.hits,
		Refused:   v.OverLimit,
		Shadow:    v.Shadow,
		Limit:     v.Limit,
		Remaining: v.Remaining,
		Reset:     v.Reset,
	})
}
