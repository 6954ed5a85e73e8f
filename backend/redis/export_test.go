package redis

import (
	"strconv"

	"github.com/ratelimitd/ratelimitd/backend"
)

// RefundMarker returns the bytes that start the argument of a refund of n
// requests on the wire (RESP): for tests that fail refunds.
func RefundMarker(n int) []byte {
	return append([]byte("$"+strconv.Itoa(headerSize+callSize+n*recordSize)+"\r\n"), opRefund)
}

// EvalOnly has s run its script with EVALSHA, as it does on Redis before
// 7.0, which has no functions.
func EvalOnly(s *Store) { s.evalOnly.Store(true) }

// FastRuns reports how many script runs s sent to take.lua's lean path
// (opFast) on standalone Redis or Sentinel.
func FastRuns(s *Store) uint64 { return s.fastRuns.Load() }

// Compact reports whether s would send reqs, one call, as a compact call,
// which take.lua decides on its lean path (on standalone Redis or
// Sentinel, or in one slot on Cluster).
func (s *Store) Compact(reqs []backend.Request) bool { return compact(reqs, nil, withLeases) }

// ShareKey returns the Redis key of a share bucket under prefix.
func ShareKey(prefix, bucket string) string { return shareKey(prefix, bucket) }

// HashTag returns the hash tag, braces included, of r's counters on
// Cluster: their slot is CLUSTER KEYSLOT of it.
func HashTag(r *backend.Request) string { return "{" + tagOf(r) + "}" }

// Elsewhere reports how many calls (or parts) s sent in a batch to a
// Cluster node that did not serve their keys, and so wrote nothing there.
func Elsewhere(s *Store) uint64 { return s.elsewhere.Load() }

// CrossNodes reports the Cluster masters that s has a batcher for.
func CrossNodes(s *Store) []string { return s.crossNodes() }

// crossNodes reports the masters that the store has a batcher for.
func (s *Store) crossNodes() []string {
	x := &s.cross
	x.mu.Lock()
	defer x.mu.Unlock()
	names := make([]string, 0, len(x.nodes))
	for name := range x.nodes {
		names = append(names, name)
	}
	return names
}

// PruneCross stops s's batchers of the Cluster masters for which keep is
// false, as when they leave the Cluster.
func PruneCross(s *Store, keep func(name string) bool) { s.pruneCross(keep) }

// MaxResetNotes is how many resets Redis keeps the note of.
const MaxResetNotes = maxResetNotes
