package config

import (
	"iter"
	"maps"
	"slices"

	"github.com/ratelimitd/ratelimitd/backend"
)

// Rules are compiled rules: a match tree per domain. Rules are immutable
// and safe for concurrent use by multiple goroutines. The zero Rules has no
// domains.
type Rules struct {
	domains map[string]*DomainRules
	src     []*Domain
	files   []string
	digest  string // of the files' names and contents, as Load read them
}

// DomainRules are the compiled rules of one domain. They are immutable and
// safe for concurrent use; a nil *DomainRules matches nothing.
type DomainRules struct {
	name string
	root level
}

// A level holds the rules of one level of the tree, by key.
type level map[string]*keyRules

// keyRules are the rules of one level for one key, in the order Match
// tries them.
type keyRules struct {
	exact     map[string]*Rule // by value
	wildcards []*Rule          // in file order
	keyOnly   *Rule
}

// A Rule is one compiled descriptor of the tree. Rules are shared by every
// request that matches them and must not be modified.
type Rule struct {
	// Key is the descriptor's key.
	Key string
	// Value is the value matched: "" for a key-only rule, which matches
	// any value, and the pattern for a wildcard rule.
	Value string
	// Wildcard reports whether Value contains '*', each matching any run
	// of characters.
	Wildcard bool
	// Path names the rule for metrics and headers: its levels, from the
	// top, joined by ".", each "key" for a key-only rule or "key=value",
	// such as "generic_key=login.remote_address".
	Path string
	// Levels are the rules matched at each level, from the top down to
	// this one: Levels[len(Levels)-1] is the rule itself.
	Levels []*Rule
	// Limits are the limits that apply, all of them; empty means none.
	Limits []RuleLimit
	// Unlimited means every request passes, uncounted; Limits is empty.
	Unlimited bool
	// Replaces lists the names of the limits that an Unlimited rule
	// replaces. (Other rules carry them in Limits.)
	Replaces []string
	// ShadowMode, QuotaMode, DetailedMetric, ValueToMetric,
	// ShareThreshold and ConsumeWhenOver are the descriptor's flags: see
	// Descriptor.
	ShadowMode, QuotaMode, DetailedMetric, ValueToMetric, ShareThreshold, ConsumeWhenOver bool
	// Metadata is the descriptor's metadata, shared: do not modify it.
	Metadata map[string]any
	// IPPrefix, when set, counts a request value that is an IP address by
	// its network: IPv4 addresses by their first V4 bits, IPv6 by their
	// first V6 bits. Values that are not IP addresses count as they are.
	IPPrefix IPPrefix
	// File and Line are where the descriptor is defined (0 if unknown).
	File string
	Line int

	glob     glob  // Value compiled, for a Wildcard rule
	children level // the next level, nil if none
}

// A RuleLimit is one limit of a Rule.
type RuleLimit struct {
	// Limit is the limit to apply: its Algorithm, Requests per Window,
	// where Window comes from the unit or window, and Burst.
	backend.Limit
	// Name is the limit's name, "" if none.
	Name string
	// Replaces lists the names of the limits that this limit removes from
	// a request when it applies.
	Replaces []string
}

// Domain returns the rules of the domain named name, or nil if there is
// none.
func (r *Rules) Domain(name string) *DomainRules {
	if r == nil {
		return nil
	}
	return r.domains[name]
}

// Domains returns the syntax trees the rules were compiled from, in load
// order, for display (see Marshal). They must not be modified.
func (r *Rules) Domains() []*Domain {
	if r == nil {
		return nil
	}
	return slices.Clone(r.src)
}

// Files returns the names of the files the rules were read from, in the
// order they were read.
func (r *Rules) Files() []string {
	if r == nil {
		return nil
	}
	return slices.Clone(r.files)
}

// Name returns the domain's name.
func (d *DomainRules) Name() string {
	if d == nil {
		return ""
	}
	return d.name
}

// All yields every rule of the domain, each before the rules nested in
// it; at each level, by key in byte order, and for a key its exact values
// in byte order, then its wildcard values in file order, then its
// key-only rule.
func (d *DomainRules) All() iter.Seq[*Rule] {
	return func(yield func(*Rule) bool) {
		if d != nil {
			d.root.all(yield)
		}
	}
}

// all yields the rules of lv and their children, and reports whether
// yield wants more.
func (lv level) all(yield func(*Rule) bool) bool {
	for _, key := range slices.Sorted(maps.Keys(lv)) {
		kr := lv[key]
		rules := make([]*Rule, 0, len(kr.exact)+len(kr.wildcards)+1)
		for _, v := range slices.Sorted(maps.Keys(kr.exact)) {
			rules = append(rules, kr.exact[v])
		}
		rules = append(rules, kr.wildcards...)
		if kr.keyOnly != nil {
			rules = append(rules, kr.keyOnly)
		}
		for _, r := range rules {
			if !yield(r) || !r.children.all(yield) {
				return false
			}
		}
	}
	return true
}
