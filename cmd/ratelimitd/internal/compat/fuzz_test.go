package compat_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/cmd/ratelimitd/internal/compat"
)

// FuzzEnvoyproxy: whatever the values, Envoyproxy neither panics nor sets a flag it may not, and each error names
// a variable it knows.
func FuzzEnvoyproxy(f *testing.F) {
	f.Add(uint64(0), "tcp\x00redis:6379")
	f.Add(uint64(1<<20), "sentinel\x00m,s1:1,s2:2\x00user:pa:ss")
	f.Add(uint64(7), "GRPC_XDS_SOTW\x00k:v,k2:v2\x00a=b,c\x000x10\x00-1")
	f.Add(uint64(3), "rediss://:p@h:1/2\x00true\x00\x001e400\x00tcp6\x00[::1]:0")
	names := compat.Variables()
	f.Fuzz(func(t *testing.T, seed uint64, blob string) {
		vars := map[string]string{}
		for i, v := range strings.Split(blob, "\x00") {
			// Spread the values over the variables, the seed choosing where they start and how far apart.
			j := (seed + uint64(i)*(seed>>32|1)) % uint64(len(names))
			vars[names[j]] = v
		}
		r, err := compat.Envoyproxy(env(vars))
		checkFlags(t, r)
		if err == nil {
			return
		}
		for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
			ce, ok := errors.AsType[*compat.Error](e)
			if !ok || !slices.Contains(names, ce.Name) {
				t.Errorf("error %v names no known variable", e)
			}
		}
	})
}
