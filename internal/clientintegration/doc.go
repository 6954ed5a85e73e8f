// Package clientintegration holds no code: its tests check the Go client
// (github.com/ratelimitd/ratelimitd/client, a module of its own) against
// ratelimitd's real server, the server package on the memory store, over
// gRPC. They keep to what needs the real server: that the decisions,
// headers, statuses, limit overrides and validation bounds the client
// reports agree with what ratelimitd does, end to end through the
// interceptors and the HTTP middleware; and that the quota mode
// (client.Quota) enforces the assignments ratelimitd serves over RLQS, on
// a real listener, through a restart. The client's behaviour on its own
// (failure policy, refusal memory, contexts, encodings) and its examples
// are tested in the client module, against a scripted server, so that
// they run with that module alone.
package clientintegration
