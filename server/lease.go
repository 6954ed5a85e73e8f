package server

import (
	"context"
	"encoding/binary"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ratelimitd/ratelimitd/backend"
	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/server/internal/engine"
)

// A lease id is the stamps of the slots an Acquire took, which the
// stores name leases by (backend.Result.Lease): a version byte, then per
// request descriptor the number of its stamps and the stamps, each a
// uvarint. The server keeps no table of leases: the counters hold them,
// and a lease that is never given back lapses with its stamp.
const (
	leaseVersion = 1
	// maxLeaseID bounds a lease id a request may carry: 64 descriptors
	// with a few concurrency limits each fit with room to spare.
	maxLeaseID = 4096
)

// appendLeaseID appends the id of the lease sc's decision took, and
// returns it with the lease's expiry (µs; 0 when it holds nothing).
func appendLeaseID(b []byte, sc *scratch) (_ []byte, expires int64) {
	b = append(b, leaseVersion)
	for i := range sc.Req.Descs {
		var exp int64
		sc.leaseBuf, exp = sc.AppendLease(sc.leaseBuf[:0], i)
		if exp != 0 && (expires == 0 || exp < expires) {
			expires = exp
		}
		b = appendStamps(b, sc.leaseBuf)
	}
	return b, expires
}

// appendStamps appends one descriptor's part of a lease id: how many
// stamps, then each, as uvarints.
func appendStamps(b []byte, stamps []int64) []byte {
	b = binary.AppendUvarint(b, uint64(len(stamps)))
	for _, s := range stamps {
		b = binary.AppendUvarint(b, uint64(s))
	}
	return b
}

// readStamps reads one descriptor's part of a lease id from b, appending
// its stamps to dst; it returns the rest of b, and false when b holds no
// such part.
func readStamps(b []byte, dst []int64) (_ []int64, rest []byte, ok bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return dst, nil, false
	}
	b = b[k:]
	for range n {
		s, k := binary.Uvarint(b)
		if k <= 0 || s > 1<<62 {
			return dst, nil, false
		}
		b = b[k:]
		dst = append(dst, int64(s))
	}
	return dst, b, true
}

// readLeaseID reads id, a lease id of n descriptors' parts that
// appendLeaseID made, appending their stamps to leases and calling span
// with each descriptor's span of them; ok is false when id is not one.
// Native lease ids and Envoy's (one descriptor's, see envoyLease) are
// read by it alike.
func readLeaseID(id []byte, n int, leases []int64, span func(i int, stamps [2]int)) (_ []int64, ok bool) {
	if len(id) == 0 || id[0] != leaseVersion {
		return leases, false
	}
	id = id[1:]
	for i := range n {
		from := len(leases)
		if leases, id, ok = readStamps(id, leases); !ok {
			return leases, false
		}
		span(i, [2]int{from, len(leases)})
	}
	return leases, len(id) == 0
}

// applyLeaseID gives each descriptor of sc.Req the op and its stamps
// from a lease id, which must be one that appendLeaseID made for as many
// descriptors.
func applyLeaseID(sc *scratch, id []byte, op backend.Op) error {
	switch {
	case len(id) == 0:
		return engine.Invalid("lease_id is required")
	case len(id) > maxLeaseID:
		return engine.Invalid("lease_id is %d bytes, over the maximum %d", len(id), maxLeaseID)
	case id[0] != leaseVersion:
		return engine.Invalid("lease_id is not one this server answered")
	}
	r := &sc.Req
	var ok bool
	r.Leases, ok = readLeaseID(id, len(r.Descs), r.Leases, func(i int, stamps [2]int) {
		d := &r.Descs[i]
		d.Op, d.HasLease, d.Lease = op, true, stamps
	})
	if !ok {
		return engine.Invalid("lease_id does not match the request's descriptors")
	}
	return nil
}

// nativeLease renders a lease, nil when it holds nothing.
func nativeLease(sc *scratch) *ratelimitv1.Lease {
	id, expires := appendLeaseID(nil, sc)
	if expires == 0 {
		return nil
	}
	return &ratelimitv1.Lease{Id: id, ExpiresAt: timestamppb.New(time.UnixMicro(expires))}
}

// Acquire implements ratelimitv1.RateLimitServiceServer: ShouldRateLimit,
// answering the lease of the concurrency slots it took.
func (n nativeService) Acquire(ctx context.Context, req *ratelimitv1.AcquireRequest) (resp *ratelimitv1.AcquireResponse, err error) {
	s := n.s
	defer func(start time.Time) {
		s.metrics.decided(apiNative, start, resp.GetCode() == ratelimitv1.Code_CODE_OVER_LIMIT, err)
	}(time.Now())
	for i, d := range req.GetDescriptors() {
		if d.GetGiveBack() {
			return nil, grpcError(engine.Invalid("descriptor %d: give_back is not allowed in Acquire (use Release)", i))
		}
	}
	sc := s.getScratch()
	defer s.putScratch(sc)
	if err := s.decideNative(ctx, sc, req.GetDomain(), req.GetDescriptors(), req.GetHits(), nil, backend.Take); err != nil {
		return nil, err
	}
	d := nativeResponse(sc)
	resp = &ratelimitv1.AcquireResponse{Code: d.Code, Statuses: d.Statuses, Headers: d.Headers}
	if !sc.Dec.Over {
		resp.Lease = nativeLease(sc)
	}
	return resp, nil
}

// Release implements ratelimitv1.RateLimitServiceServer: it gives back
// the slots of a lease, and nothing else.
func (n nativeService) Release(ctx context.Context, req *ratelimitv1.ReleaseRequest) (resp *ratelimitv1.ReleaseResponse, err error) {
	s := n.s
	defer func(start time.Time) { s.metrics.decided(apiNative, start, false, err) }(time.Now())
	sc := s.getScratch()
	defer s.putScratch(sc)
	if err := s.decideNative(ctx, sc, req.GetDomain(), req.GetDescriptors(), req.GetHits(), req.GetLeaseId(), backend.GiveBack); err != nil {
		return nil, err
	}
	return &ratelimitv1.ReleaseResponse{Statuses: nativeResponse(sc).Statuses}, nil
}

// Renew implements ratelimitv1.RateLimitServiceServer: it extends a
// lease, OVER_LIMIT when the lease no longer holds its slots.
func (n nativeService) Renew(ctx context.Context, req *ratelimitv1.RenewRequest) (resp *ratelimitv1.RenewResponse, err error) {
	s := n.s
	defer func(start time.Time) {
		s.metrics.decided(apiNative, start, resp.GetCode() == ratelimitv1.Code_CODE_OVER_LIMIT, err)
	}(time.Now())
	sc := s.getScratch()
	defer s.putScratch(sc)
	if err := s.decideNative(ctx, sc, req.GetDomain(), req.GetDescriptors(), req.GetHits(), req.GetLeaseId(), backend.Renew); err != nil {
		return nil, err
	}
	// A renew takes no part in the call's verdict (backend.Renew): the
	// code is whether every lease of it still held.
	lapsed := false
	for _, v := range sc.Dec.Statuses {
		lapsed = lapsed || v.OverLimit
	}
	resp = &ratelimitv1.RenewResponse{Code: nativeCode(lapsed), Statuses: nativeResponse(sc).Statuses}
	if !lapsed {
		resp.Lease = nativeLease(sc)
	}
	return resp, nil
}
