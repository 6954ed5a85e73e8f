package server

import (
	"context"
	"math"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimitd/ratelimitd/backend"
	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
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
	if err := checkRequest(req.GetDomain(), len(req.GetDescriptors())); err != nil {
		return nil, err
	}
	if req.Hits > maxHits {
		return nil, invalid("hits %d over the maximum %d", req.Hits, uint64(maxHits))
	}
	sc := s.getScratch()
	defer s.putScratch(sc)
	d := s.rules.Load().Domain(req.Domain)
	hits := req.Hits
	if hits == 0 {
		hits = 1
	}
	var ovr backend.Limit
	for i, rd := range req.Descriptors {
		h := hits
		if rd != nil && rd.Hits != nil {
			h = *rd.Hits // 0 checks without consuming
		}
		var o *backend.Limit
		if lo := rd.GetLimit(); lo != nil {
			if err := lo.GetWindow().CheckValid(); err != nil {
				return nil, invalid("descriptor %d: limit override window: %v", i, err)
			}
			ovr = backend.Limit{Requests: uint64(lo.Requests), Window: lo.Window.AsDuration()}
			if err := ovr.Validate(); err != nil {
				return nil, invalid("descriptor %d: limit override: %v", i, err)
			}
			if d != nil { // overrides apply in a known domain only
				o = &ovr
			}
		}
		if err := addDescriptor(sc, d, req.Domain, rd.GetEntries(), h, o); err != nil {
			return nil, err
		}
	}
	if err := s.decide(ctx, sc); err != nil {
		return nil, err
	}
	return nativeResponse(sc), nil
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
	dec := &sc.dec
	resp := &ratelimitv1.ShouldRateLimitResponse{Code: nativeCode(dec.over)}
	arena := make([]nativeStatus, len(dec.statuses))
	resp.Statuses = make([]*ratelimitv1.DescriptorStatus, len(dec.statuses))
	for i, v := range dec.statuses {
		a := &arena[i]
		resp.Statuses[i] = &a.st
		a.st.Code = nativeCode(v.over)
		if v.unlimited {
			a.st.Unlimited = true
			a.st.Remaining = math.MaxUint32 // as Envoy's limit_remaining says it
		}
		if !v.limited {
			continue
		}
		a.lim.Requests = uint32(v.limit.Requests)
		setDuration(&a.window, v.limit.Window)
		a.lim.Window = &a.window
		a.lim.Algorithm = nativeAlgorithm(v.limit.Algorithm)
		a.lim.Name = v.name
		a.lim.Burst = uint32(v.limit.Requests)
		if v.limit.Burst != 0 {
			a.lim.Burst = uint32(v.limit.Burst)
		}
		a.st.Limit = &a.lim
		a.st.Remaining = v.remaining
		setDuration(&a.reset, v.reset)
		a.st.ResetAfter = &a.reset
		setDuration(&a.retry, v.retry)
		a.st.RetryAfter = &a.retry
	}
	if len(dec.headers) > 0 {
		resp.Headers = pointers[ratelimitv1.Header](len(dec.headers))
		for i, h := range dec.headers {
			resp.Headers[i].Name, resp.Headers[i].Value = h.name, h.value
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
	}
	return ratelimitv1.Algorithm_ALGORITHM_UNSPECIFIED
}
