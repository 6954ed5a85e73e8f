package server

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"net/http"
	"os"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/hotkeys"
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
	// shows each value's digest, "sha256:" and the first 16 hex digits of
	// its SHA-256, so that values that are personal data (IP addresses,
	// API keys) are not on view, while an operator can still find a
	// value they know.
	ShowValues bool
	// Replica names this replica in /hotkeys: each replica sees only the
	// decisions it made. Empty means the host name.
	Replica string
}

// newHotKeys returns the hot keys tracker of s's options, nil when off.
// A domain that leaves the rules leaves the hot keys.
func (s *Server) newHotKeys() *hotkeys.Tracker {
	o := s.opts.HotKeys
	if !o.Enabled {
		return nil
	}
	return hotkeys.New(hotkeys.Options{
		K: o.K, Window: o.Window, Now: s.opts.Now,
		Live: func(domain string) bool { return s.rules.Load().Domain(domain) != nil },
	})
}

// observeHot records the verdict v on ds in the hot keys, if tracked. It
// is the engine's one call into them: for a decision that changes
// neither list it costs a hash and a few atomic loads.
func (s *Server) observeHot(sc *scratch, ds *desc, v *verdict) {
	if s.hot == nil || !v.limited {
		return
	}
	s.hot.Observe(sc.req.domain, sc.keys[ds.key[0]:ds.key[1]], &hotkeys.Observation{
		Rule:      ds.rule,
		Path:      ds.path,
		Hits:      ds.hits,
		Refused:   v.overLimit,
		Shadow:    v.shadow,
		Limit:     v.limit,
		Remaining: v.remaining,
		Reset:     v.reset,
	})
}

// hotKeysView is the body of GET /hotkeys.
type hotKeysView struct {
	Replica       string          `json:"replica"`
	WindowSeconds float64         `json:"window_seconds"`
	K             int             `json:"k"`
	Values        string          `json:"values"` // "digest" or "shown"
	Domains       []hotKeysDomain `json:"domains"`
}

// hotKeysDomain is one domain's lists.
type hotKeysDomain struct {
	Domain  string        `json:"domain"`
	Refused []hotKeyEntry `json:"refused"`
	Nearest []hotKeyEntry `json:"nearest"`
}

// hotKeyEntry is one counter of a list.
type hotKeyEntry struct {
	Rule       string       `json:"rule"`
	File       string       `json:"file,omitempty"`
	Line       int          `json:"line,omitempty"`
	Descriptor []hotKeyPart `json:"descriptor"`
	Truncated  bool         `json:"truncated,omitempty"` // the descriptor's last entries are not kept
	Hits       uint64       `json:"hits"`
	Refused    uint64       `json:"refused"`
	// RefusedError bounds how far Refused may exceed the true count.
	RefusedError uint64  `json:"refused_error"`
	Limit        uint64  `json:"limit"`
	Algorithm    string  `json:"algorithm"`
	Window       string  `json:"window"`
	Remaining    uint64  `json:"remaining"`
	Reset        string  `json:"reset"`
	Used         float64 `json:"used"`
	UsedAt       string  `json:"used_at,omitempty"`
	Seen         string  `json:"seen"`
	Shadow       bool    `json:"shadow,omitempty"`
}

// hotKeyPart is one entry of a counter's descriptor.
type hotKeyPart struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// serveHotKeys writes this replica's hot keys as JSON (hotKeysView).
func (s *Server) serveHotKeys(w http.ResponseWriter, _ *http.Request) {
	if s.hot == nil {
		http.Error(w, "hot keys are off (--hotkeys=false)", http.StatusNotFound)
		return
	}
	v := hotKeysView{
		Replica:       s.hotReplica(),
		WindowSeconds: s.hot.Window().Seconds(),
		K:             s.hot.K(),
		Values:        "digest",
		Domains:       []hotKeysDomain{},
	}
	show := s.opts.HotKeys.ShowValues
	if show {
		v.Values = "shown"
	}
	now := s.now()
	for _, d := range s.hot.View() {
		hd := hotKeysDomain{Domain: printable(d.Name), Refused: []hotKeyEntry{}, Nearest: []hotKeyEntry{}}
		for i := range d.Refused {
			hd.Refused = append(hd.Refused, hotEntry(&d.Refused[i], show, now))
		}
		for i := range d.Nearest {
			hd.Nearest = append(hd.Nearest, hotEntry(&d.Nearest[i], show, now))
		}
		v.Domains = append(v.Domains, hd)
	}
	writeJSON(w, v, true)
}

// hotReplica returns the name /hotkeys labels this replica's view with.
func (s *Server) hotReplica() string {
	if r := s.opts.HotKeys.Replica; r != "" {
		return r
	}
	host, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return host
}

// hotEntry renders e, its values shown or digested, its reset counted
// from now.
func hotEntry(e *hotkeys.Entry, show bool, now time.Time) hotKeyEntry {
	he := hotKeyEntry{
		Rule:         printable(e.Path),
		Truncated:    e.Truncated,
		Hits:         e.Hits,
		Refused:      e.Refused,
		RefusedError: e.RefusedError,
		Limit:        e.Limit.Requests,
		Algorithm:    e.Limit.Algorithm.String(),
		Window:       e.Limit.Window.String(),
		Remaining:    e.Remaining,
		Reset:        max(0, e.Reset-now.Sub(e.Seen)).Round(time.Millisecond).String(),
		Used:         e.Used,
		Seen:         e.Seen.UTC().Format(time.RFC3339Nano),
		Shadow:       e.Shadow,
		Descriptor:   []hotKeyPart{},
	}
	if e.Rule != nil {
		he.File, he.Line = e.Rule.File, e.Rule.Line
	}
	if e.UsedAt.IsZero() { // a refused counter: its share after its latest decision
		if c := e.Limit.Capacity(); c > 0 && e.Remaining <= c {
			he.Used = float64(c-e.Remaining) / float64(c)
		}
	} else {
		he.UsedAt = e.UsedAt.UTC().Format(time.RFC3339Nano)
	}
	he.Used = math.Round(he.Used*1e4) / 1e4
	_, parts, complete := hotkeys.DecodeKey(e.Key)
	he.Truncated = he.Truncated || !complete
	for _, p := range parts {
		he.Descriptor = append(he.Descriptor, hotKeyPart{Key: printable(p.Key), Value: hotValue(p, show)})
	}
	return he
}

// hotValue returns how /hotkeys shows p's value: itself (see printable)
// when show, else "sha256:" and the first 16 hex digits of its SHA-256.
// A value counted by its digest shows as that digest, in full when show.
func hotValue(p hotkeys.Part, show bool) string {
	switch {
	case p.Digest && show:
		return "sha256:" + hex.EncodeToString([]byte(p.Value))
	case p.Digest:
		return "sha256:" + hex.EncodeToString([]byte(p.Value)[:min(8, len(p.Value))])
	case show:
		return printable(p.Value)
	}
	sum := sha256.Sum256([]byte(p.Value))
	return fmt.Sprintf("sha256:%x", sum[:8])
}
