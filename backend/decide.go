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
//  1. Each request is over when its limit does not admit its hits plus
//     those of the earlier requests of the call on the same counter that
//     are not over: checking h1 then h2 at one instant is checking h1+h2.
//  2. The call is refused as Refused says.
//  3. Each request counts its hits when Consumes says so.
//  4. Each request's Result is read once every request has counted, so
//     that Remaining is what is left after the whole call.
func Decide(reqs []Request, states []*State, now int64, res []Result) {
	decide(reqs, states, now, res, false, nil)
}

// DecidePart decides a share of a call, such as the requests of one Redis
// Cluster slot, as if the whole call were admitted: it is Decide without
// rule 2, the reference of take.lua's "part". Every group must lie whole
// in the share, as the engine's groups, one descriptor each, do.
//
// It writes into stamps (indexed like reqs) the stamp Add returned for
// each request that counted, and 0 for the others: what Refund needs to
// give the hits back when the call as a whole is refused after all.
func DecidePart(reqs []Request, states []*State, now int64, res []Result, stamps []int64) {
	decide(reqs, states, now, res, true, stamps)
}

// decide is Decide, or DecidePart when part is set; stamps may be nil.
func decide(reqs []Request, states []*State, now int64, res []Result, part bool, stamps []int64) {
	for i := range reqs {
		hits := reqs[i].Hits
		for j := range i {
			if states[j] == states[i] && !res[j].OverLimit {
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
		}
		if stamps != nil {
			stamps[i] = stamp
		}
	}
	for i := range reqs {
		res[i] = states[i].Result(reqs[i].Limit, now, reqs[i].Hits, res[i].OverLimit)
	}
}
