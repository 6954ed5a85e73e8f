package backend

// Decide decides one call of Store.Take on its counters' states: the
// reference definition of the call-level rules, as State is of the
// algorithms. backend/memory calls it under its locks; backend/redis's
// take.lua ports it ("take"), decision for decision.
//
// states[i] is the state of reqs[i]'s counter, brought to no particular
// time; requests on one counter share one *State, so that Decide sees
// them as one counter. A ban's state may be nil: a ban touches no
// counter. Decide updates states and writes one Result per request into
// res (len(res) == len(reqs)); it allocates nothing.
//
// The rules, in order:
//
//  0. Give-backs and renews (Op GiveBack, Renew) apply first, whatever
//     the takes decide: State.GiveBack and State.Renew. A give-back is
//     never over; a renew is over when its lease is not held. Their
//     groups play no part in the verdict (see Refused).
//  1. Each take is over when its limit does not admit its hits plus
//     those of the earlier takes of the call on the same counter that
//     are not over: checking h1 then h2 at one instant is checking h1+h2.
//  2. The call is refused as Refused says.
//  3. Each take counts its hits when Consumes says so.
//  4. Each request's Result is read once every request has counted, so
//     that Remaining is what is left after the whole call. A give-back's
//     RetryAfter is zero (it is never over, even on a ban); a failed
//     renew's is the time until its hits would be admitted (zero when
//     they would be now: the caller may acquire afresh). Result.Lease is
//     the stamp of the lease that a Concurrency take counted or a renew
//     moved to, else zero.
func Decide(reqs []Request, states []*State, now int64, res []Result) {
	decide(reqs, states, now, res, false, nil)
}

// DecidePart decides a share of a call, such as the requests of one Redis
// Cluster slot, as if the whole call were admitted: it is Decide without
// rule 2, the reference of take.lua's "part". Every group must lie whole
// in the share, as the engine's groups, one descriptor each, do.
//
// It writes into stamps (indexed like reqs) the stamp Add returned for
// each take that counted, and 0 for the others (give-backs and renews
// among them, which never need refunding): what Refund needs to give the
// hits back when the call as a whole is refused after all.
func DecidePart(reqs []Request, states []*State, now int64, res []Result, stamps []int64) {
	decide(reqs, states, now, res, true, stamps)
}

// decide is Decide, or DecidePart when part is set; stamps may be nil.
func decide(reqs []Request, states []*State, now int64, res []Result, part bool, stamps []int64) {
	for i := range reqs {
		r := &reqs[i]
		res[i].OverLimit, res[i].Lease = false, 0
		switch r.Op {
		case GiveBack:
			states[i].GiveBack(r.Limit, now, r.Hits, r.Lease)
		case Renew:
			stamp, ok := states[i].Renew(r.Limit, now, r.Lease)
			res[i].OverLimit, res[i].Lease = !ok, stamp
		}
	}
	for i := range reqs {
		if reqs[i].Op != Take {
			continue
		}
		hits := reqs[i].Hits
		for j := range i {
			if states[j] == states[i] && reqs[j].Op == Take && !res[j].OverLimit {
				hits = addSat(hits, reqs[j].Hits)
			}
		}
		res[i].OverLimit = !states[i].Admits(reqs[i].Limit, now, hits)
	}
	refused := !part && Refused(reqs, res)
	for i := range reqs {
		var stamp int64
		if Consumes(reqs, res, refused, i) {
			stamp = states[i].Add(reqs[i].Limit, now, reqs[i].Hits)
			if reqs[i].Limit.Algorithm == Concurrency {
				res[i].Lease = stamp
			}
		}
		if stamps != nil {
			stamps[i] = stamp
		}
	}
	for i := range reqs {
		q, over, lease := &reqs[i], res[i].OverLimit, res[i].Lease
		if q.Op != Take {
			res[i] = opResult(q, states[i], now, over, lease)
			continue
		}
		// A take's, here rather than in a call of its own: this loop is
		// the decision's hot path.
		res[i] = states[i].Result(q.Limit, now, q.Hits, over)
		res[i].Lease = lease
	}
}

// opResult returns the Result on st at now of q, a give-back or renew,
// given its OverLimit and Lease: rule 4.
func opResult(q *Request, st *State, now int64, over bool, lease int64) Result {
	if q.Op == GiveBack {
		out := st.Result(q.Limit, now, q.Hits, false)
		out.OverLimit, out.RetryAfter = false, 0 // even on a ban
		return out
	}
	// A failed renew waits for nothing when its hits fit now.
	wait := over && !st.Admits(q.Limit, now, q.Hits)
	out := st.Result(q.Limit, now, q.Hits, wait)
	out.OverLimit, out.Lease = over, lease
	return out
}
