package redistest

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// sentinelTimeout bounds the wait for the group to be ready and for
	// a failover to complete.
	sentinelTimeout = 10 * time.Second
	// masterName is the name under which the sentinel monitors the master.
	masterName = "mymaster"
)

// A Sentinel is a monitored replication group started by StartSentinel:
// one master, one replica and one redis-sentinel. All three are killed
// when the test that started them ends.
//
// Master and Replica follow Failover, but not a failover that the sentinel
// starts on its own (after a test kills the master for longer than a
// second); MasterAddr always tells what the sentinel reports.
type Sentinel struct {
	// Master is the master; Failover swaps it with Replica.
	Master *Server
	// Replica is the server that replicates Master.
	Replica *Server
	// Addr is the sentinel's address, "127.0.0.1:port".
	Addr string
	// MasterName is the name under which the sentinel monitors the master.
	MasterName string

	sentinel *Server
}

// StartSentinel starts a master, a replica of it and a redis-sentinel
// monitoring the master (quorum 1, down-after-milliseconds 1000,
// failover-timeout 3000), and waits until the replica is in sync and
// receiving the replication stream, and the sentinel knows both servers and
// considers the replica fit to promote.
//
// The servers sync through a file in their directory (repl-diskless-sync
// no): Redis 7.0 holds the stream to a replica synced over a socket until
// the replica's next REPLCONF ACK, up to a second later, and writes made
// meanwhile would be lost by a failover.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	Require(t)
	deadline := time.Now().Add(sentinelTimeout)
	repl := []string{"--repl-diskless-sync", "no"}
	master := Start(t, repl...)
	mhost, mport, _ := net.SplitHostPort(master.Addr)
	replica := Start(t, append(repl, "--replicaof", mhost, mport)...)
	waitSynced(t, master, replica, deadline)

	s := &Sentinel{Master: master, Replica: replica, MasterName: masterName}
	s.sentinel = startServer(t, spec{
		bin: "redis-sentinel",
		args: func(dir string, port int) ([]string, error) {
			// The sentinel rewrites this file as it learns, so it lives in dir.
			conf := filepath.Join(dir, "sentinel.conf")
			text := fmt.Sprintf(`port %d
bind 127.0.0.1
protected-mode no
daemonize no
logfile ""
dir %q
sentinel monitor %s %s %s 1
sentinel down-after-milliseconds %[3]s 1000
sentinel failover-timeout %[3]s 3000
sentinel parallel-syncs %[3]s 1
`, port, dir, masterName, mhost, mport)
			return []string{conf}, os.WriteFile(conf, []byte(text), 0o644)
		},
	})
	s.Addr = s.sentinel.Addr

	for {
		err := s.knows(master.Addr, replica.Addr)
		if err == nil {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: sentinel %s not ready: %v\n%s", s.Addr, err, s.sentinel.tail())
		}
		time.Sleep(pollInterval)
	}
}

// knows returns nil when the sentinel reports master as the master and
// replica as a healthy replica with its link to the master up.
func (s *Sentinel) knows(master, replica string) error {
	got, err := s.masterAddr()
	if err != nil {
		return err
	}
	if got != master {
		return fmt.Errorf("sentinel reports master %s, want %s", got, master)
	}
	v, err := command(s.Addr, "SENTINEL", "REPLICAS", s.MasterName)
	if err != nil {
		return fmt.Errorf("SENTINEL REPLICAS: %w", err)
	}
	arr, _ := v.([]any)
	for _, r := range arr {
		f := pairs(r)
		if f["name"] != replica {
			continue
		}
		if f["flags"] != "slave" || f["master-link-status"] != "ok" {
			return fmt.Errorf("sentinel sees replica %s with flags %q, master-link-status %q",
				replica, f["flags"], f["master-link-status"])
		}
		return nil
	}
	return fmt.Errorf("sentinel does not know replica %s yet", replica)
}

// waitSynced waits until replica's link to master is up and replica has
// acknowledged every write master has accepted (WAIT 1).
func waitSynced(t testing.TB, master, replica *Server, deadline time.Time) {
	t.Helper()
	for {
		err := synced(master, replica)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: replica %s not in sync with %s: %v\n%s", replica.Addr, master.Addr, err, replica.tail())
		}
		time.Sleep(pollInterval)
	}
}

func synced(master, replica *Server) error {
	info, err := replica.info("replication")
	if err != nil {
		return err
	}
	if info["role"] != "slave" || info["master_link_status"] != "up" {
		return fmt.Errorf("role %q, master_link_status %q", info["role"], info["master_link_status"])
	}
	if info["master_port"] != portOf(master.Addr) {
		return fmt.Errorf("replica of port %s", info["master_port"])
	}
	v, err := command(master.Addr, "WAIT", "1", "100")
	if err != nil {
		return err
	}
	if n, _ := v.(int64); n < 1 {
		return errors.New("WAIT 1: the replica has not acknowledged the master's writes")
	}
	return nil
}

func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// Failover promotes the replica with SENTINEL FAILOVER and waits until the
// sentinel reports it as the master and it reports role:master. First, if
// the master is up, it waits up to a second for the replica to acknowledge
// every write the master has accepted, so a test's writes survive the
// failover. Afterwards it makes the former master a replica of the new one
// right away (the sentinel would only after several seconds) and waits
// until it is in sync, so the group is ready for another Failover; a
// former master that is down is left alone. Master and Replica are then
// swapped, and so are their command lines for Restart. Failover fails t
// after about 10 seconds.
func (s *Sentinel) Failover(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(sentinelTimeout)
	old, next := s.Master, s.Replica
	_, _ = command(old.Addr, "WAIT", "1", "1000") // best effort: the master may be down
	for {
		_, err := command(s.Addr, "SENTINEL", "FAILOVER", s.MasterName)
		if err == nil {
			break
		}
		// NOGOODSLAVE: the sentinel has not yet judged the replica fit.
		var re replyError
		if !errors.As(err, &re) || !strings.HasPrefix(string(re), "NOGOODSLAVE") || time.Now().After(deadline) {
			t.Fatalf("redistest: SENTINEL FAILOVER %s: %v\n%s", s.MasterName, err, s.sentinel.tail())
		}
		time.Sleep(pollInterval)
	}
	for {
		err := s.promoted(next)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: failover to %s: %v\n%s", next.Addr, err, s.sentinel.tail())
		}
		time.Sleep(pollInterval)
	}
	next.setReplicaOf("")
	old.setReplicaOf(next.Addr)
	host, port, _ := net.SplitHostPort(next.Addr)
	if _, err := command(old.Addr, "REPLICAOF", host, port); err == nil {
		waitSynced(t, next, old, deadline)
	}
	s.Master, s.Replica = next, old
}

// promoted returns nil once the sentinel has finished failing over to next
// and next reports role:master. GET-MASTER-ADDR-BY-NAME names next while
// the failover is still reconfiguring replicas; SENTINEL MASTER switches
// its address only at the end, and another SENTINEL FAILOVER then starts.
func (s *Sentinel) promoted(next *Server) error {
	v, err := command(s.Addr, "SENTINEL", "MASTER", s.MasterName)
	if err != nil {
		return fmt.Errorf("SENTINEL MASTER %s: %w", s.MasterName, err)
	}
	m := pairs(v)
	if addr := net.JoinHostPort(m["ip"], m["port"]); addr != next.Addr || strings.Contains(m["flags"], "failover") {
		return fmt.Errorf("sentinel reports master %s with flags %q, failover-state %q", addr, m["flags"], m["failover-state"])
	}
	info, err := next.info("replication")
	if err != nil {
		return err
	}
	if info["role"] != "master" {
		return fmt.Errorf("%s reports role %q", next.Addr, info["role"])
	}
	return nil
}

// MasterAddr returns the master's address as the sentinel reports it
// (SENTINEL GET-MASTER-ADDR-BY-NAME).
func (s *Sentinel) MasterAddr(t testing.TB) string {
	t.Helper()
	addr, err := s.masterAddr()
	if err != nil {
		t.Fatalf("redistest: %v\n%s", err, s.sentinel.tail())
	}
	return addr
}

func (s *Sentinel) masterAddr() (string, error) {
	v, err := command(s.Addr, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName)
	if err != nil {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME %s: %w", s.MasterName, err)
	}
	hp, _ := v.([]any)
	if len(hp) != 2 {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME %s: unexpected reply %v", s.MasterName, v)
	}
	host, _ := hp[0].(string)
	port, _ := hp[1].(string)
	return net.JoinHostPort(host, port), nil
}

// Client returns a go-redis failover client that finds the master through
// the sentinel, closed when t ends.
func (s *Sentinel) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    s.MasterName,
		SentinelAddrs: []string{s.Addr},
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// URL returns the sentinel's address as a URL of the form
// "redis-sentinel://127.0.0.1:port?master_name=NAME".
func (s *Sentinel) URL() string {
	return "redis-sentinel://" + s.Addr + "?master_name=" + url.QueryEscape(s.MasterName)
}
