package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"testing"

	"google.golang.org/grpc"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/server/rlqs"
)

// TestRunQuota drives an RLQS service with bench.yaml's rules in quota
// mode: the callers decide locally, without errors, and the report
// counts what the failure policy decided.
func TestRunQuota(t *testing.T) {
	rules, err := config.Load("bench.yaml")
	if err != nil {
		t.Fatal(err)
	}
	svc := rlqs.New(rules, rlqs.Options{})
	g := grpc.NewServer()
	svc.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(func() {
		svc.EndStreams()
		g.Stop()
	})

	var out bytes.Buffer
	args := []string{"-mode", "quota", "-addr", lis.Addr().String(), "-descriptors", "3", "-keys", "20",
		"-concurrency", "4", "-conns", "2", "-warmup", "200ms", "-duration", "300ms", "-reporting-interval", "100ms", "-json"}
	if err := run(t.Context(), args, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var r report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("loadgen's JSON %q: %v", out.String(), err)
	}
	if r.Mode != modeQuota || r.Decisions == 0 || r.Errors != 0 || r.OverLimit != 0 {
		t.Errorf("mode %q, %d decisions, %d errors (the first: %q), %d over limit; want quota, some decisions, none refused or failed",
			r.Mode, r.Decisions, r.Errors, r.FirstError, r.OverLimit)
	}
	if r.FailOpens == nil { // read at the edges, it may differ a little from the decisions counted
		t.Error("fail_opens is null: want the count of decisions made by the failure policy")
	}
	if r.LoadgenCPU == nil || r.DaemonCPU != nil {
		t.Errorf("loadgen_cpu_us %v, daemon_cpu_us %v: want loadgen's only (no -pid)", r.LoadgenCPU, r.DaemonCPU)
	}
}
