package redis

import (
	"context"
	_ "embed"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/backend"
)

// The script protocol. Every script run decides one or more calls on
// their counters (take.lua): KEYS holds one counter key per request, and
// ARGV[1] one binary argument, little-endian: a header, then per call its
// number of requests and a record per request. The reply is one string: a
// result per request. take.lua's table P names the same constants, and
// TestScriptProtocol checks that they agree.

//go:embed take.lua
var takeSource string

var takeScript = goredis.NewScript(takeSource)

// Ops, the header's first byte.
const (
	// opTake decides each call whole (a batch holds several).
	opTake = 0
	// opPart decides one Cluster slot's share of a call as if the call
	// were admitted, and returns per request the stamp a refund needs.
	opPart = 1
	// opRefund gives back what opPart took on the requests flagged
	// flagGiveBack, and reports the slot's results afresh.
	opRefund = 2
)

// A record's flags: the algorithm, plus modeShift times the mode, plus
// the bits below.
const (
	modeShift           = 8
	flagConsumeWhenOver = 32
	flagGiveBack        = 64  // opRefund: give back this request's hits
	flagWasOver         = 128 // opRefund: this request was over
)

// Sizes of the binary parts, in bytes; the comments give their struct
// formats in take.lua.
const (
	headerSize  = 1 + 8 + 4         // '<BdI4': op, now (µs; 0 reads Redis TIME), number of calls
	callSize    = 4                 // '<I4': the call's number of requests
	recordSize  = 1 + 3*4 + 4*8     // '<BI4I4I4dddd': flags, requests, burst, group, window µs, hits, stamp, GCRA interval µs
	resultSize  = 1 + 3*8           // '<Bddd': over, remaining, reset µs, retry µs
	stampedSize = resultSize + 8    // '<Bdddd': a result and its stamp (opPart)
	stateSize   = 3 * 8             // '<ddd': a counter's T, N and P (tokens in N for a token bucket)
	logHeader   = 8                 // '<d': a sliding log's first element, the sum of its hits
	logEntry    = 2 * 8             // '<dd': each further element, a time and its hits, oldest first
	maxLog      = backend.MaxSlidingLog // the most entries of a log: further instants fold into the newest
)

// layout names the layout of the keys and values the script writes. It
// starts every key after the prefix, so that replicas of another layout,
// sharing one Redis during a rolling upgrade, never read these counters
// (nor these replicas theirs): a counter under a new layout starts fresh.
const layout = "v2:"

// A call is the keys and the binary argument of one script run, or of one
// call's share of a batched run.
type call struct {
	keys []string
	arg  []byte
}

var callPool = sync.Pool{New: func() any { return new(call) }}

func getCall() *call {
	c := callPool.Get().(*call)
	c.keys, c.arg = c.keys[:0], c.arg[:0]
	return c
}

func (c *call) free() {
	clear(c.keys)
	callPool.Put(c)
}

// header starts a script run's argument: op, the clock's reading in µs
// (0 for Redis TIME) and the number of calls.
func (c *call) header(op byte, now int64, calls int) {
	c.arg = append(c.arg, op)
	c.arg = binary.LittleEndian.AppendUint64(c.arg, math.Float64bits(float64(now)))
	c.arg = binary.LittleEndian.AppendUint32(c.arg, uint32(calls))
}

// setCalls rewrites the number of calls of a header written with header.
func (c *call) setCalls(calls int) {
	binary.LittleEndian.PutUint32(c.arg[1+8:], uint32(calls))
}

// appendCall appends one call: the requests idx of reqs (all of them if
// idx is nil), whose keys get hash tag tag ("" for none). stamps (for
// opRefund) and extra flags, indexed like reqs, may be nil.
func (c *call) appendCall(prefix string, reqs []backend.Request, idx []int, tag string, stamps []int64, extra []uint8) {
	n := len(reqs)
	if idx != nil {
		n = len(idx)
	}
	c.arg = binary.LittleEndian.AppendUint32(c.arg, uint32(n))
	for k := range n {
		i := k
		if idx != nil {
			i = idx[k]
		}
		r := &reqs[i]
		c.keys = append(c.keys, key(prefix, tag, r.Key))
		flags := uint8(r.Limit.Algorithm) + modeShift*uint8(r.Mode)
		if r.ConsumeWhenOver {
			flags |= flagConsumeWhenOver
		}
		if extra != nil {
			flags |= extra[i]
		}
		var stamp, interval int64
		if stamps != nil {
			stamp = stamps[i]
		}
		w := int64(r.Limit.Window / time.Microsecond)
		if r.Limit.Algorithm == backend.GCRA && r.Limit.Requests > 0 {
			// backend.Limit's emission interval: w / requests, rounded up.
			interval = (w + int64(r.Limit.Requests) - 1) / int64(r.Limit.Requests)
		}
		c.arg = append(c.arg, flags)
		c.arg = binary.LittleEndian.AppendUint32(c.arg, uint32(r.Limit.Requests))
		c.arg = binary.LittleEndian.AppendUint32(c.arg, uint32(r.Limit.Capacity()))
		c.arg = binary.LittleEndian.AppendUint32(c.arg, uint32(r.Group))
		for _, v := range [...]float64{float64(w), float64(r.Hits), float64(stamp), float64(interval)} {
			c.arg = binary.LittleEndian.AppendUint64(c.arg, math.Float64bits(v))
		}
	}
}

// run runs the script with c's keys and argument, and returns its reply.
func (c *call) run(ctx context.Context, client goredis.Scripter) (string, error) {
	return takeScript.Run(ctx, client, c.keys, c.arg).Text()
}

// decode reads the results of the requests idx (all of res if idx is nil)
// from reply, the script's, and with opPart their stamps into stamps.
func decode(reply string, op byte, res []backend.Result, idx []int, stamps []int64) error {
	n := len(res)
	if idx != nil {
		n = len(idx)
	}
	size := resultSize
	if op == opPart {
		size = stampedSize
	}
	if len(reply) != size*n {
		return fmt.Errorf("script replied %d bytes for %d requests", len(reply), n)
	}
	for k := range n {
		i := k
		if idx != nil {
			i = idx[k]
		}
		v := reply[size*k:]
		res[i] = backend.Result{
			OverLimit:  v[0] != 0,
			Remaining:  uint64(float(v[1:])),
			ResetAfter: backend.FromMicros(int64(float(v[9:]))),
			RetryAfter: backend.FromMicros(int64(float(v[17:]))),
		}
		if op == opPart {
			stamps[i] = int64(float(v[25:]))
		}
	}
	return nil
}

// float reads a little-endian float64 from the start of s.
func float(s string) float64 {
	return math.Float64frombits(uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56)
}

// key returns the Redis key of a counter: the prefix, the layout, on
// Cluster a hash tag, then the counter key.
func key(prefix, tag, k string) string {
	if tag == "" {
		return prefix + layout + k
	}
	return prefix + layout + "{" + tag + "}" + k
}

// tagOf returns the hash tag of a request's counter on Cluster: a hash of
// its Tag (of its Key when Tag is empty), so that every limit of a
// descriptor lands in one slot and descriptors spread evenly.
func tagOf(r *backend.Request) string {
	t := r.Tag
	if t == "" {
		t = r.Key
	}
	// FNV-1a, 64 bits.
	h := uint64(14695981039346656037)
	for k := 0; k < len(t); k++ {
		h ^= uint64(t[k])
		h *= 1099511628211
	}
	return strconv.FormatUint(h, 36)
}
