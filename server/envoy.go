package server

import (
	"context"
	"math"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimitd/ratelimitd/backend"
)

// envoyService is envoy.service.ratelimit.v3.RateLimitService.
type envoyService struct {
	rlsv3.UnimplementedRateLimitServiceServer
	s *Server
}

// ShouldRateLimit implements rlsv3.RateLimitServiceServer.
func (e envoyService) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return e.s.decideEnvoy(ctx, apiEnvoy, req)
}

// addEnvoy checks req and adds its descriptors to sc.
func (s *Server) addEnvoy(sc *scratch, req *rlsv3.RateLimitRequest) error {
	if err := checkRequest(req.GetDomain(), len(req.GetDescriptors())); err != nil {
		return err
	}
	d := s.rules.Load().Domain(req.Domain)
	hits := uint64(req.HitsAddend)
	if hits == 0 {
		hits = 1
	}
	var ovr backend.Limit
	for i, rd := range req.Descriptors {
		if rd.GetIsNegativeHits() {
			return invalid("descriptor %d: is_negative_hits is not supported", i)
		}
		h := hits
		if rd.GetHitsAddend() != nil {
			h = rd.HitsAddend.Value // 0 checks without consuming
		}
		var o *backend.Limit
		if lo := rd.GetLimit(); lo != nil {
			w, ok := envoyWindow(lo.Unit)
			if !ok {
				return invalid("descriptor %d: limit override has unit %v", i, lo.Unit)
			}
			if m := lo.GetUnitMultiplier(); m != nil {
				if m.Value == 0 {
					return invalid("descriptor %d: limit override unit_multiplier is 0", i)
				}
				if time.Duration(m.Value) > backend.MaxWindow/w {
					return invalid("descriptor %d: limit override window of %d × %v is over the maximum of 100 years", i, m.Value, lo.Unit)
				}
				w *= time.Duration(m.Value)
			}
			ovr = backend.Limit{Requests: uint64(lo.RequestsPerUnit), Window: w}
			if d != nil { // overrides apply in a known domain only
				o = &ovr
			}
		}
		if err := addDescriptor(sc, d, req.Domain, rd.GetEntries(), h, o); err != nil {
			return err
		}
	}
	return nil
}

var envoyUnits = [...]time.Duration{
	typev3.RateLimitUnit_SECOND: time.Second,
	typev3.RateLimitUnit_MINUTE: time.Minute,
	typev3.RateLimitUnit_HOUR:   time.Hour,
	typev3.RateLimitUnit_DAY:    24 * time.Hour,
	typev3.RateLimitUnit_MONTH:  30 * 24 * time.Hour,
	typev3.RateLimitUnit_YEAR:   365 * 24 * time.Hour,
}

// envoyWindow returns the length of Envoy unit u.
func envoyWindow(u typev3.RateLimitUnit) (time.Duration, bool) {
	if u <= 0 || int(u) >= len(envoyUnits) {
		return 0, false
	}
	return envoyUnits[u], true
}

// envoyUnit returns the unit whose length is w, or UNKNOWN.
func envoyUnit(w time.Duration) rlsv3.RateLimitResponse_RateLimit_Unit {
	switch w {
	case time.Second:
		return rlsv3.RateLimitResponse_RateLimit_SECOND
	case time.Minute:
		return rlsv3.RateLimitResponse_RateLimit_MINUTE
	case time.Hour:
		return rlsv3.RateLimitResponse_RateLimit_HOUR
	case 24 * time.Hour:
		return rlsv3.RateLimitResponse_RateLimit_DAY
	case 7 * 24 * time.Hour:
		return rlsv3.RateLimitResponse_RateLimit_WEEK
	case 30 * 24 * time.Hour:
		return rlsv3.RateLimitResponse_RateLimit_MONTH
	case 365 * 24 * time.Hour:
		return rlsv3.RateLimitResponse_RateLimit_YEAR
	}
	return rlsv3.RateLimitResponse_RateLimit_UNKNOWN
}

// envoyStatus holds the messages of one descriptor's status, allocated
// together.
type envoyStatus struct {
	st  rlsv3.RateLimitResponse_DescriptorStatus
	lim rlsv3.RateLimitResponse_RateLimit
	dur durationpb.Duration
}

// envoyResponse renders sc's decision as Envoy's response.
func envoyResponse(sc *scratch) *rlsv3.RateLimitResponse {
	dec := &sc.dec
	resp := &rlsv3.RateLimitResponse{OverallCode: envoyCode(dec.over)}
	arena := make([]envoyStatus, len(dec.statuses))
	resp.Statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(dec.statuses))
	for i, v := range dec.statuses {
		a := &arena[i]
		resp.Statuses[i] = &a.st
		a.st.Code = envoyCode(v.over)
		switch {
		case v.unlimited:
			a.st.LimitRemaining = math.MaxUint32
		case v.limited:
			a.lim.Name = v.name
			a.lim.RequestsPerUnit = uint32(v.limit.Requests)
			a.lim.Unit = envoyUnit(v.limit.Window)
			a.st.CurrentLimit = &a.lim
			a.st.LimitRemaining = uint32(min(v.remaining, math.MaxUint32))
			setDuration(&a.dur, v.reset)
			a.st.DurationUntilReset = &a.dur
		}
	}
	if len(dec.headers) > 0 {
		resp.ResponseHeadersToAdd = pointers[corev3.HeaderValue](len(dec.headers))
		for i, h := range dec.headers {
			resp.ResponseHeadersToAdd[i].Key, resp.ResponseHeadersToAdd[i].Value = h.name, h.value
		}
	}
	resp.DynamicMetadata = metadata(sc)
	return resp
}

// metadata merges the metadata of the matched rules of the descriptors
// within their limits, in request order, the first value of a key
// winning (maps merge key by key), under the field "metadata" of Envoy's
// dynamic metadata. It returns nil when no such rule has metadata.
func metadata(sc *scratch) *structpb.Struct {
	var merged map[string]any
	for i := range sc.descs {
		r := sc.descs[i].rule
		if r == nil || len(r.Metadata) == 0 || sc.dec.statuses[i].over {
			continue
		}
		if merged == nil {
			merged = make(map[string]any)
		}
		mergeInto(merged, r.Metadata)
	}
	if merged == nil {
		return nil
	}
	st, err := structpb.NewStruct(map[string]any{"metadata": merged})
	if err != nil {
		return nil // config.Parse accepts only values a Struct holds
	}
	return st
}

// mergeInto adds src's keys that dst lacks, merging nested maps.
func mergeInto(dst, src map[string]any) {
	for k, v := range src {
		old, ok := dst[k]
		if !ok {
			if m, isMap := v.(map[string]any); isMap {
				cp := make(map[string]any, len(m))
				mergeInto(cp, m)
				v = cp
			}
			dst[k] = v
			continue
		}
		if om, ok := old.(map[string]any); ok {
			if m, ok := v.(map[string]any); ok {
				mergeInto(om, m)
			}
		}
	}
}

// pointers returns pointers to n new values of T, allocated together.
func pointers[T any](n int) []*T {
	vals, ptrs := make([]T, n), make([]*T, n)
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	return ptrs
}

func envoyCode(over bool) rlsv3.RateLimitResponse_Code {
	if over {
		return rlsv3.RateLimitResponse_OVER_LIMIT
	}
	return rlsv3.RateLimitResponse_OK
}

func setDuration(d *durationpb.Duration, v time.Duration) {
	d.Seconds = int64(v / time.Second)
	d.Nanos = int32(v % time.Second)
}
