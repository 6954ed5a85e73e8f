package fairshare

import (
	"math"
	"slices"
)

// Headroom is the fraction of its demand that a client asking less than its
// fair share gets on top of that demand, at least MinHeadroom: such a client
// is given demand + max(demand×Headroom, MinHeadroom×limit/n) for n
// clients, or the fair level if that is less.
//
// A share is set from the rate a client reported over its last interval and
// enforced until its next report, so a share of exactly the demand would
// throttle a client whose traffic grows at all in between, and also one whose
// count merely fluctuates: at 100 requests per interval a Poisson count
// varies by about 10%, so 25% is two and a half standard deviations. A
// client that outgrows even that is throttled for at most one interval: its
// denied requests count in its next report's demand, which raises its share.
// Headroom is taken only from what nobody else wants: clients above the fair
// level split what the smaller ones leave, headroom included, equally.
const Headroom = 0.25

// MinHeadroom is the least headroom, as a fraction of an equal share
// (limit/n for n clients), that a client asking less than its fair share
// gets. Without it a client that was idle over its last interval would get
// nothing on a bucket the others saturate, and be denied every request
// until its next report; with it, it can restart at a twentieth of an equal
// share. Idle clients hold back at most that fraction of the limit.
const MinHeadroom = 0.05

// stackClients is how many clients Allocate sorts in a buffer on its stack;
// more allocate one slice per call.
const stackClients = 64

// Allocate sets out[i] to client i's rate under limit (requests per second),
// max-min fair by demands[i] (requests per second each client would use).
//
// Each client wants demands[i] plus headroom ([Headroom] of its demand, at
// least [MinHeadroom] of an equal share limit/n), at most limit. Water-filling
// finds the level L at which the clients' wants, each capped at L, use the
// whole limit: a client wanting less than L gets its want (its demand plus
// headroom), the others get L each, equally. When every want fits with some
// of the limit to spare, the spare is split equally among all clients, so a
// client can grow into it before its next report; the sum then equals the
// limit. The sum of out never exceeds limit, in whatever order it is added
// (out is scaled down by the rounding error if it could), and no out[i]
// exceeds limit.
//
// Inputs: a NaN, zero or negative demand is a client that wants only the
// least headroom (and its part of any spare); +Inf is a client that wants the whole
// limit (Tracker uses it for a client whose demand is not yet known). A NaN,
// zero or negative limit gives every client 0; +Inf gives every client +Inf.
// Allocate uses only min(len(demands), len(out)) entries. It allocates
// nothing for up to 64 clients.
func Allocate(limit float64, demands []float64, out []float64) {
	n := min(len(demands), len(out))
	var buf [stackClients]float64
	var sorted []float64
	if n <= stackClients {
		sorted = buf[:n]
	} else {
		sorted = make([]float64, n)
	}
	allocate(limit, demands[:n], out[:n], sorted)
}

// allocate is Allocate with a caller-provided scratch slice, sorted, of
// len(demands) entries, which it overwrites.
func allocate(limit float64, demands, out, sorted []float64) {
	if len(demands) == 0 {
		return
	}
	if !(limit > 0) { // also NaN
		clear(out)
		return
	}
	if math.IsInf(limit, 1) {
		for i := range out {
			out[i] = limit
		}
		return
	}
	floor := MinHeadroom * limit / float64(len(demands))
	for i, d := range demands {
		sorted[i] = want(limit, floor, d)
	}
	slices.Sort(sorted)
	level, spare := waterLevel(limit, sorted)
	for i, d := range demands {
		out[i] = min(want(limit, floor, d), level) + spare
	}
	clampSum(limit, out)
}

// want is what a client of demand d asks for under limit: its demand plus
// Headroom of it, at least floor, at most limit. A NaN or non-positive
// demand is 0.
func want(limit, floor, d float64) float64 {
	if !(d > 0) {
		d = 0
	}
	return min(d+max(d*Headroom, floor), limit)
}

// waterLevel returns, for wants sorted ascending, the level at which the
// wants each capped at it sum to limit, or +Inf when they all fit; spare is
// then what they leave, split per client, and 0 otherwise.
func waterLevel(limit float64, sorted []float64) (level, spare float64) {
	remaining := limit
	for k, w := range sorted {
		l := remaining / float64(len(sorted)-k)
		if w > l {
			return l, 0
		}
		remaining -= w
	}
	return math.Inf(1), max(remaining, 0) / float64(len(sorted))
}

// clampSum caps each entry of out at limit and scales them down until their
// sum is at most limit, whatever order a caller adds them in: rounding makes
// sums in different orders differ by up to about (n-1) units in the last
// place each, so for n > 2 entries the sum computed here must stay that far
// below limit. Two entries sum the same in either order.
func clampSum(limit float64, out []float64) {
	budget := limit
	if n := len(out); n > 2 {
		budget = limit * (1 - 4*float64(n-1)*0x1p-53)
	}
	for {
		var sum float64
		for i := range out {
			out[i] = min(out[i], limit)
			sum += out[i]
		}
		if sum <= budget {
			return
		}
		f := math.Nextafter(budget/sum, 0)
		for i := range out {
			out[i] *= f
		}
	}
}
