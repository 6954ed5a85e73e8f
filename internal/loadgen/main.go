// Command loadgen drives ratelimitd's Envoy RLS v3 ShouldRateLimit with
// closed-loop callers, and reports the throughput, the latency percentiles
// and the CPU that ratelimitd (and Redis) spent per decision.
//
// Each caller sends a request, waits for the answer, and sends the next.
// A request names the domain "bench" of internal/loadgen/bench.yaml, with
// user u<N> drawn uniformly from -keys values, and with -descriptors 3
// also path /p<N%50> and tenant t<N%10>, each its own descriptor. Calls
// that end during -warmup are not counted; the measured period is the
// -duration that follows.
//
// Usage:
//
//	bin/ratelimitd --config internal/loadgen/bench.yaml &
//	go run ./internal/loadgen -addr 127.0.0.1:8081 -descriptors 3 -pid $!
//
// With -json, stdout holds one JSON object and the human line goes to
// stderr. .ci/bench-load runs it against each backend.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// main leaves SIGINT and SIGTERM to their default action, so that an
// interrupted run dies of the signal and a calling shell script stops too.
func main() {
	err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr)
	var ee exitError
	switch {
	case errors.As(err, &ee):
		os.Exit(int(ee))
	case err != nil:
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

// exitError asks main to exit with its status, the message having been
// printed already.
type exitError int

func (e exitError) Error() string { return "exit status " + strconv.Itoa(int(e)) }

// options are the command's flags.
type options struct {
	addr        string
	domain      string
	descriptors int
	concurrency int
	conns       int
	keys        int
	duration    time.Duration
	warmup      time.Duration
	timeout     time.Duration
	seed        uint64
	pid         int
	redisPID    int
	json        bool
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8081", "ratelimitd's gRPC `address`")
	fs.StringVar(&o.domain, "domain", "bench", "rate limit domain of the requests")
	fs.IntVar(&o.descriptors, "descriptors", 1, "descriptors per request: 1 (user) or 3 (user, path, tenant)")
	fs.IntVar(&o.concurrency, "concurrency", 32, "closed-loop callers")
	fs.IntVar(&o.conns, "conns", 1, "gRPC client connections; callers are assigned to them round-robin")
	fs.IntVar(&o.keys, "keys", 10_000, "distinct users the callers draw from")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "measured period")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "unmeasured period before it")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Second, "deadline of each call")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the callers' random draws")
	fs.IntVar(&o.pid, "pid", 0, "ratelimitd's `pid`, to report its CPU per decision (0: don't)")
	fs.IntVar(&o.redisPID, "redis-pid", 0, "redis-server's `pid`, to report its CPU per decision (0: don't)")
	fs.BoolVar(&o.json, "json", false, "print one JSON object on stdout (the human line goes to stderr)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, exitError(0)
		}
		return nil, exitError(2)
	}
	var bad string
	switch {
	case fs.NArg() > 0:
		bad = fmt.Sprintf("unexpected argument %q", fs.Arg(0))
	case o.descriptors != 1 && o.descriptors != 3:
		bad = fmt.Sprintf("-descriptors %d: want 1 or 3", o.descriptors)
	case o.concurrency < 1, o.conns < 1, o.keys < 1:
		bad = "-concurrency, -conns and -keys must be at least 1"
	case o.duration <= 0, o.warmup < 0, o.timeout <= 0:
		bad = "-duration and -timeout must be positive, -warmup not negative"
	}
	if bad != "" {
		fmt.Fprintln(stderr, "loadgen:", bad)
		return nil, exitError(2)
	}
	return o, nil
}

// A report is the outcome of a run; its JSON form is what -json prints.
// Latencies are in microseconds; CPU figures are microseconds of CPU per
// decision over the measured period, null when no pid was given.
type report struct {
	Addr        string  `json:"addr"`
	Descriptors int     `json:"descriptors"`
	Concurrency int     `json:"concurrency"`
	Conns       int     `json:"conns"`
	Keys        int     `json:"keys"`
	DurationS   float64 `json:"duration_s"`
	// Decisions counts answered calls, OK or OVER_LIMIT.
	Decisions  uint64   `json:"decisions"`
	OverLimit  uint64   `json:"over_limit"`
	Errors     uint64   `json:"errors"`
	RPS        float64  `json:"rps"`
	P50        float64  `json:"p50_us"`
	P90        float64  `json:"p90_us"`
	P99        float64  `json:"p99_us"`
	Max        float64  `json:"max_us"`
	DaemonCPU  *float64 `json:"daemon_cpu_us"`
	RedisCPU   *float64 `json:"redis_cpu_us"`
	LoadgenCPU *float64 `json:"loadgen_cpu_us"`
	FirstError string   `json:"first_error,omitempty"`
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	conns := make([]rlsv3.RateLimitServiceClient, o.conns)
	for i := range conns {
		cc, err := grpc.NewClient(o.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer cc.Close()
		cc.Connect()
		conns[i] = rlsv3.NewRateLimitServiceClient(cc)
	}
	vals := newValues(o.keys)

	start := time.Now()
	t0, t1 := start.Add(o.warmup), start.Add(o.warmup+o.duration)
	tallies := make([]tally, o.concurrency)
	var wg sync.WaitGroup
	for i := range tallies {
		c := caller{o: o, vals: vals, client: conns[i%len(conns)], t0: t0, t1: t1,
			rng: rand.New(rand.NewPCG(o.seed, uint64(i)))}
		wg.Go(func() { c.loop(ctx, &tallies[i]) })
	}

	// CPU is sampled at the edges of the measured period.
	pids := []int{o.pid, o.redisPID, 0} // 0: this process
	var cpu0, cpu1 [3]time.Duration
	sample := func(at time.Time, into *[3]time.Duration) error {
		select {
		case <-time.After(time.Until(at)):
		case <-ctx.Done():
			return ctx.Err()
		}
		for i, pid := range pids {
			if pid == 0 && i != 2 {
				continue
			}
			d, err := cpuTime(pid)
			if err != nil {
				return fmt.Errorf("CPU of pid %d: %w", pid, err)
			}
			into[i] = d
		}
		return nil
	}
	err = sample(t0, &cpu0)
	if err == nil {
		err = sample(t1, &cpu1)
	}
	wg.Wait()
	if err != nil {
		return err
	}

	var all tally
	for i := range tallies {
		all.merge(&tallies[i])
	}
	r := report{
		Addr: o.addr, Descriptors: o.descriptors, Concurrency: o.concurrency, Conns: o.conns, Keys: o.keys,
		DurationS: o.duration.Seconds(),
		Decisions: all.hist.n, OverLimit: all.overLimit, Errors: all.errors,
		RPS: float64(all.hist.n) / o.duration.Seconds(),
		P50: micros(all.hist.quantile(0.50)), P90: micros(all.hist.quantile(0.90)),
		P99: micros(all.hist.quantile(0.99)), Max: micros(all.hist.max),
	}
	if all.firstErr != nil {
		r.FirstError = all.firstErr.Error()
	}
	perDecision := func(i int) *float64 {
		if (pids[i] == 0 && i != 2) || all.hist.n == 0 {
			return nil
		}
		v := micros(cpu1[i]-cpu0[i]) / float64(all.hist.n)
		return &v
	}
	r.DaemonCPU, r.RedisCPU, r.LoadgenCPU = perDecision(0), perDecision(1), perDecision(2)

	human := stdout
	if o.json {
		human = stderr
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n", b)
	}
	fmt.Fprintln(human, r.String())
	if r.Decisions == 0 {
		return fmt.Errorf("no decisions in %v: %d errors, the first: %s", o.duration, r.Errors, r.FirstError)
	}
	return nil
}

// String returns r as one line for people.
func (r report) String() string {
	cpu := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return strconv.FormatFloat(*v, 'f', 1, 64) + " µs"
	}
	s := fmt.Sprintf("%s %d descriptor(s), %d callers on %d conn(s): %.0f req/s over %gs, p50 %.0f µs, p90 %.0f µs, p99 %.0f µs, max %.0f µs; "+
		"%d decisions, %d over limit, %d errors; CPU per decision: ratelimitd %s, redis %s, loadgen %s",
		r.Addr, r.Descriptors, r.Concurrency, r.Conns, r.RPS, r.DurationS, r.P50, r.P90, r.P99, r.Max,
		r.Decisions, r.OverLimit, r.Errors, cpu(r.DaemonCPU), cpu(r.RedisCPU), cpu(r.LoadgenCPU))
	if r.FirstError != "" {
		s += "; first error: " + r.FirstError
	}
	return s
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// values holds the descriptor values, built once so that callers spend
// their CPU on calls rather than on formatting.
type values struct {
	users, paths, tenants []string
}

func newValues(keys int) *values {
	v := &values{users: make([]string, keys), paths: make([]string, 50), tenants: make([]string, 10)}
	for i := range v.users {
		v.users[i] = "u" + strconv.Itoa(i)
	}
	for i := range v.paths {
		v.paths[i] = "/p" + strconv.Itoa(i)
	}
	for i := range v.tenants {
		v.tenants[i] = "t" + strconv.Itoa(i)
	}
	return v
}

// A tally is what one caller measured over the measured period.
type tally struct {
	hist      histogram // latency of every decision
	overLimit uint64
	errors    uint64
	firstErr  error
}

func (t *tally) merge(o *tally) {
	t.hist.merge(&o.hist)
	t.overLimit += o.overLimit
	t.errors += o.errors
	if t.firstErr == nil {
		t.firstErr = o.firstErr
	}
}

// A caller is one closed-loop client.
type caller struct {
	o      *options
	vals   *values
	client rlsv3.RateLimitServiceClient
	rng    *rand.Rand
	t0, t1 time.Time // the measured period
}

// loop calls until t1 or until ctx is done, counting into t the calls
// that end within [t0, t1).
func (c *caller) loop(ctx context.Context, t *tally) {
	for ctx.Err() == nil {
		req := c.request(c.rng.IntN(len(c.vals.users)))
		begin := time.Now()
		cctx, cancel := context.WithTimeout(ctx, c.o.timeout)
		resp, err := c.client.ShouldRateLimit(cctx, req)
		cancel()
		end := time.Now()
		if !end.Before(c.t1) {
			return
		}
		if end.Before(c.t0) {
			continue
		}
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return // interrupted: not the server's fault
			}
			t.errors++
			if t.firstErr == nil {
				t.firstErr = err
			}
		default:
			t.hist.record(end.Sub(begin))
			if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
				t.overLimit++
			}
		}
	}
}

// request builds the request for user n.
func (c *caller) request(n int) *rlsv3.RateLimitRequest {
	entry := func(k, v string) *rlv3.RateLimitDescriptor {
		return &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: k, Value: v}}}
	}
	ds := make([]*rlv3.RateLimitDescriptor, 0, 3)
	ds = append(ds, entry("user", c.vals.users[n]))
	if c.o.descriptors == 3 {
		ds = append(ds, entry("path", c.vals.paths[n%len(c.vals.paths)]), entry("tenant", c.vals.tenants[n%len(c.vals.tenants)]))
	}
	return &rlsv3.RateLimitRequest{Domain: c.o.domain, Descriptors: ds}
}
