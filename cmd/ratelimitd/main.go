// Command ratelimitd is the rate-limit decision daemon: Envoy's
// RateLimitService and ratelimitd's native API on one gRPC port, with
// HTTP health, readiness and /json on another.
//
// Usage:
//
//	ratelimitd --config rules.yaml [flags]
//	ratelimitd --xds-server host:port --xds-node-id ID [flags]
//	ratelimitd check-config PATH
//	ratelimitd replay --old RULES --new RULES [--json] LOG
//	ratelimitd overrides list|set|delete|reset --admin URL [--token-file FILE] [flags]
//	ratelimitd --version
//
// Every flag can also be set with the environment variable
// RATELIMITD_<FLAG> (upper case, '-' as '_'); a flag on the command line
// wins over the environment, which wins over the default. With --compat
// envoyproxy, envoyproxy/ratelimit's variables come between the
// environment and the defaults.
//
// The daemon is wired in three steps: build (build.go) turns the flags
// into a store, a rules source and servers without starting anything;
// serve (serve.go) runs them; drain (drain.go) hands them to
// server.Server.Drain, the shutdown sequence.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if e, ok := errors.AsType[exitError](err); ok {
			os.Exit(e.code)
		}
		fmt.Fprintln(os.Stderr, "ratelimitd:", err)
		os.Exit(1)
	}
}

// lookupEnv reads an environment variable, as os.LookupEnv: its value, and
// whether it is set (envoyproxy/ratelimit's variables tell an empty value
// from an unset one).
type lookupEnv func(name string) (string, bool)

// exitError ends the process with code, its message already written.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// run runs ratelimitd with the command-line args (without the program
// name) until ctx is done, reading the environment through lookup.
func run(ctx context.Context, args []string, lookup lookupEnv, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "check-config" {
		return checkConfig(args[1:], lookup, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "replay" {
		return replayCommand(ctx, args[1:], lookup, os.Stdin, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "overrides" {
		return overridesCommand(ctx, args[1:], lookup, stdout, stderr)
	}
	cfg, err := parseFlags(args, lookup, stderr)
	if err != nil {
		return err
	}
	if cfg.version {
		fmt.Fprintln(stdout, "ratelimitd", version())
		return nil
	}
	return serve(ctx, cfg, stderr)
}
