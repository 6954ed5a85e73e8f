package compat

import (
	"strconv"
	"strings"
	"time"
)

// str returns the variable's value, or def when it is unset. An empty variable is the empty string, as envconfig
// reads it.
func (t *translator) str(name, def string) string {
	if v, ok := t.lookup(name); ok {
		return v
	}
	return def
}

// boolean returns the variable as strconv.ParseBool reads it, or def when it is unset or malformed (then recorded).
func (t *translator) boolean(name string, def bool) bool {
	v, ok := t.lookup(name)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		t.fail(name, "", "%q is not a boolean (want true or false, 1 or 0, as strconv.ParseBool reads them)", clip(v))
		return def
	}
	return b
}

// integer returns the variable as strconv.ParseInt reads it with base 0 (so 0x10 is 16, as envconfig reads it),
// and whether it is set and well formed; a malformed value is recorded.
func (t *translator) integer(name string) (int64, bool) {
	v, ok := t.lookup(name)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 0, 64)
	if err != nil {
		t.fail(name, "", "%q is not an integer", clip(v))
		return 0, false
	}
	return n, true
}

// duration returns the variable as time.ParseDuration reads it, and whether it is set and well formed; a malformed
// value is recorded.
func (t *translator) duration(name string) (time.Duration, bool) {
	v, ok := t.lookup(name)
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.fail(name, "", "%q is not a duration (want a Go duration such as 300ms, 10s or 1h30m)", clip(v))
		return 0, false
	}
	return d, true
}

// float returns the variable as strconv.ParseFloat reads it with bits, and whether it is set and well formed; a
// malformed value is recorded.
func (t *translator) float(name string, bits int) (float64, bool) {
	v, ok := t.lookup(name)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, bits)
	if err != nil {
		t.fail(name, "", "%q is not a number", clip(v))
		return 0, false
	}
	return f, true
}

// pairs returns the variable as envconfig reads a map[string]string: "k1:v1,k2:v2", each item exactly one ':'
// (so neither keys nor values hold ':' or ','), whitespace kept; a blank value is an empty map. A malformed value
// is recorded, and pairs then returns nil.
func (t *translator) pairs(name string) [][2]string {
	v, ok := t.lookup(name)
	if !ok || strings.TrimSpace(v) == "" {
		return nil
	}
	var out [][2]string
	for item := range strings.SplitSeq(v, ",") {
		kv := strings.Split(item, ":")
		if len(kv) != 2 {
			t.fail(name, "", "item %q is not key:value (a value holds neither ':' nor ',')", clip(item))
			return nil
		}
		out = append(out, [2]string{kv[0], kv[1]})
	}
	return out
}

// clip shortens a value quoted in a message.
func clip(s string) string {
	const most = 64
	if len(s) <= most {
		return s
	}
	return s[:most] + "..."
}

// keyValues gives flag, a ratelimitd flag of k=v items, the k:v pairs of the
// variable name (see pairs), and honours name; a pair that bad says the flag
// cannot carry (a separator in it) fails name, naming the item as what,
// unless flag is set explicitly (see Moot).
func (t *translator) keyValues(name, flag, what string, bad func(k, v string) bool) {
	var items []string
	for _, kv := range t.pairs(name) {
		if bad(kv[0], kv[1]) {
			t.fail(name, flag, "%s %q holds a separator ('=' or ',')", what, clip(kv[0]))
			continue
		}
		items = append(items, kv[0]+"="+kv[1])
	}
	if len(items) > 0 {
		t.flags[flag] = strings.Join(items, ",")
	}
	t.honour(name)
}
