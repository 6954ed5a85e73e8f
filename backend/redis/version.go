package redis

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"
)

// MinVersion is the oldest Redis the store runs on. Its script reads the
// clock (TIME) before it writes, which Redis allows only when scripts are
// replicated by their effects: the default since Redis 5.0 (Redis 3.2 and
// 4 refuse the write unless the script calls redis.replicate_commands).
const MinVersion = "5.0.0"

// A version is a Redis version: major, minor, patch.
type version [3]int

var minVersion = mustParseVersion(MinVersion)

// parseVersion reads a redis_version such as "7.0.15"; a missing patch or
// minor number is 0, and anything after the digits of a part (as in
// "7.2.0-rc1") is ignored.
func parseVersion(s string) (version, error) {
	var v version
	parts := strings.SplitN(strings.TrimSpace(s), ".", 3)
	for i, p := range parts {
		end := 0
		for end < len(p) && p[end] >= '0' && p[end] <= '9' {
			end++
		}
		n, err := strconv.Atoi(p[:end])
		if err != nil {
			return version{}, fmt.Errorf("redis: version %q: want major.minor.patch", s)
		}
		v[i] = n
		if end < len(p) {
			break // a suffix ends the version
		}
	}
	return v, nil
}

func mustParseVersion(s string) version {
	v, err := parseVersion(s)
	if err != nil {
		panic(err)
	}
	return v
}

// less reports whether v is older than w.
func (v version) less(w version) bool { return slices.Compare(v[:], w[:]) < 0 }

func (v version) String() string { return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2]) }

// infoField returns the value of field in the text of INFO.
func infoField(info, field string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// checkInfo checks the INFO server text of node: nil if it runs MinVersion
// or later, or if it is a Sentinel (whose version says nothing of the
// servers it watches).
func checkInfo(node, info string) error {
	if infoField(info, "redis_mode") == "sentinel" {
		return nil
	}
	raw := infoField(info, "redis_version")
	v, err := parseVersion(raw)
	if err != nil {
		return fmt.Errorf("redis: node %s: %w", node, err)
	}
	if v.less(minVersion) {
		return fmt.Errorf("redis: node %s runs Redis %s; ratelimitd needs %d.%d or later", node, raw, minVersion[0], minVersion[1])
	}
	return nil
}

// checkVersion returns an OnConnect hook that checks the Redis version of
// node on a new connection. With once, it stops checking when a
// connection has passed: the first contact with a node, not every
// connection; without (a Sentinel group's master, which moves), it checks
// every new connection. A failing check fails the connection, so the call
// on it fails (and counts for the node's breaker); the next connection
// checks again. A node that refuses INFO (renamed, or denied by an ACL)
// is not checked. Connections opened at once wait for the first one's
// check (the store's probe and the first calls open theirs together).
func checkVersion(node string, once bool) func(context.Context, *goredis.Conn) error {
	var passed atomic.Bool
	var mu sync.Mutex
	return func(ctx context.Context, cn *goredis.Conn) error {
		if passed.Load() {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if passed.Load() {
			return nil
		}
		info, err := cn.Info(ctx, "server").Result()
		if denied(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("redis: node %s: INFO server: %w", node, err)
		}
		if err := checkInfo(node, info); err != nil {
			return err
		}
		passed.Store(once)
		return nil
	}
}
