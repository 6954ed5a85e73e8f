package redis_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/backend/redis"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// TestVersionCheck: a client of NewClient checks the Redis version of a
// node on first contact: the real server (7.0) passes, once.
func TestVersionCheck(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, newClient(t, "redis://"+srv.Addr), redis.Options{LocalCache: -1})
	reqs := descriptors(1, hourly(10))
	for range 3 {
		mustTake(t, s, reqs...)
	}
	stats := srv.Info(t, "commandstats")["cmdstat_info"]
	if !strings.HasPrefix(stats, "calls=1,") {
		t.Errorf("INFO calls on Redis after 3 decisions = %q, want calls=1 (the version check, once per node)", stats)
	}
}

// TestVersionTooOld: a node that reports Redis 4.0.14 fails every call
// with an error that names it and its version.
func TestVersionTooOld(t *testing.T) {
	addr := fakeRedis(t, "4.0.14")
	client, err := redis.NewClient("redis://"+addr, redis.ClientOptions{DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	s := newStore(t, client, redis.Options{LocalCache: -1, Timeout: 2 * time.Second})
	_, err = take(t, s, descriptors(1, hourly(10))...)
	want := fmt.Sprintf("redis: node %s runs Redis 4.0.14; ratelimitd needs 5.0 or later", addr)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Take on Redis 4.0.14: %v, want an error containing %q", err, want)
	}
}

// fakeRedis serves a RESP2 server on loopback that reports version and
// refuses HELLO, as Redis before 6 does, until t ends; it answers every
// other command with OK.
func fakeRedis(t *testing.T, version string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				<-t.Context().Done()
				conn.Close()
			})
			wg.Go(func() {
				defer conn.Close()
				r := bufio.NewReader(conn)
				for {
					args, err := readCommand(r)
					if err != nil {
						return
					}
					var reply string
					switch strings.ToUpper(args[0]) {
					case "HELLO":
						reply = "-ERR unknown command 'HELLO'\r\n"
					case "INFO":
						info := "# Server\r\nredis_version:" + version + "\r\nredis_mode:standalone\r\n"
						reply = "$" + strconv.Itoa(len(info)) + "\r\n" + info + "\r\n"
					case "PING":
						reply = "+PONG\r\n"
					default:
						reply = "+OK\r\n"
					}
					if _, err := conn.Write([]byte(reply)); err != nil {
						return
					}
				}
			})
		}
	})
	return l.Addr().String()
}

// readCommand reads one RESP array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
	if err != nil || n < 1 {
		return nil, fmt.Errorf("bad command header %q", line)
	}
	args := make([]string, n)
	for i := range args {
		if _, err := r.ReadString('\n'); err != nil { // $len
			return nil, err
		}
		arg, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		args[i] = strings.TrimSuffix(arg, "\r\n")
	}
	return args, nil
}

// TestNoSecretInErrors: no error or log line of the package carries a
// password: malformed URLs, and calls on a Redis that refuses the
// password.
func TestNoSecretInErrors(t *testing.T) {
	const secret = "s3cr3t-pw"
	for _, url := range []string{
		"redsi://:" + secret + "@h:6379",
		"redis-clustr://u:" + secret + "@h:6379",
		"redis://u:" + secret + "@h:notaport/0",
		"redis://u:" + secret + "@h:6379/notadb",
		"redis://u:" + secret + "@h:6379?dial_timeout=soon",
		"redis://u:" + secret + "@h:6379?password=" + secret + "&unknown_option=1",
		"redis-sentinel://u:" + secret + "@h:26379?sentinel_password=" + secret,
		"redis-sentinel://h:26379?master_name=m&sentinel_password=" + secret + "&dial_timeout=soon",
		"redis-cluster://u:" + secret + "@h:1?addr=h:notaport",
		"redis:/:" + secret + "@h:6379",
		"redis//:" + secret + "@h:6379",
		":" + secret + "@h:6379",
		"rediss://u:" + secret + "@h:6379 ",
		"redis://u:" + secret + "\x7f@h:6379",
	} {
		_, err := redis.NewClient(url, redis.ClientOptions{})
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("NewClient(%q) error carries the password: %v", url, err)
		}
		if got := redis.Redact(url); strings.Contains(got, secret) {
			t.Errorf("Redact(%q) = %q, carries the password", url, got)
		}
	}
	// The URL parser's reasons quote what they could not read, which may
	// be a piece of the password.
	for url, piece := range map[string]string{
		"redis://:hun/ter2@h:1": ":hun",
		"redis://:p%zzw@h:1":    "%zz",
	} {
		if _, err := redis.NewClient(url, redis.ClientOptions{}); err == nil || strings.Contains(err.Error(), piece) {
			t.Errorf("NewClient(%q) = %v, want an error without %q", url, err, piece)
		}
	}

	srv := redistest.Start(t, "--user", "alice", "on", ">the-real-one", "~*", "+@all")
	var logs bytes.Buffer
	var mu sync.Mutex
	redis.SetLogger(slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil)))
	t.Cleanup(func() { redis.SetLogger(slog.Default()) })
	client := newClient(t, "redis://alice:"+secret+"@"+srv.Addr)
	s := newStore(t, client, redis.Options{LocalCache: -1, Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))})
	for range 5 {
		_, err := take(t, s, descriptors(1, hourly(10))...)
		if err == nil {
			t.Fatal("Take with a wrong password: no error")
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("Take error carries the password: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	_ = client.Ping(ctx).Err()
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logs.String(), secret) {
		t.Errorf("a log line carries the password:\n%s", logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (w lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(b)
}
