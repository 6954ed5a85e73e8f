// Command baseline is the load benchmark's stand-in for the reference rate
// limit service, envoyproxy/ratelimit on Redis: a minimal Envoy RLS v3
// gRPC server that sends Redis the same commands per request, so that its
// Redis CPU and Redis command time per decision stand for the reference's.
// It is not a rate limit service to deploy: it knows one limit for every
// descriptor and reads no rules.
//
// Per request, as the reference does on its fixed window: each descriptor
// gets a counter key made of the domain, its entries' keys and values and
// the start of the current window (for example
// "bench_user_u42_1732399200"); all of the request's descriptors go to
// Redis in ONE go-redis pipeline of INCRBY key hits and EXPIRE key window
// per descriptor, one round trip per request and no batching across
// requests; the answer is OVER_LIMIT when any counter exceeds -limit.
// With -cluster, -redis lists a Redis Cluster's seed nodes and the
// pipeline is go-redis's Cluster pipeline: each command routed by its
// key's slot, the commands bound for one node sent together, the nodes in
// parallel, as the reference pipelines on a Cluster.
//
// Usage:
//
//	bin/baseline -grpc-addr 127.0.0.1:0 -redis 127.0.0.1:6379 &
//	bin/loadgen -addr <the address it prints> -pid $!
//
// It prints "baseline listening on ADDR" on stdout once it serves, and
// stops on SIGINT or SIGTERM. .ci/bench-load runs it as the baseline rows
// of make bench-load.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/ratelimitd/ratelimitd/internal/envoyunit"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "baseline:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	grpcAddr string
	redis    string
	cluster  bool
	limit    uint64
	window   time.Duration
}

// parseFlags reads the command line; a usage error is printed on stderr.
func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("baseline", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.grpcAddr, "grpc-addr", "127.0.0.1:8081", "gRPC listen `address` (port 0: any free port)")
	fs.StringVar(&o.redis, "redis", "127.0.0.1:6379", "Redis: a host:port `address` or a redis:// URL")
	fs.BoolVar(&o.cluster, "cluster", false, "-redis is a Redis Cluster: a comma-separated list of its nodes' host:port addresses")
	fs.Uint64Var(&o.limit, "limit", 1_000_000_000, "requests per window of each counter")
	fs.DurationVar(&o.window, "window", time.Hour, "the fixed window (whole seconds)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case o.window < time.Second || o.window%time.Second != 0:
		return nil, fmt.Errorf("-window %v: want a whole number of seconds", o.window)
	}
	return o, nil
}

// redisOptions returns the go-redis options for s, a URL or an address.
// The pool is go-redis's default (10 connections per GOMAXPROCS).
func redisOptions(s string) (*redis.Options, error) {
	if strings.Contains(s, "://") {
		o, err := redis.ParseURL(s)
		if err != nil {
			return nil, fmt.Errorf("-redis: %w", err)
		}
		return o, nil
	}
	return &redis.Options{Addr: s}, nil
}

// run serves until ctx is done.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	var rdb redis.UniversalClient
	if o.cluster {
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(o.redis, ",")})
	} else {
		ro, err := redisOptions(o.redis)
		if err != nil {
			return err
		}
		rdb = redis.NewClient(ro)
	}
	defer rdb.Close()
	lis, err := net.Listen("tcp", o.grpcAddr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	gs := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(gs, &server{rdb: rdb, limit: o.limit, window: o.window, now: time.Now})
	fmt.Fprintf(stdout, "baseline listening on %s\n", lis.Addr())
	done := make(chan error, 1)
	go func() { done <- gs.Serve(lis) }()
	select {
	case err := <-done:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
		gs.Stop()
		if err := <-done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("serve: %w", err)
		}
		return nil
	}
}

// server answers ShouldRateLimit with one fixed-window counter per
// descriptor in Redis.
type server struct {
	rlsv3.UnimplementedRateLimitServiceServer
	rdb    redis.Cmdable
	limit  uint64
	window time.Duration
	now    func() time.Time // the clock that places requests in windows
}

// ShouldRateLimit counts the request's hits (1 when hits_addend is 0) on
// each descriptor's counter in one pipeline, and answers OVER_LIMIT when
// any counter is above the limit.
func (s *server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	hits := int64(max(req.GetHitsAddend(), 1))
	secs := int64(s.window / time.Second)
	suffix := "_" + strconv.FormatInt(s.now().Unix()/secs*secs, 10)
	pipe := s.rdb.Pipeline()
	incrs := make([]*redis.IntCmd, len(req.GetDescriptors()))
	for i, d := range req.GetDescriptors() {
		var key strings.Builder
		key.WriteString(req.GetDomain())
		for _, e := range d.GetEntries() {
			key.WriteString("_" + e.GetKey() + "_" + e.GetValue())
		}
		key.WriteString(suffix)
		incrs[i] = pipe.IncrBy(ctx, key.String(), hits)
		pipe.Expire(ctx, key.String(), s.window)
	}
	if _, err := pipe.Exec(ctx); err != nil { // INCRBY and EXPIRE never answer nil
		return nil, fmt.Errorf("redis pipeline: %w", err)
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for _, c := range incrs {
		st := &rlsv3.RateLimitResponse_DescriptorStatus{
			Code:         rlsv3.RateLimitResponse_OK,
			CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: uint32(min(s.limit, 1<<32-1)), Unit: unit(s.window)},
		}
		if n := uint64(max(c.Val(), 0)); n > s.limit {
			st.Code, resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT, rlsv3.RateLimitResponse_OVER_LIMIT
		} else {
			st.LimitRemaining = uint32(min(s.limit-n, 1<<32-1))
		}
		resp.Statuses = append(resp.Statuses, st)
	}
	return resp, nil
}

// unit returns the Envoy unit of window w, UNKNOWN when w is not one.
func unit(w time.Duration) rlsv3.RateLimitResponse_RateLimit_Unit {
	u, _ := envoyunit.ByWindow(w) // the zero Unit's number is UNKNOWN's
	return rlsv3.RateLimitResponse_RateLimit_Unit(u.Envoy)
}
