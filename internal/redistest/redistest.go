package redistest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// readyTimeout bounds how long a process may take to answer PING.
	readyTimeout = 10 * time.Second
	// startAttempts is how many free ports Start tries when binding fails.
	startAttempts = 5
	// restartTimeout bounds how long Restart waits for its port to be free.
	restartTimeout = 5 * time.Second
	// pollInterval is how often the harness polls a process's state.
	pollInterval = 10 * time.Millisecond
	// tailLines is how many log lines failure messages quote.
	tailLines = 30
)

// binaries are the programs the package runs, all looked up on PATH.
var binaries = []string{"redis-server", "redis-sentinel", "redis-cli"}

// errAddrInUse reports that a process could not bind its port.
var errAddrInUse = errors.New("address already in use")

// Require skips t when redis-server, redis-sentinel or redis-cli is not on
// PATH, or fails it when the CI environment variable is "true", so that CI
// never passes by skipping. Start, StartCluster and StartSentinel call it.
func Require(t testing.TB) {
	t.Helper()
	var missing []string
	for _, b := range binaries {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) == 0 {
		return
	}
	msg := fmt.Sprintf("redistest: %s not found on PATH; run .ci/install-redis "+
		"(or install the Debian packages redis-server redis-sentinel redis-tools)",
		strings.Join(missing, ", "))
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// A Server is one redis-server (or redis-sentinel) process started by this
// package. It is killed when the test that started it ends.
//
// Kill and Log are safe to call from any goroutine; Restart must not run
// concurrently with another Restart of the same Server.
type Server struct {
	// Addr is the server's address, "127.0.0.1:port". Restart keeps it.
	Addr string

	bin     string // absolute path of the binary
	dir     string // the working directory, a t.TempDir()
	logPath string // the process's stdout and stderr, across restarts

	mu   sync.Mutex
	args []string // requires mu; the command line of the last launch
	proc *process // requires mu; the last launch, nil before the first
}

// A process is one run of a Server's binary.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd.Wait has returned
	err  error         // cmd.Wait's result, written before done is closed

	killOnce sync.Once
}

// kill kills the process's group and waits until the process has exited.
func (p *process) kill() {
	p.killOnce.Do(func() {
		// The group may outlive an exited leader (a forked RDB child), so
		// it is killed even then; Linux does not reuse a live group's ID.
		_ = killGroup(p.cmd.Process)
	})
	<-p.done
}

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// serverArgs is the command line of a standalone, non-persistent server.
func serverArgs(dir string, port int) []string {
	return []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--protected-mode", "no",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
		"--logfile", "",
	}
}

// Start starts a standalone redis-server on a free loopback port, waits
// until it answers PING and registers a t.Cleanup that kills it. The server
// persists nothing (--save "" --appendonly no) and works in t.TempDir().
// extra are further command-line arguments, such as "--maxmemory", "10mb".
// Start skips or fails t as Require does when redis is not installed.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	return startServer(t, spec{
		bin: "redis-server",
		args: func(dir string, port int) ([]string, error) {
			return append(serverArgs(dir, port), extra...), nil
		},
	})
}

// A spec says how to start a process.
type spec struct {
	bin string // the binary, looked up on PATH
	// busPort asks for a port whose port+10000 (the cluster bus) is free too.
	busPort bool
	// args returns the command line for a process listening on port, with
	// dir as its working directory. It may write files into dir.
	args func(dir string, port int) ([]string, error)
}

// startServer starts sp on a free port, trying other ports while the
// process fails to bind, and registers its cleanup.
func startServer(t testing.TB, sp spec) *Server {
	t.Helper()
	Require(t)
	bin, err := exec.LookPath(sp.bin)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	dir := t.TempDir()
	s := &Server{bin: bin, dir: dir, logPath: filepath.Join(dir, sp.bin+".log")}
	// Registered after t.TempDir, so it runs before the directory is removed.
	t.Cleanup(s.Kill)
	for attempt := 1; ; attempt++ {
		port, err := freePort(sp.busPort)
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		args, err := sp.args(dir, port)
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		err = s.launch(args)
		if err == nil {
			return s
		}
		if !errors.Is(err, errAddrInUse) || attempt == startAttempts {
			t.Fatalf("redistest: %v", err)
		}
	}
}

// launch runs s.bin with args and waits until it answers PING. On failure
// the process is dead and the error quotes the log's tail; it wraps
// errAddrInUse when the process could not bind a port.
func (s *Server) launch(args []string) error {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	start, err := logf.Seek(0, io.SeekEnd)
	if err != nil {
		logf.Close()
		return err
	}
	fmt.Fprintf(logf, "### redistest: %s %q\n", s.bin, args)

	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = logf, logf // files, so exec starts no copying goroutines
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	logf.Close() // the child has its own descriptor
	if err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() { // ends when the process exits; every path below kills it eventually
		p.err = cmd.Wait()
		close(p.done)
	}()
	s.mu.Lock()
	s.proc, s.args = p, args
	s.mu.Unlock()

	if err := waitPing(s.Addr, p); err != nil {
		p.kill()
		if bytes.Contains(s.logSince(start), []byte("already in use")) {
			err = fmt.Errorf("%w: %w", errAddrInUse, err)
		}
		return fmt.Errorf("%s on %s did not start: %w\n%s", filepath.Base(s.bin), s.Addr, err, s.tail())
	}
	return nil
}

// waitPing waits until addr answers PING, p exits or readyTimeout passes.
func waitPing(addr string, p *process) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		reply, err := commandString(addr, "PING")
		if err == nil && reply == "PONG" {
			return nil
		}
		if p.exited() {
			if p.err == nil {
				return errors.New("process exited")
			}
			return fmt.Errorf("process exited: %w", p.err)
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("no PONG after %v: %w", readyTimeout, err)
			}
			return fmt.Errorf("no PONG after %v (last reply %q)", readyTimeout, reply)
		}
		time.Sleep(pollInterval)
	}
}

// Kill kills the server with SIGKILL, along with any process it forked, and
// waits until it has exited. It is a no-op when the server is not running.
func (s *Server) Kill() {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p != nil {
		p.kill()
	}
}

// Restart starts the server again on the same Addr with the same command
// line and waits until it answers PING, killing it first if it is running.
// Without persistence a standalone server comes back empty; a cluster node
// rejoins its cluster from its nodes.conf. While the port is still busy,
// Restart retries for a few seconds before it fails t.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	s.mu.Lock()
	args := slices.Clone(s.args)
	s.mu.Unlock()
	deadline := time.Now().Add(restartTimeout)
	for {
		err := s.launch(args)
		if err == nil {
			return
		}
		if !errors.Is(err, errAddrInUse) || time.Now().After(deadline) {
			t.Fatalf("redistest: restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Client returns a go-redis client to the server, closed when t ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Info runs INFO section ("replication", "memory", "" for the default set)
// and returns its fields, such as "role" -> "master". It fails t when the
// server does not answer.
func (s *Server) Info(t testing.TB, section string) map[string]string {
	t.Helper()
	info, err := s.info(section)
	if err != nil {
		t.Fatalf("redistest: %v\n%s", err, s.tail())
	}
	return info
}

func (s *Server) info(section string) (map[string]string, error) {
	args := []string{"INFO"}
	if section != "" {
		args = append(args, section)
	}
	text, err := commandString(s.Addr, args...)
	if err != nil {
		return nil, fmt.Errorf("INFO %s on %s: %w", section, s.Addr, err)
	}
	return parseInfo(text), nil
}

// Log returns everything the process has written to stdout and stderr
// (Redis's log) since Start, across restarts; each launch begins with a
// "### redistest:" line giving its command line.
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.logPath)
	return string(b)
}

// logSince returns the log from byte offset off on.
func (s *Server) logSince(off int64) []byte {
	b, _ := os.ReadFile(s.logPath)
	if off > int64(len(b)) {
		return nil
	}
	return b[off:]
}

// tail returns the last lines of the log, for failure messages.
func (s *Server) tail() string {
	lines := strings.Split(strings.TrimRight(s.Log(), "\n"), "\n")
	if len(lines) > tailLines {
		lines = lines[len(lines)-tailLines:]
	}
	return fmt.Sprintf("--- last lines of %s ---\n%s", s.logPath, strings.Join(lines, "\n"))
}

// setReplicaOf rewrites the command line that Restart uses so that the
// server comes back as a replica of addr, or as a master when addr is "".
func (s *Server) setReplicaOf(addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := slices.Index(s.args, "--replicaof"); i >= 0 && i+2 < len(s.args) {
		s.args = slices.Delete(slices.Clone(s.args), i, i+3)
	}
	if addr != "" {
		host, port, _ := net.SplitHostPort(addr)
		s.args = append(slices.Clone(s.args), "--replicaof", host, port)
	}
}

// freePort returns a loopback port that was free a moment ago. With bus it
// also checks port+10000, the cluster bus port, and picks both below the
// usual ephemeral range (32768 and up) so that outgoing connections are
// unlikely to take them. The caller retries if a port is taken meanwhile.
func freePort(bus bool) (int, error) {
	if !bus {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port, nil
	}
	for range 100 {
		port := 10000 + rand.IntN(12000) // port in [10000, 22000), bus in [20000, 32000)
		if portFree(port) && portFree(port+10000) {
			return port, nil
		}
	}
	return 0, errors.New("find a free port pair (port, port+10000): none after 100 tries")
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// running reports whether the server's process is up (started and not
// exited).
func (s *Server) running() bool {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	return p != nil && !p.exited()
}
