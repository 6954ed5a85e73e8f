package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// cmdTotals are the calls of, and the microseconds Redis spent in, a set
// of commands, summed over commands and nodes.
type cmdTotals struct {
	calls, usec uint64
}

// sub returns t minus o.
func (t cmdTotals) sub(o cmdTotals) cmdTotals {
	return cmdTotals{calls: t.calls - o.calls, usec: t.usec - o.usec}
}

// cmdStats reads INFO commandstats from a fixed set of Redis nodes.
type cmdStats struct {
	clients []*redis.Client
	names   []string // lower-case command names, as INFO prints them
}

// newCmdStats connects to each of addrs (host:port) and checks that it
// answers INFO commandstats. names are the commands to sum.
func newCmdStats(ctx context.Context, addrs, names []string) (*cmdStats, error) {
	s := &cmdStats{}
	for _, n := range names {
		s.names = append(s.names, strings.ToLower(n))
	}
	for _, a := range addrs {
		s.clients = append(s.clients, redis.NewClient(&redis.Options{Addr: a, PoolSize: 1}))
	}
	if _, err := s.read(ctx); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// close closes the connections.
func (s *cmdStats) close() {
	for _, c := range s.clients {
		c.Close()
	}
}

// read returns the totals of s's commands over s's nodes now.
func (s *cmdStats) read(ctx context.Context) (cmdTotals, error) {
	var sum cmdTotals
	for _, c := range s.clients {
		text, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return cmdTotals{}, fmt.Errorf("INFO commandstats of %s: %w", c.Options().Addr, err)
		}
		t, err := parseCmdStats(text, s.names)
		if err != nil {
			return cmdTotals{}, fmt.Errorf("INFO commandstats of %s: %w", c.Options().Addr, err)
		}
		sum.calls += t.calls
		sum.usec += t.usec
	}
	return sum, nil
}

// parseCmdStats sums the calls and usec fields of the lines
// "cmdstat_<name>:calls=N,usec=N,..." of INFO commandstats whose name is
// one of names. A command never called since the server started has no
// line, and counts zero.
func parseCmdStats(text string, names []string) (cmdTotals, error) {
	var sum cmdTotals
	for line := range strings.Lines(text) {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd || !slices.Contains(names, name) {
			continue
		}
		for f := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			var into *uint64
			switch k {
			case "calls":
				into = &sum.calls
			case "usec":
				into = &sum.usec
			default:
				continue
			}
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return cmdTotals{}, fmt.Errorf("cmdstat_%s: %s: %w", name, k, err)
			}
			*into += n
		}
	}
	return sum, nil
}
