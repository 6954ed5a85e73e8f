package main

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

func TestParseCmdStats(t *testing.T) {
	const text = "# Commandstats\r\n" +
		"cmdstat_evalsha:calls=10,usec=250,usec_per_call=25.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_eval:calls=1,usec=40,usec_per_call=40.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_incrby:calls=7,usec=9,usec_per_call=1.29,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_client|setname:calls=2,usec=3,usec_per_call=1.50,rejected_calls=0,failed_calls=0\r\n"
	for _, tt := range []struct {
		names []string
		want  cmdTotals
	}{
		{[]string{"evalsha", "eval", "fcall"}, cmdTotals{calls: 11, usec: 290}},
		{[]string{"incrby", "expire"}, cmdTotals{calls: 7, usec: 9}},
		{nil, cmdTotals{}},
	} {
		got, err := parseCmdStats(text, tt.names)
		if err != nil || got != tt.want {
			t.Errorf("parseCmdStats(%v) = %+v, %v; want %+v", tt.names, got, err, tt.want)
		}
	}
	if _, err := parseCmdStats("cmdstat_eval:calls=x,usec=1\r\n", []string{"eval"}); err == nil {
		t.Error("parseCmdStats of calls=x: no error")
	}
}

// TestCmdStats checks that the totals of two servers add up, counting only
// the commands asked for.
func TestCmdStats(t *testing.T) {
	ctx := context.Background()
	a, b := redistest.Start(t), redistest.Start(t)
	s, err := newCmdStats(ctx, []string{a.Addr, b.Addr}, []string{"INCRBY", "expire"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	before, err := s.read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ca, cb := a.Client(t), b.Client(t)
	for range 3 {
		ca.IncrBy(ctx, "k", 1)
		cb.IncrBy(ctx, "k", 1)
		cb.Expire(ctx, "k", time.Minute)
		ca.Get(ctx, "k")
	}
	after, err := s.read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := after.sub(before).calls; got != 9 {
		t.Errorf("INCRBY and EXPIRE calls on both servers: %d, want 9", got)
	}
}
