package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/server"
)

// mainVersion is set at build time: -ldflags "-X main.mainVersion=v1.2.3".
var mainVersion string

func version() string {
	if mainVersion != "" {
		return mainVersion
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// flags are the daemon's settings, read once from the command line and
// the environment.
type flags struct {
	config          string
	grpcAddr        string
	httpAddr        string
	backend         string
	headers         server.HeaderMode
	shadowMode      bool
	memoryMaxKeys   int
	shutdownTimeout time.Duration
	logLevel        slog.Level
	logFormat       string
	version         bool
}

// envPrefix prefixes the environment variable of every flag.
const envPrefix = "RATELIMITD_"

// envName returns the environment variable of the flag name.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// parseFlags reads args, then the environment for every flag args did
// not set. It returns an exitError(2) after printing usage on bad input.
func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (*flags, error) {
	f := &flags{}
	fs := flag.NewFlagSet("ratelimitd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.config, "config", "", "rules: a YAML `file`, or a directory of *.yaml and *.yml files; watched for changes")
	fs.StringVar(&f.grpcAddr, "grpc-addr", "127.0.0.1:8081", "gRPC listen `address` (Envoy RLS v3, ratelimit.v1, health, reflection)")
	fs.StringVar(&f.httpAddr, "http-addr", "127.0.0.1:8080", "HTTP listen `address` (/healthz, /readyz, POST /json)")
	fs.StringVar(&f.backend, "backend", "memory", "counter store: memory")
	fs.TextVar(&f.headers, "response-headers", server.HeadersIETF, "response headers: ietf (RateLimit-Policy, RateLimit), legacy (RateLimit-Limit/-Remaining/-Reset) or off")
	fs.BoolVar(&f.shadowMode, "shadow-mode", false, "refuse nothing: report decisions, count only what fits")
	fs.IntVar(&f.memoryMaxKeys, "memory-max-keys", 1_000_000, "most counters the memory store keeps; more evict the soonest to expire")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long to drain in-flight requests on SIGTERM")
	fs.TextVar(&f.logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fs.BoolVar(&f.version, "version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage:\n  ratelimitd --config PATH [flags]\n  ratelimitd check-config PATH\n\n")
		fmt.Fprintf(stderr, "Every flag may also be set as %s<FLAG> (upper case, '-' as '_').\n\nFlags:\n", envPrefix)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, exitError{0}
		}
		return nil, exitError{2}
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ratelimitd: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return nil, exitError{2}
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	var bad error
	fs.VisitAll(func(fl *flag.Flag) {
		if set[fl.Name] || bad != nil {
			return
		}
		if v := getenv(envName(fl.Name)); v != "" {
			if err := fl.Value.Set(v); err != nil {
				bad = fmt.Errorf("%s=%q: %v", envName(fl.Name), v, err)
			}
		}
	})
	if bad != nil {
		fmt.Fprintln(stderr, "ratelimitd:", bad)
		return nil, exitError{2}
	}
	if f.version {
		return f, nil
	}
	switch {
	case f.config == "":
		fmt.Fprintf(stderr, "ratelimitd: no rules: give --config PATH (or %s)\n", envName("config"))
		return nil, exitError{2}
	case f.logFormat != "text" && f.logFormat != "json":
		fmt.Fprintf(stderr, "ratelimitd: --log-format %q: want text or json\n", f.logFormat)
		return nil, exitError{2}
	case f.memoryMaxKeys <= 0:
		fmt.Fprintf(stderr, "ratelimitd: --memory-max-keys %d: want at least 1\n", f.memoryMaxKeys)
		return nil, exitError{2}
	}
	return f, nil
}
