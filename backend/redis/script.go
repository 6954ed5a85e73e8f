package redis

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/backend"
)

// The script protocol. Every script run decides one or more calls on
// their counters (take.lua): KEYS holds one counter key per request, and
// ARGV[1] one binary argument, little-endian: a header, then per call its
// number of requests and a record per request, compact when the call
// allows (see compactBit). The reply is one string: a result per
// request, in the format of the run's op (see replyFormat). take.lua's
// table P names the same constants, and TestScriptProtocol checks that
// they agree.
//
// On Redis 7.0 and later, take.lua is loaded once per node as a function
// library (FUNCTION LOAD) and each run is an FCALL; on older Redis each
// run is an EVALSHA of the same code, which Redis runs whole every time.
// The library and its function are named after a digest of the code, so
// replicas of different builds, sharing one Redis during a rolling
// upgrade, each call their own.

//go:embed take.lua
var takeSource string

var (
	// takeFunction is the function take.lua registers, crossFunction
	// its function for keys of several slots (see cross.go), and
	// takeLibrary the library that registers both.
	takeFunction, crossFunction, takeLibrary = library(takeSource)
	// takeScript runs take.lua with EVALSHA, on Redis before 7.0.
	takeScript = goredis.NewScript(takeSource + "\nreturn take(KEYS, ARGV[1])\n")
)

// library returns the names of the functions that src, ended so,
// registers as a function library (take's, and cross's with the
// allow-cross-slot-keys flag), and the library's code.
func library(src string) (name, crossName, code string) {
	sum := sha256.Sum256([]byte(src))
	name = "ratelimitd_" + hex.EncodeToString(sum[:8])
	crossName = name + "_cross"
	code = "#!lua name=" + name + "\n" + src +
		"\nredis.register_function(" + strconv.Quote(name) + ", function(keys, args) return take(keys, args[1]) end)\n" +
		"redis.register_function{function_name = " + strconv.Quote(crossName) +
		", callback = function(_, args) return cross(args) end, flags = {'allow-cross-slot-keys'}}\n"
	return name, crossName, code
}

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
	// opFast decides as opTake does a run whose calls are all compact
	// (see compactBit), in take.lua's lean path.
	opFast = 3
	// opFastLeased is opFast on a run that holds a concurrency limit's
	// request: its results carry their leases, as opTake's do.
	opFastLeased = 4
)

// compactBit, set in a call's number of requests, says that the call's
// records are compact: every request is a take on a fixed or sliding
// window or a concurrency limit, or every request a give-back on a
// concurrency limit (see shape), with a limit above zero, enforced,
// without consume_when_over, and on a counter of its own within the call.
// A call of takes is refused exactly when one of them is over, whatever
// their groups, and a call of give-backs never (a group plays its part in
// the verdict by its first request's op: see backend.Refused), so a
// compact record carries only what decides it: flags (the algorithm),
// requests, window µs and hits; then on a concurrency limit its op and
// lease.
const compactBit = 1 << 31

// A shape says which requests a compact call may hold.
type shape uint8

const (
	// windowsOnly: takes on fixed and sliding windows, the calls of a
	// cross run (see cross.go), which never holds a concurrency limit.
	windowsOnly shape = iota
	// withLeases: those, and a concurrency limit's takes, or its
	// give-backs (by lease or anonymous) in a call of give-backs; renews
	// go the general path.
	withLeases
)

// partCallBit, set too in a cross run's call's number of requests (see
// cross.go), says that the call is a part of a call over several nodes:
// decided as opPart decides, its results stamped.
const partCallBit = 1 << 30

// A cross run's reply to each call starts with a status byte: crossDone,
// then the call's results; or crossElsewhere, then the length of Redis's
// error ('<I4') and the error, the call having written nothing.
const (
	crossDone      = 0
	crossElsewhere = 1
	statusSize     = 1
	reasonSize     = 4
)

// notTaken is the stamp of a request of a cross run's part whose hits do
// not count: no window starts there, so a refund with it gives nothing
// back.
const notTaken = -1

// A record's flags: the algorithm, plus modeShift times the mode, plus
// the bits below.
const (
	modeShift           = 8
	flagConsumeWhenOver = 32
	flagGiveBack        = 64  // opRefund: give back this request's hits
	flagWasOver         = 128 // opRefund: this request was over
)

// A record's op, after its flags: the request's backend.Op.
const (
	recordTake     = byte(backend.Take)
	recordGiveBack = byte(backend.GiveBack)
	recordRenew    = byte(backend.Renew)
)

// Sizes of the binary parts, in bytes; the comments give their struct
// formats in take.lua.
const (
	headerSize   = 1 + 8 + 4             // '<BdI4': op, now (µs; 0 reads Redis TIME), number of calls
	callSize     = 4                     // '<I4': the call's number of requests
	recordSize   = 2 + 3*4 + 4*8         // '<BBI4I4I4dddd': flags, op, requests, burst, group, window µs, hits, stamp (a refund's; a give-back's or renew's lease), GCRA interval µs
	compactSize  = 1 + 4 + 2*8           // '<BI4dd': flags, requests, window µs, hits (a compact call's record)
	compactLease = 1 + 8                 // '<Bd': op, lease given back (after a compact record of a concurrency limit)
	resultSize   = 1 + 3*8               // '<Bddd': over, remaining, reset µs, retry µs (opFast, opRefund)
	stampedSize  = resultSize + 8        // '<Bdddd': a result and its stamp (a cross run's part)
	leasedSize   = resultSize + 8        // '<Bdddd': a result and its lease (opTake)
	leasedStamp  = leasedSize + 8        // '<Bddddd': a result, its lease and its stamp (opPart)
	stateSize    = 3 * 8                 // '<ddd': a counter's T, N and P (tokens in N for a token bucket)
	logHeader    = 8                     // '<d': a sliding log's first element, the sum of its hits
	leaseHeader  = 5 * 8                 // '<ddddd': a concurrency log's first element: the sum, the newest stamp given, the number of leases, the oldest's stamp and hits
	logEntry     = 2 * 8                 // '<dd': each further element, a time and its hits, oldest first
	maxLog       = backend.MaxSlidingLog // the most entries of a log: further instants fold into the newest
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
	// general is whether a call appended is not compact, so that the
	// run cannot take the lean path (opFast).
	general bool
	// leased is whether a compact call appended holds a concurrency
	// limit, whose results carry leases (opFastLeased).
	leased bool
}

var callPool = sync.Pool{New: func() any { return new(call) }}

func getCall() *call {
	c := callPool.Get().(*call)
	c.keys, c.arg, c.general, c.leased = c.keys[:0], c.arg[:0], false, false
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

// seal makes an opTake run whose calls are all compact an opFast one (an
// opFastLeased one if a call holds a concurrency limit), once every call
// is appended.
func (c *call) seal() {
	switch {
	case c.arg[0] != opTake || c.general:
	case c.leased:
		c.arg[0] = opFastLeased
	default:
		c.arg[0] = opFast
	}
}

// picked returns how many of n requests idx picks: all of them if idx is
// nil (a whole call), else len(idx) (a Cluster slot's part).
func picked(n int, idx []int) int {
	if idx != nil {
		return len(idx)
	}
	return n
}

// at returns the index of the k-th request idx picks.
func at(idx []int, k int) int {
	if idx != nil {
		return idx[k]
	}
	return k
}

// compact reports whether the requests idx of reqs (all of them if idx is
// nil) make a compact call of shape sh (see compactBit).
func compact(reqs []backend.Request, idx []int, sh shape) bool {
	n := picked(len(reqs), idx)
	if n > heavyRequests { // a bound on the quadratic check of distinct keys
		return false
	}
	for k := range n {
		i := at(idx, k)
		r := &reqs[i]
		var fits bool
		switch r.Limit.Algorithm {
		case backend.SlidingWindow, backend.FixedWindow:
			fits = r.Op == backend.Take
		case backend.Concurrency:
			fits = sh == withLeases && (r.Op == backend.Take || r.Op == backend.GiveBack)
		}
		if !fits || r.Op != reqs[at(idx, 0)].Op || r.Limit.Requests == 0 || r.Mode != backend.Enforce || r.ConsumeWhenOver {
			return false
		}
		for j := range k {
			if reqs[at(idx, j)].Key == r.Key {
				return false
			}
		}
	}
	return true
}

// appendCall appends one call: the requests idx of reqs (all of them if
// idx is nil), whose keys get hash tag tag ("" for none). stamps (for
// opRefund) and extra flags, indexed like reqs, may be nil. The call is
// compact when it can be (see compactBit): without stamps nor extra
// flags, which only Cluster's parts and refunds carry.
func (c *call) appendCall(prefix string, reqs []backend.Request, idx []int, tag string, stamps []int64, extra []uint8) {
	n := picked(len(reqs), idx)
	for k := range n {
		c.keys = append(c.keys, key(prefix, tag, reqs[at(idx, k)].Key))
	}
	if stamps == nil && extra == nil && compact(reqs, idx, withLeases) {
		c.appendCompact(reqs, idx)
		return
	}
	c.general = true
	c.arg = binary.LittleEndian.AppendUint32(c.arg, uint32(n))
	for k := range n {
		i := at(idx, k)
		r := &reqs[i]
		flags := uint8(r.Limit.Algorithm) + modeShift*uint8(r.Mode)
		if r.ConsumeWhenOver {
			flags |= flagConsumeWhenOver
		}
		if extra != nil {
			flags |= extra[i]
		}
		var stamp, interval int64
		switch {
		case r.Op != backend.Take:
			stamp = r.Lease // never refunded: the field names the lease
		case stamps != nil:
			stamp = stamps[i]
		}
		w := int64(r.Limit.Window / time.Microsecond)
		if r.Limit.Algorithm == backend.GCRA && !r.Limit.Ban() {
			interval = r.Limit.Interval()
		}
		c.arg = append(c.arg, flags, byte(r.Op))
		c.arg = binary.LittleEndian.AppendUint32(c.arg, uint32(r.Limit.Requests))
		c.arg = binary.LittleEndian.AppendUint32(c.arg, uint32(r.Limit.Capacity()))
		c.arg = binary.LittleEndian.AppendUint32(c.arg, uint32(r.Group))
		for _, v := range [...]float64{float64(w), float64(r.Hits), float64(stamp), float64(interval)} {
			c.arg = binary.LittleEndian.AppendUint64(c.arg, math.Float64bits(v))
		}
	}
}

// appendCompact appends the records of the requests idx of reqs (all of
// them if idx is nil) as a compact call.
func (c *call) appendCompact(reqs []backend.Request, idx []int) {
	n := picked(len(reqs), idx)
	c.arg = binary.LittleEndian.AppendUint32(c.arg, uint32(n)|compactBit)
	for k := range n {
		r := &reqs[at(idx, k)]
		c.arg = append(c.arg, uint8(r.Limit.Algorithm))
		c.arg = binary.LittleEndian.AppendUint32(c.arg, uint32(r.Limit.Requests))
		c.arg = binary.LittleEndian.AppendUint64(c.arg, math.Float64bits(float64(r.Limit.Window/time.Microsecond)))
		c.arg = binary.LittleEndian.AppendUint64(c.arg, math.Float64bits(float64(r.Hits)))
		if r.Limit.Algorithm == backend.Concurrency {
			c.leased = true
			c.arg = append(c.arg, byte(r.Op))
			c.arg = binary.LittleEndian.AppendUint64(c.arg, math.Float64bits(float64(r.Lease)))
		}
	}
}

// run runs take.lua with c's keys and argument on client (standalone or
// Sentinel), and returns its reply: with FCALL, loading the library first
// if the node lacks it, or with EVALSHA once a node has refused FCALL or
// FUNCTION LOAD (see denied).
func (s *Store) run(ctx context.Context, c *call) (string, error) {
	if c.arg[0] == opFast || c.arg[0] == opFastLeased {
		s.fastRuns.Add(1)
	}
	if !s.evalOnly.Load() {
		reply, err := s.client.FCall(ctx, takeFunction, c.keys, c.arg).Text()
		switch {
		case noFunction(err):
			err := s.client.FunctionLoadReplace(ctx, takeLibrary).Err()
			if err == nil {
				return s.client.FCall(ctx, takeFunction, c.keys, c.arg).Text()
			}
			if !denied(err) {
				return "", fmt.Errorf("loading the function library: %w", err)
			}
			s.evalOnly.Store(true)
		case noFCall(err):
			s.evalOnly.Store(true)
		default:
			return reply, err
		}
	}
	return takeScript.Run(ctx, s.client, c.keys, c.arg).Text()
}

// noFunction reports whether err says that the node lacks the function
// (a fresh node, or FUNCTION FLUSH).
func noFunction(err error) bool {
	return err != nil && goredis.HasErrorPrefix(err, "Function not found") // after "ERR "
}

// noFCall reports whether err says that the node does not know FCALL
// (Redis before 7.0), or will not run it (an ACL, a renamed command).
func noFCall(err error) bool {
	return denied(err) && strings.Contains(strings.ToLower(err.Error()), "fcall")
}

// denied reports whether err is Redis's refusal of a command that it does
// not know (older Redis, a renamed command) or that the user may not run
// (an ACL): FCALL or FUNCTION LOAD, which EVALSHA then replaces, or INFO,
// which checkVersion then skips.
func denied(err error) bool {
	return err != nil && (goredis.HasErrorPrefix(err, "unknown command") || goredis.HasErrorPrefix(err, "NOPERM"))
}

// The formats of a script's results, per request.
const (
	fmtResult        = iota // resultSize: opFast
	fmtLeased               // leasedSize: opTake, opFastLeased
	fmtLeasedStamped        // leasedStamp: opPart, with the stamp a refund needs
	fmtStamped              // stampedSize: a cross run's part, with the stamp a refund needs
	fmtRefund               // resultSize: opRefund, whose results keep the lease the part gave
)

// replyFormat returns the format of the results of a run of op (as
// sealed: see seal).
func replyFormat(op byte) int {
	switch op {
	case opTake, opFastLeased:
		return fmtLeased
	case opPart:
		return fmtLeasedStamped
	case opRefund:
		return fmtRefund
	}
	return fmtResult
}

// resultBytes returns the size of a result in format.
func resultBytes(format int) int {
	switch format {
	case fmtLeased:
		return leasedSize
	case fmtLeasedStamped:
		return leasedStamp
	case fmtStamped:
		return stampedSize
	}
	return resultSize
}

// decode reads the results of the requests idx (all of res if idx is nil)
// from reply, the script's, in format; with a stamped format their stamps
// into stamps. fmtRefund keeps each result's Lease.
func decode(reply string, format int, res []backend.Result, idx []int, stamps []int64) error {
	n := picked(len(res), idx)
	size := resultBytes(format)
	if len(reply) != size*n {
		return fmt.Errorf("script replied %d bytes for %d requests", len(reply), n)
	}
	for k := range n {
		i := at(idx, k)
		v := reply[size*k:]
		var lease int64
		switch format {
		case fmtLeased, fmtLeasedStamped:
			lease = int64(float(v[25:]))
		case fmtRefund:
			lease = res[i].Lease
		}
		res[i] = backend.Result{
			OverLimit:  v[0] != 0,
			Remaining:  uint64(float(v[1:])),
			ResetAfter: backend.FromMicros(micros(float(v[9:]))),
			RetryAfter: backend.FromMicros(micros(float(v[17:]))),
			Lease:      lease,
		}
		switch format {
		case fmtLeasedStamped:
			stamps[i] = int64(float(v[33:]))
		case fmtStamped:
			stamps[i] = int64(float(v[25:]))
		}
	}
	return nil
}

// maxMicros saturates the times the script reports, as Go saturates
// int64 arithmetic in backend.State.
const maxMicros = 1 << 62

// micros converts a time the script reports to µs: negative is zero, and
// a time past maxMicros (a saturated GCRA TAT, a debt recorded past the
// limit) is maxMicros.
func micros(v float64) int64 {
	switch {
	case v <= 0:
		return 0
	case v >= maxMicros:
		return maxMicros
	}
	return int64(v)
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
