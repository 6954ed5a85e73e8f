package server_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/internal/grpctest"
	"github.com/ratelimitd/ratelimitd/server"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestPanicIsInternal: a handler that panics (a bug) answers Internal and
// is logged; the server keeps serving.
func TestPanicIsInternal(t *testing.T) {
	var logs lockedBuffer
	store := memory.New(memory.Options{})
	t.Cleanup(func() { store.Close() })
	srv := server.New(store, loadRules(t, "gateway.yaml"), server.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	g := grpc.NewServer(srv.GRPCOptions()...)
	srv.Register(g)
	g.RegisterService(&grpc.ServiceDesc{
		ServiceName: "test.Panic",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Boom",
			Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				in := new(emptypb.Empty)
				if err := dec(in); err != nil {
					return nil, err
				}
				boom := func(context.Context, any) (any, error) { panic("boom") }
				return ic(ctx, in, &grpc.UnaryServerInfo{FullMethod: "/test.Panic/Boom"}, boom)
			},
		}},
	}, struct{}{})
	conn, _ := grpctest.Serve(t, g)

	err := conn.Invoke(t.Context(), "/test.Panic/Boom", &emptypb.Empty{}, &emptypb.Empty{})
	if status.Code(err) != codes.Internal {
		t.Errorf("a panicking handler answered %v, want Internal", err)
	}
	if !strings.Contains(logs.String(), "panicked") || !strings.Contains(logs.String(), "boom") {
		t.Errorf("the panic was not logged; logs:\n%s", logs.String())
	}
	if _, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("the server stopped serving after a panic: %v", err)
	}
}
