package server

import (
	"encoding/base64"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/server/internal/engine"
)

// Envoy's leases. Envoy's give-back (is_negative_hits) names no slot, so
// the store frees the newest one held, and the slots left held can be
// older than work still running: they lapse under it, and more than the
// limit may then run. To give Envoy exact releases, an admitted answer
// that took concurrency slots carries each descriptor's lease in its
// dynamic metadata, under LeasesKey and the rule's path; Envoy stores it
// under the filter's namespace (envoy.filters.http.ratelimit), where a
// stream-done rate limit's `metadata` action reads it into a last entry
// of key LeaseEntryKey. A give-back whose last entry has that key frees
// exactly that lease (the entry is not matched against the rules). A
// request refused, or never answered, carries no lease, so Envoy builds
// no give-back for it at all.
const (
	// LeasesKey is the key of Envoy's dynamic metadata under which an
	// admitted answer names the leases it took, by rule path.
	LeasesKey = "ratelimitd_leases"
	// LeaseEntryKey is the key of the entry that names the lease a
	// give-back frees: the value LeasesKey gave.
	LeaseEntryKey = "ratelimitd_lease"
)

// envoyLeaseID returns the lease id, as Envoy carries it, of the slots
// sc's decision took on descriptor i, or "" when it took none: the
// native lease id's version and the descriptor's stamps, in URL-safe
// base64 without padding (a metadata string travels in headers and logs).
func envoyLeaseID(sc *scratch, i int) string {
	var expires int64
	sc.leaseBuf, expires = sc.AppendLease(sc.leaseBuf[:0], i)
	if expires == 0 {
		return ""
	}
	sc.idBuf = appendStamps(append(sc.idBuf[:0], leaseVersion), sc.leaseBuf)
	return base64.RawURLEncoding.EncodeToString(sc.idBuf)
}

// withLeases adds to md (nil: none yet) the leases that sc's admitted
// decision took, and returns it; md is unchanged when it took none. A
// rule that two descriptors of one request matched names the first's.
// Whether a descriptor took slots is the engine's answer (AppendLease
// reads the limits that applied), not its rule's: an operator's override
// can give a rule a concurrency limit, or take it away.
func withLeases(md *structpb.Struct, sc *scratch) *structpb.Struct {
	var leases map[string]*structpb.Value
	for i := range sc.Dec.Statuses {
		r := sc.Rule(i)
		if r == nil {
			continue
		}
		id := envoyLeaseID(sc, i)
		if id == "" {
			continue
		}
		if leases == nil {
			leases = make(map[string]*structpb.Value, 1)
		}
		if _, dup := leases[r.Path]; !dup {
			leases[r.Path] = structpb.NewStringValue(id)
		}
	}
	if leases == nil {
		return md
	}
	if md == nil {
		md = &structpb.Struct{Fields: make(map[string]*structpb.Value, 1)}
	}
	md.Fields[LeasesKey] = structpb.NewStructValue(&structpb.Struct{Fields: leases})
	return md
}

// envoyLease takes, from a give-back descriptor of sc.Req whose last
// entry is a LeaseEntryKey, that entry off its entries and gives the
// descriptor the lease it names.
func envoyLease(sc *scratch, d *engine.Descriptor, i int) error {
	r := &sc.Req
	if d.Entries[1] == d.Entries[0] || r.Entries[d.Entries[1]-1].Key != LeaseEntryKey {
		return nil
	}
	if d.Op != backend.GiveBack {
		return engine.Invalid("descriptor %d: a %s entry names a lease to give back: set is_negative_hits", i, LeaseEntryKey)
	}
	bad := engine.Invalid("descriptor %d: %s is not a lease this server answered", i, LeaseEntryKey)
	v := r.Entries[d.Entries[1]-1].Value
	if len(v) > base64.RawURLEncoding.EncodedLen(maxLeaseID) {
		return bad
	}
	id, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return bad
	}
	var ok bool
	r.Leases, ok = readLeaseID(id, 1, r.Leases, func(_ int, stamps [2]int) { d.Lease = stamps })
	if !ok {
		return bad
	}
	d.Entries[1]--
	d.HasLease = true
	return nil
}
