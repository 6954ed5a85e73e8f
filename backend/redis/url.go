package redis

import "strings"

// schemes are the URL schemes NewClient accepts, each with "://".
var schemes = []string{
	"redis://", "rediss://",
	"redis-cluster://", "rediss-cluster://",
	"redis-sentinel://", "rediss-sentinel://",
	"unix://",
}

// IsURL reports whether s starts with a scheme NewClient accepts, so that
// a caller can tell a Redis URL from another kind of store's name before
// it parses it. NewClient still checks the rest.
func IsURL(s string) bool {
	for _, scheme := range schemes {
		if strings.HasPrefix(s, scheme) {
			return true
		}
	}
	return false
}
