package redis

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/cenkalti/backoff/v5"
	goredis "github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/ratelimitd/ratelimitd/backend"
)

// Shares (backend.ShareStore). Each bucket is one hash, its key the
// prefix, a layout (shareLayout) and a digest of the bucket's name as
// the hash tag, so that Redis Cluster keeps it in one slot: one field
// per replica, written by share.lua, which exchanges the requests of a
// call on one bucket in one run, atomically. A call runs one script per bucket, all of them in
// one pipeline: one round trip (on Cluster, one per node, the nodes in
// parallel). The script runs with EVALSHA, and with EVAL where the node
// lacks it (a second round trip, once per node).

//go:embed share.lua
var shareSource string

// shareScript runs share.lua.
var shareScript = goredis.NewScript(shareSource)

// Sizes of share.lua's binary parts, in bytes.
const (
	shareRequestSize = 4 * 8 // '<dddd': limit, want, TTL µs, now µs (0 reads Redis TIME); then the demands
	shareReplySize   = 2 * 8 // '<dd': the grant, µs until the first other entry expires; then the others' demands
)

var _ backend.ShareStore = (*Store)(nil)

// shareLayout names the layout of the share buckets' keys and values, as
// layout does the counters'.
const shareLayout = "rlqs:v1:"

// shareChannels prefixes, after the store's prefix and shareLayout, the
// name of each replica's notification channel (see WatchShares).
const shareChannels = "changed:"

// shareKey returns the Redis key of a share bucket: the prefix, the
// layout, and as the hash tag a 128-bit digest of the bucket's name,
// which bounds the key's length whatever the name's.
func shareKey(prefix, bucket string) string {
	sum := sha256.Sum256([]byte(bucket))
	return prefix + shareLayout + "{" + base64.RawURLEncoding.EncodeToString(sum[:16]) + "}"
}

// A shareRun is one script run: a bucket's key and its requests' script
// arguments, in the call's order.
type shareRun struct {
	scriptRun       // keys: the bucket's key alone; args: the channels' prefix, the bucket's name, then replica name and REQUEST per request
	idx       []int // the requests' indices in the call
}

// ExchangeShares implements backend.ShareStore.
//
// As with Take, the Redis work runs on a context of the store's (the
// caller's values; the caller's deadline, or without one the store's
// Timeout: an exchange is made off the decision path, and may take longer
// than a decision) and under the nodes' circuit breakers: ExchangeShares
// returns at the caller's cancellation if that comes first, and the
// exchange may still be applied.
func (s *Store) ExchangeShares(ctx context.Context, reqs []backend.ShareRequest, res []backend.ShareResult) error {
	if len(res) != len(reqs) {
		return fmt.Errorf("redis: exchange shares: %d results for %d requests", len(res), len(reqs))
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redis: exchange shares: %w", err)
	}
	if len(reqs) == 0 {
		return nil
	}
	runs := s.shareRuns(reqs)
	replies, err := s.detachShares(ctx, runs, len(reqs))
	if err != nil {
		return fmt.Errorf("redis: exchange shares: %w", err)
	}
	for i, reply := range replies {
		if len(reply) < shareReplySize || len(reply)%8 != 0 {
			return fmt.Errorf("redis: exchange shares: script replied %d bytes for request %d", len(reply), i)
		}
		res[i].Granted = float(reply)
		res[i].OthersExpire = time.Duration(float(reply[8:])) * time.Microsecond
		for v := reply[shareReplySize:]; len(v) > 0; v = v[8:] {
			res[i].Others = append(res[i].Others, float(v))
		}
	}
	return nil
}

// shareRuns encodes reqs as one script run per bucket, the buckets in
// order of first use, so that the caller's requests are never read
// after ExchangeShares returns.
func (s *Store) shareRuns(reqs []backend.ShareRequest) []*shareRun {
	now := float64(s.nowMicros())
	channels := s.prefix + shareLayout + shareChannels
	var runs []*shareRun
	byKey := make(map[string]*shareRun, len(reqs))
	for i := range reqs {
		r := &reqs[i]
		k := shareKey(s.prefix, r.Bucket)
		run := byKey[k]
		if run == nil {
			run = &shareRun{scriptRun: scriptRun{keys: []string{k}, args: []any{channels, r.Bucket}}}
			byKey[k] = run
			runs = append(runs, run)
		}
		arg := make([]byte, 0, shareRequestSize+8*len(r.Demands))
		ttl := float64(max(r.TTL, 0) / time.Microsecond)
		for _, v := range [...]float64{r.Limit, r.Want, ttl, now} {
			arg = binary.LittleEndian.AppendUint64(arg, math.Float64bits(v))
		}
		for _, v := range r.Demands {
			arg = binary.LittleEndian.AppendUint64(arg, math.Float64bits(v))
		}
		run.idx = append(run.idx, i)
		run.args = append(run.args, r.Replica, arg)
	}
	return runs
}

// detachShares runs runs off the caller's goroutine (see offload), and
// returns the reply to each of the call's n requests. Like a heavy call,
// it takes a slot beside the batches, so that exchanges cannot take every
// connection from them.
func (s *Store) detachShares(ctx context.Context, runs []*shareRun, n int) ([]string, error) {
	return offload(ctx, s, []*Store{s}, func() ([]string, error) {
		// An exchange is no decision: it may take the caller's own
		// deadline (the pool's, a second by default), when it has one.
		deadline, ok := ctx.Deadline()
		if !ok {
			deadline = time.Now().Add(s.timeout)
		}
		rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
		defer cancel()
		return s.runShares(rctx, runs, n)
	})
}

// runShares sends runs in one pipeline (see pipelineRuns), and returns
// the reply to each of the call's n requests, or the first error. A call
// that finds a node's breaker open fails at once, sending nothing: its
// other buckets keep the entries the replica holds.
func (s *Store) runShares(ctx context.Context, runs []*shareRun, n int) ([]string, error) {
	replies := make([]string, n)
	errs, err := s.pipelineRuns(ctx, shareScript, len(runs), func(p int) *scriptRun { return &runs[p].scriptRun },
		func(p int, cmd *goredis.Cmd) error {
			run := runs[p]
			got, err := cmd.StringSlice()
			if err == nil && len(got) != len(run.idx) {
				err = fmt.Errorf("script replied %d results for %d requests on %s", len(got), len(run.idx), run.keys[0])
			}
			if err != nil {
				return err
			}
			for k, i := range run.idx {
				replies[i] = got[k]
			}
			return nil
		})
	if err != nil {
		return nil, err
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return replies, nil
}

// A scriptRun is one run of a script in a pipeline: its keys, all of one
// hash tag, and its arguments.
type scriptRun struct {
	keys []string
	args []any
}

// pipelineRuns sends script's n runs (run(p) is run p) in one pipeline,
// on Cluster one per node, each under its node's circuit breaker, with
// EVALSHA, then again with EVAL those whose node lacked the script; read,
// if not nil, reads the reply of each run that succeeded, and its error
// is the run's. It returns each run's error, after reporting them to the
// breakers; or, sending nothing, an error when a node's breaker is open.
func (s *Store) pipelineRuns(ctx context.Context, script *goredis.Script, n int, run func(p int) *scriptRun,
	read func(p int, cmd *goredis.Cmd) error) ([]error, error) {
	nodes := make([]string, n)
	for p := range n {
		nodes[p] = s.nodeOf(ctx, run(p).keys[0])
	}
	for _, name := range nodes {
		if nd := s.node(name); nd.b.State() != gobreaker.StateClosed {
			s.startProbe(nd) //nolint:contextcheck // the probe runs on the store's context, never a call's
			return nil, fmt.Errorf("%w: %s", ErrUnavailable, name)
		}
	}
	errs := make([]error, n)
	tickets := make(map[string]ticket, n)
	for p, name := range nodes {
		tk, ok := tickets[name]
		if !ok {
			var err error
			tk, err = s.admit(name) //nolint:contextcheck // a probe that admit may start runs on the store's context, never a call's
			if err != nil {
				errs[p] = err
			}
			tickets[name] = tk
		}
		if tk.report == nil && errs[p] == nil {
			errs[p] = fmt.Errorf("%w: %s", ErrUnavailable, name)
		}
	}
	cmds := make([]*goredis.Cmd, n)
	send := make([]bool, n)
	for p := range send {
		send[p] = errs[p] == nil
	}
	for _, eval := range []bool{false, true} {
		_, _ = s.client.Pipelined(ctx, func(pipe goredis.Pipeliner) error {
			for p := range n {
				r := run(p)
				switch {
				case !send[p]:
				case eval:
					cmds[p] = script.Eval(ctx, pipe, r.keys, r.args...)
				default:
					cmds[p] = script.EvalSha(ctx, pipe, r.keys, r.args...)
				}
			}
			return nil
		})
		again := false
		for p := range n {
			send[p] = send[p] && !eval && goredis.HasErrorPrefix(cmds[p].Err(), "NOSCRIPT")
			again = again || send[p]
		}
		if !again {
			break
		}
	}
	for p := range n {
		if errs[p] != nil {
			continue
		}
		if errs[p] = cmds[p].Err(); errs[p] == nil && read != nil {
			errs[p] = read(p, cmds[p])
		}
	}
	reportTickets(tickets, nodes, errs) //nolint:contextcheck // a probe that done may start runs on the store's context, never a call's
	return errs, nil
}

// WatchShares implements backend.ShareStore. share.lua publishes the name
// of a bucket whose entry an exchange changed on the channel of every
// other replica with an entry in force on it (the prefix, shareLayout,
// shareChannels and the replica's name); WatchShares subscribes to
// replica's channel. Redis delivers each message at most once, to the
// subscribers connected when it is published, across a Cluster's nodes
// too: changed("") follows every subscription, the first and those made
// again after the connection was lost, and a replica that was not
// subscribed learns of changes at its entries' next renewal.
func (s *Store) WatchShares(ctx context.Context, replica string, changed func(bucket string)) error {
	ps := s.client.Subscribe(ctx, s.prefix+shareLayout+shareChannels+replica)
	defer ps.Close()
	// A Receive blocked on the connection does not see ctx end: closing
	// the subscription ends it.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()
	// While Redis is out of reach, each Receive fails at once: wait
	// between them (the library's exponential backoff, from 100 ms to
	// 5 s), and tell changed once it answers again.
	wait := backoff.NewExponentialBackOff()
	wait.InitialInterval, wait.MaxInterval = 100*time.Millisecond, 5*time.Second
	for {
		msg, err := ps.Receive(ctx)
		if ctx.Err() != nil {
			return nil //nolint:nilerr // watching ends with ctx
		}
		if err != nil {
			t := time.NewTimer(wait.NextBackOff())
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			continue
		}
		switch m := msg.(type) {
		case *goredis.Subscription:
			if m.Kind == "subscribe" {
				wait.Reset()
				changed("")
			}
		case *goredis.Message:
			changed(m.Payload)
		}
	}
}
