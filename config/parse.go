package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// Limits on what aliases may do to a document, besides
// Limits.MaxExpandedBytes: YAML aliases can repeat a subtree any number of
// times, and by nesting them, a small file can stand for a huge or (in
// go.yaml.in/yaml/v3) a cyclic tree.
const (
	// maxNesting bounds the nesting of a document, aliases followed.
	maxNesting = 1000
	// maxExpansion bounds how many nodes aliases may add to a document,
	// on top of expansionFactor times its own size.
	maxExpansion    = 10_000
	expansionFactor = 10
)

// Parse reads the YAML rules file data, using name in errors. Each YAML
// document in data is one domain; documents with nothing but comments and
// white space are skipped.
//
// Parse performs every check that one file allows, all but one of
// Compile's: that a domain is not also defined in another file. It returns
// either the domains, in file order, or every error it found (at most 20,
// then one that says how many more), each an *Error, joined with
// errors.Join. Its work is bounded by DefaultLimits, or by the Limits of a
// WithLimits option.
func Parse(name string, data []byte, opts ...Option) ([]*Domain, error) {
	o := buildOptions(opts)
	c := &compiler{limits: o.limits}
	domains := decode(name, data, o.limits, newBudget(o.limits), &c.errs)
	for _, d := range domains {
		c.domain(d) // checks it; the compiled rules are not kept
	}
	checkDomainNames(domains, &c.errs)
	if err := c.errs.err(); err != nil {
		return nil, err
	}
	return domains, nil
}

// decode decodes one file into its syntax tree, checking its shape, and
// adds its errors to errs. It takes what the file uses from b. It returns
// every domain it could decode, even with errors, so that they can be
// checked too.
func decode(name string, data []byte, limits Limits, b *budget, errs *errorList) []*Domain {
	d := &decoder{file: name, limits: limits, budget: b, errs: errs}
	switch {
	case int64(len(data)) <= b.bytes:
		b.bytes -= int64(len(data))
	case b.bytes == limits.MaxBytes:
		d.errorf(pos{}, "file is over the maximum %d bytes", limits.MaxBytes)
		b.bytes = -1 // spent: a Load reads no more files
		return nil
	default:
		d.errorf(pos{}, "rule files are over the maximum %d bytes together", limits.MaxBytes)
		b.bytes = -1
		return nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var domains []*Domain
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			if !errors.Is(err, io.EOF) {
				d.syntaxError(data, err)
			}
			break
		}
		dom, ok := d.document(&doc)
		if dom != nil {
			domains = append(domains, dom)
		}
		if !ok {
			break // past a bound: the rest of the file is not decoded
		}
	}
	return domains
}

// yamlLine matches the place in go.yaml.in/yaml/v3's syntax errors.
var yamlLine = regexp.MustCompile(`^line (\d+): `)

// A decoder turns the YAML nodes of one file into the syntax tree,
// reporting what is not of the right shape: unknown fields, wrong types,
// duplicate fields. The compiler then checks the tree's meaning.
type decoder struct {
	file   string
	limits Limits
	budget *budget
	errs   *errorList
	// rules counts the descriptors of the current document; past
	// limits.MaxRules, the decoder stops decoding descriptors.
	rules int
	full  bool // rules went past limits.MaxRules
}

func (d *decoder) errorf(p pos, format string, args ...any) {
	d.errs.add(d.file, p, format, args...)
}

func posOf(n *yaml.Node) pos { return pos{n.Line, n.Column} }

// deref returns the node that n stands for, following aliases.
func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// describe names what n is, for "must be a mapping, got ..." messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a sequence"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return "null"
		}
		if v := []rune(n.Value); len(v) > 40 {
			return strconv.Quote(string(v[:37]) + "...")
		}
		return strconv.Quote(n.Value)
	}
	return "nothing"
}

// document decodes one YAML document into a Domain. It returns nil for an
// empty document and for one that is not a mapping, and ok false when the
// document goes past a bound of d.limits that the whole file is refused
// for.
func (d *decoder) document(doc *yaml.Node) (dom *Domain, ok bool) {
	if len(doc.Content) == 0 {
		return nil, true
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" && root.Value == "" {
		return nil, true // only comments and white space
	}
	size, p, err := checkAliases(root, d.budget.expanded)
	if err != nil {
		d.errorf(p, "%v", err)
		return nil, true
	}
	if d.budget.expanded -= size; d.budget.expanded < 0 {
		d.budget.bytes = -1 // spent: a Load reads no more files
		d.errorf(p, "aliases expanded, the rule files are over the maximum %d bytes", d.limits.MaxExpandedBytes)
		return nil, false
	}
	root = deref(root)
	if root.Kind != yaml.MappingNode {
		d.errorf(posOf(root), "document must be a mapping with domain and descriptors, got %s", describe(root))
		return nil, true
	}
	d.rules, d.full = 0, false
	dom = &Domain{file: d.file, src: src{pos: posOf(root)}}
	for _, f := range d.fields(root, &dom.src) {
		switch f.name {
		case "domain":
			dom.Domain = d.string(f, &dom.src)
		case "descriptors":
			dom.Descriptors = d.descriptors(f, &dom.src)
		default:
			d.unknown(f, "domain", &dom.src)
		}
	}
	return dom, true
}

// checkAliases reports an alias that refers to a node that contains it, a
// document nested more than maxNesting levels deep, one that aliases expand
// past its size times expansionFactor plus maxExpansion nodes. Otherwise
// it returns the document's expanded size, each node counting the bytes of
// its text plus one, or budget+1 if that is over budget, with the place of
// the node (often an alias) at which, in document order, it went over;
// the decoder can then follow aliases freely. Its work is linear in the document as written:
// the size of an aliased node is counted once.
func checkAliases(root *yaml.Node, budget int64) (size int64, over pos, err error) {
	type info struct {
		done   bool  // else in progress: a node that contains the current one
		size   int   // nodes in the expanded subtree, capped at limit+1
		bytes  int64 // expanded size of the subtree, capped at budget+1
		height int   // levels in the expanded subtree
	}
	var count func(n *yaml.Node) int
	count = func(n *yaml.Node) int { // nodes written in the document
		c := 1
		for _, ch := range n.Content {
			c += count(ch)
		}
		return c
	}
	limit := expansionFactor*count(root) + maxExpansion
	budget = max(budget, 0)
	var sum int64 // expanded size of the nodes walked so far, in document order
	seen := make(map[*yaml.Node]*info)
	errDepth := fmt.Errorf("document nested more than %d levels deep", maxNesting)
	var walk func(n *yaml.Node, depth int) (*info, pos, error)
	walk = func(n *yaml.Node, depth int) (*info, pos, error) {
		if i := seen[n]; i != nil {
			switch {
			case !i.done:
				return nil, posOf(n), errors.New("node contains itself")
			case depth+i.height > maxNesting:
				return nil, posOf(n), errDepth
			}
			return i, pos{}, nil // an alias's target: counted at the alias
		}
		if depth > maxNesting {
			return nil, posOf(n), errDepth
		}
		i := &info{size: 1, height: 1, bytes: min(int64(len(n.Value))+1, budget+1)}
		seen[n] = i
		if n.Kind == yaml.AliasNode && n.Alias != nil {
			if a := seen[n.Alias]; a != nil && !a.done {
				return nil, posOf(n), fmt.Errorf("alias *%s refers to a node that contains it", n.Value)
			}
			a, p, err := walk(n.Alias, depth)
			if err != nil {
				return nil, p, err
			}
			i.size, i.height, i.bytes = a.size, a.height, a.bytes
		}
		if sum <= budget {
			if n.Kind == yaml.AliasNode {
				sum += i.bytes
			} else {
				sum += int64(len(n.Value)) + 1
			}
			if sum > budget {
				over = posOf(n)
			}
		}
		for _, ch := range n.Content {
			c, p, err := walk(ch, depth+1)
			if err != nil {
				return nil, p, err
			}
			i.size = min(i.size+c.size, limit+1)
			i.bytes = min(i.bytes+c.bytes, budget+1)
			i.height = max(i.height, c.height+1)
		}
		i.done = true
		return i, pos{}, nil
	}
	i, p, err := walk(root, 0)
	switch {
	case err != nil:
		return 0, p, err
	case i.size > limit:
		return 0, posOf(root), fmt.Errorf("aliases expand the document to more than %d nodes", limit)
	}
	return i.bytes, over, nil
}

// A field is one key and value of a YAML mapping.
type field struct {
	name     string
	key, val *yaml.Node // val has its aliases followed
}

// fields returns the fields of mapping n, merge keys ("<<: *base")
// resolved: n's own fields come first, then merged ones that n does not
// define, the earlier merged mapping winning. It reports keys that are not
// scalars and keys given twice, and records in s where each field's value
// is.
func (d *decoder) fields(n *yaml.Node, s *src) []field {
	var fs []field
	seen := make(map[string]*yaml.Node)
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if k.Kind != yaml.ScalarNode {
			d.errorf(posOf(k), "mapping key must be a string, got %s", describe(k))
			s.broken = true
			continue
		}
		name := scalarString(k)
		if first, ok := seen[name]; ok {
			d.errorf(posOf(k), "field %q given twice (first at line %d)", name, first.Line)
			s.broken = true
			continue
		}
		seen[name] = k
		fs = append(fs, field{name: name, key: k, val: v})
	}
	for len(merges) > 0 {
		m := merges[0]
		merges = merges[1:]
		switch m.Kind {
		case yaml.MappingNode:
			var inner src
			for _, f := range d.fields(m, &inner) {
				if _, ok := seen[f.name]; !ok {
					seen[f.name] = f.key
					fs = append(fs, f)
				}
			}
			s.broken = s.broken || inner.broken
		case yaml.SequenceNode:
			// Merge each mapping of the sequence, in order, before any
			// merge key that follows.
			list := make([]*yaml.Node, 0, len(m.Content)+len(merges))
			for _, c := range m.Content {
				list = append(list, deref(c))
			}
			merges = append(list, merges...)
		default:
			d.errorf(posOf(m), "merge (<<) value must be a mapping or a sequence of mappings, got %s", describe(m))
			s.broken = true
		}
	}
	for _, f := range fs {
		if s.fields == nil {
			s.fields = make(map[string]pos, len(fs))
		}
		s.fields[f.name] = posOf(f.val)
	}
	return fs
}

// unknown reports a field that a part of the tree does not have.
func (d *decoder) unknown(f field, what string, s *src) {
	d.errorf(posOf(f.key), "unknown field %q in %s", f.name, what)
	s.broken = true
}

// scalarString returns the string that scalar n stands for: "" for null,
// the decoded bytes for !!binary, else n's text whatever its type (so
// "value: 1" is "1"), as when yaml.v3 decodes a scalar into a string.
func scalarString(n *yaml.Node) string {
	switch n.ShortTag() {
	case "!!null":
		return ""
	case "!!binary":
		var s string
		if n.Decode(&s) == nil {
			return s
		}
	}
	return n.Value
}

// string decodes a string field.
func (d *decoder) string(f field, s *src) string {
	if f.val.Kind != yaml.ScalarNode {
		d.errorf(posOf(f.val), "%s must be a string, got %s", f.name, describe(f.val))
		s.broken = true
		return ""
	}
	return scalarString(f.val)
}

// bool decodes a boolean field: true or false (also True, yes, on...);
// null is false.
func (d *decoder) bool(f field, s *src) bool {
	var b bool
	if f.val.Kind != yaml.ScalarNode || f.val.Decode(&b) != nil {
		d.errorf(posOf(f.val), "%s must be true or false, got %s", f.name, describe(f.val))
		s.broken = true
		return false
	}
	return b
}

// uint32 decodes an integer field from 0 to math.MaxUint32; null is 0.
func (d *decoder) uint32(f field, s *src) uint32 {
	var u uint64
	switch {
	case f.val.Kind == yaml.ScalarNode && f.val.ShortTag() == "!!null":
		return 0
	case f.val.Kind == yaml.ScalarNode && f.val.ShortTag() == "!!int" && f.val.Decode(&u) == nil && u <= math.MaxUint32:
		return uint32(u)
	}
	d.errorf(posOf(f.val), "%s must be an integer from 0 to %d, got %s", f.name, uint32(math.MaxUint32), describe(f.val))
	s.broken = true
	return 0
}

// sequence returns the items of a sequence field, aliases followed. Null is
// an empty sequence (not nil); anything else is an error and nil.
func (d *decoder) sequence(f field, s *src) []*yaml.Node {
	switch {
	case f.val.Kind == yaml.ScalarNode && f.val.ShortTag() == "!!null":
		return []*yaml.Node{}
	case f.val.Kind != yaml.SequenceNode:
		d.errorf(posOf(f.val), "%s must be a sequence, got %s", f.name, describe(f.val))
		s.broken = true
		return nil
	}
	items := make([]*yaml.Node, len(f.val.Content))
	for i, n := range f.val.Content {
		items[i] = deref(n)
	}
	return items
}

// descriptors decodes a list of descriptors; it returns nil for an empty
// one.
func (d *decoder) descriptors(f field, s *src) []*Descriptor {
	var list []*Descriptor
	for _, n := range d.sequence(f, s) {
		if n.Kind != yaml.MappingNode {
			d.errorf(posOf(n), "descriptor must be a mapping with key and value, got %s", describe(n))
			s.broken = true
			continue
		}
		if d.full {
			break
		}
		if d.rules++; d.rules > d.limits.MaxRules {
			d.errorf(posOf(n), "domain has more than %d descriptors", d.limits.MaxRules)
			d.full = true
			break
		}
		list = append(list, d.descriptor(n))
	}
	return list
}

func (d *decoder) descriptor(n *yaml.Node) *Descriptor {
	desc := &Descriptor{src: src{pos: posOf(n)}}
	s := &desc.src
	for _, f := range d.fields(n, s) {
		switch f.name {
		case "key":
			desc.Key = d.string(f, s)
		case "value":
			desc.Value = d.string(f, s)
		case "rate_limit":
			if f.val.Kind == yaml.ScalarNode && f.val.ShortTag() == "!!null" {
				continue // as if absent
			}
			desc.RateLimit = d.rateLimit(f, f.val, s)
		case "rate_limits":
			// Unlike other lists, an empty one is kept (non-nil) for
			// the validator to report.
			items := d.sequence(f, s)
			if items == nil {
				continue
			}
			desc.RateLimits = make([]*RateLimit, 0, len(items))
			for _, item := range items {
				if rl := d.rateLimit(f, item, s); rl != nil {
					desc.RateLimits = append(desc.RateLimits, rl)
				}
			}
		case "shadow_mode":
			desc.ShadowMode = d.bool(f, s)
		case "quota_mode":
			desc.QuotaMode = d.bool(f, s)
		case "detailed_metric":
			desc.DetailedMetric = d.bool(f, s)
		case "value_to_metric":
			desc.ValueToMetric = d.bool(f, s)
		case "share_threshold":
			desc.ShareThreshold = d.bool(f, s)
		case "consume_when_over":
			desc.ConsumeWhenOver = d.bool(f, s)
		case "ip_prefix":
			desc.IPPrefix = d.ipPrefix(f, s)
		case "metadata":
			desc.Metadata = d.metadata(f, s)
		case "descriptors":
			desc.Descriptors = d.descriptors(f, s)
		default:
			d.unknown(f, "descriptor", s)
		}
	}
	return desc
}

// rateLimit decodes n, the value of the rate_limit field or an item of
// rate_limits (f).
func (d *decoder) rateLimit(f field, n *yaml.Node, parent *src) *RateLimit {
	if n.Kind != yaml.MappingNode {
		what := f.name
		if f.name == "rate_limits" {
			what = "rate_limits entry"
		}
		d.errorf(posOf(n), "%s must be a mapping with unit and requests_per_unit, got %s", what, describe(n))
		parent.broken = true
		return nil
	}
	rl := &RateLimit{src: src{pos: posOf(n)}}
	s := &rl.src
	for _, f := range d.fields(n, s) {
		switch f.name {
		case "unit":
			rl.Unit = d.string(f, s)
		case "requests_per_unit":
			rl.RequestsPerUnit = d.uint32(f, s)
		case "unlimited":
			rl.Unlimited = d.bool(f, s)
		case "name":
			rl.Name = d.string(f, s)
		case "replaces":
			for _, item := range d.sequence(f, s) {
				if r, ok := d.replace(item, s); ok {
					rl.Replaces = append(rl.Replaces, r)
				}
			}
		case "algorithm":
			rl.Algorithm = d.string(f, s)
		case "burst":
			rl.Burst = d.uint32(f, s)
		case "window":
			rl.Window = d.string(f, s)
		default:
			d.unknown(f, "rate limit", s)
		}
	}
	return rl
}

func (d *decoder) replace(n *yaml.Node, parent *src) (Replace, bool) {
	if n.Kind != yaml.MappingNode {
		d.errorf(posOf(n), "replaces entry must be a mapping with name, got %s", describe(n))
		parent.broken = true
		return Replace{}, false
	}
	r := Replace{src: src{pos: posOf(n)}}
	for _, f := range d.fields(n, &r.src) {
		switch f.name {
		case "name":
			r.Name = d.string(f, &r.src)
		default:
			d.unknown(f, "replaces entry", &r.src)
		}
	}
	return r, true
}

// ipPrefix decodes the ip_prefix field: a mapping with v4 and v6, both
// optional. Null is as if absent. It records where v4 and v6 are in s as
// "ip_prefix.v4" and "ip_prefix.v6"; the compiler checks their range.
func (d *decoder) ipPrefix(f field, s *src) *IPPrefix {
	switch {
	case f.val.Kind == yaml.ScalarNode && f.val.ShortTag() == "!!null":
		return nil
	case f.val.Kind != yaml.MappingNode:
		d.errorf(posOf(f.val), "ip_prefix must be a mapping with v4 and v6, got %s", describe(f.val))
		s.broken = true
		return nil
	}
	p := &IPPrefix{}
	var inner src
	for _, g := range d.fields(f.val, &inner) {
		var bits *int
		switch g.name {
		case "v4":
			bits = &p.V4
		case "v6":
			bits = &p.V6
		default:
			d.errorf(posOf(g.key), "unknown field %q in ip_prefix", g.name)
			s.broken = true
			continue
		}
		var n int
		if g.val.Kind != yaml.ScalarNode || g.val.ShortTag() != "!!int" || g.val.Decode(&n) != nil {
			d.errorf(posOf(g.val), "ip_prefix %s must be a prefix length, from 1 to %d, got %s", g.name, maxBits(g.name), describe(g.val))
			s.broken = true
			continue
		}
		*bits = n
		if s.fields == nil {
			s.fields = make(map[string]pos)
		}
		s.fields["ip_prefix."+g.name] = posOf(g.val)
	}
	s.broken = s.broken || inner.broken
	return p
}

// metadata decodes the metadata field; it returns nil for an empty
// mapping.
func (d *decoder) metadata(f field, s *src) map[string]any {
	if f.val.Kind == yaml.ScalarNode && f.val.ShortTag() == "!!null" {
		return nil
	}
	if f.val.Kind != yaml.MappingNode {
		d.errorf(posOf(f.val), "metadata must be a mapping, got %s", describe(f.val))
		s.broken = true
		return nil
	}
	m, _ := d.value(f.val, s).(map[string]any)
	if len(m) == 0 {
		return nil
	}
	return m
}

// value decodes a metadata value into JSON-like Go values: string, bool,
// int (or uint64 past math.MaxInt), float64 (finite, and not a whole
// number that fits an int), nil, []any and map[string]any.
func (d *decoder) value(n *yaml.Node, s *src) any {
	n = deref(n)
	switch n.Kind {
	case yaml.MappingNode:
		var inner src
		fs := d.fields(n, &inner)
		if inner.broken {
			s.broken = true
		}
		m := make(map[string]any, len(fs))
		for _, f := range fs {
			m[f.name] = d.value(f.val, s)
		}
		return m
	case yaml.SequenceNode:
		list := make([]any, len(n.Content))
		for i, c := range n.Content {
			list[i] = d.value(c, s)
		}
		return list
	}
	switch n.ShortTag() {
	case "!!null":
		return nil
	case "!!bool":
		var b bool
		if n.Decode(&b) == nil {
			return b
		}
	case "!!int":
		var v any
		if n.Decode(&v) == nil {
			switch v := v.(type) {
			case int:
				return v
			case int64: // on 32-bit platforms
				if v >= math.MinInt && v <= math.MaxInt {
					return int(v)
				}
				return float64(v)
			case uint64:
				return v
			}
		}
	case "!!float":
		var f float64
		if n.Decode(&f) == nil {
			if math.IsInf(f, 0) || math.IsNaN(f) {
				d.errorf(posOf(n), "metadata value %s is not a finite number", n.Value)
				s.broken = true
				return nil
			}
			// yaml.v3 writes 2.0 as "2", which reads back as an int.
			if f == math.Trunc(f) && f >= math.MinInt && f < math.MaxInt {
				return int(f)
			}
			return f
		}
	}
	return scalarString(n) // strings, timestamps, binary and custom tags
}
