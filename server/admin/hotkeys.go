package admin

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"net/http"
	"os"
	"time"

	"github.com/ratelimitd/ratelimitd/server/hotkeys"
	"github.com/ratelimitd/ratelimitd/server/internal/engine"
)

// hotKeysView is the body of GET /hotkeys.
type hotKeysView struct {
	Replica       string  `json:"replica"`
	WindowSeconds float64 `json:"window_seconds"`
	K             int     `json:"k"`
	Values        string  `json:"values"` // "digest" or "shown"
	// DigestKey says where the digests' key comes from: "random" (drawn
	// by this process: digests differ between replicas) or "file"; and
	// DigestKeyID names it (hotkeys.Digester.KeyID), so that replicas
	// showing comparable digests can be told.
	DigestKey   string `json:"digest_key,omitempty"`
	DigestKeyID string `json:"digest_key_id,omitempty"`
	// Lookup, with ?value=, is the value looked up, as the lists show
	// it; the lists then hold only the counters with that value.
	Lookup  *hotKeysLookup  `json:"lookup,omitempty"`
	Domains []hotKeysDomain `json:"domains"`
}

// hotKeysLookup is the value GET /hotkeys?value= looked up.
type hotKeysLookup struct {
	// Value is the value as the lists show it: its digest, or itself
	// with --hotkeys-values show.
	Value string `json:"value"`
	// Found counts the entries that hold it, both lists of every domain.
	Found int `json:"found"`
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
// With ?value=V, it keeps only the counters one of whose values is V (or
// counts by V's digest), and says how V shows: an operator finds there a
// value a customer reports without the digests' key.
func (a *Admin) serveHotKeys(w http.ResponseWriter, r *http.Request) {
	if a.hotTracker() == nil {
		http.Error(w, "hot keys are off (--hotkeys=false)", http.StatusNotFound)
		return
	}
	show := a.opts.HotKeysShowValues
	v := hotKeysView{
		Replica:       a.hotReplica(),
		WindowSeconds: a.hotTracker().Window().Seconds(),
		K:             a.hotTracker().K(),
		Values:        "digest",
		Domains:       []hotKeysDomain{},
	}
	if show {
		v.Values = "shown"
	} else {
		v.DigestKey, v.DigestKeyID = "file", a.hotDigests().KeyID()
		if a.hotDigests().Random() {
			v.DigestKey = "random"
		}
	}
	q := r.URL.Query()
	lookup, looking := q.Get("value"), q.Has("value")
	keep := func(*hotkeys.Entry) bool { return true }
	if looking {
		v.Lookup = &hotKeysLookup{Value: a.hotValue(lookupPart(lookup), show)}
		keep = func(e *hotkeys.Entry) bool { return entryHolds(e, lookup) }
	}
	now := a.eng.Now()
	for _, d := range a.hotTracker().View() {
		hd := hotKeysDomain{Domain: engine.Printable(d.Name), Refused: []hotKeyEntry{}, Nearest: []hotKeyEntry{}}
		for i := range d.Refused {
			if keep(&d.Refused[i]) {
				hd.Refused = append(hd.Refused, a.hotEntry(&d.Refused[i], show, now))
			}
		}
		for i := range d.Nearest {
			if keep(&d.Nearest[i]) {
				hd.Nearest = append(hd.Nearest, a.hotEntry(&d.Nearest[i], show, now))
			}
		}
		if looking {
			if len(hd.Refused)+len(hd.Nearest) == 0 {
				continue
			}
			v.Lookup.Found += len(hd.Refused) + len(hd.Nearest)
		}
		v.Domains = append(v.Domains, hd)
	}
	writeJSON(w, v, true)
}

// lookupPart returns the part that value counts as in a counter key: the
// value, or its SHA-256 when it is over engine.MaxEntryBytes (appendKeyPrefix).
func lookupPart(value string) hotkeys.Part {
	if len(value) > engine.MaxEntryBytes {
		sum := sha256.Sum256([]byte(value))
		return hotkeys.Part{Value: string(sum[:]), Digest: true}
	}
	return hotkeys.Part{Value: value}
}

// entryHolds reports whether one of e's values counts value: as the
// engine counts it at that level of e's rule (levelValue: its network
// under ip_prefix), itself or by its digest.
func entryHolds(e *hotkeys.Entry, value string) bool {
	_, parts, _ := hotkeys.DecodeKey(e.Key)
	for j, p := range parts {
		v, _ := engine.LevelValue(e.Rule, j, value, false)
		if hotkeys.Match(p, v, engine.MaxEntryBytes) {
			return true
		}
	}
	return false
}

// hotReplica returns the name /hotkeys labels this replica's view with.
func (a *Admin) hotReplica() string {
	if r := a.opts.HotKeysReplica; r != "" {
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
func (a *Admin) hotEntry(e *hotkeys.Entry, show bool, now time.Time) hotKeyEntry {
	he := hotKeyEntry{
		Rule:         engine.Printable(e.Path),
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
		he.Descriptor = append(he.Descriptor, hotKeyPart{Key: engine.Printable(p.Key), Value: a.hotValue(p, show)})
	}
	return he
}

// hotValue returns how /hotkeys shows p's value: itself (see printable)
// when show, else its keyed digest (hotkeys.Digester). A value counted by
// its SHA-256 shows, when show, as "sha256:" and that digest in hex.
func (a *Admin) hotValue(p hotkeys.Part, show bool) string {
	switch {
	case !show:
		return a.hotDigests().Digest(p)
	case p.Digest:
		return "sha256:" + hex.EncodeToString([]byte(p.Value))
	}
	return engine.Printable(p.Value)
}

// hotTracker returns the engine's hot keys tracker, nil when off.
func (a *Admin) hotTracker() *hotkeys.Tracker { t, _ := a.eng.HotKeys(); return t }

// hotDigests returns the digester of the hot keys' values.
func (a *Admin) hotDigests() *hotkeys.Digester { _, d := a.eng.HotKeys(); return d }
