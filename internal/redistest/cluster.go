package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// clusterTimeout bounds redis-cli --cluster create and the wait for
	// every node to report cluster_state:ok.
	clusterTimeout = 30 * time.Second
	// clusterSlots is the number of hash slots in a Redis Cluster.
	clusterSlots = 16384
)

// A Cluster is a Redis Cluster of masters without replicas, started by
// StartCluster. Its nodes are killed when the test that started it ends.
type Cluster struct {
	// Addrs are the nodes' addresses, in the order of Nodes.
	Addrs []string
	// Nodes are the cluster's masters. Each can be killed and restarted;
	// a restarted node rejoins the cluster with its former slots.
	Nodes []*Server
}

// StartCluster starts masters cluster-enabled redis-server processes (at
// least 3, as redis-cli requires), joins them with redis-cli --cluster
// create with no replicas, and waits until every node reports
// cluster_state:ok with all 16384 slots assigned and all nodes known.
// The nodes use --cluster-node-timeout 1000 (milliseconds).
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	Require(t)
	if masters < 3 {
		t.Fatalf("redistest: StartCluster(%d): redis-cli --cluster create needs at least 3 masters", masters)
	}
	c := &Cluster{}
	for range masters {
		n := startServer(t, spec{
			bin:     "redis-server",
			busPort: true,
			args: func(dir string, port int) ([]string, error) {
				conf := filepath.Join(dir, "nodes.conf")
				// A node that failed to bind may have written one already.
				if err := os.Remove(conf); err != nil && !os.IsNotExist(err) {
					return nil, err
				}
				return append(serverArgs(dir, port),
					"--cluster-enabled", "yes",
					"--cluster-config-file", conf,
					"--cluster-node-timeout", "1000",
				), nil
			},
		})
		c.Nodes = append(c.Nodes, n)
		c.Addrs = append(c.Addrs, n.Addr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	cmd := exec.CommandContext(ctx, "redis-cli", args...)
	cmd.SysProcAttr = sysProcAttr()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	c.WaitOK(t)
	return c
}

// WaitOK waits until every node reports cluster_state:ok with all 16384
// slots assigned and ok and all nodes known, as after StartCluster. Use it
// after restarting a node: a restarted master rejoins with its slots (but
// no data) and reports cluster_state:ok only about two seconds after it
// started. WaitOK fails t after 30 seconds, so it fails while a node is down.
func (c *Cluster) WaitOK(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(clusterTimeout)
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_slots_assigned": strconv.Itoa(clusterSlots),
		"cluster_slots_ok":       strconv.Itoa(clusterSlots),
		"cluster_known_nodes":    strconv.Itoa(len(c.Nodes)),
	}
	for _, n := range c.Nodes {
		for {
			text, err := commandString(n.Addr, "CLUSTER", "INFO")
			info := parseInfo(text)
			if err == nil && matches(info, want) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: cluster node %s not ready: CLUSTER INFO = %v, %v; want %v\n%s",
					n.Addr, info, err, want, n.tail())
			}
			time.Sleep(pollInterval)
		}
	}
}

// matches reports whether info has every field of want.
func matches(info, want map[string]string) bool {
	for k, v := range want {
		if info[k] != v {
			return false
		}
	}
	return true
}

// NodeForKey returns the node that serves key's hash slot, according to
// CLUSTER KEYSLOT and CLUSTER SLOTS on the first node that answers.
func (c *Cluster) NodeForKey(t testing.TB, key string) *Server {
	t.Helper()
	var errs []string
	for _, n := range c.Nodes {
		addr, err := slotOwner(n.Addr, key)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		for _, m := range c.Nodes {
			if m.Addr == addr {
				return m
			}
		}
		t.Fatalf("redistest: key %q is served by %s, which is not one of %v", key, addr, c.Addrs)
	}
	t.Fatalf("redistest: no node answered for key %q: %s", key, strings.Join(errs, "; "))
	return nil
}

// slotOwner asks the node at addr which address serves key's slot.
func slotOwner(addr, key string) (string, error) {
	v, err := command(addr, "CLUSTER", "KEYSLOT", key)
	if err != nil {
		return "", fmt.Errorf("CLUSTER KEYSLOT on %s: %w", addr, err)
	}
	slot, ok := v.(int64)
	if !ok {
		return "", fmt.Errorf("CLUSTER KEYSLOT on %s: unexpected reply %v", addr, v)
	}
	v, err = command(addr, "CLUSTER", "SLOTS")
	if err != nil {
		return "", fmt.Errorf("CLUSTER SLOTS on %s: %w", addr, err)
	}
	ranges, _ := v.([]any)
	for _, r := range ranges {
		// [start, end, [ip, port, id, ...] (the master), replicas...]
		r, _ := r.([]any)
		if len(r) < 3 {
			continue
		}
		start, _ := r[0].(int64)
		end, _ := r[1].(int64)
		master, _ := r[2].([]any)
		if slot < start || slot > end || len(master) < 2 {
			continue
		}
		ip, _ := master[0].(string)
		port, _ := master[1].(int64)
		return net.JoinHostPort(ip, strconv.FormatInt(port, 10)), nil
	}
	return "", fmt.Errorf("CLUSTER SLOTS on %s: slot %d of %q is not assigned", addr, slot, key)
}

// Client returns a go-redis cluster client seeded with every node's
// address, closed when t ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// URL returns the cluster's address as a URL of the form
// "redis-cluster://h1:p1?addr=h2:p2&addr=h3:p3".
func (c *Cluster) URL() string {
	var b strings.Builder
	b.WriteString("redis-cluster://")
	for i, a := range c.Addrs {
		switch i {
		case 0:
		case 1:
			b.WriteString("?addr=")
		default:
			b.WriteString("&addr=")
		}
		b.WriteString(a)
	}
	return b.String()
}
