// Package server is ratelimitd's faces over one decision engine: Envoy's
// envoy.service.ratelimit.v3.RateLimitService and the native
// ratelimit.v1.RateLimitService on one gRPC server, with gRPC health and
// reflection (and with Options.RLQS Envoy's quota service, package rlqs),
// and the HTTP endpoints /json, /healthz and /readyz, beside the
// operators' pages of package admin.
//
// Where things live:
//
//	server.go      Server, Options, the gRPC wiring (GRPCOptions, Register), grpcError
//	envoy.go       Envoy's RLS face: decideEnvoy, the response, and the decoded request (/json's)
//	envoywire.go   Envoy's request read from the wire (the one hand-written protobuf walker)
//	native.go      the native ratelimit.v1 face, Explain RPC included
//	json.go        POST /json, Envoy's face in JSON, and the engine errors' HTTP statuses
//	http.go        the HTTP routes, split between callers and operators, and OperatorHosts
//	health.go      gRPC health; envoyproxy.go: envoyproxy/ratelimit's /healthcheck
//	metrics.go     the Prometheus metrics, engine.Metrics among them; statsd.go: the reference's
//	requestlog.go  the sample of decoded requests handed to package requestlog
//	internal/engine  the engine: match, counters, verdicts, headers, explain, hot keys
//	admin/         the operators' pages: /ui/, /hotkeys, /config, /explain, /rlconfig
//
// A request walks down once and back: the face decodes its message into
// the engine's transport-free request (engine.Request, in a pooled
// scratch) and records a sample of it in the request log; the engine
// matches each descriptor to the rule that applies (config.Match), builds
// one counter key per limit (domain, every entry, algorithm and window,
// length-prefixed), drops the limits another matched limit replaces, and
// asks the backend.Store to decide them all at once (a refused request
// consumes nothing; bans need no counter and are decided without the
// store); back from the store, it reports one verdict per descriptor (the
// limit that refused, else the one with the least remaining), counts them
// through engine.Metrics and works out the response headers' values; the
// face then encodes that answer in its own message and maps the engine's
// errors to its own codes.
//
// Keys and values are bytes: Envoy's request is read from the wire by the
// server's own codec (see GRPCOptions), since Envoy copies headers, which
// may hold any byte, into values that protobuf strings could not hold.
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
