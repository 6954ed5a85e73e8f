package client_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimitd/ratelimitd/client"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ask calls ShouldRateLimit and fails the test on an error, or a decision
// of the failure policy.
func ask(t *testing.T, c client.RateLimiter, domain string, ds ...client.Descriptor) client.Decision {
	t.Helper()
	d, err := c.ShouldRateLimit(t.Context(), domain, ds...)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%q, %v): %v", domain, ds, err)
	}
	if d.Err != nil {
		t.Fatalf("ShouldRateLimit(%q, %v) was answered by the failure policy: %v", domain, ds, d.Err)
	}
	return d
}

// wantCode checks that err is a status error of code.
func wantCode(t *testing.T, call string, err error, code codes.Code) {
	t.Helper()
	if got := status.Code(err); err == nil || got != code {
		t.Errorf("%s: error %v (code %v), want code %v", call, err, got, code)
	}
}

// next is a handler that counts its calls and answers 200 "ok".
type next struct{ calls int }

func (n *next) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	n.calls++
	io.WriteString(w, "ok")
}

// serve runs one request through h and returns the response.
func serve(h http.Handler, r *http.Request) *http.Response {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec.Result()
}

// request returns a request from remote with the headers of header, given
// as name, value pairs.
func request(method, target, remote string, header ...string) *http.Request {
	r := httptest.NewRequest(method, target, nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	return r
}

// problem is the 429 body.
type problem struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail"`
	ViolatedPolicies []string `json:"violated-policies"`
}

// readProblem decodes resp's problem+json body.
func readProblem(t *testing.T, resp *http.Response) problem {
	t.Helper()
	if got, want := resp.Header.Get("Content-Type"), "application/problem+json"; got != want {
		t.Errorf("Content-Type = %q, want %q", got, want)
	}
	var p problem
	dec := json.NewDecoder(resp.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("decoding the problem body: %v", err)
	}
	return p
}

// wantHeaders checks resp's headers: "" wants none of that name.
func wantHeaders(t *testing.T, step string, resp *http.Response, want map[string]string) {
	t.Helper()
	for name, v := range want {
		if got := resp.Header.Values(name); v == "" && len(got) != 0 || v != "" && (len(got) != 1 || got[0] != v) {
			t.Errorf("%s: header %s = %q, want %q", step, name, got, v)
		}
	}
}

// A target is a gRPC service (the health service) protected by
// interceptors under test.
type target struct {
	health healthpb.HealthClient
	calls  atomic.Int64
}

// newTarget serves the health service with the interceptors of opts,
// called through a connection with dialOpts. It counts the calls (and
// streams) that pass opts' interceptors.
func newTarget(t testing.TB, opts []grpc.ServerOption, dialOpts ...grpc.DialOption) *target {
	t.Helper()
	tg := &target{}
	countUnary := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		tg.calls.Add(1)
		return h(ctx, req)
	}
	countStream := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		tg.calls.Add(1)
		return h(srv, ss)
	}
	g := grpc.NewServer(append(opts[:len(opts):len(opts)],
		grpc.ChainUnaryInterceptor(countUnary), grpc.ChainStreamInterceptor(countStream))...)
	healthpb.RegisterHealthServer(g, health.NewServer())
	conn, _ := serveGRPC(t, g, dialOpts...)
	tg.health = healthpb.NewHealthClient(conn)
	return tg
}

// check calls Health.Check with the outgoing metadata kv, and returns the
// response header metadata and the error.
func (tg *target) check(t *testing.T, kv ...string) (metadata.MD, error) {
	t.Helper()
	var hdr metadata.MD
	ctx := metadata.AppendToOutgoingContext(t.Context(), kv...)
	_, err := tg.health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
	return hdr, err
}

// wantRefused checks that err is ResourceExhausted with a RetryInfo of
// retry and a QuotaFailure of the violations of subjects.
func wantRefused(t *testing.T, call string, err error, retry time.Duration, subjects ...string) {
	t.Helper()
	wantCode(t, call, err, codes.ResourceExhausted)
	var ri *errdetails.RetryInfo
	var qf *errdetails.QuotaFailure
	for _, d := range status.Convert(err).Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			ri = d
		case *errdetails.QuotaFailure:
			qf = d
		}
	}
	if diff := cmp.Diff(&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)}, ri, protocmp.Transform()); diff != "" {
		t.Errorf("%s: RetryInfo mismatch (-want +got):\n%s", call, diff)
	}
	var got []string
	for _, v := range qf.GetViolations() {
		got = append(got, v.GetSubject())
	}
	if diff := cmp.Diff(subjects, got); diff != "" {
		t.Errorf("%s: QuotaFailure subjects mismatch (-want +got):\n%s", call, diff)
	}
}
