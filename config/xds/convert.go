package xds

import (
	"errors"
	"fmt"
	"strings"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/ratelimitd/ratelimitd/config"
)

// TypeURL is the type URL of the resources that a Client subscribes to:
// envoyproxy/ratelimit's RateLimitConfig, one domain each.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// Compile converts a set of RateLimitConfig resources, as one xDS response
// carries them, into Rules, checking them as config.Load checks rule files:
// each resource is one domain, and no two resources may name the same
// domain. An empty set yields Rules with no domains. The error, if any,
// names each resource at fault by its name (or its index, when it has
// none or cannot be decoded); past MaxBadResources resources at fault, it
// only counts the others. opts bound the work as for config.Compile.
func Compile(resources []*anypb.Any, opts ...config.Option) (*config.Rules, error) {
	domains := make([]*config.Domain, 0, len(resources))
	for _, res := range resources {
		rc, err := decode(res)
		if err != nil {
			break // attribute below names it
		}
		domains = append(domains, Domain(rc))
	}
	if len(domains) == len(resources) {
		// The common case, a good set, is compiled once; only a set at
		// fault is compiled again, resource by resource, to name those at
		// fault.
		rules, err := config.Compile(domains, opts...)
		if err == nil {
			return rules, nil
		}
		if aerr := attribute(resources, opts); aerr != nil {
			return nil, aerr
		}
		return nil, fmt.Errorf("rate limit configs: %w", err)
	}
	return nil, attribute(resources, opts)
}

// attribute returns the errors of each resource at fault in a set that
// config.Compile refused or that does not decode, each named by its
// resource, or nil when every resource is good alone and only the set as
// a whole is at fault (a bound of opts on all of them).
func attribute(resources []*anypb.Any, opts []config.Option) error {
	var errs []error
	first := make(map[string]string, len(resources)) // domain -> resource
	for i, res := range resources {
		rc, err := decode(res)
		if err != nil {
			errs = append(errs, fmt.Errorf("resource %d: %w", i, err))
			continue
		}
		name := resourceName(rc, i)
		d := Domain(rc)
		if _, err := config.Compile([]*config.Domain{d}, opts...); err != nil {
			errs = append(errs, prefixLines(name, err))
			continue
		}
		if prev, dup := first[d.Domain]; dup {
			errs = append(errs, fmt.Errorf("%s: duplicate domain %q (first in %s)", name, d.Domain, prev))
			continue
		}
		first[d.Domain] = name
	}
	if len(errs) == 0 {
		return nil
	}
	return joinBounded(errs)
}

// MaxBadResources is how many resources at fault Compile's error describes;
// it counts the others, so that a NACK and its log line stay short however
// many resources a set gets wrong.
const MaxBadResources = 10

// joinBounded joins the errors of the first MaxBadResources resources at
// fault and counts the rest.
func joinBounded(errs []error) error {
	if len(errs) <= MaxBadResources {
		return errors.Join(errs...)
	}
	more := fmt.Errorf("... and %d more resources refused", len(errs)-MaxBadResources)
	return errors.Join(append(errs[:MaxBadResources:MaxBadResources], more)...)
}

// decode unpacks one resource, refusing any other type than TypeURL.
func decode(res *anypb.Any) (*rlsconf.RateLimitConfig, error) {
	if res == nil {
		return nil, errors.New("nil resource")
	}
	if res.GetTypeUrl() != TypeURL {
		return nil, fmt.Errorf("type %q, want %q", res.GetTypeUrl(), TypeURL)
	}
	rc := new(rlsconf.RateLimitConfig)
	if err := res.UnmarshalTo(rc); err != nil {
		return nil, fmt.Errorf("decode RateLimitConfig: %w", err)
	}
	return rc, nil
}

// resourceName names a resource in errors: `resource "name"`, or by its
// index when it has no name.
func resourceName(rc *rlsconf.RateLimitConfig, i int) string {
	if rc.GetName() == "" {
		return fmt.Sprintf("resource %d", i)
	}
	return fmt.Sprintf("resource %q", rc.GetName())
}

// prefixLines puts prefix before each line of err's message, so that every
// error that config.Compile joins names the resource.
func prefixLines(prefix string, err error) error {
	lines := strings.Split(err.Error(), "\n")
	for i, l := range lines {
		lines[i] = prefix + ": " + l
	}
	return errors.New(strings.Join(lines, "\n"))
}

// Domain converts one RateLimitConfig into the syntax tree that config.Parse
// makes of a YAML document, unchecked: config.Compile checks it. A
// RateLimitConfig has no room for ratelimitd's extensions (algorithm,
// burst, window, rate_limits, ip_prefix, metadata...), so the tree has none.
func Domain(rc *rlsconf.RateLimitConfig) *config.Domain {
	return &config.Domain{
		Domain:      rc.GetDomain(),
		Descriptors: descriptors(rc.GetDescriptors()),
	}
}

// descriptors converts one level of the descriptor tree.
func descriptors(list []*rlsconf.RateLimitDescriptor) []*config.Descriptor {
	if len(list) == 0 {
		return nil
	}
	out := make([]*config.Descriptor, 0, len(list))
	for _, d := range list {
		if d == nil {
			continue // a repeated message field decodes no nil element
		}
		out = append(out, &config.Descriptor{
			Key:            d.GetKey(),
			Value:          d.GetValue(),
			RateLimit:      rateLimit(d.GetRateLimit()),
			ShadowMode:     d.GetShadowMode(),
			DetailedMetric: d.GetDetailedMetric(),
			Descriptors:    descriptors(d.GetDescriptors()),
		})
	}
	return out
}

// rateLimit converts a policy; nil stays nil (no limit). The unit is named
// as in a YAML file; UNKNOWN (0) is no unit, which config.Compile refuses
// unless the limit is unlimited.
func rateLimit(p *rlsconf.RateLimitPolicy) *config.RateLimit {
	if p == nil {
		return nil
	}
	rl := &config.RateLimit{
		RequestsPerUnit: p.GetRequestsPerUnit(),
		Unlimited:       p.GetUnlimited(),
		Name:            p.GetName(),
	}
	if u := p.GetUnit(); u != rlsconf.RateLimitUnit_UNKNOWN {
		rl.Unit = strings.ToLower(u.String())
	}
	for _, r := range p.GetReplaces() {
		rl.Replaces = append(rl.Replaces, config.Replace{Name: r.GetName()})
	}
	return rl
}
