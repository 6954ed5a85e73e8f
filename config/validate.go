package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
)

// A validator checks the meaning of a syntax tree, one domain at a time;
// the decoder has checked its shape.
type validator struct {
	file string // of the domain being checked
	errs errorList
}

func (v *validator) errorf(p pos, format string, args ...any) {
	v.errs.add(v.file, p, format, args...)
}

func (v *validator) domain(d *Domain) {
	v.file = d.file
	if !d.src.broken {
		if _, ok := d.src.fields["domain"]; !ok && d.Domain == "" {
			v.errorf(d.src.pos, "missing domain")
		} else if d.Domain == "" {
			v.errorf(d.src.at("domain"), "domain is empty")
		}
	}
	v.descriptors(d.Descriptors, 1)
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

func (v *validator) descriptors(list []*Descriptor, depth int) {
	first := make(map[keyValue]*Descriptor, len(list))
	for _, d := range list {
		if d == nil {
			continue
		}
		if !d.src.broken && d.Key != "" {
			kv := keyValue{d.Key, d.Value}
			if f, ok := first[kv]; ok {
				at := ""
				if p := f.src.pos; p.line > 0 {
					at = fmt.Sprintf(" (first at line %d)", p.line)
				}
				if d.Value == "" {
					v.errorf(d.src.pos, "duplicate descriptor key %q without value%s", d.Key, at)
				} else {
					v.errorf(d.src.pos, "duplicate descriptor key %q value %q%s", d.Key, d.Value, at)
				}
			} else {
				first[kv] = d
			}
		}
		v.descriptor(d, depth)
	}
}

func (v *validator) descriptor(d *Descriptor, depth int) {
	if depth > maxDepth {
		v.errorf(d.src.pos, "descriptors nested more than %d levels deep", maxDepth)
		return
	}
	s := &d.src
	if !s.broken {
		switch _, ok := s.fields["key"]; {
		case !ok && d.Key == "":
			v.errorf(s.pos, "descriptor has no key")
		case d.Key == "":
			v.errorf(s.at("key"), "descriptor key is empty")
		}
		if d.RateLimit != nil && d.RateLimits != nil {
			v.errorf(s.at("rate_limits"), "descriptor has both rate_limit and rate_limits: use one")
		} else if d.RateLimits != nil && len(d.RateLimits) == 0 {
			v.errorf(s.at("rate_limits"), "rate_limits is empty")
		}
		if d.ShareThreshold && !strings.Contains(d.Value, "*") {
			v.errorf(s.at("share_threshold"), "share_threshold needs a wildcard value (one with '*'), got %q", d.Value)
		}
	}
	if d.RateLimit != nil {
		v.rateLimit(d.RateLimit, false)
	}
	type counter struct {
		alg    backend.Algorithm
		window time.Duration
	}
	first := make(map[counter]int, len(d.RateLimits)) // index in d.RateLimits
	for i, rl := range d.RateLimits {
		if rl == nil {
			continue
		}
		l, ok := v.rateLimit(rl, true)
		if !ok {
			continue
		}
		c := counter{l.Algorithm, l.Window}
		if j, ok := first[c]; ok {
			at := ""
			if p := d.RateLimits[j].src.pos; p.line > 0 {
				at = fmt.Sprintf(" at line %d", p.line)
			}
			v.errorf(rl.src.pos, "rate_limits[%d] has the same algorithm (%v) and window (%v) as rate_limits[%d]%s: they would share one counter",
				i, l.Algorithm, l.Window, j, at)
			continue
		}
		first[c] = i
	}
	v.descriptors(d.Descriptors, depth+1)
}

// rateLimit checks a rate limit and returns it compiled, with ok false if
// it has errors or is unlimited. inList is true for an item of rate_limits.
func (v *validator) rateLimit(rl *RateLimit, inList bool) (l backend.Limit, ok bool) {
	ok = true
	s := &rl.src
	fail := func(field, format string, args ...any) {
		v.errorf(s.at(field), format, args...)
		ok = false
	}
	if rl.src.broken {
		return backend.Limit{}, false
	}
	if rl.Unlimited {
		if inList {
			fail("unlimited", "unlimited is not allowed in rate_limits (use rate_limit)")
		}
		for _, c := range []struct {
			field string
			set   bool
		}{
			{"unit", rl.Unit != ""},
			{"window", rl.Window != ""},
			{"requests_per_unit", rl.RequestsPerUnit > 0},
			{"algorithm", rl.Algorithm != ""},
			{"burst", rl.Burst > 0},
		} {
			if c.set {
				fail(c.field, "unlimited: true excludes %s", c.field)
			}
		}
	}
	for _, r := range rl.Replaces {
		switch {
		case r.src.broken:
		case r.Name == "":
			v.errorf(r.src.pos, "replaces entry has an empty name")
			ok = false
		case r.Name == rl.Name:
			v.errorf(r.src.at("name"), "limit %q replaces itself", r.Name)
			ok = false
		}
	}
	switch {
	case rl.Unit != "" && rl.Window != "":
		fail("window", "unit and window exclude each other: use one")
	case rl.Unit != "":
		w, known := units[strings.ToLower(rl.Unit)]
		if !known {
			fail("unit", "unknown unit %q (want second, minute, hour, day, week, month or year)", rl.Unit)
		}
		l.Window = w
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
	if rl.Algorithm != "" {
		a, err := backend.ParseAlgorithm(strings.ToLower(rl.Algorithm))
		if err != nil {
			fail("algorithm", "%v", err)
		}
		l.Algorithm = a
	}
	l.Requests = uint64(rl.RequestsPerUnit)
	l.Burst = uint64(rl.Burst)
	if !ok || rl.Unlimited {
		return backend.Limit{}, false
	}
	switch {
	case l.Burst != 0 && l.Algorithm != backend.TokenBucket && l.Algorithm != backend.GCRA:
		fail("burst", "burst applies to token_bucket and gcra only, not %v", l.Algorithm)
	case l.Algorithm == backend.SlidingLog && l.Requests > backend.MaxSlidingLog:
		fail("requests_per_unit", "sliding_log allows at most %d requests per window, got %d (use sliding_window)",
			backend.MaxSlidingLog, l.Requests)
	default:
		if err := l.Validate(); err != nil {
			fail("burst", "%v", err) // the burst of a gcra limit, or its mapping
		}
	}
	return l, ok
}
