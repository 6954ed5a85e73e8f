package compat

import (
	"net"
	"net/url"
	"strconv"
	"strings"
)

// store translates the counter store: BACKEND_TYPE and Redis, the local cache and the keys.
func (t *translator) store() {
	memcache := []string{
		"MEMCACHE_HOST_PORT", "MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_SRV", "MEMCACHE_SRV_REFRESH", "MEMCACHE_TLS",
		"MEMCACHE_TLS_CLIENT_CERT", "MEMCACHE_TLS_CLIENT_KEY", "MEMCACHE_TLS_CACERT",
		"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
	}
	switch bt := t.str("BACKEND_TYPE", "redis"); bt {
	case "redis", "":
		t.honour("BACKEND_TYPE")
		t.ignore("BACKEND_TYPE is not memcache", memcache...)
		t.redis()
	case "memcache":
		t.fail("BACKEND_TYPE", "backend", "memcache is not supported: ratelimitd keeps counters in Redis "+
			"(or, for one replica, in memory), so replicas would stop sharing counters; use Redis (REDIS_URL)")
	default:
		t.fail("BACKEND_TYPE", "backend", "%q is not redis or memcache", clip(bt))
	}
	t.localCache()
	if p := t.str("CACHE_KEY_PREFIX", ""); p != "" {
		t.flags["redis-key-prefix"] = p
		t.honour("CACHE_KEY_PREFIX")
	} else {
		t.ignore("empty: ratelimitd keeps its own prefix, its keys differing from the reference's anyway", "CACHE_KEY_PREFIX")
	}
	t.ignore("each key expires as soon as its count no longer matters, without jitter", "EXPIRATION_JITTER_MAX_SECONDS")
	if t.boolean("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false) {
		t.honour("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")
	} else {
		t.ignore("ratelimitd never counts the hits of a refused request, unless its rule says consume_when_over: true",
			"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")
	}
}

// localCache translates LOCAL_CACHE_SIZE_IN_BYTES (0, the default: no cache) to entries.
func (t *translator) localCache() {
	n, ok := t.integer("LOCAL_CACHE_SIZE_IN_BYTES")
	switch {
	case !ok || n == 0:
		t.flags["local-cache"] = "false"
	case n < 0:
		t.fail("LOCAL_CACHE_SIZE_IN_BYTES", "", "%d is negative", n)
	default:
		t.flags["local-cache"] = "true"
		t.flags["local-cache-size"] = strconv.FormatInt(max(1, n/BytesPerCacheEntry), 10)
	}
	t.honour("LOCAL_CACHE_SIZE_IN_BYTES")
}

// redis translates the Redis settings to a --backend URL that backend/redis reads, and its other flags.
func (t *translator) redis() {
	perSecond := []string{
		"REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_URL", "REDIS_PERSECOND_POOL_SIZE",
		"REDIS_PERSECOND_AUTH", "REDIS_PERSECOND_SENTINEL_AUTH", "REDIS_PERSECOND_TLS", "REDIS_PERSECOND_TIMEOUT",
		"REDIS_PERSECOND_PIPELINE_WINDOW", "REDIS_PERSECOND_PIPELINE_LIMIT", "REDIS_PERSECOND_USE_EXPLICIT_PIPELINE",
		"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
	}
	if t.boolean("REDIS_PERSECOND", false) {
		t.fail("REDIS_PERSECOND", "", "ratelimitd keeps every counter in one store, deciding a request's descriptors "+
			"together: one-second limits would share the main store's counters rather than REDIS_PERSECOND_URL's; "+
			"unset REDIS_PERSECOND (one-second counters then live in REDIS_URL's Redis, starting from zero)")
	} else {
		t.honour("REDIS_PERSECOND")
		t.ignore("REDIS_PERSECOND is not true", perSecond...)
	}
	if u, ok := t.redisURL(); ok {
		t.flags["backend"] = u
	}
	t.redisTLS()
	if n, ok := t.integer("REDIS_POOL_SIZE"); ok {
		if n < 0 {
			t.fail("REDIS_POOL_SIZE", "", "%d is negative", n)
		} else {
			t.flags["redis-pool-size"] = strconv.FormatInt(n, 10)
			t.honour("REDIS_POOL_SIZE")
		}
	}
	if d, ok := t.duration("REDIS_TIMEOUT"); ok {
		if d > 0 {
			for _, flag := range []string{"redis-timeout", "redis-dial-timeout", "redis-read-timeout", "redis-write-timeout"} {
				t.flags[flag] = d.String()
			}
			t.honour("REDIS_TIMEOUT")
		} else {
			t.ignore("no timeout: ratelimitd keeps its own", "REDIS_TIMEOUT")
		}
	}
	t.ignore("not needed: requests that arrive while a script runs are decided together by the next one",
		"REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT", "REDIS_USE_EXPLICIT_PIPELINE")
	t.ignore("waiting for a free connection is bounded by the Redis timeouts",
		"REDIS_POOL_ON_EMPTY_BEHAVIOR", "REDIS_POOL_ON_EMPTY_WAIT_DURATION")
	// The reference stays healthy while Redis is down unless it checks its connections: so does ratelimitd, whose
	// failure mode (error) would otherwise take it out of its load balancer, and keep a pod from starting.
	active := t.boolean("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", false)
	t.flags["ready-without-store"] = strconv.FormatBool(!active)
	t.honour("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION")
}

// redisURL returns the --backend URL of REDIS_TYPE, REDIS_SOCKET_TYPE, REDIS_URL, REDIS_AUTH, REDIS_SENTINEL_AUTH and
// REDIS_TLS, and whether they make one.
func (t *translator) redisURL() (string, bool) {
	scheme := "redis"
	if t.boolean("REDIS_TLS", false) {
		scheme = "rediss"
	}
	t.honour("REDIS_TLS")
	raw := t.str("REDIS_URL", defaultRedisURL)
	user, pass, auth := credentials(t.str("REDIS_AUTH", ""))
	u := url.URL{Scheme: scheme}
	q := url.Values{}
	typ := t.str("REDIS_TYPE", "SINGLE")
	if !strings.EqualFold(typ, "sentinel") {
		t.ignore("REDIS_TYPE is not sentinel", "REDIS_SENTINEL_AUTH")
	}
	switch strings.ToLower(typ) {
	case "single":
		tcp, ok := t.tcpSocket()
		if !ok {
			return "", false
		}
		if !tcp {
			return t.unixURL(raw, user, pass, auth, u.Scheme == "rediss")
		}
		host, db, ok := t.singleAddr(raw, &user, &pass, &auth, &u.Scheme)
		if !ok {
			return "", false
		}
		u.Host, u.Path = host, db
	case "cluster":
		addrs, ok := t.addrs(raw, 0)
		if !ok {
			return "", false
		}
		u.Scheme += "-cluster"
		u.Host, q["addr"] = addrs[0], addrs[1:]
		t.otherSocket("cluster")
	case "sentinel":
		addrs, ok := t.addrs(raw, 1)
		if !ok {
			return "", false
		}
		u.Scheme += "-sentinel"
		u.Host, q["addr"] = addrs[1], addrs[2:]
		q.Set("master_name", addrs[0])
		// REDIS_AUTH authenticates to the master, REDIS_SENTINEL_AUTH to the Sentinels.
		if auth {
			if user != "" {
				q.Set("username", user)
			}
			q.Set("password", pass)
		}
		user, pass, auth = credentials(t.str("REDIS_SENTINEL_AUTH", ""))
		t.honour("REDIS_SENTINEL_AUTH")
		t.otherSocket("sentinel")
	default:
		t.fail("REDIS_TYPE", "backend", "%q is not single, sentinel or cluster", clip(typ))
		return "", false
	}
	if auth {
		u.User = url.UserPassword(user, pass)
	}
	u.RawQuery = q.Encode()
	t.honour("REDIS_TYPE", "REDIS_URL", "REDIS_AUTH")
	return u.String(), true
}

// credentials splits REDIS_AUTH as the reference does: "user:password", or a password without ':'.
func credentials(s string) (user, pass string, ok bool) {
	if s == "" {
		return "", "", false
	}
	if u, p, found := strings.Cut(s, ":"); found {
		return u, p, true
	}
	return "", s, true
}

// tcpSocket reports whether REDIS_SOCKET_TYPE, which a single Redis is dialled with, is TCP (else a unix socket),
// and whether it is one of the two. The reference's default, a unix socket at its default REDIS_URL, is twemproxy's
// socket, which ratelimitd cannot use: it decides a request in one script over all its keys, which a sharding proxy
// in front of Redis cannot run.
func (t *translator) tcpSocket() (tcp, ok bool) {
	switch s := t.str("REDIS_SOCKET_TYPE", "unix"); s {
	case "tcp", "tcp4", "tcp6":
		t.honour("REDIS_SOCKET_TYPE")
		return true, true
	case "unix":
		if t.str("REDIS_URL", defaultRedisURL) == defaultRedisURL {
			reason := "a unix socket at REDIS_URL's default (" + defaultRedisURL + "), twemproxy's: ratelimitd " +
				"decides a request in one script over all its keys, which a sharding proxy in front of Redis cannot " +
				"run; set REDIS_URL to the socket of a Redis, or REDIS_SOCKET_TYPE=tcp and REDIS_URL=host:port of a " +
				"Redis, Sentinel or Cluster"
			if !t.isSet("REDIS_SOCKET_TYPE") {
				reason = "unset, so unix (the reference's default), " + reason
			}
			t.fail("REDIS_SOCKET_TYPE", "backend", "%s", reason)
			return false, false
		}
		t.honour("REDIS_SOCKET_TYPE")
		return false, true
	default:
		t.fail("REDIS_SOCKET_TYPE", "backend", "%q is not tcp or unix", clip(s))
	}
	return false, false
}

// unixURL returns the unix:// --backend URL of a single Redis on the unix socket at path, with REDIS_AUTH's
// credentials.
func (t *translator) unixURL(path, user, pass string, auth, tls bool) (string, bool) {
	if tls {
		t.fail("REDIS_TLS", "backend", "TLS over a unix socket is not supported")
		return "", false
	}
	if !strings.HasPrefix(path, "/") {
		t.fail("REDIS_URL", "backend", "not the absolute path of a unix socket (REDIS_SOCKET_TYPE=unix)")
		return "", false
	}
	u := url.URL{Scheme: "unix", Path: path}
	if auth {
		u.User = url.UserPassword(user, pass)
	}
	t.honour("REDIS_TYPE", "REDIS_URL", "REDIS_AUTH")
	return u.String(), true
}

// otherSocket notes REDIS_SOCKET_TYPE for a Cluster or Sentinel, which the reference dials over TCP whatever it
// says.
func (t *translator) otherSocket(typ string) {
	if s := t.str("REDIS_SOCKET_TYPE", ""); s == "tcp" {
		t.honour("REDIS_SOCKET_TYPE")
	} else {
		t.ignore("the reference dials a "+typ+"'s nodes over TCP whatever it says", "REDIS_SOCKET_TYPE")
	}
}

// singleAddr reads REDIS_URL for a single Redis: host:port, or a redis:// or rediss:// URL (which the reference's
// client reads too), whose password, user and database apply unless REDIS_AUTH is set. It returns the host:port
// and the URL path ("/N" or "").
func (t *translator) singleAddr(raw string, user, pass *string, auth *bool, scheme *string) (host, db string, ok bool) {
	if s, _, isURL := strings.Cut(raw, "://"); isURL {
		u, err := url.Parse(raw)
		if err != nil || (s != "redis" && s != "rediss") || u.Host == "" {
			t.fail("REDIS_URL", "backend", "not host:port, nor a redis:// or rediss:// URL (its value is not shown: it may hold a password)")
			return "", "", false
		}
		if s == "rediss" {
			*scheme = "rediss"
		}
		if u.User != nil && !*auth {
			*user = u.User.Username()
			*pass, _ = u.User.Password()
			*auth = true
		}
		if u.Path != "" && u.Path != "/" {
			if _, err := strconv.Atoi(strings.TrimPrefix(u.Path, "/")); err != nil {
				t.fail("REDIS_URL", "backend", "the URL's path is not /N, a database number")
				return "", "", false
			}
			db = u.Path
		}
		return u.Host, db, true
	}
	if _, _, err := net.SplitHostPort(raw); err != nil {
		t.fail("REDIS_URL", "backend", "not host:port (want host:port with REDIS_TYPE=single and REDIS_SOCKET_TYPE=tcp)")
		return "", "", false
	}
	return raw, "", true
}

// addrs splits REDIS_URL's comma-separated list: skip leading names (the Sentinel master's) kept as they are, the
// rest host:port. At least one host:port must follow.
func (t *translator) addrs(raw string, skip int) ([]string, bool) {
	parts := strings.Split(raw, ",")
	want := "h1:p1,h2:p2,... (REDIS_TYPE=cluster)"
	if skip > 0 {
		want = "master,s1:p1,s2:p2,... (REDIS_TYPE=sentinel: the master's name, then the Sentinels)"
	}
	if len(parts) <= skip || parts[0] == "" {
		t.fail("REDIS_URL", "backend", "not %s", want)
		return nil, false
	}
	for _, p := range parts[skip:] {
		if h, port, err := net.SplitHostPort(p); err != nil || h == "" || port == "" {
			t.fail("REDIS_URL", "backend", "an address is not host:port; want %s", want)
			return nil, false
		}
	}
	return parts, true
}

// redisTLS translates the Redis TLS files, which the reference reads only with REDIS_TLS.
func (t *translator) redisTLS() {
	files := map[string]string{
		"REDIS_TLS_CACERT":      "redis-tls-ca",
		"REDIS_TLS_CLIENT_CERT": "redis-tls-cert",
		"REDIS_TLS_CLIENT_KEY":  "redis-tls-key",
	}
	if !t.boolean("REDIS_TLS", false) && !strings.HasPrefix(t.flags["backend"], "rediss") {
		for name := range files {
			t.ignore("REDIS_TLS is not true: the reference connects without TLS", name)
		}
		t.ignore("REDIS_TLS is not true: the reference connects without TLS", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION")
		return
	}
	for name, flag := range files {
		if v := t.str(name, ""); v != "" {
			t.flags[flag] = v
			t.honour(name)
		}
	}
	if t.boolean("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false) {
		t.fail("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "backend", "ratelimitd cannot skip only the host name check: "+
			"its Redis client's skip_verify would accept any certificate; give REDIS_TLS_CACERT the CA and Redis a "+
			"certificate that names its host, or set --backend with ?skip_verify=true to accept that")
	} else {
		t.honour("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION")
	}
}
