// Package server is ratelimitd's decision engine and its faces: Envoy's
// envoy.service.ratelimit.v3.RateLimitService and the native
// ratelimit.v1.RateLimitService on one gRPC server, with gRPC health and
// reflection, and the HTTP endpoints /json, /explain, /healthz and /readyz.
//
// The faces (Envoy's over gRPC and /json, the native API) only decode
// their messages into the engine's transport-free request and map its
// errors to their own codes. Keys and values are bytes: Envoy's request is
// read from the wire by the server's own codec (see GRPCOptions), since
// Envoy copies headers, which may hold any byte, into values that
// protobuf strings could not hold.
//
// Every face runs one engine. For each request descriptor it finds the
// rule that applies (config.Match), builds one counter key per limit
// (domain, every entry, algorithm and window, length-prefixed), drops the
// limits another matched limit replaces, and asks the backend.Store to
// decide them all at once: a refused request consumes nothing. Bans need
// no counter and are decided without the store. It then
// reports one status per descriptor (the limit that refused, else the one
// with the least remaining) and the headers the caller should send.
//
// Usage:
//
//	rules, err := config.Load("rules.yaml")
//	store := memory.New(memory.Options{})
//	srv := server.New(store, rules, server.Options{})
//	g := grpc.NewServer(srv.GRPCOptions()...)
//	srv.Register(g)
//	go g.Serve(lis)
//	http.ListenAndServe(":8080", srv.Handler())
//
// The server converts errors to gRPC status: InvalidArgument for a
// malformed request, Unavailable when the store cannot decide or is
// closed, the context's own code when the caller gave up, and Internal,
// logged, for a bug.
package server
