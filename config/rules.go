package config

import (
	"slices"
	"strings"

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

// Compile checks domains, which may come from any number of files, together
// and compiles them into Rules. It repeats every check of Parse (so domains
// built in code are checked too) and adds one: a domain is defined once
// across all files (the error names both places). It returns every error it
// found (at most 20, then one that says how many more), each an *Error,
// joined with errors.Join.
//
// The Rules keep domains, for Domains, and share their Metadata maps: the
// caller must not modify them afterwards.
func Compile(domains []*Domain) (*Rules, error) {
	var files []string
	for _, d := range domains {
		if d != nil && d.file != "" && !slices.Contains(files, d.file) {
			files = append(files, d.file)
		}
	}
	return compile(domains, files)
}

func compile(domains []*Domain, files []string) (*Rules, error) {
	v := &validator{}
	for _, d := range domains {
		if d == nil {
			v.errs.add("", pos{}, "nil domain")
			continue
		}
		v.domain(d)
	}
	checkDomainNames(domains, &v.errs)
	if err := v.errs.err(); err != nil {
		return nil, err
	}
	r := &Rules{
		domains: make(map[string]*DomainRules, len(domains)),
		src:     slices.Clip(slices.Clone(domains)),
		files:   slices.Clip(slices.Clone(files)),
	}
	for _, d := range domains {
		dr := &DomainRules{name: d.Domain}
		dr.root = compileLevel(d.file, d.Descriptors, nil)
		r.domains[d.Domain] = dr
	}
	return r, nil
}

// compileLevel compiles the descriptors of one level, under the rules
// parents (nil at the top).
func compileLevel(file string, list []*Descriptor, parents []*Rule) level {
	if len(list) == 0 {
		return nil
	}
	lv := make(level)
	for _, d := range list {
		r := compileRule(file, d, parents)
		kr := lv[d.Key]
		if kr == nil {
			kr = &keyRules{}
			lv[d.Key] = kr
		}
		switch {
		case r.Wildcard:
			kr.wildcards = append(kr.wildcards, r)
		case r.Value == "":
			kr.keyOnly = r
		default:
			if kr.exact == nil {
				kr.exact = make(map[string]*Rule)
			}
			kr.exact[r.Value] = r
		}
	}
	return lv
}

func compileRule(file string, d *Descriptor, parents []*Rule) *Rule {
	r := &Rule{
		Key:             d.Key,
		Value:           d.Value,
		Wildcard:        strings.Contains(d.Value, "*"),
		ShadowMode:      d.ShadowMode,
		QuotaMode:       d.QuotaMode,
		DetailedMetric:  d.DetailedMetric,
		ValueToMetric:   d.ValueToMetric,
		ShareThreshold:  d.ShareThreshold,
		ConsumeWhenOver: d.ConsumeWhenOver,
		Metadata:        d.Metadata,
		File:            file,
		Line:            d.src.line,
	}
	if r.Wildcard {
		r.glob = compileGlob(d.Value)
	}
	r.Levels = append(slices.Clone(parents), r)
	var path strings.Builder
	for i, l := range r.Levels {
		if i > 0 {
			path.WriteByte('.')
		}
		path.WriteString(l.Key)
		if l.Value != "" {
			path.WriteByte('=')
			path.WriteString(l.Value)
		}
	}
	r.Path = path.String()
	limits := d.RateLimits
	if d.RateLimit != nil {
		limits = []*RateLimit{d.RateLimit}
	}
	for _, rl := range limits {
		var replaces []string
		for _, rep := range rl.Replaces {
			replaces = append(replaces, rep.Name)
		}
		if rl.Unlimited {
			r.Unlimited = true
			r.Replaces = replaces
			continue
		}
		l, _ := (&validator{}).rateLimit(rl, false) // checked by compile
		r.Limits = append(r.Limits, RuleLimit{Limit: l, Name: rl.Name, Replaces: replaces})
	}
	r.children = compileLevel(file, d.Descriptors, r.Levels)
	return r
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
