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

// redisVars names one Redis's variables: the main one's (REDIS_*) or the one of one-second limits
// (REDIS_PERSECOND_*), and the ratelimitd flags they become.
type redisVars struct {
	prefix     string // "REDIS_" or "REDIS_PERSECOND_"
	defaultURL string
	backend    string // the flag of the store's URL: "backend" or "backend-per-second"
}

var (
	mainRedis      = redisVars{prefix: "REDIS_", defaultURL: defaultRedisURL, backend: "backend"}
	perSecondRedis = redisVars{prefix: "REDIS_PERSECOND_", defaultURL: defaultPerSecondURL, backend: "backend-per-second"}
)

// v returns the name of the variable of this Redis whose name ends in suffix (e.g. "URL").
func (r redisVars) v(suffix string) string { return r.prefix + suffix }

// redis translates the Redis settings to a --backend URL that backend/redis reads, and its other flags; with
// REDIS_PERSECOND, the second Redis's to --backend-per-second.
func (t *translator) redis() {
	if u, ok := t.redisURL(mainRedis); ok {
		t.flags["backend"] = u
	}
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
	t.perSecond()
	t.redisTLS()
}

// perSecond translates REDIS_PERSECOND: the counters of one-second limits in a Redis of their own, which ratelimitd
// decides together with the main Redis's, all or nothing.
func (t *translator) perSecond() {
	r := perSecondRedis
	pipeline := []string{r.v("PIPELINE_WINDOW"), r.v("PIPELINE_LIMIT"), r.v("USE_EXPLICIT_PIPELINE")}
	rest := append([]string{
		r.v("SOCKET_TYPE"), r.v("TYPE"), r.v("URL"), r.v("POOL_SIZE"), r.v("AUTH"), r.v("SENTINEL_AUTH"),
		r.v("TLS"), r.v("TIMEOUT"), r.v("POOL_ON_EMPTY_BEHAVIOR"),
	}, pipeline...)
	t.honour("REDIS_PERSECOND")
	if !t.boolean("REDIS_PERSECOND", false) {
		t.ignore("REDIS_PERSECOND is not true", rest...)
		return
	}
	if u, ok := t.redisURL(r); ok {
		t.flags[r.backend] = u
	}
	if n, ok := t.integer(r.v("POOL_SIZE")); ok {
		if n < 0 {
			t.fail(r.v("POOL_SIZE"), "", "%d is negative", n)
		} else {
			t.flags["redis-per-second-pool-size"] = strconv.FormatInt(n, 10)
			t.honour(r.v("POOL_SIZE"))
		}
	}
	if d, ok := t.duration(r.v("TIMEOUT")); ok {
		if d > 0 {
			t.flags["redis-per-second-timeout"] = d.String()
			t.honour(r.v("TIMEOUT"))
		} else {
			t.ignore("no timeout: ratelimitd keeps its own", r.v("TIMEOUT"))
		}
	}
	t.ignore("not needed: requests that arrive while a script runs are decided together by the next one", pipeline...)
	t.ignore("waiting for a free connection is bounded by the Redis timeouts", r.v("POOL_ON_EMPTY_BEHAVIOR"))
}

// redisURL returns the store URL of r's TYPE, SOCKET_TYPE, URL, AUTH, SENTINEL_AUTH and TLS variables, and whether
// they make one.
func (t *translator) redisURL(r redisVars) (string, bool) {
	scheme := "redis"
	if t.boolean(r.v("TLS"), false) {
		scheme = "rediss"
	}
	t.honour(r.v("TLS"))
	raw := t.str(r.v("URL"), r.defaultURL)
	user, pass, auth := credentials(t.str(r.v("AUTH"), ""))
	u := url.URL{Scheme: scheme}
	q := url.Values{}
	typ := t.str(r.v("TYPE"), "SINGLE")
	if !strings.EqualFold(typ, "sentinel") {
		t.ignore(r.v("TYPE")+" is not sentinel", r.v("SENTINEL_AUTH"))
	}
	switch strings.ToLower(typ) {
	case "single":
		tcp, ok := t.tcpSocket(r)
		if !ok {
			return "", false
		}
		if !tcp {
			return t.unixURL(r, raw, user, pass, auth, u.Scheme == "rediss")
		}
		host, db, ok := t.singleAddr(r, raw, &user, &pass, &auth, &u.Scheme)
		if !ok {
			return "", false
		}
		u.Host, u.Path = host, db
	case "cluster":
		addrs, ok := t.addrs(r, raw, 0)
		if !ok {
			return "", false
		}
		u.Scheme += "-cluster"
		u.Host, q["addr"] = addrs[0], addrs[1:]
		t.otherSocket(r, "cluster")
	case "sentinel":
		addrs, ok := t.addrs(r, raw, 1)
		if !ok {
			return "", false
		}
		u.Scheme += "-sentinel"
		u.Host, q["addr"] = addrs[1], addrs[2:]
		q.Set("master_name", addrs[0])
		// AUTH authenticates to the master, SENTINEL_AUTH to the Sentinels.
		if auth {
			if user != "" {
				q.Set("username", user)
			}
			q.Set("password", pass)
		}
		user, pass, auth = credentials(t.str(r.v("SENTINEL_AUTH"), ""))
		t.honour(r.v("SENTINEL_AUTH"))
		t.otherSocket(r, "sentinel")
	default:
		t.fail(r.v("TYPE"), r.backend, "%q is not single, sentinel or cluster", clip(typ))
		return "", false
	}
	if auth {
		u.User = url.UserPassword(user, pass)
	}
	u.RawQuery = q.Encode()
	t.honour(r.v("TYPE"), r.v("URL"), r.v("AUTH"))
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
func (t *translator) tcpSocket(r redisVars) (tcp, ok bool) {
	sockVar, urlVar := r.v("SOCKET_TYPE"), r.v("URL")
	switch s := t.str(sockVar, "unix"); s {
	case "tcp", "tcp4", "tcp6":
		t.honour(sockVar)
		return true, true
	case "unix":
		if t.str(urlVar, r.defaultURL) == r.defaultURL {
			reason := "a unix socket at " + urlVar + "'s default (" + r.defaultURL + "), twemproxy's: ratelimitd " +
				"decides a request in one script over all its keys, which a sharding proxy in front of Redis cannot " +
				"run; set " + urlVar + " to the socket of a Redis, or " + sockVar + "=tcp and " + urlVar +
				"=host:port of a Redis, Sentinel or Cluster"
			if !t.isSet(sockVar) {
				reason = "unset, so unix (the reference's default), " + reason
			}
			t.fail(sockVar, r.backend, "%s", reason)
			return false, false
		}
		t.honour(sockVar)
		return false, true
	default:
		t.fail(sockVar, r.backend, "%q is not tcp or unix", clip(s))
	}
	return false, false
}

// unixURL returns the unix:// --backend URL of a single Redis on the unix socket at path, with REDIS_AUTH's
// credentials.
func (t *translator) unixURL(r redisVars, path, user, pass string, auth, tls bool) (string, bool) {
	if tls {
		t.fail(r.v("TLS"), r.backend, "TLS over a unix socket is not supported")
		return "", false
	}
	if !strings.HasPrefix(path, "/") {
		t.fail(r.v("URL"), r.backend, "not the absolute path of a unix socket (%s=unix)", r.v("SOCKET_TYPE"))
		return "", false
	}
	u := url.URL{Scheme: "unix", Path: path}
	if auth {
		u.User = url.UserPassword(user, pass)
	}
	t.honour(r.v("TYPE"), r.v("URL"), r.v("AUTH"))
	return u.String(), true
}

// otherSocket notes REDIS_SOCKET_TYPE for a Cluster or Sentinel, which the reference dials over TCP whatever it
// says.
func (t *translator) otherSocket(r redisVars, typ string) {
	if s := t.str(r.v("SOCKET_TYPE"), ""); s == "tcp" {
		t.honour(r.v("SOCKET_TYPE"))
	} else {
		t.ignore("the reference dials a "+typ+"'s nodes over TCP whatever it says", r.v("SOCKET_TYPE"))
	}
}

// singleAddr reads REDIS_URL for a single Redis: host:port, or a redis:// or rediss:// URL (which the reference's
// client reads too), whose password, user and database apply unless REDIS_AUTH is set. It returns the host:port
// and the URL path ("/N" or "").
func (t *translator) singleAddr(r redisVars, raw string, user, pass *string, auth *bool, scheme *string) (host, db string, ok bool) {
	if s, _, isURL := strings.Cut(raw, "://"); isURL {
		u, err := url.Parse(raw)
		if err != nil || (s != "redis" && s != "rediss") || u.Host == "" {
			t.fail(r.v("URL"), r.backend, "not host:port, nor a redis:// or rediss:// URL (its value is not shown: it may hold a password)")
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
				t.fail(r.v("URL"), r.backend, "the URL's path is not /N, a database number")
				return "", "", false
			}
			db = u.Path
		}
		return u.Host, db, true
	}
	if _, _, err := net.SplitHostPort(raw); err != nil {
		t.fail(r.v("URL"), r.backend, "not host:port (want host:port with %s=single and %s=tcp)", r.v("TYPE"), r.v("SOCKET_TYPE"))
		return "", "", false
	}
	return raw, "", true
}

// addrs splits REDIS_URL's comma-separated list: skip leading names (the Sentinel master's) kept as they are, the
// rest host:port. At least one host:port must follow.
func (t *translator) addrs(r redisVars, raw string, skip int) ([]string, bool) {
	parts := strings.Split(raw, ",")
	want := "h1:p1,h2:p2,... (" + r.v("TYPE") + "=cluster)"
	if skip > 0 {
		want = "master,s1:p1,s2:p2,... (" + r.v("TYPE") + "=sentinel: the master's name, then the Sentinels)"
	}
	if len(parts) <= skip || parts[0] == "" {
		t.fail(r.v("URL"), r.backend, "not %s", want)
		return nil, false
	}
	for _, p := range parts[skip:] {
		if h, port, err := net.SplitHostPort(p); err != nil || h == "" || port == "" {
			t.fail(r.v("URL"), r.backend, "an address is not host:port; want %s", want)
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
	// The reference reads them for either Redis that uses TLS.
	tls := t.boolean("REDIS_TLS", false) || t.boolean("REDIS_PERSECOND", false) && t.boolean("REDIS_PERSECOND_TLS", false)
	if !tls && !strings.HasPrefix(t.flags["backend"], "rediss") && !strings.HasPrefix(t.flags["backend-per-second"], "rediss") {
		for name := range files {
			t.ignore("neither REDIS_TLS nor REDIS_PERSECOND_TLS is true: the reference connects without TLS", name)
		}
		t.ignore("neither REDIS_TLS nor REDIS_PERSECOND_TLS is true: the reference connects without TLS", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION")
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
