// Package clientintegration holds no code: its tests check the Go client
// (github.com/ratelimitd/ratelimitd/client, a module of its own) against
// ratelimitd's real server, the server package on the memory store, over
// gRPC. The client module's own tests use a scripted server instead, so
// that they run with the client module alone.
package clientintegration
