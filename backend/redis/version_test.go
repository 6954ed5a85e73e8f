package redis

import (
	"strings"
	"testing"
)

func TestParseVersion(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want version
	}{
		{"7.0.15", version{7, 0, 15}},
		{"5.0.0", version{5, 0, 0}},
		{"4.0.14", version{4, 0, 14}},
		{"6.2", version{6, 2, 0}},
		{"7", version{7, 0, 0}},
		{"7.2.0-rc1", version{7, 2, 0}},
		{"255.255.255", version{255, 255, 255}},
		{" 7.0.15\r", version{7, 0, 15}},
	} {
		got, err := parseVersion(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("parseVersion(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "x.1", "v7.0.0", ".1.2"} {
		if v, err := parseVersion(bad); err == nil {
			t.Errorf("parseVersion(%q) = %v, want an error", bad, v)
		}
	}
}

func TestVersionLess(t *testing.T) {
	for _, tt := range []struct {
		v, w version
		want bool
	}{
		{version{4, 0, 14}, version{5, 0, 0}, true},
		{version{5, 0, 0}, version{5, 0, 0}, false},
		{version{5, 0, 1}, version{5, 0, 0}, false},
		{version{4, 9, 9}, version{5, 0, 0}, true},
		{version{10, 0, 0}, version{9, 9, 9}, false},
		{version{5, 0, 0}, version{5, 1, 0}, true},
	} {
		if got := tt.v.less(tt.w); got != tt.want {
			t.Errorf("%v.less(%v) = %v, want %v", tt.v, tt.w, got, tt.want)
		}
	}
}

func TestCheckInfo(t *testing.T) {
	info := func(fields ...string) string {
		return "# Server\r\n" + strings.Join(fields, "\r\n") + "\r\n"
	}
	for _, tt := range []struct {
		info, want string // want: an error containing it, or "" for none
	}{
		{info("redis_version:7.0.15", "redis_mode:standalone"), ""},
		{info("redis_version:5.0.0", "redis_mode:cluster"), ""},
		{info("redis_version:4.0.14", "redis_mode:standalone"), "redis: node 10.0.0.3:6379 runs Redis 4.0.14; ratelimitd needs 5.0 or later"},
		{info("redis_version:3.2.12"), "runs Redis 3.2.12"},
		{info("redis_version:4.0.14", "redis_mode:sentinel"), ""}, // a Sentinel's own version does not matter
		{info("redis_mode:standalone"), "version"},
	} {
		err := checkInfo("10.0.0.3:6379", tt.info)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("checkInfo(%q) = %v, want nil", tt.info, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("checkInfo(%q) = %v, want an error containing %q", tt.info, err, tt.want)
		}
	}
}
