package client_test

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ratelimitd/ratelimitd/client"
	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

// A fakeRLS stands in for ratelimitd, so that the client module's tests
// need nothing of the daemon's: a real gRPC server of the native API, over
// bufconn, scripted. It records the requests it receives and, unless
// answer is set, limits every descriptor to limit hits per hour, counted
// by its entries (a value counts the same whichever field carries it),
// deciding a request all or nothing, and sends the IETF rate-limit
// headers. (The tests of the module ratelimitd check the Client against
// the real server.)
type fakeRLS struct {
	ratelimitv1.UnimplementedRateLimitServiceServer
	limit      uint64               // hits admitted per descriptor; 0 admits everything
	retryAfter *durationpb.Duration // of a refusal; an hour when nil
	// answer, when set, answers every request instead of the counters.
	answer func(*ratelimitv1.ShouldRateLimitRequest) (*ratelimitv1.ShouldRateLimitResponse, error)
	// slow makes the server answer only when the call's context ends.
	slow atomic.Bool
	// renewing, when set, makes Renew signal on it, then answer only when
	// the call's context ends.
	renewing atomic.Pointer[chan struct{}]
	// fail, when set, is the error the server answers with.
	fail atomic.Pointer[error]
	// stop stops the server early (newFakeRLS sets it); idempotent.
	stop func()

	// slots, when set, is how many leases of each descriptor Acquire
	// admits at once (a concurrency limit on every descriptor); 0 admits
	// every Acquire without a lease, as ratelimitd does where no
	// concurrency limit applies. A lease never expires by itself; lapse
	// drops one.
	slots uint64

	mu       sync.Mutex
	reqs     []*ratelimitv1.ShouldRateLimitRequest // guarded by mu
	counts   map[string]uint64                     // guarded by mu
	held     map[string]uint64                     // slots held per descriptor; guarded by mu
	leases   map[string][]string                   // a lease's descriptors by its id; guarded by mu
	nextID   int                                   // guarded by mu
	releases []string                              // Release calls' lease ids; guarded by mu
}

// newFakeRLS serves f until the test ends and returns a connection to it.
func newFakeRLS(t testing.TB, f *fakeRLS) *grpc.ClientConn {
	t.Helper()
	f.makeMaps()
	g := grpc.NewServer()
	ratelimitv1.RegisterRateLimitServiceServer(g, f)
	conn, stop := serveGRPC(t, g)
	f.stop = stop
	return conn
}

// makeMaps makes f's maps, empty: what serves f calls it first.
func (f *fakeRLS) makeMaps() {
	f.counts = make(map[string]uint64)
	f.held = make(map[string]uint64)
	f.leases = make(map[string][]string)
}

// serveGRPC serves g on an in-memory listener until the test ends, and
// returns a client connection to it (with dialOpts added) and a function
// that stops g early. Both are cleaned up with t; stopping twice is safe.
func serveGRPC(t testing.TB, g *grpc.Server, dialOpts ...grpc.DialOption) (*grpc.ClientConn, func()) {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	stop := serveListener(t, g, lis)
	conn, err := grpc.NewClient("passthrough:///bufnet", append([]grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}, dialOpts...)...)
	if err != nil {
		t.Fatalf("grpc.NewClient: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, stop
}

// serveListener serves g on lis until the test ends, and returns a
// function that stops g early; stopping twice is safe.
func serveListener(t testing.TB, g *grpc.Server, lis net.Listener) func() {
	served := make(chan error, 1)
	go func() { served <- g.Serve(lis) }()
	stop := sync.OnceFunc(func() {
		g.Stop()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("Serve: %v", err)
		}
	})
	t.Cleanup(stop)
	return stop
}

// rpcs returns how many requests f received.
func (f *fakeRLS) rpcs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reqs)
}

// requests returns the requests f received, in order.
func (f *fakeRLS) requests() []*ratelimitv1.ShouldRateLimitRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*ratelimitv1.ShouldRateLimitRequest(nil), f.reqs...)
}

// ShouldRateLimit implements ratelimitv1.RateLimitServiceServer.
func (f *fakeRLS) ShouldRateLimit(ctx context.Context, req *ratelimitv1.ShouldRateLimitRequest) (*ratelimitv1.ShouldRateLimitResponse, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, proto.Clone(req).(*ratelimitv1.ShouldRateLimitRequest)) // not proto.CloneOf: the module requires protobuf v1.33
	f.mu.Unlock()
	if err := f.failure(ctx); err != nil {
		return nil, err
	}
	if f.answer != nil {
		return f.answer(req)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
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
			resp.Headers = append(resp.Headers,
				&ratelimitv1.Header{Name: "RateLimit-Policy", Value: fmt.Sprintf("%q;q=%d;w=3600", st.Limit.Name, f.limit)},
				&ratelimitv1.Header{Name: "RateLimit", Value: fmt.Sprintf("%q;r=%d;t=3600", st.Limit.Name, st.Remaining)})
		}
		resp.Statuses = append(resp.Statuses, st)
	}
	if resp.Code == ratelimitv1.Code_CODE_OVER_LIMIT {
		resp.Headers = append(resp.Headers, &ratelimitv1.Header{Name: "Retry-After", Value: fmt.Sprint(retry.GetSeconds())})
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

// leaseTTL is how long the fake's leases say they last.
const leaseTTL = time.Minute

// Acquire implements ratelimitv1.RateLimitServiceServer: it takes a slot
// of every descriptor, all or nothing, with slots set.
func (f *fakeRLS) Acquire(ctx context.Context, req *ratelimitv1.AcquireRequest) (*ratelimitv1.AcquireResponse, error) {
	if err := f.failure(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &ratelimitv1.AcquireResponse{Code: ratelimitv1.Code_CODE_OK}
	if f.slots == 0 {
		return resp, nil
	}
	keys := make([]string, len(req.GetDescriptors()))
	for i, d := range req.GetDescriptors() {
		keys[i] = fakeKey(d)
		st := &ratelimitv1.DescriptorStatus{Code: ratelimitv1.Code_CODE_OK, Limit: &ratelimitv1.Limit{
			Name: d.GetEntries()[0].GetKey(), Requests: uint32(f.slots), Window: durationpb.New(leaseTTL),
			Algorithm: ratelimitv1.Algorithm_ALGORITHM_CONCURRENCY,
		}}
		if f.held[keys[i]] >= f.slots {
			st.Code, st.RetryAfter = ratelimitv1.Code_CODE_OVER_LIMIT, durationpb.New(time.Second)
			resp.Code = ratelimitv1.Code_CODE_OVER_LIMIT
		}
		resp.Statuses = append(resp.Statuses, st)
	}
	if resp.Code == ratelimitv1.Code_CODE_OVER_LIMIT {
		return resp, nil
	}
	for _, k := range keys {
		f.held[k]++
	}
	resp.Lease = f.newLease(keys)
	return resp, nil
}

// newLease records a lease of keys. It requires that f.mu is held.
func (f *fakeRLS) newLease(keys []string) *ratelimitv1.Lease {
	f.nextID++
	id := fmt.Sprintf("lease-%d", f.nextID)
	f.leases[id] = keys
	return &ratelimitv1.Lease{Id: []byte(id), ExpiresAt: timestamppb.New(time.Now().Add(leaseTTL))}
}

// Release implements ratelimitv1.RateLimitServiceServer: it frees the
// lease's slots, if it is held.
func (f *fakeRLS) Release(ctx context.Context, req *ratelimitv1.ReleaseRequest) (*ratelimitv1.ReleaseResponse, error) {
	f.mu.Lock()
	f.releases = append(f.releases, string(req.GetLeaseId()))
	f.mu.Unlock()
	if err := f.failure(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range f.leases[string(req.GetLeaseId())] {
		f.held[k]--
	}
	delete(f.leases, string(req.GetLeaseId()))
	return &ratelimitv1.ReleaseResponse{}, nil
}

// Renew implements ratelimitv1.RateLimitServiceServer: it replaces a
// held lease by a new one (a new id), or answers OVER_LIMIT.
func (f *fakeRLS) Renew(ctx context.Context, req *ratelimitv1.RenewRequest) (*ratelimitv1.RenewResponse, error) {
	if renewing := f.renewing.Load(); renewing != nil {
		*renewing <- struct{}{}
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if err := f.failure(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	keys, ok := f.leases[string(req.GetLeaseId())]
	if !ok {
		return &ratelimitv1.RenewResponse{Code: ratelimitv1.Code_CODE_OVER_LIMIT}, nil
	}
	delete(f.leases, string(req.GetLeaseId()))
	return &ratelimitv1.RenewResponse{Code: ratelimitv1.Code_CODE_OK, Lease: f.newLease(keys)}, nil
}

// failure returns the error the fake answers with (slow or fail), nil
// when it answers.
func (f *fakeRLS) failure(ctx context.Context) error {
	if f.slow.Load() {
		<-ctx.Done()
		return status.FromContextError(ctx.Err()).Err()
	}
	if err := f.fail.Load(); err != nil {
		return *err
	}
	return nil
}

// lapse drops the lease id as if it had expired, freeing its slots.
func (f *fakeRLS) lapse(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range f.leases[id] {
		f.held[k]--
	}
	delete(f.leases, id)
}

// holding returns how many slots of d are held.
func (f *fakeRLS) holding(d client.Descriptor) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	rd := &ratelimitv1.Descriptor{}
	for _, e := range d.Entries {
		rd.Entries = append(rd.Entries, &ratelimitv1.Entry{Key: e.Key, Value: e.Value})
	}
	return f.held[fakeKey(rd)]
}

// released returns the lease ids of the Release calls f received, in
// order.
func (f *fakeRLS) released() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.releases...)
}
