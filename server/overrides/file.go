package overrides

import (
	"fmt"
	"os"
	"time"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/server/internal/engine"
)

// MaxFileBytes is the largest overrides file ReadFile reads: some 2,600
// bytes for each of DefaultMax overrides, as GET /v1/overrides writes
// them (indented).
const MaxFileBytes = 256 << 20

// A Set is the overrides of a file (ReadFile), compiled as a daemon
// applies them, for a replay or a check to decide as production did.
type Set struct {
	// Overrides are the file's, in its order.
	Overrides []Override
	runtime   *engine.RuntimeOverrides
}

// Runtime returns the set as the engine applies it.
func (s *Set) Runtime() *engine.RuntimeOverrides {
	if s == nil {
		return nil
	}
	return s.runtime
}

// ReadFile reads an overrides file, GET /v1/overrides's answer
// ({"overrides": [...]}), of at most max overrides (zero: DefaultMax),
// and compiles each with opts (the daemon's default algorithm) as the
// daemon would. Expiries are not checked: a replay applies the overrides
// of the file to the whole log. Two overrides of one descriptor are an
// error, as is anything Set refuses.
func ReadFile(path string, max int, opts ...config.Option) (*Set, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	file, err := decodeStrict[File](f, MaxFileBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if max <= 0 {
		max = DefaultMax
	}
	if len(file.Overrides) > max {
		return nil, fmt.Errorf("%s: %d overrides, over the maximum %d (--max-overrides)", path, len(file.Overrides), max)
	}
	m := make(map[string]*engine.RuntimeOverride, len(file.Overrides))
	first := make(map[string]int, len(file.Overrides))
	for i := range file.Overrides {
		o := &file.Overrides[i]
		limits, err := o.Compile(time.Time{}, opts...)
		if err != nil {
			return nil, fmt.Errorf("%s: override %d: %w", path, i, err)
		}
		k := o.Key()
		if j, dup := first[k]; dup {
			return nil, fmt.Errorf("%s: override %d has the descriptor of override %d", path, i, j)
		}
		first[k] = i
		ov := &engine.RuntimeOverride{Limits: limits, Reason: o.Reason, SetBy: o.SetBy, Version: o.Version}
		if o.ExpiresAt != nil {
			ov.Expires = *o.ExpiresAt
		}
		m[k] = ov
	}
	return &Set{Overrides: file.Overrides, runtime: engine.NewRuntimeOverrides(m)}, nil
}
