package config

import (
	"bytes"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// A Domain is one YAML document of a rules file: a domain name and its
// descriptor tree. Domain, Descriptor, RateLimit and Replace form the syntax
// tree that Parse returns and Marshal renders; their fields hold what the
// file says, unchecked strings included, and Compile checks them.
//
// A tree that Parse returned remembers the places of its parts for error
// messages; one built in code has none, and its errors name no place.
type Domain struct {
	// Domain is the name that requests give in their domain field.
	Domain string `yaml:"domain"`
	// Descriptors are the top level of the tree.
	Descriptors []*Descriptor `yaml:"descriptors,omitempty"`

	file string // name of the file it was parsed from
	src  src
}

// A Descriptor is one rule of the tree: it matches a request descriptor's
// entry by Key and Value, and its Descriptors match the next entry.
type Descriptor struct {
	// Key is the entry's key to match. It is required.
	Key string `yaml:"key"`
	// Value is the entry's value to match: "" matches any value (a key-only
	// rule, each value counted apart), and a Value containing '*' is a
	// pattern in which each '*' matches any run of characters.
	Value string `yaml:"value,omitempty"`
	// RateLimit is the limit applied when a request descriptor ends here.
	// Nil with RateLimits empty means no limit.
	RateLimit *RateLimit `yaml:"rate_limit,omitempty"`
	// RateLimits are several limits that all apply (a ratelimitd
	// extension); it excludes RateLimit.
	RateLimits []*RateLimit `yaml:"rate_limits,omitempty"`
	// ShadowMode reports an over-limit request as allowed, counting it in
	// metrics only.
	ShadowMode bool `yaml:"shadow_mode,omitempty"`
	// QuotaMode makes a request over its limit only when every quota-mode
	// descriptor of it is over.
	QuotaMode bool `yaml:"quota_mode,omitempty"`
	// DetailedMetric keys this rule's metrics by the request's values.
	DetailedMetric bool `yaml:"detailed_metric,omitempty"`
	// ValueToMetric puts the request's value into the metric name.
	ValueToMetric bool `yaml:"value_to_metric,omitempty"`
	// ShareThreshold makes every value that a wildcard Value matches share
	// one counter. It requires a Value with '*'.
	ShareThreshold bool `yaml:"share_threshold,omitempty"`
	// ConsumeWhenOver counts this descriptor's hits even when the request
	// is refused (a ratelimitd extension, for usage reported after the
	// fact).
	ConsumeWhenOver bool `yaml:"consume_when_over,omitempty"`
	// IPPrefix, when not nil, counts a request value that is an IP
	// address by its network (a ratelimitd extension): see
	// Rule.IPPrefix. Here a zero field means its default, 32 for V4 and
	// 64 for V6.
	IPPrefix *IPPrefix `yaml:"ip_prefix,omitempty"`
	// Metadata is free-form data returned with decisions, as JSON-like
	// values: string, bool, int, float64, nil, []any and map[string]any.
	// Parse turns whole-numbered floats into int, so that it reads back
	// what Marshal writes.
	Metadata map[string]any `yaml:"metadata,omitempty"`
	// Descriptors match the request descriptor's next entry.
	Descriptors []*Descriptor `yaml:"descriptors,omitempty"`

	src src
}

// A RateLimit is one limit of a Descriptor, as written: Compile turns it
// into a RuleLimit.
type RateLimit struct {
	// Unit is the period of the limit, in any case: second, minute, hour,
	// day, week, month (30 days) or year (365 days). It excludes Window.
	Unit string `yaml:"unit,omitempty"`
	// RequestsPerUnit is how many requests pass per Unit (or Window);
	// 0 refuses every request.
	RequestsPerUnit uint32 `yaml:"requests_per_unit,omitempty"`
	// Unlimited lets every request pass without counting it. It excludes
	// every other field but Name and Replaces.
	Unlimited bool `yaml:"unlimited,omitempty"`
	// Name names the limit, for Replaces and for the response.
	Name string `yaml:"name,omitempty"`
	// Replaces lists the limits that this limit removes from a request when
	// it applies.
	Replaces []Replace `yaml:"replaces,omitempty"`
	// Algorithm is how requests are counted (a ratelimitd extension):
	// "" or sliding_window, fixed_window, sliding_log, token_bucket or gcra.
	Algorithm string `yaml:"algorithm,omitempty"`
	// Burst is how many requests may pass at once under token_bucket and
	// gcra (a ratelimitd extension); 0 means RequestsPerUnit.
	Burst uint32 `yaml:"burst,omitempty"`
	// Window is the period of the limit as a Go duration such as "30s" or
	// "1h30m" (a ratelimitd extension). It excludes Unit.
	Window string `yaml:"window,omitempty"`

	src src
}

// A Replace names a limit that a RateLimit replaces.
type Replace struct {
	// Name is the Name of the replaced limit.
	Name string `yaml:"name"`

	src src
}

// src records where a part of the syntax tree was parsed from.
type src struct {
	pos                   // of the part's mapping
	fields map[string]pos // of the value of each field present
	// broken is set when a field failed to decode or was unknown: checks
	// that could only repeat that error in other words are skipped.
	broken bool
}

// at returns the position of field's value, or of the whole part if field
// is "" or absent.
func (s *src) at(field string) pos {
	if p, ok := s.fields[field]; ok {
		return p
	}
	return s.pos
}

// Marshal renders domains as YAML, one document per domain, such that Parse
// reads back the same domains (positions aside). It does not check them.
func Marshal(domains []*Domain) ([]byte, error) {
	if len(domains) == 0 {
		return []byte{}, nil // the encoder fails on a stream without documents
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	for _, d := range domains {
		if err := enc.Encode(d); err != nil {
			return nil, fmt.Errorf("config: marshal domain %q: %w", d.Domain, err)
		}
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("config: marshal: %w", err)
	}
	return buf.Bytes(), nil
}
