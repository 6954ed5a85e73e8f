package engine

import (
	"cmp"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitd/ratelimitd/config"
)

// DefaultUnknownDomains is Options.UnknownDomains when zero.
const DefaultUnknownDomains = 100

// Unknown domains: how often one is logged, and how long one is kept
// after its last request when its place is wanted.
const (
	unknownLogEvery = time.Minute
	unknownIdle     = 10 * time.Minute
	// unknownRoomEvery is how often a full table looks for room: each
	// look copies and scans it, and requests for new domains past the
	// bound may come at any rate.
	unknownRoomEvery = time.Second
)

// unknownDomains counts the requests for domains that have no rules,
// which are answered OK with nothing limited (as the reference does): a
// mistyped domain turns limiting off, and this is how the operator
// learns it. The first max domains seen get their own label in
// ratelimitd_unknown_domain_requests_total and their own log line, at
// most once per domain every unknownLogEvery; the requests for domains
// past max are counted together (the bound's metric) and logged together
// at the same pace. When the table is full, a domain that now has rules,
// or that has had no request for unknownIdle, gives up its place (and its
// label) to a new one; a full table looks for such places at most once
// every unknownRoomEvery, so that a flood of new domains past the bound
// costs each request what one domain's does, a map lookup and a few
// atomic loads and adds, and no copy of the table. The metrics are read
// from the table's counts when scraped (UnknownCounts).
//
// Reading the table takes no lock: it is a map replaced whole, under mu,
// when a domain comes or goes (at most max entries copied).
type unknownDomains struct {
	max      int
	log      *slog.Logger
	now      func() time.Time
	rules    func() *config.Rules
	table    atomic.Pointer[map[string]*unknownDomain]
	mu       sync.Mutex   // serializes changes of table
	nextRoom atomic.Int64 // the Unix nanosecond before which a full table looks for no room
	// others counts the domains past max together; its name is empty.
	others unknownDomain
}

// An unknownDomain is one domain without rules, or the others together.
type unknownDomain struct {
	name     string        // as the request sent it
	requests atomic.Uint64 // the metric's value (see UnknownCounts)
	last     atomic.Int64  // the Unix nanosecond of the latest request, to the second
	nextLog  atomic.Int64  // the Unix nanosecond before which nothing is logged
}

// newUnknownDomains returns the table of e's options.
func newUnknownDomains(max int, log *slog.Logger, now func() time.Time, rules func() *config.Rules) *unknownDomains {
	u := &unknownDomains{max: cmp.Or(max, DefaultUnknownDomains), log: log, now: now, rules: rules}
	u.table.Store(&map[string]*unknownDomain{})
	return u
}

// ObserveUnknown counts a request for domain, which has no rules, as
// Decide does: for the faces that decide elsewhere (RLQS reports).
func (e *Engine) ObserveUnknown(domain string) { e.unknown.observe(domain) }

// UnknownCounts calls f with the requests counted for each domain
// without rules that has a place in the table, and returns those of the
// domains past the bound, counted together: the metrics' values, read
// when scraped.
func (e *Engine) UnknownCounts(f func(domain string, requests uint64)) (untracked uint64) {
	for _, d := range *e.unknown.table.Load() {
		f(d.name, d.requests.Load())
	}
	return e.unknown.others.requests.Load()
}

// observe counts one request for domain, which has no rules, and logs it
// if its domain was not logged within unknownLogEvery.
func (u *unknownDomains) observe(domain string) {
	now := u.now().UnixNano()
	d, ok := (*u.table.Load())[domain]
	if !ok {
		d = u.add(domain, now)
	}
	n := d.requests.Add(1)
	if last := d.last.Load(); now-last >= int64(time.Second) {
		d.last.Store(now) // to the second: a hot domain's requests seldom write it
	}
	if next := d.nextLog.Load(); now >= next && d.nextLog.CompareAndSwap(next, now+int64(unknownLogEvery)) {
		u.logRequest(d, domain, n)
	}
}

// add returns the entry of domain, new if the table has room (or makes
// room), else u.others; now is the request's time, in Unix nanoseconds.
func (u *unknownDomains) add(domain string, now int64) *unknownDomain {
	if len(*u.table.Load()) >= u.max && now < u.nextRoom.Load() {
		return &u.others // full, and looked for room less than unknownRoomEvery ago
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	old := *u.table.Load()
	if d, ok := old[domain]; ok { // added meanwhile
		return d
	}
	if len(old) >= u.max {
		if now < u.nextRoom.Load() {
			return &u.others
		}
		u.nextRoom.Store(now + int64(unknownRoomEvery))
	}
	table := maps.Clone(old)
	if len(table) >= u.max {
		u.makeRoom(table, now)
	}
	if len(table) >= u.max {
		return &u.others
	}
	d := &unknownDomain{name: strings.Clone(domain)}
	d.last.Store(now) // not idle while its first request is counted
	table[d.name] = d
	u.table.Store(&table)
	return d
}

// makeRoom drops from table the domains that now have rules, and those
// idle for unknownIdle at now, with their series; u.mu is held.
func (u *unknownDomains) makeRoom(table map[string]*unknownDomain, now int64) {
	rules := u.rules()
	idle := now - int64(unknownIdle)
	for name, d := range table {
		if rules.Domain(name) != nil || d.last.Load() < idle {
			delete(table, name)
		}
	}
}

// logRequest logs a request for d (domain for u.others), its n-th.
func (u *unknownDomains) logRequest(d *unknownDomain, domain string, n uint64) {
	rules := u.rules()
	attrs := []any{"domain", Printable(domain), "requests", n}
	switch {
	case rules == nil:
		attrs = append(attrs, "rules_loaded", false)
	case d == &u.others:
		attrs = append(attrs, "untracked", true, "unknown_domains_max", u.max)
	}
	if near := nearestDomain(domain, rules); near != "" {
		attrs = append(attrs, "did_you_mean", near)
	}
	u.log.Warn("request for a domain with no rules: answered OK, nothing limited", attrs...)
}

// An UnknownView is one domain without rules as /ui/api/status shows it.
type UnknownView struct {
	Domain   string `json:"domain"`
	Requests uint64 `json:"requests"`
	LastSeen string `json:"last_seen"`
}

// UnknownDomains returns the domains without rules, the most requested first, and
// the requests for domains past the bound.
func (e *Engine) UnknownDomains() (domains []UnknownView, untracked uint64) {
	u := e.unknown
	domains = []UnknownView{}
	for _, d := range *u.table.Load() {
		domains = append(domains, UnknownView{
			Domain: Printable(d.name), Requests: d.requests.Load(),
			LastSeen: time.Unix(0, d.last.Load()).UTC().Format(time.RFC3339),
		})
	}
	slices.SortFunc(domains, func(a, b UnknownView) int {
		return cmp.Or(cmp.Compare(b.Requests, a.Requests), strings.Compare(a.Domain, b.Domain))
	})
	return domains, u.others.requests.Load()
}

// Bounds of nearestDomain's work, done at most once per logged line.
const (
	maxSuggestLen     = 64  // longer names are not compared
	maxSuggestDomains = 256 // the first ones of a larger rule set only
)

// nearestDomain returns the domain of rules within two edits of name
// (insertions, deletions, substitutions of bytes), the nearest, or "".
func nearestDomain(name string, rules *config.Rules) string {
	if len(name) > maxSuggestLen {
		return ""
	}
	best, bestDist := "", 3
	for i, d := range rules.Domains() {
		if i == maxSuggestDomains {
			break
		}
		if n := d.Domain; len(n) <= maxSuggestLen && absDiff(len(n), len(name)) < bestDist {
			if dist := editDistance(name, n); dist < bestDist {
				best, bestDist = n, dist
			}
		}
	}
	return best
}

func absDiff(a, b int) int {
	if a < b {
		return b - a
	}
	return a - b
}

// editDistance returns the Levenshtein distance between a and b, in
// bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, sub)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
