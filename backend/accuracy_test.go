package backend_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
)

// accuracyTrace describes the bursty traffic of TestSlidingWindowAccuracy.
// Each client has its own limit of limit per window and alternates
// between quiet periods and bursts; within each period its requests are a
// Poisson process.
type accuracyTrace struct {
	seed     uint64        // of the math/rand/v2 PCG that draws everything
	clients  int           // each with its own counters
	bursty   float64       // share of clients that burst; the others stay in one quiet period
	span     time.Duration // simulated traffic per client
	limit    uint64        // requests per window, for every client
	window   time.Duration
	quiet    time.Duration // mean length of a quiet period (exponential)
	quietMin float64       // a quiet period's rate, as a share of limit/window: uniform in [quietMin, quietMax)
	quietMax float64
	burst    time.Duration // mean length of a burst (exponential)
	burstMin float64       // a burst's rate, as a multiple of limit/window: uniform in [burstMin, burstMax)
	burstMax float64
}

// accuracyCounts are the decisions TestSlidingWindowAccuracy counts.
type accuracyCounts struct {
	requests   int
	logRefused int // by the exact sliding log
	winRefused int // by the sliding window, on its own history

	// The sliding window on its own history against the log on its own:
	// the two deployments side by side, whose counters part once they
	// decide differently.
	overAdmit   int // the window admits what the log refuses
	falseRefuse int // the window refuses what the log admits

	// The sliding window on the log's history (fed the log's admissions):
	// the approximation error of each decision by itself.
	sameOverAdmit   int
	sameFalseRefuse int

	// worst is the most requests the sliding window, on its own history,
	// admitted in any interval of one window's length, over all clients.
	worst uint64
}

// simulate runs the trace through, for each client, a sliding log, a
// sliding window deciding for itself, and a sliding window that counts
// what the log admitted.
func (tr accuracyTrace) simulate() accuracyCounts {
	r := rand.New(rand.NewPCG(tr.seed, 0))
	logLimit := backend.Limit{Algorithm: backend.SlidingLog, Requests: tr.limit, Window: tr.window}
	winLimit := backend.Limit{Algorithm: backend.SlidingWindow, Requests: tr.limit, Window: tr.window}
	w := tr.window.Microseconds()
	base := backend.Micros(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	perMicro := float64(tr.limit) / float64(w) // the limit's rate, per µs
	var c accuracyCounts
	var admitted []int64 // times the own-history window admitted, oldest first
	for range tr.clients {
		var log, win, same backend.State
		admitted = admitted[:0]
		head := 0                 // admitted[head:] are within the last window
		now := base + r.Int64N(w) // clients are not aligned to windows
		end := now + tr.span.Microseconds()
		bursty := r.Float64() < tr.bursty
		burst := bursty && r.IntN(2) == 0
		for now < end {
			mean, lo, hi := tr.quiet, tr.quietMin, tr.quietMax
			if burst {
				mean, lo, hi = tr.burst, tr.burstMin, tr.burstMax
			}
			periodEnd := end
			if bursty {
				periodEnd = min(end, now+int64(r.ExpFloat64()*float64(mean.Microseconds())))
			}
			rate := perMicro * (lo + r.Float64()*(hi-lo))
			for {
				now += 1 + int64(r.ExpFloat64()/rate)
				if now >= periodEnd {
					break
				}
				c.requests++
				logOK := log.Admits(logLimit, now, 1)
				if logOK {
					log.Add(logLimit, now, 1)
				} else {
					c.logRefused++
				}
				sameOK := same.Admits(winLimit, now, 1)
				if logOK {
					same.Add(winLimit, now, 1)
				}
				winOK := win.Admits(winLimit, now, 1)
				if winOK {
					win.Add(winLimit, now, 1)
					admitted = append(admitted, now)
					for admitted[head] <= now-w {
						head++
					}
					c.worst = max(c.worst, uint64(len(admitted)-head))
					if head > 4096 && 2*head > len(admitted) {
						admitted = append(admitted[:0], admitted[head:]...)
						head = 0
					}
				} else {
					c.winRefused++
				}
				switch {
				case winOK && !logOK:
					c.overAdmit++
				case !winOK && logOK:
					c.falseRefuse++
				}
				switch {
				case sameOK && !logOK:
					c.sameOverAdmit++
				case !sameOK && logOK:
					c.sameFalseRefuse++
				}
			}
			now = periodEnd
			burst = bursty && !burst
		}
	}
	return c
}

// accuracyBounds are upper bounds on accuracyCounts, in percent of all
// requests, except excess (percent more admissions than the log's) and
// worst (multiples of the limit).
type accuracyBounds struct {
	differ, overAdmit, falseRefuse             float64 // side by side
	sameDiffer, sameOverAdmit, sameFalseRefuse float64 // same history
	excess, worst                              float64
}

// TestSlidingWindowAccuracy measures how often the sliding window counter
// decides otherwise than the exact sliding log with the same limit, on two
// fixed traces of about a million requests each. Every client is limited
// to 100 requests a minute. Its quiet periods run at 5–50% of that rate;
// a bursty client also has bursts (mean 40 s, at 1.5–5 times the rate)
// between quiet periods (mean 5 min), so most bursts run into the
// limit. "bursty" is 100 bursty clients over 3 simulated hours each;
// "mostly under" is 600 clients over an hour, 2% of them bursty.
//
// Disagreements are counted two ways:
//
//   - side by side: each algorithm decides on its own history, as two
//     deployments would. Once they disagree their counters differ, so one
//     disagreement can cause others later.
//   - same history: a second sliding window counts exactly what the log
//     admitted, so each disagreement is the window's error on that one
//     decision, given the log's history.
//
// Measured with the seed below, in percent of all requests:
//
//	                                      bursty    mostly under
//	refused by the log                    35.56     1.00
//	side by side: differ                  13.56     0.39
//	              window over-admits       7.51     0.21
//	              window falsely refuses   6.05     0.18
//	same history: differ                  25.42     0.72
//	              window over-admits      21.15     0.56
//	              window falsely refuses   4.27     0.16
//	window's admissions beyond the log's  +2.27    +0.03
//	most the window admits in a minute    177      160      (limit 100)
//
// Cloudflare's figure, 0.003% of decisions wrong, was measured over 400
// million requests of real traffic, where nearly every client stays far
// below its limit: such a client is admitted by both algorithms every
// time, and only clients near their limit can be decided differently.
// So it is here: quiet clients never disagree. In "mostly under" the
// bursty clients send 2.9% of the requests and account for every
// disagreement (13.5% of their decisions, as in "bursty"). That mix, and
// not a fault of the implementation, is why both traces are far above
// 0.003%: at this rate of disagreement, a trace would reach Cloudflare's
// figure with about 0.02% of its requests from clients at their limit.
// Other seeds give the same figures for "bursty" within 0.5 points; for
// "mostly under", with only a dozen bursty clients, 0.25–0.62% differ.
//
// Why so many differ at the limit: while a client is over its limit, the
// log admits a request exactly when an old one expires and refuses all
// others, so its count sits at the limit itself. The window's estimate
// (the previous window's count weighted by its overlap, plus this
// window's count) is then a little under or over the limit by chance, and
// each time it is under, it admits what the log refuses: the same-history
// over-admissions. Side by side, both admit at about the limit's rate but
// at different instants, each refusing some of what the other admits, and
// in all the window admits only 2.27% more. But it assumes that the
// previous window's requests were spread evenly over it: after a burst
// late in a window, it admits up to nearly twice the limit over the
// sliding minute that spans the two (177 here).
//
// The bounds below are the measured figures plus about 10%, to catch a
// change in the algorithms; the traces are fixed, so they are not noise
// margins.
func TestSlidingWindowAccuracy(t *testing.T) {
	trace := func(clients int, bursty float64, span time.Duration) accuracyTrace {
		return accuracyTrace{
			seed: 20260101, clients: clients, bursty: bursty, span: span,
			limit: 100, window: time.Minute,
			quiet: 5 * time.Minute, quietMin: 0.05, quietMax: 0.5,
			burst: 40 * time.Second, burstMin: 1.5, burstMax: 5,
		}
	}
	tests := []struct {
		name  string
		trace accuracyTrace
		max   accuracyBounds
	}{
		{"bursty", trace(100, 1, 3*time.Hour), accuracyBounds{
			differ: 15, overAdmit: 8.3, falseRefuse: 6.7,
			sameDiffer: 28, sameOverAdmit: 23.5, sameFalseRefuse: 4.7,
			excess: 2.5, worst: 1.95,
		}},
		{"mostly under", trace(600, 0.02, time.Hour), accuracyBounds{
			differ: 0.44, overAdmit: 0.24, falseRefuse: 0.21,
			sameDiffer: 0.8, sameOverAdmit: 0.63, sameFalseRefuse: 0.18,
			excess: 0.1, worst: 1.8,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := tt.trace
			c := tr.simulate()
			share := func(n int) float64 { return 100 * float64(n) / float64(c.requests) }
			logAdmitted, winAdmitted := c.requests-c.logRefused, c.requests-c.winRefused
			excess := 100 * (float64(winAdmitted)/float64(logAdmitted) - 1)
			t.Logf("%d requests from %d clients (%.0f%% bursty) over %v each, limit %d per %v",
				c.requests, tr.clients, 100*tr.bursty, tr.span, tr.limit, tr.window)
			t.Logf("refused: sliding log %.2f%%, sliding window %.2f%%; the window admits %+.2f%% as many as the log",
				share(c.logRefused), share(c.winRefused), excess)
			t.Logf("side by side: %.4f%% of decisions differ: %.4f%% over-admitted (%d), %.4f%% falsely refused (%d)",
				share(c.overAdmit+c.falseRefuse), share(c.overAdmit), c.overAdmit, share(c.falseRefuse), c.falseRefuse)
			t.Logf("same history: %.4f%% differ: %.4f%% over-admitted (%d), %.4f%% falsely refused (%d)",
				share(c.sameOverAdmit+c.sameFalseRefuse), share(c.sameOverAdmit), c.sameOverAdmit,
				share(c.sameFalseRefuse), c.sameFalseRefuse)
			t.Logf("the sliding window admitted at most %d in any %v (limit %d)", c.worst, tr.window, tr.limit)

			if c.requests < 900_000 {
				t.Fatalf("the trace has %d requests, want about a million", c.requests)
			}
			bounds := []struct {
				name     string
				got, max float64
			}{
				{"side by side, differing %", share(c.overAdmit + c.falseRefuse), tt.max.differ},
				{"side by side, over-admitted %", share(c.overAdmit), tt.max.overAdmit},
				{"side by side, falsely refused %", share(c.falseRefuse), tt.max.falseRefuse},
				{"same history, differing %", share(c.sameOverAdmit + c.sameFalseRefuse), tt.max.sameDiffer},
				{"same history, over-admitted %", share(c.sameOverAdmit), tt.max.sameOverAdmit},
				{"same history, falsely refused %", share(c.sameFalseRefuse), tt.max.sameFalseRefuse},
				{"admissions beyond the log's %", excess, tt.max.excess},
				{"most admitted in one window, per limit", float64(c.worst) / float64(tr.limit), tt.max.worst},
			}
			for _, b := range bounds {
				if b.got > b.max {
					t.Errorf("%s: %.4f, want ≤ %.4f", b.name, b.got, b.max)
				}
			}
		})
	}
}
