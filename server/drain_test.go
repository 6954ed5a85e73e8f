package server_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/server"
)

// drainLog is a log sink safe for concurrent use.
type drainLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *drainLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *drainLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// serveOn serves hs on a loopback port and returns its address.
func serveOn(t *testing.T, hs *http.Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = hs.Serve(lis) }()
	t.Cleanup(func() { hs.Close(); <-done })
	return lis.Addr().String()
}

// TestDrain: Drain reports not ready and keeps serving, new connections
// too, until Delay is over (a stepped clock); then ends the health
// watches, closes the Close servers at once, drains gRPC and HTTP, and
// cuts the streams and requests still in flight at Timeout.
// Afterwards, the gRPC listener refuses connections.
func TestDrain(t *testing.T) {
	domains, err := config.Parse("drain.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 100}\n"))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := config.Compile(domains)
	if err != nil {
		t.Fatal(err)
	}
	store := memory.New(memory.Options{})
	t.Cleanup(func() { store.Close() })
	srv := server.New(store, rules, server.Options{})

	g := grpc.NewServer(srv.GRPCOptions()...)
	srv.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- g.Serve(lis) }()
	t.Cleanup(g.Stop) // Serve then returns into served, which has room
	dial := func() *grpc.ClientConn {
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	decide := func(conn *grpc.ClientConn) error {
		_, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{
			Domain:      "d",
			Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}},
		})
		return err
	}

	// The HTTP server holds GET /held until the test ends.
	entered, release := make(chan struct{}, 1), make(chan struct{})
	t.Cleanup(func() { close(release) })
	mux := http.NewServeMux()
	mux.Handle("/", srv.Handler())
	mux.HandleFunc("GET /held", func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	public := &http.Server{Handler: mux}
	publicAddr := serveOn(t, public)
	debug := &http.Server{Handler: http.NotFoundHandler()}
	debugAddr := serveOn(t, debug)

	conn := dial()
	watch, err := healthpb.NewHealthClient(conn).Watch(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := watch.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health Watch = %v, %v; want SERVING", resp, err)
	}
	// A reflection stream stays open as long as its client wants: the
	// gRPC server's drain waits for it until the Timeout.
	refl, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := refl.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	if _, err := refl.Recv(); err != nil {
		t.Fatal(err)
	}
	held := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + publicAddr + "/held")
		if err == nil {
			resp.Body.Close()
		}
		held <- err
	}()
	<-entered

	var logs drainLog
	delays, delayOver := make(chan time.Duration, 1), make(chan time.Time)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		srv.Drain(context.Background(), server.DrainOptions{
			Delay: time.Hour, Timeout: 100 * time.Millisecond,
			GRPC: g, HTTP: []*http.Server{public, nil}, Close: []*http.Server{debug, nil},
			Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			After:  func(d time.Duration) <-chan time.Time { delays <- d; return delayOver },
		})
	}()
	if d := <-delays; d != time.Hour {
		t.Fatalf("Drain waits %v, want the Delay, 1h", d)
	}
	// Within the delay: not ready, still serving, on new connections too.
	if resp, err := watch.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health Watch within the delay = %v, %v; want NOT_SERVING", resp, err)
	}
	if err := decide(dial()); err != nil {
		t.Errorf("a call on a new connection within the delay: %v", err)
	}
	if resp, err := http.Get("http://" + debugAddr + "/"); err != nil {
		t.Errorf("the debug server within the delay: %v", err)
	} else {
		resp.Body.Close()
	}

	close(delayOver)
	select {
	case <-drained:
	case <-time.After(time.Minute): // a bound against hanging
		t.Fatal("Drain did not return a minute after its 100ms timeout")
	}
	if _, err := watch.Recv(); status.Code(err) != codes.Unavailable || status.Convert(err).Message() != "shutting down" {
		t.Errorf("health Watch after the drain ended with %v, want the server's Unavailable \"shutting down\", not a cut", err)
	}
	if _, err := refl.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("the reflection stream held past the Timeout ended with %v, want Unavailable (cut off)", err)
	}
	if err := <-held; err == nil {
		t.Error("the request held past the Timeout was answered, want its connection closed")
	}
	if !strings.Contains(logs.String(), "drain timed out") {
		t.Errorf("no warning that the drain timed out; logs:\n%s", logs.String())
	}
	if c, err := net.Dial("tcp", lis.Addr().String()); err == nil {
		c.Close()
		t.Error("the gRPC listener accepts connections after the drain")
	}
	if _, err := http.Get("http://" + debugAddr + "/"); err == nil {
		t.Error("the debug server answers after the drain")
	}
	if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		t.Errorf("Serve: %v", err)
	}
}
