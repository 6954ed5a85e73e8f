package client_test

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/internal/grpctest"
)

// A fakeRLS stands in for ratelimitd where a test needs what the real one
// does not offer: it records the requests it receives, and limits every
// descriptor to limit hits per hour, counted by its entries (a value
// counts the same whichever field carries it), deciding a request all or
// nothing.
type fakeRLS struct {
	ratelimitv1.UnimplementedRateLimitServiceServer
	limit      uint64               // hits admitted per descriptor; 0 admits everything
	retryAfter *durationpb.Duration // of a refusal; an hour when nil

	mu     sync.Mutex
	reqs   []*ratelimitv1.ShouldRateLimitRequest // guarded by mu
	counts map[string]uint64                     // guarded by mu
}

// newFakeRLS serves f until the test ends and returns a connection to it.
func newFakeRLS(t testing.TB, f *fakeRLS) *grpc.ClientConn {
	t.Helper()
	f.counts = make(map[string]uint64)
	g := grpc.NewServer()
	ratelimitv1.RegisterRateLimitServiceServer(g, f)
	conn, _ := grpctest.Serve(t, g)
	return conn
}

// requests returns the requests f received, in order.
func (f *fakeRLS) requests() []*ratelimitv1.ShouldRateLimitRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*ratelimitv1.ShouldRateLimitRequest(nil), f.reqs...)
}

// ShouldRateLimit implements ratelimitv1.RateLimitServiceServer.
func (f *fakeRLS) ShouldRateLimit(_ context.Context, req *ratelimitv1.ShouldRateLimitRequest) (*ratelimitv1.ShouldRateLimitResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, proto.CloneOf(req))
	retry := f.retryAfter
	if retry == nil {
		retry = durationpb.New(time.Hour)
	}
	resp := &ratelimitv1.ShouldRateLimitResponse{Code: ratelimitv1.Code_CODE_OK}
	keys := make([]string, len(req.GetDescriptors()))
	hits := make([]uint64, len(keys))
	for i, d := range req.GetDescriptors() {
		keys[i], hits[i] = fakeKey(d), d.GetHits()
		if d.Hits == nil {
			hits[i] = 1
		}
		st := &ratelimitv1.DescriptorStatus{Code: ratelimitv1.Code_CODE_OK}
		if f.limit > 0 {
			st.Limit = &ratelimitv1.Limit{Name: d.GetEntries()[0].GetKey(), Requests: uint32(f.limit), Window: durationpb.New(time.Hour)}
			if used := f.counts[keys[i]]; used+hits[i] > f.limit {
				st.Code = ratelimitv1.Code_CODE_OVER_LIMIT
				st.RetryAfter = retry
				resp.Code = ratelimitv1.Code_CODE_OVER_LIMIT
			} else {
				st.Remaining = f.limit - used - hits[i]
			}
		}
		resp.Statuses = append(resp.Statuses, st)
	}
	if resp.Code == ratelimitv1.Code_CODE_OK {
		for i, k := range keys {
			f.counts[k] += hits[i]
		}
	}
	return resp, nil
}

// fakeKey is d's counter: its keys and values, length-prefixed, a value
// as bytes whichever field carried it, and a digest marked as such.
func fakeKey(d *ratelimitv1.Descriptor) string {
	var b []byte
	for _, e := range d.GetEntries() {
		v := e.GetValue()
		switch {
		case e.GetValueSha256() != nil:
			v = "sha256:" + hex.EncodeToString(e.GetValueSha256())
		case e.GetRawValue() != nil:
			v = string(e.GetRawValue())
		}
		for _, s := range []string{e.GetKey(), v} {
			b = binary.AppendUvarint(b, uint64(len(s)))
			b = append(b, s...)
		}
	}
	return string(b)
}
