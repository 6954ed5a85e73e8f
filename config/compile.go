package config

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/internal/envoyunit"
)

// Compile checks domains, which may come from any number of files, together
// and compiles them into Rules. It repeats every check of Parse (so domains
// built in code are checked too) and adds one: a domain is defined once
// across all files (the error names both places). It returns every error it
// found (at most 20, then one that says how many more), each an *Error,
// joined with errors.Join. Its work is bounded by DefaultLimits, or by the
// Limits of a WithLimits option.
//
// The Rules keep domains, for Domains, and share their Metadata maps: the
// caller must not modify them afterwards.
func Compile(domains []*Domain, opts ...Option) (*Rules, error) {
	o := buildOptions(opts)
	var files []string
	for _, d := range domains {
		if d != nil && d.file != "" && !slices.Contains(files, d.file) {
			files = append(files, d.file)
		}
	}
	c := &compiler{limits: o.limits, algorithm: o.algorithm}
	compiled := make([]*DomainRules, len(domains))
	for i, d := range domains {
		if d == nil {
			c.errs.add("", pos{}, "nil domain")
			continue
		}
		compiled[i] = c.domain(d)
	}
	return c.finish(domains, compiled, files)
}

// finish checks that no domain name is defined twice, and returns every
// error the compiler found or the Rules of domains, compiled, read from
// files.
func (c *compiler) finish(domains []*Domain, compiled []*DomainRules, files []string) (*Rules, error) {
	checkDomainNames(domains, &c.errs)
	if err := c.errs.err(); err != nil {
		return nil, err
	}
	r := &Rules{
		domains: make(map[string]*DomainRules, len(domains)),
		src:     slices.Clip(slices.Clone(domains)),
		files:   slices.Clip(slices.Clone(files)),
	}
	for _, dr := range compiled {
		r.domains[dr.name] = dr
	}
	return r, nil
}

// A compiler checks the meaning of a syntax tree, whose shape the decoder
// has checked, and compiles it in the same pass, one domain at a time:
// each check yields the compiled value it checked. What it compiles from a
// tree with errors is incomplete and must be dropped.
type compiler struct {
	limits    Limits
	algorithm backend.Algorithm // of the rate limits that name none
	errs      errorList

	// Of the domain being compiled:
	file  string
	rules int   // descriptors so far, to check limits.MaxRules
	paths int64 // bytes of the rules' paths so far, for limits.MaxPathBytes
	full  bool  // past one of those two bounds: compile nothing more
}

func (c *compiler) errorf(p pos, format string, args ...any) {
	c.errs.add(c.file, p, format, args...)
}

// domain checks and compiles one domain.
func (c *compiler) domain(d *Domain) *DomainRules {
	c.file = d.file
	c.rules, c.paths, c.full = 0, 0, false
	if !d.src.broken {
		if _, ok := d.src.fields["domain"]; !ok && d.Domain == "" {
			c.errorf(d.src.pos, "missing domain")
		} else if d.Domain == "" {
			c.errorf(d.src.at("domain"), "domain is empty")
		}
	}
	return &DomainRules{name: d.Domain, root: c.level(d.Descriptors, nil)}
}

// checkDomainNames reports every domain name defined more than once.
func checkDomainNames(domains []*Domain, errs *errorList) {
	first := make(map[string]*Domain, len(domains))
	for _, d := range domains {
		if d == nil || d.Domain == "" {
			continue
		}
		if f, ok := first[d.Domain]; ok {
			errs.add(d.file, d.src.at("domain"), "duplicate domain %q (first at %s)",
				d.Domain, place(f.file, f.src.at("domain")))
			continue
		}
		first[d.Domain] = d
	}
}

// keyValue identifies a descriptor among its siblings.
type keyValue struct{ key, value string }

// level checks and compiles the descriptors of one level, under the rule
// parent (nil at the top).
func (c *compiler) level(list []*Descriptor, parent *Rule) level {
	if len(list) == 0 {
		return nil
	}
	lv := make(level)
	first := make(map[keyValue]*Descriptor, len(list))
	for _, d := range list {
		if c.full {
			break
		}
		if d == nil {
			c.errorf(pos{}, "nil descriptor")
			continue
		}
		dup := false
		if !d.src.broken && d.Key != "" {
			kv := keyValue{d.Key, d.Value}
			if f, ok := first[kv]; ok {
				dup = true
				at := ""
				if p := f.src.pos; p.line > 0 {
					at = fmt.Sprintf(" (first at line %d)", p.line)
				}
				if d.Value == "" {
					c.errorf(d.src.pos, "duplicate descriptor key %q without value%s", d.Key, at)
				} else {
					c.errorf(d.src.pos, "duplicate descriptor key %q value %q%s", d.Key, d.Value, at)
				}
			} else {
				first[kv] = d
			}
		}
		r := c.rule(d, parent)
		if r == nil || dup {
			continue
		}
		kr := lv[r.Key]
		if kr == nil {
			kr = &keyRules{}
			lv[r.Key] = kr
		}
		switch {
		case r.Wildcard && len(kr.wildcards) == c.limits.MaxWildcards:
			c.errorf(d.src.pos, "key %q has more than %d wildcard values at this level", r.Key, c.limits.MaxWildcards)
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

// rule checks and compiles descriptor d, a child of the rule parent (nil
// at the top), and the tree below it. It returns nil for a descriptor that
// could never match (too deep, or with too long a key) and for one past a
// bound of the domain.
func (c *compiler) rule(d *Descriptor, parent *Rule) *Rule {
	s := &d.src
	var ancestors []*Rule
	pathLen := len(d.Key)
	if d.Value != "" {
		pathLen += 1 + len(d.Value)
	}
	if parent != nil {
		ancestors = parent.Levels
		pathLen += len(parent.Path) + 1
	}
	depth := len(ancestors) + 1
	if depth > MaxDepth {
		c.errorf(s.pos, "descriptors nested more than %d levels deep: a request descriptor has at most %d entries, so no request can match this rule",
			MaxDepth, MaxDepth)
		return nil
	}
	if len(d.Key) > MaxKeyBytes {
		// Its tree is not compiled (nor checked): it could not match.
		c.errorf(s.at("key"), "descriptor key is %d bytes, over the maximum %d: no request can match it", len(d.Key), MaxKeyBytes)
		return nil
	}
	if c.rules++; c.rules > c.limits.MaxRules {
		c.errorf(s.pos, "domain has more than %d descriptors", c.limits.MaxRules)
		c.full = true
		return nil
	}
	if c.paths += int64(pathLen); c.paths > c.limits.MaxPathBytes {
		c.errorf(s.pos, "the paths of the domain's rules are over the maximum %d bytes in all (a rule's path repeats the keys and values of the rules above it)",
			c.limits.MaxPathBytes)
		c.full = true
		return nil
	}
	if !s.broken {
		switch _, ok := s.fields["key"]; {
		case !ok && d.Key == "":
			c.errorf(s.pos, "descriptor has no key")
		case d.Key == "":
			c.errorf(s.at("key"), "descriptor key is empty")
		}
		if d.RateLimit != nil && d.RateLimits != nil {
			c.errorf(s.at("rate_limits"), "descriptor has both rate_limit and rate_limits: use one")
		} else if d.RateLimits != nil && len(d.RateLimits) == 0 {
			c.errorf(s.at("rate_limits"), "rate_limits is empty")
		}
		if d.ShareThreshold && !strings.Contains(d.Value, "*") {
			c.errorf(s.at("share_threshold"), "share_threshold needs a wildcard value (one with '*'), got %q", d.Value)
		}
	}
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
		File:            c.file,
		Line:            s.line,
	}
	if d.IPPrefix != nil {
		r.IPPrefix = c.ipPrefix(d)
	}
	if r.Wildcard {
		r.glob = compileGlob(d.Value)
	}
	r.Levels = make([]*Rule, depth)
	copy(r.Levels, ancestors)
	r.Levels[depth-1] = r
	var path strings.Builder
	path.Grow(pathLen)
	if parent != nil {
		path.WriteString(parent.Path)
		path.WriteByte('.')
	}
	path.WriteString(r.Key)
	if r.Value != "" {
		path.WriteByte('=')
		path.WriteString(r.Value)
	}
	r.Path = path.String()

	if rl := d.RateLimit; rl != nil {
		if l, ok := c.rateLimit(rl, false); ok && rl.Unlimited {
			r.Unlimited = true
			r.Replaces = l.Replaces
		} else if ok {
			r.Limits = append(r.Limits, l)
		}
	}
	r.Limits = append(r.Limits, c.rateLimits(d.RateLimits, s.at("rate_limits"))...)
	if r.ConsumeWhenOver && slices.ContainsFunc(r.Limits, func(l RuleLimit) bool { return l.Algorithm == backend.Concurrency }) {
		// A slot held past the limit would be a slot over the cap: what
		// a concurrency limit exists to prevent.
		c.errorf(s.at("consume_when_over"), "consume_when_over does not apply to a concurrency limit (a slot past the limit would break the cap)")
	}
	r.children = c.level(d.Descriptors, r)
	return r
}

// rateLimits checks and compiles the items of a rate_limits list, at p,
// and returns those without errors. Two limits may not share a counter.
func (c *compiler) rateLimits(list []*RateLimit, p pos) []RuleLimit {
	type counter struct {
		alg    backend.Algorithm
		window time.Duration
	}
	var out []RuleLimit
	first := make(map[counter]int, len(list)) // index in list
	for i, rl := range list {
		if rl == nil {
			c.errorf(p, "rate_limits[%d] is nil", i)
			continue
		}
		l, ok := c.rateLimit(rl, true)
		if !ok {
			continue
		}
		k := counter{l.Algorithm, l.Window}
		if j, ok := first[k]; ok {
			at := ""
			if p := list[j].src.pos; p.line > 0 {
				at = fmt.Sprintf(" at line %d", p.line)
			}
			c.errorf(rl.src.pos, "rate_limits[%d] has the same algorithm (%v) and window (%v) as rate_limits[%d]%s: they would share one counter",
				i, l.Algorithm, l.Window, j, at)
			continue
		}
		first[k] = i
		out = append(out, l)
	}
	return out
}

// ipPrefix checks d's IPPrefix and returns it with its defaults filled in.
func (c *compiler) ipPrefix(d *Descriptor) IPPrefix {
	s := &d.src
	p := *d.IPPrefix
	for _, f := range []struct {
		name string
		bits *int
		def  int
	}{
		{"v4", &p.V4, DefaultIPPrefixV4},
		{"v6", &p.V6, DefaultIPPrefixV6},
	} {
		at, given := s.fields["ip_prefix."+f.name]
		if !given {
			at = s.at("ip_prefix")
		}
		switch {
		case *f.bits == 0 && !given:
			*f.bits = f.def
		case *f.bits < 1 || *f.bits > maxBits(f.name):
			c.errorf(at, "ip_prefix %s must be a prefix length, from 1 to %d, got %d", f.name, maxBits(f.name), *f.bits)
		}
	}
	return p
}

// rateLimit checks a rate limit and returns it compiled, with ok false if
// it has errors. Of an unlimited one, only Name and Replaces are set.
// inList is true for an item of rate_limits.
func (c *compiler) rateLimit(rl *RateLimit, inList bool) (rlim RuleLimit, ok bool) {
	ok = true
	s := &rl.src
	fail := func(field, format string, args ...any) {
		c.errorf(s.at(field), format, args...)
		ok = false
	}
	if rl.src.broken {
		return RuleLimit{}, false
	}
	rlim.Name = rl.Name
	if rl.Unlimited {
		if inList {
			fail("unlimited", "unlimited is not allowed in rate_limits (use rate_limit)")
		}
		for _, f := range []struct {
			field string
			set   bool
		}{
			{"unit", rl.Unit != ""},
			{"window", rl.Window != ""},
			{"requests_per_unit", rl.RequestsPerUnit > 0},
			{"algorithm", rl.Algorithm != ""},
			{"burst", rl.Burst > 0},
		} {
			if f.set {
				fail(f.field, "unlimited: true excludes %s", f.field)
			}
		}
	}
	for _, r := range rl.Replaces {
		switch {
		case r.src.broken:
		case r.Name == "":
			c.errorf(r.src.pos, "replaces entry has an empty name")
			ok = false
		case r.Name == rl.Name:
			c.errorf(r.src.at("name"), "limit %q replaces itself", r.Name)
			ok = false
		}
		rlim.Replaces = append(rlim.Replaces, r.Name)
	}
	l := &rlim.Limit
	switch {
	case rl.Unit != "" && rl.Window != "":
		fail("window", "unit and window exclude each other: use one")
	case rl.Unit != "":
		u, known := envoyunit.ByName(rl.Unit)
		if !known {
			fail("unit", "unknown unit %q (want second, minute, hour, day, week, month or year)", rl.Unit)
		}
		l.Window = u.Window
	case rl.Window != "":
		w, err := time.ParseDuration(rl.Window)
		switch {
		case err != nil:
			fail("window", "window %q is not a duration such as \"30s\", \"5m\" or \"1h30m\"", rl.Window)
		case w < backend.MinWindow || w > backend.MaxWindow:
			fail("window", "window %v is outside [%v, %v]", w, backend.MinWindow, backend.MaxWindow)
		case w%time.Microsecond != 0:
			fail("window", "window %v is not a whole number of microseconds", w)
		}
		l.Window = w
	case !rl.Unlimited:
		fail("", "rate limit has neither unit nor window")
	}
	l.Algorithm = c.algorithm
	if rl.Algorithm != "" {
		a, err := backend.ParseAlgorithm(strings.ToLower(rl.Algorithm))
		if err != nil {
			fail("algorithm", "%v", err)
		}
		l.Algorithm = a
	}
	l.Requests = uint64(rl.RequestsPerUnit)
	l.Burst = uint64(rl.Burst)
	switch {
	case !ok:
		return RuleLimit{}, false
	case rl.Unlimited:
		return RuleLimit{Name: rlim.Name, Replaces: rlim.Replaces}, true
	}
	switch {
	case l.Burst != 0 && l.Algorithm != backend.TokenBucket && l.Algorithm != backend.GCRA:
		fail("burst", "burst applies to token_bucket and gcra only, not %v", l.Algorithm)
	case l.Algorithm == backend.SlidingLog && l.Requests > backend.MaxSlidingLog:
		fail("requests_per_unit", "sliding_log allows at most %d requests per window, got %d (use sliding_window)",
			backend.MaxSlidingLog, l.Requests)
	case l.Algorithm == backend.Concurrency && l.Requests > backend.MaxSlidingLog:
		fail("requests_per_unit", "concurrency allows at most %d held at once, got %d", backend.MaxSlidingLog, l.Requests)
	default:
		if err := l.Validate(); err != nil {
			fail("burst", "%v", err) // the burst of a gcra limit, or its mapping
		}
	}
	if !ok {
		return RuleLimit{}, false
	}
	return rlim, true
}

// CompileLimits checks and compiles the rate limits of one descriptor
// written as a rule file's rate_limits are, but built in code or decoded
// from another format, for those who take limits outside rule files, such
// as runtime overrides. It applies every check Compile applies to a
// rate_limits list (an empty one included); a limit's replaces are not
// checked against other rules. It returns every error, each an *Error
// that names no place, joined with errors.Join.
func CompileLimits(limits []*RateLimit, opts ...Option) ([]RuleLimit, error) {
	o := buildOptions(opts)
	c := &compiler{limits: o.limits, algorithm: o.algorithm}
	if len(limits) == 0 {
		c.errorf(pos{}, "rate_limits is empty")
	}
	out := c.rateLimits(limits, pos{})
	if err := c.errs.err(); err != nil {
		return nil, err
	}
	return slices.Clip(out), nil
}
