package redis_test

import (
	"testing"

	"github.com/ratelimitd/ratelimitd/backend/redis"
)

func TestIsURL(t *testing.T) {
	for s, want := range map[string]bool{
		"redis://127.0.0.1:6379":                  true,
		"rediss://h:6380/2":                       true,
		"redis-cluster://h1:1?addr=h2:2":          true,
		"rediss-cluster://h1:1":                   true,
		"redis-sentinel://s:26379?master_name=m":  true,
		"rediss-sentinel://s:26379?master_name=m": true,
		"unix:///run/redis.sock":                  true,
		"memory":                                  false,
		"127.0.0.1:6379":                          false,
		"http://h:6379":                           false,
		"redis:/h":                                false,
		"REDIS://h:6379":                          false,
		"":                                        false,
	} {
		if got := redis.IsURL(s); got != want {
			t.Errorf("IsURL(%q) = %v, want %v", s, got, want)
		}
	}
}
