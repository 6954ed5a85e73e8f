// Command loadgen drives an Envoy RLS v3 rate limit service (ratelimitd,
// or the baseline of tools/baseline) with closed-loop callers,
// and reports the throughput, the latency percentiles, and what the
// service, Redis and loadgen itself spent per decision.
//
// With -mode rpc (the default), each caller sends a ShouldRateLimit
// request, waits for the answer, and sends the next. A request names the
// -domain ("bench" of tools/loadgen/bench.yaml by default), with user
// u<N> drawn uniformly from -keys values, and with -descriptors 3 also
// path /p<N%50> and tenant t<N%10>, each its own descriptor. Calls that
// end during -warmup are not counted; the measured period is the
// -duration that follows. A decision is an answered call, OK or
// OVER_LIMIT.
//
// With -mode quota, loadgen decides itself: each gRPC connection has one
// client.Quota (the Go client's quota mode, failing open, reporting every
// -reporting-interval) on the -domain, shared by the callers assigned to
// it, and each caller calls Allow on the same descriptors, drawn the same
// way, one decision after the other. A decision is an Allow that
// answered, admitted or refused (counted as over limit); the service only
// takes the Quotas' reports. An Allow takes well under a microsecond, so
// a caller reads the clock once per quotaBatch decisions, and each of
// them counts the batch's mean as its latency. The report adds
// fail_opens: the decisions the Quotas' failure policy made over the
// measured period (a bucket without an assignment, such as one past the
// buckets ratelimitd assigns on one stream).
//
// At both edges of the measured period loadgen reads, and the report
// divides their growth by the decisions:
//
//   - the CPU time (user and system, from /proc/<pid>/stat) of the service
//     (-pid), of the Redis servers (-redis-pid, summed: all the nodes of a
//     Cluster) and of loadgen itself;
//   - the calls and the microseconds of the -redis-cmd commands in Redis's
//     INFO commandstats of each -redis-addr, summed. The default commands
//     are the script calls that ratelimitd decides with (FCALL, EVALSHA, EVAL and
//     their kin); for the baseline, pass -redis-cmd incrby,expire. Redis
//     counts a command that a script calls on its own as well as within
//     the script's time, so sum the one kind or the other.
//
// Usage:
//
//	bin/ratelimitd --config tools/loadgen/bench.yaml --backend redis://127.0.0.1:6379 &
//	go run ./tools/loadgen -addr 127.0.0.1:8081 -descriptors 3 -pid $! \
//		-redis-pid $(pidof redis-server) -redis-addr 127.0.0.1:6379
//
// With -json, stdout holds one JSON object (the fields of report) and the
// human line goes to stderr. .ci/bench-load (make bench-load) runs it
// against each store of ratelimitd and against the baseline.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/ratelimitd/ratelimitd/client"
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
	mode        string
	interval    time.Duration
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
	redisPIDs   intList
	redisAddrs  stringList
	redisCmds   stringList
	json        bool
}

// A stringList is a flag that may be repeated, each time with one value or
// several separated by commas.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(s string) error {
	for v := range strings.SplitSeq(s, ",") {
		if v = strings.TrimSpace(v); v == "" {
			return errors.New("empty value")
		}
		*l = append(*l, v)
	}
	return nil
}

// An intList is a stringList of positive integers.
type intList []int

func (l *intList) String() string {
	s := make([]string, len(*l))
	for i, n := range *l {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func (l *intList) Set(s string) error {
	var vs stringList
	if err := vs.Set(s); err != nil {
		return err
	}
	for _, v := range vs {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return fmt.Errorf("%q is not a pid", v)
		}
		*l = append(*l, n)
	}
	return nil
}

// scriptCommands are the commands that run ratelimitd's decisions on
// Redis, the default of -redis-cmd. Commands that a script calls are
// counted by Redis on their own too, and within the script's time: sum
// the script commands or the plain ones, not both.
var scriptCommands = stringList{"evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro"}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.mode, "mode", modeRPC, "how callers decide: "+modeRPC+" (a ShouldRateLimit call each) or "+modeQuota+" (locally, with a client.Quota per connection)")
	fs.DurationVar(&o.interval, "reporting-interval", 0, "with -mode quota, how often each Quota reports (0: the client's default)")
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8081", "the service's gRPC `address`")
	fs.StringVar(&o.domain, "domain", "bench", "rate limit domain of the requests")
	fs.IntVar(&o.descriptors, "descriptors", 1, "descriptors per request: 1 (user) or 3 (user, path, tenant)")
	fs.IntVar(&o.concurrency, "concurrency", 32, "closed-loop callers")
	fs.IntVar(&o.conns, "conns", 1, "gRPC client connections; callers are assigned to them round-robin")
	fs.IntVar(&o.keys, "keys", 10_000, "distinct users the callers draw from")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "measured period")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "unmeasured period before it")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Second, "deadline of each call")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the callers' random draws")
	fs.IntVar(&o.pid, "pid", 0, "the service's `pid`, to report its CPU per decision (0: don't)")
	fs.Var(&o.redisPIDs, "redis-pid", "redis-server `pids`, to report their CPU per decision, summed (repeatable, or comma-separated)")
	fs.Var(&o.redisAddrs, "redis-addr", "Redis `host:port` addresses whose INFO commandstats to read, summed (repeatable, or comma-separated)")
	fs.Var(&o.redisCmds, "redis-cmd", "`commands` whose Redis time -redis-addr reports (repeatable, or comma-separated; default "+scriptCommands.String()+")")
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
	case o.mode != modeRPC && o.mode != modeQuota:
		bad = fmt.Sprintf("-mode %q: want %s or %s", o.mode, modeRPC, modeQuota)
	case o.interval < 0:
		bad = fmt.Sprintf("-reporting-interval %v: must not be negative", o.interval)
	case o.descriptors != 1 && o.descriptors != 3:
		bad = fmt.Sprintf("-descriptors %d: want 1 or 3", o.descriptors)
	case o.concurrency < 1, o.conns < 1, o.keys < 1:
		bad = "-concurrency, -conns and -keys must be at least 1"
	case o.duration <= 0, o.warmup < 0, o.timeout <= 0:
		bad = "-duration and -timeout must be positive, -warmup not negative"
	}
	if len(o.redisCmds) == 0 {
		o.redisCmds = scriptCommands
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
	Mode        string  `json:"mode"`
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
	// RedisCmd is the microseconds Redis spent in the -redis-cmd commands
	// per decision, and RedisCalls their calls per decision, summed over
	// the -redis-addr nodes; null without -redis-addr.
	RedisCmd   *float64 `json:"redis_cmd_us"`
	RedisCalls *float64 `json:"redis_cmd_calls"`
	// FailOpens counts, with -mode quota, the decisions that the Quotas'
	// failure policy made over the measured period; null otherwise.
	FailOpens  *uint64 `json:"fail_opens"`
	FirstError string  `json:"first_error,omitempty"`
}

// run parses args, drives the service for the warm-up and the measured
// period, and prints the report.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	vals := newValues(o.keys)
	p := &probe{o: o}
	deciders := make([]decider, o.conns)
	for i := range deciders {
		cc, err := grpc.NewClient(o.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return fmt.Errorf("gRPC connection to -addr %s: %w", o.addr, err)
		}
		defer cc.Close()
		cc.Connect()
		if o.mode == modeRPC {
			deciders[i] = &rpcDecider{o: o, vals: vals, client: rlsv3.NewRateLimitServiceClient(cc)}
			continue
		}
		d, err := newQuotaDecider(o, vals, cc) //nolint:contextcheck // the Quota runs its stream until Close, on a context of its own
		if err != nil {
			return err
		}
		defer d.q.Close() // before cc.Close: deferred calls run last first
		p.quotas = append(p.quotas, d.q)
		deciders[i] = d
	}
	if len(o.redisAddrs) > 0 {
		if p.stats, err = newCmdStats(ctx, o.redisAddrs, o.redisCmds); err != nil {
			return err
		}
		defer p.stats.close()
	}

	start := time.Now()
	t0, t1 := start.Add(o.warmup), start.Add(o.warmup+o.duration)
	tallies := make([]tally, o.concurrency)
	var wg sync.WaitGroup
	for i := range tallies {
		c := caller{d: deciders[i%len(deciders)], keys: o.keys, t0: t0, t1: t1,
			rng: rand.New(rand.NewPCG(o.seed, uint64(i)))}
		wg.Go(func() { c.loop(ctx, &tallies[i]) })
	}
	s0, err := p.readAt(ctx, t0)
	var s1 sample
	if err == nil {
		s1, err = p.readAt(ctx, t1)
	}
	wg.Wait()
	if err != nil {
		return err
	}

	var all tally
	for i := range tallies {
		all.merge(&tallies[i])
	}
	r := newReport(o, &all)
	r.perDecision(o, s1.sub(s0))
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

// A probe reads the counters that the report divides by the decisions:
// the CPU of the service (-pid), of the Redis servers (-redis-pid) and of
// this process, and the Redis command totals (-redis-addr); with -mode
// quota, it also reads the Quotas' fail-opens.
type probe struct {
	o      *options
	stats  *cmdStats       // nil without -redis-addr
	quotas []*client.Quota // with -mode quota
}

// A sample is what a probe read at one instant.
type sample struct {
	daemon, redis, self time.Duration
	cmds                cmdTotals
	failOpens           uint64
}

// sub returns s minus o.
func (s sample) sub(o sample) sample {
	return sample{daemon: s.daemon - o.daemon, redis: s.redis - o.redis, self: s.self - o.self, cmds: s.cmds.sub(o.cmds),
		failOpens: s.failOpens - o.failOpens}
}

// readAt waits until at, then reads the counters; it returns early with
// ctx's error when ctx is done.
func (p *probe) readAt(ctx context.Context, at time.Time) (sample, error) {
	t := time.NewTimer(time.Until(at))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return sample{}, ctx.Err()
	}
	var s sample
	var err error
	if s.self, err = cpuTime(0); err != nil {
		return sample{}, fmt.Errorf("CPU of this process: %w", err)
	}
	if p.o.pid != 0 {
		if s.daemon, err = cpuTime(p.o.pid); err != nil {
			return sample{}, fmt.Errorf("CPU of pid %d: %w", p.o.pid, err)
		}
	}
	for _, pid := range p.o.redisPIDs {
		d, err := cpuTime(pid)
		if err != nil {
			return sample{}, fmt.Errorf("CPU of Redis pid %d: %w", pid, err)
		}
		s.redis += d
	}
	if p.stats != nil {
		if s.cmds, err = p.stats.read(ctx); err != nil {
			return sample{}, err
		}
	}
	for _, q := range p.quotas {
		s.failOpens += q.FailOpens()
	}
	return s, nil
}

// newReport returns the report of the tallies all, without the figures
// per decision.
func newReport(o *options, all *tally) report {
	r := report{
		Mode: o.mode, Addr: o.addr, Descriptors: o.descriptors, Concurrency: o.concurrency, Conns: o.conns, Keys: o.keys,
		DurationS: o.duration.Seconds(),
		Decisions: all.hist.n, OverLimit: all.overLimit, Errors: all.errors,
		RPS: float64(all.hist.n) / o.duration.Seconds(),
		P50: micros(all.hist.quantile(0.50)), P90: micros(all.hist.quantile(0.90)),
		P99: micros(all.hist.quantile(0.99)), Max: micros(all.hist.max),
	}
	if all.firstErr != nil {
		r.FirstError = all.firstErr.Error()
	}
	return r
}

// perDecision sets r's figures per decision from d, what the counters
// moved over the measured period; those that o did not ask for stay nil.
func (r *report) perDecision(o *options, d sample) {
	if o.mode == modeQuota {
		r.FailOpens = &d.failOpens
	}
	if r.Decisions == 0 {
		return
	}
	per := func(v float64) *float64 {
		v /= float64(r.Decisions)
		return &v
	}
	r.LoadgenCPU = per(micros(d.self))
	if o.pid != 0 {
		r.DaemonCPU = per(micros(d.daemon))
	}
	if len(o.redisPIDs) > 0 {
		r.RedisCPU = per(micros(d.redis))
	}
	if len(o.redisAddrs) > 0 {
		r.RedisCmd, r.RedisCalls = per(float64(d.cmds.usec)), per(float64(d.cmds.calls))
	}
}

// String returns r as one line for people.
func (r report) String() string {
	f := func(v *float64, unit string) string {
		if v == nil {
			return "-"
		}
		return num(*v) + unit
	}
	s := fmt.Sprintf("%s %s %d descriptor(s), %d callers on %d conn(s): %.0f req/s over %gs, p50 %s µs, p90 %s µs, p99 %s µs, max %.0f µs; "+
		"%d decisions, %d over limit, %d errors; per decision: CPU of the service %s, of Redis %s, of loadgen %s; "+
		"Redis commands %s in %s calls",
		r.Mode, r.Addr, r.Descriptors, r.Concurrency, r.Conns, r.RPS, r.DurationS, num(r.P50), num(r.P90), num(r.P99), r.Max,
		r.Decisions, r.OverLimit, r.Errors, f(r.DaemonCPU, " µs"), f(r.RedisCPU, " µs"), f(r.LoadgenCPU, " µs"),
		f(r.RedisCmd, " µs"), f(r.RedisCalls, ""))
	if r.FailOpens != nil {
		s += fmt.Sprintf("; %d decided by the failure policy", *r.FailOpens)
	}
	if r.FirstError != "" {
		s += "; first error: " + r.FirstError
	}
	return s
}

// num formats v for people: whole from 100 up, else three significant
// digits (a local decision's figures are fractions of a microsecond).
func num(v float64) string {
	if v >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
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

// The modes of -mode.
const (
	modeRPC   = "rpc"
	modeQuota = "quota"
)

// quotaBatch is how many decisions a caller makes, with -mode quota,
// between two readings of the clock: an Allow takes about as long as
// reading the clock twice.
const quotaBatch = 64

// A decider makes the decisions of the callers on one connection.
type decider interface {
	// decide decides for user n: whether the service or the Quota refused,
	// or the error of a call that got no answer.
	decide(ctx context.Context, n int) (overLimit bool, err error)
	// batch is how many decisions a caller makes between two readings of
	// the clock.
	batch() int
}

// An rpcDecider sends a ShouldRateLimit call per decision.
type rpcDecider struct {
	o      *options
	vals   *values
	client rlsv3.RateLimitServiceClient
}

func (d *rpcDecider) batch() int { return 1 }

func (d *rpcDecider) decide(ctx context.Context, n int) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, d.o.timeout)
	defer cancel()
	resp, err := d.client.ShouldRateLimit(cctx, d.request(n))
	if err != nil {
		return false, err
	}
	return resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT, nil
}

// request builds the request for user n.
func (d *rpcDecider) request(n int) *rlsv3.RateLimitRequest {
	entry := func(k, v string) *rlv3.RateLimitDescriptor {
		return &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: k, Value: v}}}
	}
	ds := make([]*rlv3.RateLimitDescriptor, 0, 3)
	ds = append(ds, entry("user", d.vals.users[n]))
	if d.o.descriptors == 3 {
		ds = append(ds, entry("path", d.vals.paths[n%len(d.vals.paths)]), entry("tenant", d.vals.tenants[n%len(d.vals.tenants)]))
	}
	return &rlsv3.RateLimitRequest{Domain: d.o.domain, Descriptors: ds}
}

// A quotaDecider decides locally with a Quota, on the descriptors that an
// rpcDecider would send, built once per user so that callers spend their
// CPU on Allow.
type quotaDecider struct {
	q     *client.Quota
	users [][]client.Descriptor // by user
}

// newQuotaDecider returns a quotaDecider whose Quota talks to the
// service over cc, able to hold every bucket that the callers use.
func newQuotaDecider(o *options, vals *values, cc *grpc.ClientConn) (*quotaDecider, error) {
	q, err := client.NewQuota(cc, o.domain, client.WithReportingInterval(o.interval),
		client.WithMaxBuckets(len(vals.users)+len(vals.paths)+len(vals.tenants)))
	if err != nil {
		return nil, fmt.Errorf("quota on -domain %q: %w", o.domain, err)
	}
	d := &quotaDecider{q: q, users: make([][]client.Descriptor, len(vals.users))}
	for n, u := range vals.users {
		d.users[n] = []client.Descriptor{client.D("user", u)}
		if o.descriptors == 3 {
			d.users[n] = append(d.users[n], client.D("path", vals.paths[n%len(vals.paths)]), client.D("tenant", vals.tenants[n%len(vals.tenants)]))
		}
	}
	return d, nil
}

func (d *quotaDecider) batch() int { return quotaBatch }

func (d *quotaDecider) decide(_ context.Context, n int) (bool, error) {
	ok, err := d.q.Allow(d.users[n]...)
	return !ok && err == nil, err
}

// A caller is one closed-loop client.
type caller struct {
	d      decider
	keys   int
	rng    *rand.Rand
	t0, t1 time.Time // the measured period
}

// loop decides until t1 or until ctx is done, counting into t the
// decisions of the batches that end within [t0, t1); each decision of a
// batch counts the batch's mean latency.
func (c *caller) loop(ctx context.Context, t *tally) {
	batch := c.d.batch()
	for ctx.Err() == nil {
		var over, errs uint64
		var firstErr error
		begin := time.Now()
		for range batch {
			o, err := c.d.decide(ctx, c.rng.IntN(c.keys))
			switch {
			case err != nil:
				errs++
				firstErr = cmp.Or(firstErr, err)
			case o:
				over++
			}
		}
		end := time.Now()
		if !end.Before(c.t1) {
			return
		}
		if end.Before(c.t0) {
			continue
		}
		if errs > 0 && ctx.Err() != nil {
			return // interrupted: not the server's fault
		}
		if n := uint64(batch) - errs; n > 0 {
			t.hist.recordN(end.Sub(begin)/time.Duration(batch), n)
		}
		t.overLimit += over
		t.errors += errs
		t.firstErr = cmp.Or(t.firstErr, firstErr)
	}
}
