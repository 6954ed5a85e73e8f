package server

import (
	"context"
	"crypto/sha256"
	"math"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ratelimitd/ratelimitd/backend"
	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/server/internal/engine"
)

// nativeService is ratelimit.v1.RateLimitService.
type nativeService struct {
	ratelimitv1.UnimplementedRateLimitServiceServer
	s *Server
}

// ShouldRateLimit implements ratelimitv1.RateLimitServiceServer.
func (n nativeService) ShouldRateLimit(ctx context.Context, req *ratelimitv1.ShouldRateLimitRequest) (resp *ratelimitv1.ShouldRateLimitResponse, err error) {
	s := n.s
	defer func(start time.Time) {
		s.metrics.decided(apiNative, start, resp.GetCode() == ratelimitv1.Code_CODE_OVER_LIMIT, err)
	}(time.Now())
	sc := s.getScratch()
	defer s.putScratch(sc)
	if err := s.decideNative(ctx, sc, req.GetDomain(), req.GetDescriptors(), req.GetHits(), nil, backend.Take); err != nil {
		return nil, err
	}
	return nativeResponse(sc), nil
}

// decideNative decodes a native request's fields into sc, with op and
// the lease named by leaseID on each descriptor unless op is Take (a
// Release's or Renew's), logs it and decides it. Its errors are gRPC's.
func (s *Server) decideNative(ctx context.Context, sc *scratch, domain string, descs []*ratelimitv1.Descriptor, hits uint64, leaseID []byte, op backend.Op) error {
	if err := nativeRequest(sc, domain, descs, hits); err != nil {
		return grpcError(err)
	}
	if op != backend.Take {
		if err := applyLeaseID(sc, leaseID, op); err != nil {
			return grpcError(err)
		}
	}
	s.logRequest(sc)
	if err := s.eng.Decide(ctx, &sc.Scratch); err != nil {
		return grpcError(err)
	}
	return nil
}

// nativeRequest fills sc.Req from a native request's fields (those of
// ShouldRateLimit, which Acquire, Release and Renew share).
func nativeRequest(sc *scratch, domain string, descs []*ratelimitv1.Descriptor, hits uint64) error {
	if hits > engine.MaxHits {
		return engine.Invalid("hits %d over the maximum %d", hits, uint64(engine.MaxHits))
	}
	if hits == 0 {
		hits = 1
	}
	if err := engine.CheckRequest(domain, len(descs)); err != nil {
		return err
	}
	r := &sc.Req
	r.Domain = domain
	for i, rd := range descs {
		if err := engine.CheckEntryCount(i, len(rd.GetEntries())); err != nil {
			return err
		}
		from := len(r.Entries)
		for j, e := range rd.GetEntries() {
			ent := engine.Entry{Key: e.GetKey(), Value: e.GetValue()}
			raw, sum := e.GetRawValue(), e.GetValueSha256()
			switch {
			case len(raw) > 0 && (ent.Value != "" || len(sum) > 0), len(sum) > 0 && ent.Value != "":
				return engine.Invalid("descriptor %d entry %d: set one of value, raw_value and value_sha256", i, j)
			case len(raw) > 0:
				ent.Value = string(raw)
			case len(sum) > 0:
				if len(sum) != sha256.Size {
					return engine.Invalid("descriptor %d entry %d: value_sha256 is %d bytes, want %d", i, j, len(sum), sha256.Size)
				}
				ent.Value, ent.Digest = string(sum), true
			}
			r.Entries = append(r.Entries, ent)
		}
		h := hits
		if rd != nil && rd.Hits != nil {
			h = rd.GetHits() // 0 checks without consuming
		}
		d := r.Add(from, h)
		if rd.GetGiveBack() {
			d.Op = backend.GiveBack
		}
		if lo := rd.GetLimit(); lo != nil {
			if err := lo.GetWindow().CheckValid(); err != nil {
				return engine.Invalid("descriptor %d: limit override window: %v", i, err)
			}
			d.HasLimit = true
			d.Limit = engine.Override{Requests: uint64(lo.GetRequests()), Window: lo.GetWindow().AsDuration()}
		}
	}
	return nil
}

// nativeStatus holds the messages of one descriptor's status, allocated
// together.
type nativeStatus struct {
	st           ratelimitv1.DescriptorStatus
	lim          ratelimitv1.Limit
	window       durationpb.Duration
	reset, retry durationpb.Duration
}

// nativeResponse renders sc's decision as the native response.
func nativeResponse(sc *scratch) *ratelimitv1.ShouldRateLimitResponse {
	dec := &sc.Dec
	resp := &ratelimitv1.ShouldRateLimitResponse{Code: nativeCode(dec.Over)}
	arena := make([]nativeStatus, len(dec.Statuses))
	resp.Statuses = make([]*ratelimitv1.DescriptorStatus, len(dec.Statuses))
	for i, v := range dec.Statuses {
		a := &arena[i]
		resp.Statuses[i] = &a.st
		a.st.Code = nativeCode(v.Over)
		if v.Unlimited {
			a.st.Unlimited = true
			a.st.Remaining = math.MaxUint32 // as Envoy's limit_remaining says it
		}
		if !v.Limited {
			continue
		}
		a.lim.Requests = uint32(v.Limit.Requests)
		setDuration(&a.window, v.Limit.Window)
		a.lim.Window = &a.window
		a.lim.Algorithm = nativeAlgorithm(v.Limit.Algorithm)
		a.lim.Name = v.Name
		a.lim.Burst = uint32(v.Limit.Requests)
		if v.Limit.Burst != 0 {
			a.lim.Burst = uint32(v.Limit.Burst)
		}
		a.st.Limit = &a.lim
		a.st.Remaining = v.Remaining
		setDuration(&a.reset, v.Reset)
		a.st.ResetAfter = &a.reset
		setDuration(&a.retry, v.Retry)
		a.st.RetryAfter = &a.retry
	}
	if len(dec.Headers) > 0 {
		resp.Headers = pointers[ratelimitv1.Header](len(dec.Headers))
		for i, h := range dec.Headers {
			resp.Headers[i].Name, resp.Headers[i].Value = h.Name, h.Value
		}
	}
	return resp
}

func nativeCode(over bool) ratelimitv1.Code {
	if over {
		return ratelimitv1.Code_CODE_OVER_LIMIT
	}
	return ratelimitv1.Code_CODE_OK
}

func nativeAlgorithm(a backend.Algorithm) ratelimitv1.Algorithm {
	switch a {
	case backend.SlidingWindow:
		return ratelimitv1.Algorithm_ALGORITHM_SLIDING_WINDOW
	case backend.FixedWindow:
		return ratelimitv1.Algorithm_ALGORITHM_FIXED_WINDOW
	case backend.SlidingLog:
		return ratelimitv1.Algorithm_ALGORITHM_SLIDING_LOG
	case backend.TokenBucket:
		return ratelimitv1.Algorithm_ALGORITHM_TOKEN_BUCKET
	case backend.GCRA:
		return ratelimitv1.Algorithm_ALGORITHM_GCRA
	case backend.Concurrency:
		return ratelimitv1.Algorithm_ALGORITHM_CONCURRENCY
	}
	return ratelimitv1.Algorithm_ALGORITHM_UNSPECIFIED
}

// Explain implements ratelimitv1.RateLimitServiceServer: ShouldRateLimit's
// request explained as POST /explain explains /json's (see explain).
//
// With Options.OperatorsOnAdmin it answers PermissionDenied: the gRPC port
// is the callers', and an explanation shows any counter's state; operators
// then use POST /explain on the admin listener.
func (n nativeService) Explain(ctx context.Context, req *ratelimitv1.ExplainRequest) (*ratelimitv1.ExplainResponse, error) {
	s := n.s
	if s.opts.OperatorsOnAdmin {
		return nil, status.Error(codes.PermissionDenied, "Explain is served only as POST /explain on the admin listener (--admin-addr)")
	}
	sc := s.getScratch()
	defer s.putScratch(sc)
	r := req.GetRequest()
	if err := nativeRequest(sc, r.GetDomain(), r.GetDescriptors(), r.GetHits()); err != nil {
		return nil, grpcError(err)
	}
	ex, err := s.eng.Explain(ctx, &sc.Scratch)
	if err != nil {
		return nil, grpcError(err)
	}
	return nativeExplanation(ex), nil
}

// nativeDecisions maps an explanation's decisions to the native enum.
var nativeDecisions = map[string]ratelimitv1.Decision{
	"OK":         ratelimitv1.Decision_DECISION_OK,
	"OVER_LIMIT": ratelimitv1.Decision_DECISION_OVER_LIMIT,
	"UNLIMITED":  ratelimitv1.Decision_DECISION_UNLIMITED,
	"NO_RULE":    ratelimitv1.Decision_DECISION_NO_RULE,
}

// nativeExplanation renders an explanation as the native response.
func nativeExplanation(ex *engine.Explanation) *ratelimitv1.ExplainResponse {
	resp := &ratelimitv1.ExplainResponse{
		Code:        nativeCode(ex.Overall == "OVER_LIMIT"),
		ShadowMode:  ex.ShadowMode,
		Descriptors: make([]*ratelimitv1.DescriptorExplanation, len(ex.Descriptors)),
	}
	for i, d := range ex.Descriptors {
		nd := &ratelimitv1.DescriptorExplanation{
			Decision:   nativeDecisions[d.Decision],
			Unlimited:  d.Unlimited,
			ShadowMode: d.ShadowMode,
			QuotaMode:  d.QuotaMode,
			Replaces:   d.Replaces,
			Override:   d.Override,
			GiveBack:   d.GiveBack,
			Hits:       d.Hits,
			Limits:     make([]*ratelimitv1.LimitExplanation, len(d.Limits)),
		}
		if r := d.Rule; r != nil {
			nd.Rule = &ratelimitv1.MatchedRule{Path: r.Path, File: r.File, Line: uint32(max(r.Line, 0))}
		}
		if o := d.RuntimeOverride; o != nil {
			nd.RuntimeOverride = &ratelimitv1.RuntimeOverride{Reason: o.Reason, SetBy: o.SetBy, Version: o.Version}
			if !o.Expires.IsZero() {
				nd.RuntimeOverride.ExpiresAt = timestamppb.New(o.Expires)
			}
		}
		for j := range d.Limits {
			nd.Limits[j] = nativeLimitExplanation(&d.Limits[j])
		}
		resp.Descriptors[i] = nd
	}
	return resp
}

// nativeLimitExplanation renders one explained limit.
func nativeLimitExplanation(l *engine.ExplainLimit) *ratelimitv1.LimitExplanation {
	burst := l.Lim.Capacity()
	nl := &ratelimitv1.LimitExplanation{
		Limit: &ratelimitv1.Limit{
			Requests:  uint32(l.Lim.Requests),
			Window:    durationpb.New(l.Lim.Window),
			Algorithm: nativeAlgorithm(l.Lim.Algorithm),
			Name:      l.Name,
			Burst:     uint32(burst),
		},
		Replaced:   l.Replaced,
		Counter:    l.Counter,
		Remaining:  l.Remaining,
		WouldAdmit: l.WouldAdmit,
	}
	if l.Replaced {
		return nl
	}
	nl.ResetAfter = durationpb.New(l.ResetIn)
	if l.HasRetry {
		nl.RetryAfter = durationpb.New(l.RetryIn)
	}
	if l.Held != nil {
		nl.Held = *l.Held
		if *l.Held > 0 {
			nl.NextLeaseExpiry = durationpb.New(l.ResetIn)
		}
	}
	return nl
}
