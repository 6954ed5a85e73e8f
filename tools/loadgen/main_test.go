package main

import (
	"io"
	"slices"
	"testing"
	"time"
)

func TestParseFlagsLists(t *testing.T) {
	o, err := parseFlags([]string{"-redis-pid", "10,11", "-redis-pid", "12", "-redis-addr", "h1:1,h2:2"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := (intList{10, 11, 12}); !slices.Equal(o.redisPIDs, want) {
		t.Errorf("-redis-pid: %v, want %v", o.redisPIDs, want)
	}
	if want := (stringList{"h1:1", "h2:2"}); !slices.Equal(o.redisAddrs, want) {
		t.Errorf("-redis-addr: %v, want %v", o.redisAddrs, want)
	}
	if !slices.Equal(o.redisCmds, scriptCommands) {
		t.Errorf("-redis-cmd by default: %v, want %v", o.redisCmds, scriptCommands)
	}
	o, err = parseFlags([]string{"-redis-cmd", "incrby", "-redis-cmd", "expire"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := (stringList{"incrby", "expire"}); !slices.Equal(o.redisCmds, want) {
		t.Errorf("-redis-cmd incrby -redis-cmd expire: %v, want %v", o.redisCmds, want)
	}
	for _, bad := range []string{"0", "x", "1,,2"} {
		if _, err := parseFlags([]string{"-redis-pid", bad}, io.Discard); err == nil {
			t.Errorf("-redis-pid %q: no error", bad)
		}
	}
}

func TestParseFlagsMode(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.mode != modeRPC {
		t.Errorf("-mode by default: %q, want %q", o.mode, modeRPC)
	}
	o, err = parseFlags([]string{"-mode", "quota", "-reporting-interval", "1s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.mode != modeQuota || o.interval != time.Second {
		t.Errorf("-mode quota -reporting-interval 1s: mode %q, interval %v", o.mode, o.interval)
	}
	for _, bad := range [][]string{{"-mode", "local"}, {"-mode", "quota", "-reporting-interval", "-1s"}} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
