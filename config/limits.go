package config

import "github.com/ratelimitd/ratelimitd/backend"

// Request bounds. A request descriptor has at most MaxDepth entries, each
// with a key of at most MaxKeyBytes bytes (a server refuses larger ones),
// so a rule nested deeper, or with a longer key, could never match: Parse
// and Compile refuse it.
const (
	// MaxDepth is the most entries a request descriptor has, and so the
	// most levels a rule tree has.
	MaxDepth = 32
	// MaxKeyBytes is the longest key, in bytes, of a request descriptor's
	// entry, and so of a rule.
	MaxKeyBytes = 1024
)

// Defaults of Limits. They are far above what real rule sets use (a
// Kubernetes ConfigMap holds at most 1 MiB) and far below what would harm
// a server.
const (
	// DefaultMaxBytes is the default of Limits.MaxBytes: four times
	// what a ConfigMap holds.
	DefaultMaxBytes = 4 << 20
	// DefaultMaxExpandedBytes is the default of Limits.MaxExpandedBytes:
	// twice DefaultMaxBytes, since files without aliases measure up to
	// about twice their size (see Limits.MaxExpandedBytes).
	DefaultMaxExpandedBytes = 8 << 20
	// DefaultMaxRules is the default of Limits.MaxRules.
	DefaultMaxRules = 100_000
	// DefaultMaxFiles is the default of Limits.MaxFiles.
	DefaultMaxFiles = 1000
	// DefaultMaxPathBytes is the default of Limits.MaxPathBytes.
	DefaultMaxPathBytes = 64 << 20
	// DefaultMaxWildcards is the default of Limits.MaxWildcards.
	DefaultMaxWildcards = 1000
)

// Limits bound the work that reading rules may take, so that no rule file
// can take a server's memory or time: what goes past a limit is refused
// with an *Error, as any other invalid rule is. A zero field means its
// Default constant; a negative one too.
type Limits struct {
	// MaxBytes is the most bytes of rule files that Load reads, all the
	// files of a directory together, and the most data that Parse takes.
	MaxBytes int64
	// MaxExpandedBytes bounds the size of the rule files (for Load, all
	// together) with their YAML aliases expanded, each node counting the
	// bytes of its text plus one. An alias repeats the node it names at
	// every use, so a small file can stand for a huge tree; this bound is
	// on that tree.
	MaxExpandedBytes int64
	// MaxRules is the most descriptors (rules) that one domain may have,
	// at every level together.
	MaxRules int
	// MaxFiles is the most rule files (*.yaml and *.yml) that Load reads
	// from a directory.
	MaxFiles int
	// MaxPathBytes bounds the total length of the Paths of a domain's
	// compiled rules. Each rule's Path repeats the keys and values of its
	// ancestors, so a long value high in a large tree is copied into
	// every rule below it.
	MaxPathBytes int64
	// MaxWildcards is the most rules with a wildcard value that one key
	// may have at one level. Match tries them one after the other, for
	// every request that reaches them.
	MaxWildcards int
}

// DefaultLimits returns the Limits that a zero Limits stands for.
func DefaultLimits() Limits {
	return Limits{
		MaxBytes:         DefaultMaxBytes,
		MaxExpandedBytes: DefaultMaxExpandedBytes,
		MaxRules:         DefaultMaxRules,
		MaxFiles:         DefaultMaxFiles,
		MaxPathBytes:     DefaultMaxPathBytes,
		MaxWildcards:     DefaultMaxWildcards,
	}
}

// orDefaults returns l with its zero and negative fields set to their
// defaults.
func (l Limits) orDefaults() Limits {
	d := DefaultLimits()
	orDefault(&l.MaxBytes, d.MaxBytes)
	orDefault(&l.MaxExpandedBytes, d.MaxExpandedBytes)
	orDefault(&l.MaxRules, d.MaxRules)
	orDefault(&l.MaxFiles, d.MaxFiles)
	orDefault(&l.MaxPathBytes, d.MaxPathBytes)
	orDefault(&l.MaxWildcards, d.MaxWildcards)
	return l
}

// orDefault sets *v to def when it is zero or negative.
func orDefault[T int | int64](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// An Option changes how Load, Parse and Compile work.
type Option func(*options)

type options struct {
	limits    Limits
	algorithm backend.Algorithm
}

// DefaultAlgorithm counts the rate limits that name no algorithm, unless
// WithDefaultAlgorithm names another.
const DefaultAlgorithm = backend.SlidingWindow

// WithDefaultAlgorithm makes a the algorithm of the rate limits that name
// none, in place of backend.SlidingWindow. envoyproxy/ratelimit counts
// every limit in fixed windows: its rule files, and the RateLimitConfig
// resources of xDS, which cannot name an algorithm, decide as it does with
// backend.FixedWindow.
func WithDefaultAlgorithm(a backend.Algorithm) Option {
	return func(o *options) { o.algorithm = a }
}

// WithLimits bounds the work of Load, Parse and Compile by l, in place of
// DefaultLimits. Zero fields of l keep their defaults.
func WithLimits(l Limits) Option {
	return func(o *options) { o.limits = l }
}

// A budget is what is left, in one load, of the bounds of Limits that are
// on all its files together.
type budget struct {
	bytes    int64 // of Limits.MaxBytes
	expanded int64 // of Limits.MaxExpandedBytes
}

func newBudget(l Limits) *budget { return &budget{l.MaxBytes, l.MaxExpandedBytes} }

func buildOptions(opts []Option) options {
	o := options{algorithm: DefaultAlgorithm}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	o.limits = o.limits.orDefaults()
	return o
}
