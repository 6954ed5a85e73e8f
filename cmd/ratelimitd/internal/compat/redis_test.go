package compat_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/backend/redis"
	"github.com/ratelimitd/ratelimitd/cmd/ratelimitd/internal/compat"
)

// TestRedisURL: each Redis environment becomes a --backend URL that backend/redis accepts, carrying the same
// addresses, credentials and master name.
func TestRedisURL(t *testing.T) {
	for _, tt := range []struct {
		name string
		vars map[string]string
		want string
		// check, when set, inspects the URL as go-redis reads it.
		check func(t *testing.T, url string)
	}{
		{"single", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis.ns:6379"}, "redis://redis.ns:6379", nil},
		{"single type in any case", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "Single", "REDIS_URL": "10.0.0.1:6380"}, "redis://10.0.0.1:6380", nil},
		{"single IPv6", map[string]string{"REDIS_SOCKET_TYPE": "tcp6", "REDIS_URL": "[::1]:6379"}, "redis://[::1]:6379", nil},
		{"single TLS", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379", "REDIS_TLS": "true"}, "rediss://r:6379", nil},
		{"unix socket", map[string]string{"REDIS_SOCKET_TYPE": "unix", "REDIS_URL": "/run/redis/redis.sock"}, "unix:///run/redis/redis.sock", nil},
		{"unix socket with a password", map[string]string{"REDIS_SOCKET_TYPE": "unix", "REDIS_URL": "/run/redis.sock", "REDIS_AUTH": "u:p@ss"},
			"unix://u:p%40ss@/run/redis.sock", func(t *testing.T, u string) {
				o, err := goredis.ParseURL(u)
				if err != nil || o.Network != "unix" || o.Addr != "/run/redis.sock" || o.Username != "u" || o.Password != "p@ss" {
					t.Errorf("ParseURL: %+v, %v", o, err)
				}
			}},
		{"password", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379", "REDIS_AUTH": "s3cret"},
			"redis://:s3cret@r:6379", func(t *testing.T, u string) {
				o, err := goredis.ParseURL(u)
				if err != nil || o.Username != "" || o.Password != "s3cret" {
					t.Errorf("ParseURL: %+v, %v", o, err)
				}
			}},
		{"user and password with reserved characters", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379", "REDIS_AUTH": "app user:p@ss:w/rd?#%&+ é"},
			"redis://app%20user:p%40ss%3Aw%2Frd%3F%23%25&+%20%C3%A9@r:6379", func(t *testing.T, u string) {
				o, err := goredis.ParseURL(u)
				if err != nil || o.Username != "app user" || o.Password != "p@ss:w/rd?#%&+ é" {
					t.Errorf("ParseURL: user %q password %q, %v", o.Username, o.Password, err)
				}
			}},
		{"single redis:// URL", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis://:pw@r:6379/2"},
			"redis://:pw@r:6379/2", func(t *testing.T, u string) {
				o, err := goredis.ParseURL(u)
				if err != nil || o.Password != "pw" || o.DB != 2 {
					t.Errorf("ParseURL: %+v, %v", o, err)
				}
			}},
		{"REDIS_AUTH wins over the URL's", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "rediss://:old@r:6379", "REDIS_AUTH": "new"},
			"rediss://:new@r:6379", nil},
		{"cluster", map[string]string{"REDIS_TYPE": "CLUSTER", "REDIS_URL": "h1:7000,h2:7001,h3:7002", "REDIS_AUTH": "u:p w"},
			"redis-cluster://u:p%20w@h1:7000?addr=h2%3A7001&addr=h3%3A7002", func(t *testing.T, u string) {
				o, err := goredis.ParseClusterURL(strings.Replace(u, "redis-cluster", "redis", 1))
				if err != nil || strings.Join(o.Addrs, ",") != "h1:7000,h2:7001,h3:7002" || o.Username != "u" || o.Password != "p w" {
					t.Errorf("ParseClusterURL: %+v, %v", o, err)
				}
			}},
		{"cluster of one, TLS", map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": "h1:7000", "REDIS_TLS": "1"},
			"rediss-cluster://h1:7000", nil},
		{"sentinel", map[string]string{"REDIS_TYPE": "SENTINEL", "REDIS_URL": "mymaster,s1:26379,s2:26379,s3:26379",
			"REDIS_AUTH": "user:pa&ss=", "REDIS_SENTINEL_AUTH": "sp@ss"},
			"redis-sentinel://:sp%40ss@s1:26379?addr=s2%3A26379&addr=s3%3A26379&master_name=mymaster&password=pa%26ss%3D&username=user",
			func(t *testing.T, u string) {
				o, err := goredis.ParseFailoverURL(strings.Replace(u, "redis-sentinel", "redis", 1))
				if err != nil || o.MasterName != "mymaster" || strings.Join(o.SentinelAddrs, ",") != "s1:26379,s2:26379,s3:26379" ||
					o.Username != "user" || o.Password != "pa&ss=" || o.SentinelUsername != "" || o.SentinelPassword != "sp@ss" {
					t.Errorf("ParseFailoverURL: %+v, %v", o, err)
				}
			}},
		{"sentinel of one, TLS, no auth", map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "m,s1:26379", "REDIS_TLS": "true"},
			"rediss-sentinel://s1:26379?master_name=m", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := translate(t, tt.vars)
			got := r.Flags["backend"]
			if got != tt.want {
				t.Errorf("backend = %q, want %q", got, tt.want)
			}
			c, err := redis.NewClient(got, redis.ClientOptions{})
			if err != nil {
				t.Fatalf("backend/redis refuses %q: %v", got, err)
			}
			_ = c.Close()
			if tt.check != nil {
				tt.check(t, got)
			}
		})
	}
}

// TestRedisRefused: what backend/redis cannot do fails, naming the variable, with --backend as the way out, and
// never shows a password.
func TestRedisRefused(t *testing.T) {
	for _, tt := range []struct {
		name string
		vars map[string]string
		bad  string // the variable the error names
		flag string // the flag that makes it moot
	}{
		{"unix socket at the reference's default, twemproxy's", map[string]string{"REDIS_SOCKET_TYPE": "unix"}, "REDIS_SOCKET_TYPE", "backend"},
		{"twemproxy's socket spelled out", map[string]string{"REDIS_SOCKET_TYPE": "unix", "REDIS_URL": "/var/run/nutcracker/ratelimit.sock"}, "REDIS_SOCKET_TYPE", "backend"},
		{"unix socket, relative path", map[string]string{"REDIS_SOCKET_TYPE": "unix", "REDIS_URL": "redis.sock"}, "REDIS_URL", "backend"},
		{"unix socket over TLS", map[string]string{"REDIS_SOCKET_TYPE": "unix", "REDIS_URL": "/run/redis.sock", "REDIS_TLS": "true"}, "REDIS_TLS", "backend"},
		{"unknown socket", map[string]string{"REDIS_SOCKET_TYPE": "udp", "REDIS_URL": "r:6379"}, "REDIS_SOCKET_TYPE", "backend"},
		{"not host:port", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis"}, "REDIS_URL", "backend"},
		{"other scheme", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "unix://:hunter2@/sock"}, "REDIS_URL", "backend"},
		{"URL path not a db", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis://:hunter2@r:6379/x"}, "REDIS_URL", "backend"},
		{"sentinel without sentinels", map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "mymaster"}, "REDIS_URL", "backend"},
		{"sentinel bad address", map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "m,s1"}, "REDIS_URL", "backend"},
		{"cluster empty address", map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": "h1:1,"}, "REDIS_URL", "backend"},
		{"unknown type", map[string]string{"REDIS_TYPE": "ring", "REDIS_URL": "r:1"}, "REDIS_TYPE", "backend"},
		{"memcache", map[string]string{"BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": "m:11211"}, "BACKEND_TYPE", "backend"},
		{"unknown backend", map[string]string{"BACKEND_TYPE": "dynamo"}, "BACKEND_TYPE", "backend"},
		{"per-second Redis at twemproxy's socket, the default", with(tcpRedis, map[string]string{"REDIS_PERSECOND": "true"}),
			"REDIS_PERSECOND_SOCKET_TYPE", "backend-per-second"},
		{"per-second Redis, not host:port", with(tcpRedis, map[string]string{"REDIS_PERSECOND": "true",
			"REDIS_PERSECOND_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_URL": "r2"}), "REDIS_PERSECOND_URL", "backend-per-second"},
		{"per-second Redis, unknown type", with(tcpRedis, map[string]string{"REDIS_PERSECOND": "true",
			"REDIS_PERSECOND_TYPE": "ring", "REDIS_PERSECOND_URL": "r2:1"}), "REDIS_PERSECOND_TYPE", "backend-per-second"},
		{"skip host name only", with(tcpRedis, map[string]string{"REDIS_TLS": "true", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true"}),
			"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "backend"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.vars["REDIS_AUTH"] = "hunter2"
			r, err := compat.Envoyproxy(env(tt.vars))
			checkFlags(t, r)
			ce, ok := errors.AsType[*compat.Error](err)
			if !ok || ce.Name != tt.bad || ce.Flag != tt.flag {
				t.Fatalf("error %v, want one of %s (moot with %q)", err, tt.bad, tt.flag)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error shows the password: %v", err)
			}
			if !strings.HasPrefix(err.Error(), tt.bad+": ") {
				t.Errorf("error %q does not start with the variable's name", err)
			}
		})
	}
}

// TestRedisSettings: the other Redis variables.
func TestRedisSettings(t *testing.T) {
	r := translate(t, with(tcpRedis, map[string]string{
		"REDIS_TLS": "true", "REDIS_TLS_CACERT": "/tls/ca.pem", "REDIS_TLS_CLIENT_CERT": "/tls/c.pem",
		"REDIS_TLS_CLIENT_KEY": "/tls/c.key", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "false",
		"REDIS_POOL_SIZE": "0x20", "REDIS_TIMEOUT": "2s", "CACHE_KEY_PREFIX": "rl:",
		"REDIS_PIPELINE_WINDOW": "150us", "REDIS_PIPELINE_LIMIT": "8", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": "true",
		"LOCAL_CACHE_SIZE_IN_BYTES": "1048576", "EXPIRATION_JITTER_MAX_SECONDS": "60",
		"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true", "REDIS_PERSECOND_URL": "r2:6379",
	}))
	for flag, want := range map[string]string{
		"backend": "rediss://redis:6379", "redis-tls-ca": "/tls/ca.pem", "redis-tls-cert": "/tls/c.pem",
		"redis-tls-key": "/tls/c.key", "redis-pool-size": "32", "redis-timeout": "2s", "redis-dial-timeout": "2s",
		"redis-read-timeout": "2s", "redis-write-timeout": "2s", "redis-key-prefix": "rl:",
		"local-cache": "true", "local-cache-size": "8192",
	} {
		if got := r.Flags[flag]; got != want {
			t.Errorf("%s = %q, want %q", flag, got, want)
		}
	}
	for _, name := range []string{"REDIS_TLS_CACERT", "REDIS_POOL_SIZE", "REDIS_TIMEOUT", "CACHE_KEY_PREFIX",
		"LOCAL_CACHE_SIZE_IN_BYTES", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION"} {
		if !slices.Contains(r.Set, name) {
			t.Errorf("%s not in Set %v", name, r.Set)
		}
	}
	for _, name := range []string{"REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT", "EXPIRATION_JITTER_MAX_SECONDS", "REDIS_PERSECOND_URL"} {
		if !ignored(r, name) {
			t.Errorf("%s not in Ignored %v", name, r.Ignored)
		}
	}
	// Without REDIS_TLS, the reference reads no TLS file.
	r = translate(t, with(tcpRedis, map[string]string{"REDIS_TLS_CACERT": "/tls/ca.pem", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true"}))
	if _, ok := r.Flags["redis-tls-ca"]; ok || !ignored(r, "REDIS_TLS_CACERT") || !ignored(r, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION") {
		t.Errorf("TLS files without REDIS_TLS: flags %v, ignored %v", r.Flags, r.Ignored)
	}
	// A small cache still holds an entry; 0 turns it off.
	if r := translate(t, with(tcpRedis, map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "100"})); r.Flags["local-cache-size"] != "1" {
		t.Errorf("100 bytes: local-cache-size %q, want 1", r.Flags["local-cache-size"])
	}
	if r := translate(t, with(tcpRedis, map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "0"})); r.Flags["local-cache"] != "false" {
		t.Errorf("0 bytes: local-cache %q, want false", r.Flags["local-cache"])
	}
}

// TestPerSecondRedis: with REDIS_PERSECOND, the second Redis's variables become --backend-per-second and its own
// pool and timeout, read as the main Redis's are; without it they are ignored.
func TestPerSecondRedis(t *testing.T) {
	for _, tt := range []struct {
		name string
		vars map[string]string
		want string
	}{
		{"single", map[string]string{"REDIS_PERSECOND_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_URL": "r2:6380",
			"REDIS_PERSECOND_AUTH": "u:p@ss"}, "redis://u:p%40ss@r2:6380"},
		{"single TLS", map[string]string{"REDIS_PERSECOND_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_URL": "r2:6380",
			"REDIS_PERSECOND_TLS": "true"}, "rediss://r2:6380"},
		{"unix socket", map[string]string{"REDIS_PERSECOND_URL": "/run/redis2.sock"}, "unix:///run/redis2.sock"},
		{"cluster", map[string]string{"REDIS_PERSECOND_TYPE": "cluster", "REDIS_PERSECOND_URL": "h1:7000,h2:7001"},
			"redis-cluster://h1:7000?addr=h2%3A7001"},
		{"sentinel", map[string]string{"REDIS_PERSECOND_TYPE": "sentinel", "REDIS_PERSECOND_URL": "m2,s1:26379,s2:26379",
			"REDIS_PERSECOND_AUTH": "pw", "REDIS_PERSECOND_SENTINEL_AUTH": "spw"},
			"redis-sentinel://:spw@s1:26379?addr=s2%3A26379&master_name=m2&password=pw"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			vars := with(tcpRedis, tt.vars)
			vars["REDIS_PERSECOND"] = "true"
			r := translate(t, vars)
			if got := r.Flags["backend-per-second"]; got != tt.want {
				t.Errorf("backend-per-second = %q, want %q", got, tt.want)
			}
			if r.Flags["backend"] != "redis://redis:6379" {
				t.Errorf("backend = %q, want the main Redis's", r.Flags["backend"])
			}
			c, err := redis.NewClient(r.Flags["backend-per-second"], redis.ClientOptions{})
			if err != nil {
				t.Fatalf("backend/redis refuses %q: %v", r.Flags["backend-per-second"], err)
			}
			_ = c.Close()
			for name := range tt.vars {
				if !slices.Contains(r.Set, name) {
					t.Errorf("%s not in Set %v", name, r.Set)
				}
			}
		})
	}
	r := translate(t, with(tcpRedis, map[string]string{
		"REDIS_PERSECOND": "1", "REDIS_PERSECOND_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_URL": "r2:6380",
		"REDIS_PERSECOND_POOL_SIZE": "7", "REDIS_PERSECOND_TIMEOUT": "250ms", "REDIS_PERSECOND_PIPELINE_WINDOW": "1ms",
		"REDIS_PERSECOND_TLS": "true", "REDIS_TLS_CACERT": "/tls/ca.pem",
	}))
	for flag, want := range map[string]string{
		"redis-per-second-pool-size": "7", "redis-per-second-timeout": "250ms", "redis-tls-ca": "/tls/ca.pem",
		"backend": "redis://redis:6379", "backend-per-second": "rediss://r2:6380",
	} {
		if got := r.Flags[flag]; got != want {
			t.Errorf("%s = %q, want %q", flag, got, want)
		}
	}
	if !ignored(r, "REDIS_PERSECOND_PIPELINE_WINDOW") || ignored(r, "REDIS_PERSECOND_TIMEOUT") {
		t.Errorf("ignored %v: want the pipeline window ignored, the timeout honoured", r.Ignored)
	}
	// Without REDIS_PERSECOND, the second Redis's variables change nothing.
	r = translate(t, with(tcpRedis, map[string]string{"REDIS_PERSECOND_URL": "r2:6380", "REDIS_PERSECOND_POOL_SIZE": "7"}))
	if _, ok := r.Flags["backend-per-second"]; ok || r.Flags["redis-per-second-pool-size"] != "" ||
		!ignored(r, "REDIS_PERSECOND_URL") || !ignored(r, "REDIS_PERSECOND_POOL_SIZE") {
		t.Errorf("without REDIS_PERSECOND: flags %v, ignored %v", r.Flags, r.Ignored)
	}
}

// TestRedisHealthCheck: the reference stays healthy while Redis is down
// unless REDIS_HEALTH_CHECK_ACTIVE_CONNECTION is true, and so does
// ratelimitd, whatever its failure mode: the variable is honoured both
// ways.
func TestRedisHealthCheck(t *testing.T) {
	for _, tt := range []struct {
		value string // "": unset
		want  string
	}{
		{"", "true"},
		{"false", "true"},
		{"0", "true"},
		{"true", "false"},
		{"1", "false"},
	} {
		vars := tcpRedis
		if tt.value != "" {
			vars = with(tcpRedis, map[string]string{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": tt.value})
		}
		r := translate(t, vars)
		if got := r.Flags["ready-without-store"]; got != tt.want {
			t.Errorf("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=%q: ready-without-store %q, want %q", tt.value, got, tt.want)
		}
		if ignored(r, "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION") {
			t.Errorf("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=%q ignored %v, want it honoured", tt.value, r.Ignored)
		}
		if set := slices.Contains(r.Set, "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION"); set != (tt.value != "") {
			t.Errorf("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=%q: in Set %v is %v", tt.value, r.Set, set)
		}
	}
}

// ignored reports whether r ignores the variable name.
func ignored(r compat.Result, name string) bool {
	for _, ig := range r.Ignored {
		if ig.Name == name {
			return true
		}
	}
	return false
}
