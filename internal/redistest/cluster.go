package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// A Cluster is a Redis Cluster started by StartCluster or
// StartClusterWithReplicas. Its nodes are killed when the test that
// started it ends.
//
// Call its methods from the test's goroutine (they may call t.Fatal),
// one at a time; the nodes themselves may be in use by any goroutine
// meanwhile, which is what MoveSlot and Failover are for.
type Cluster struct {
	// Addrs are the masters' addresses, in the order of Nodes.
	Addrs []string
	// Nodes are the cluster's masters. Each can be killed and restarted;
	// a restarted node rejoins the cluster with its former slots. Failover
	// puts the promoted replica in its master's place.
	Nodes []*Server
	// Replicas are the replicas of StartClusterWithReplicas, those of
	// Nodes[0] first (see ReplicasOf).
	Replicas []*Server

	ids       map[*Server]string  // node IDs (CLUSTER MYID)
	replicaOf map[*Server]*Server // each replica's master
}

// clusterArgs is the command line of a cluster node. Replicas sync
// through a file (repl-diskless-sync no): over a socket, Redis 7.0 waits
// repl-diskless-sync-delay (5 s) before a full sync, and holds the stream
// until the replica's next REPLCONF ACK.
func clusterArgs(dir string, port int) ([]string, error) {
	conf := filepath.Join(dir, "nodes.conf")
	// A node that failed to bind may have written one already.
	if err := os.Remove(conf); err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	return append(serverArgs(dir, port),
		"--cluster-enabled", "yes",
		"--cluster-config-file", conf,
		"--cluster-node-timeout", strconv.Itoa(int(ClusterNodeTimeout/time.Millisecond)),
		"--repl-diskless-sync", "no",
	), nil
}

// ClusterNodeTimeout is the nodes' cluster-node-timeout: a master that
// does not answer for this long is suspected, and its replica takes over
// about one to two ClusterNodeTimeouts after it went down (see Failover).
const ClusterNodeTimeout = time.Second

// StartCluster starts masters cluster-enabled redis-server processes (at
// least 3, as redis-cli requires), joins them with redis-cli --cluster
// create with no replicas, and waits until every node reports
// cluster_state:ok with all 16384 slots assigned and all nodes known.
// The nodes use --cluster-node-timeout ClusterNodeTimeout.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	return StartClusterWithReplicas(t, masters, 0)
}

// StartClusterWithReplicas is StartCluster with replicas replicas of each
// master, attached with CLUSTER MEET and CLUSTER REPLICATE once the
// masters hold their slots; it also waits until every replica's link to
// its master is up and every node knows every other.
func StartClusterWithReplicas(t testing.TB, masters, replicas int) *Cluster {
	t.Helper()
	Require(t)
	if masters < 3 {
		t.Fatalf("redistest: StartCluster(%d): redis-cli --cluster create needs at least 3 masters", masters)
	}
	c := &Cluster{ids: map[*Server]string{}, replicaOf: map[*Server]*Server{}}
	sp := spec{bin: "redis-server", busPort: true, args: clusterArgs}
	for range masters {
		n := startServer(t, sp)
		c.Nodes = append(c.Nodes, n)
		c.Addrs = append(c.Addrs, n.Addr)
	}
	for _, m := range c.Nodes {
		for range replicas {
			r := startServer(t, sp)
			c.Replicas = append(c.Replicas, r)
			c.replicaOf[r] = m
		}
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
	if len(c.Replicas) > 0 {
		c.attachReplicas(t)
	}
	c.WaitOK(t)
	return c
}

// attachReplicas introduces every replica to the cluster and makes it
// replicate its master, once it has learnt the master's ID by gossip.
func (c *Cluster) attachReplicas(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(clusterTimeout)
	host, port, _ := net.SplitHostPort(c.Nodes[0].Addr)
	for _, r := range c.Replicas {
		if _, err := command(r.Addr, "CLUSTER", "MEET", host, port); err != nil {
			t.Fatalf("redistest: CLUSTER MEET %s on %s: %v\n%s", c.Nodes[0].Addr, r.Addr, err, r.tail())
		}
	}
	for _, r := range c.Replicas {
		id := c.ID(t, c.replicaOf[r])
		for {
			// "ERR Unknown node" until gossip has told r of its master.
			_, err := command(r.Addr, "CLUSTER", "REPLICATE", id)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: CLUSTER REPLICATE %s on %s: %v\n%s", id, r.Addr, err, r.tail())
			}
			time.Sleep(pollInterval)
		}
	}
}

// ID returns the cluster node ID of n, one of the cluster's nodes.
func (c *Cluster) ID(t testing.TB, n *Server) string {
	t.Helper()
	if id, ok := c.ids[n]; ok {
		return id
	}
	id, err := commandString(n.Addr, "CLUSTER", "MYID")
	if err != nil {
		t.Fatalf("redistest: CLUSTER MYID on %s: %v\n%s", n.Addr, err, n.tail())
	}
	c.ids[n] = id
	return id
}

// ReplicasOf returns the replicas of master, one of Nodes.
func (c *Cluster) ReplicasOf(master *Server) []*Server {
	var rs []*Server
	for _, r := range c.Replicas {
		if c.replicaOf[r] == master {
			rs = append(rs, r)
		}
	}
	return rs
}

// all returns every node: the masters, then the replicas.
func (c *Cluster) all() []*Server { return append(slices.Clone(c.Nodes), c.Replicas...) }

// WaitOK waits until every node reports cluster_state:ok with all 16384
// slots assigned and ok and all nodes known, and every replica's link to
// its master is up, as after StartCluster. Use it after restarting a
// node: a restarted master rejoins with its slots (but no data) and
// reports cluster_state:ok only about two seconds after it started.
// WaitOK fails t after 30 seconds, so it fails while a node is down.
func (c *Cluster) WaitOK(t testing.TB) {
	t.Helper()
	c.waitOK(t, c.all(), len(c.Nodes)+len(c.Replicas))
}

// waitOK waits until each of nodes reports cluster_state:ok with all
// slots ok and known nodes, and, for a replica, its link to its master up.
func (c *Cluster) waitOK(t testing.TB, nodes []*Server, known int) {
	t.Helper()
	deadline := time.Now().Add(clusterTimeout)
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_slots_assigned": strconv.Itoa(clusterSlots),
		"cluster_slots_ok":       strconv.Itoa(clusterSlots),
		"cluster_known_nodes":    strconv.Itoa(known),
	}
	for _, n := range nodes {
		for {
			err := c.nodeOK(n, want)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: cluster node %s not ready: %v\n%s", n.Addr, err, n.tail())
			}
			time.Sleep(pollInterval)
		}
	}
}

// nodeOK returns nil when n's CLUSTER INFO has every field of want and, if
// n is a replica, its link to its master is up.
func (c *Cluster) nodeOK(n *Server, want map[string]string) error {
	text, err := commandString(n.Addr, "CLUSTER", "INFO")
	if err != nil {
		return err
	}
	if info := parseInfo(text); !matches(info, want) {
		return fmt.Errorf("CLUSTER INFO = %v; want %v", info, want)
	}
	m, ok := c.replicaOf[n]
	if !ok {
		return nil
	}
	info, err := n.info("replication")
	if err != nil {
		return err
	}
	if info["role"] != "slave" || info["master_link_status"] != "up" || info["master_port"] != portOf(m.Addr) {
		return fmt.Errorf("role %q, master_link_status %q, master_port %q; want a replica of %s",
			info["role"], info["master_link_status"], info["master_port"], m.Addr)
	}
	return nil
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
	return c.SlotOwner(t, c.Slot(t, key))
}

// Slot returns key's hash slot (CLUSTER KEYSLOT on the first master that
// answers).
func (c *Cluster) Slot(t testing.TB, key string) int {
	t.Helper()
	var errs []string
	for _, n := range c.Nodes {
		v, err := command(n.Addr, "CLUSTER", "KEYSLOT", key)
		if slot, ok := v.(int64); err == nil && ok {
			return int(slot)
		}
		errs = append(errs, fmt.Sprintf("CLUSTER KEYSLOT on %s: %v, %v", n.Addr, v, err))
	}
	t.Fatalf("redistest: no node answered for key %q: %s", key, strings.Join(errs, "; "))
	return 0
}

// SlotOwner returns the master that serves slot, according to CLUSTER
// SLOTS on the first master that answers.
func (c *Cluster) SlotOwner(t testing.TB, slot int) *Server {
	t.Helper()
	var errs []string
	for _, n := range c.Nodes {
		addr, err := slotOwner(n.Addr, slot)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if m := c.byAddr(addr); m != nil {
			return m
		}
		t.Fatalf("redistest: slot %d is served by %s, which is not one of %v", slot, addr, c.Addrs)
	}
	t.Fatalf("redistest: no node answered for slot %d: %s", slot, strings.Join(errs, "; "))
	return nil
}

// byAddr returns the node listening on addr, or nil.
func (c *Cluster) byAddr(addr string) *Server {
	for _, n := range c.all() {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// slotOwner asks the node at addr which address serves slot.
func slotOwner(addr string, slot int) (string, error) {
	v, err := command(addr, "CLUSTER", "SLOTS")
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
		if int64(slot) < start || int64(slot) > end || len(master) < 2 {
			continue
		}
		ip, _ := master[0].(string)
		port, _ := master[1].(int64)
		return net.JoinHostPort(ip, strconv.FormatInt(port, 10)), nil
	}
	return "", fmt.Errorf("CLUSTER SLOTS on %s: slot %d is not assigned", addr, slot)
}

// Keys returns the keys matching pattern (KEYS) on every master.
func (c *Cluster) Keys(t testing.TB, pattern string) []string {
	t.Helper()
	var keys []string
	for _, n := range c.Nodes {
		v, err := command(n.Addr, "KEYS", pattern)
		if err != nil {
			t.Fatalf("redistest: KEYS %s on %s: %v", pattern, n.Addr, err)
		}
		for _, k := range v.([]any) {
			keys = append(keys, k.(string))
		}
	}
	return keys
}

// migrateTimeout is MIGRATE's timeout, in milliseconds.
const migrateTimeout = "5000"

// MoveSlot moves slot, with its keys, from the master that serves it to
// the master to (nothing if to serves it), as redis-cli --cluster reshard
// does: CLUSTER SETSLOT IMPORTING on to, MIGRATING on the owner, MIGRATE
// of each key that CLUSTER GETKEYSINSLOT lists until none is left, and
// CLUSTER SETSLOT NODE on to, the former owner and every other master.
// It returns once every node names to as the slot's master (CLUSTER
// SLOTS).
//
// Clients may use the slot meanwhile: while its keys move, the former
// owner answers a command on a key it no longer holds with -ASK (and one
// over some keys it holds and some it does not with -TRYAGAIN), and
// afterwards with -MOVED.
func (c *Cluster) MoveSlot(t testing.TB, slot int, to *Server) {
	t.Helper()
	from := c.SlotOwner(t, slot)
	if from == to {
		return
	}
	do := func(n *Server, args ...string) any {
		t.Helper()
		v, err := command(n.Addr, args...)
		if err != nil {
			t.Fatalf("redistest: %s on %s: %v\n%s", strings.Join(args, " "), n.Addr, err, n.tail())
		}
		return v
	}
	s := strconv.Itoa(slot)
	do(to, "CLUSTER", "SETSLOT", s, "IMPORTING", c.ID(t, from))
	do(from, "CLUSTER", "SETSLOT", s, "MIGRATING", c.ID(t, to))
	host, port, _ := net.SplitHostPort(to.Addr)
	for {
		keys, _ := do(from, "CLUSTER", "GETKEYSINSLOT", s, "100").([]any)
		if len(keys) == 0 {
			break
		}
		for _, k := range keys {
			// One key at a time, so that clients meet the slot half moved.
			// NOKEY (the key expired meanwhile) is no error.
			do(from, "MIGRATE", host, port, k.(string), "0", migrateTimeout)
		}
	}
	// The new owner first: it bumps its epoch, which settles the slot for
	// nodes that miss the announcement; then the former owner, which
	// would otherwise keep redirecting with -ASK; then the others.
	order := []*Server{to, from}
	for _, n := range c.Nodes {
		if n != to && n != from {
			order = append(order, n)
		}
	}
	for _, n := range order {
		do(n, "CLUSTER", "SETSLOT", s, "NODE", c.ID(t, to))
	}
	deadline := time.Now().Add(clusterTimeout)
	for _, n := range c.all() {
		for {
			addr, err := slotOwner(n.Addr, slot)
			if err == nil && addr == to.Addr {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: after moving slot %d to %s, %s names %q as its master (%v)", slot, to.Addr, n.Addr, addr, err)
			}
			time.Sleep(pollInterval)
		}
	}
}

// Failover kills master, one of Nodes with a replica, and waits until one
// of its replicas has taken over its slots: the replica reports
// role:master, and every other node reports cluster_state:ok with every
// slot ok (the other replicas of master then replicate the new master).
// The cluster detects the failure on its own, after ClusterNodeTimeout,
// and the replica is elected about half a second to a second later: a
// second or two in all. Writes that master acknowledged but had not yet
// sent to the replica are lost, as Redis Cluster's asynchronous
// replication documents.
//
// The promoted replica takes master's place in Nodes and Addrs, and
// master (down) becomes its replica in Replicas: restarted, it rejoins as
// one. Failover returns the new master, and fails t after 30 seconds.
func (c *Cluster) Failover(t testing.TB, master *Server) *Server {
	t.Helper()
	i := slices.Index(c.Nodes, master)
	replicas := c.ReplicasOf(master)
	if i < 0 || len(replicas) == 0 {
		t.Fatalf("redistest: Failover(%s): not a master with a replica", master.Addr)
	}
	master.Kill()
	deadline := time.Now().Add(clusterTimeout)
	var next *Server
	for next == nil {
		for _, r := range replicas {
			if info, err := r.info("replication"); err == nil && info["role"] == "master" {
				next = r
				break
			}
		}
		if next != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: no replica of %s took over\n%s", master.Addr, replicas[0].tail())
		}
		time.Sleep(pollInterval)
	}
	c.Nodes[i], c.Addrs[i] = next, next.Addr
	c.Replicas = slices.DeleteFunc(c.Replicas, func(r *Server) bool { return r == next })
	delete(c.replicaOf, next)
	for _, r := range replicas {
		if r != next {
			c.replicaOf[r] = next
		}
	}
	live := slices.DeleteFunc(c.all(), func(n *Server) bool { return !n.running() })
	c.Replicas = append(c.Replicas, master)
	c.replicaOf[master] = next
	c.waitOK(t, live, len(c.Nodes)+len(c.Replicas))
	return next
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
