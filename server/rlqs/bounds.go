package rlqs

import (
	"container/heap"
	"context"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/ratelimitd/ratelimitd/internal/tlsconfig"
)

// bound names the bound a bucket met, the label of
// ratelimitd_rlqs_buckets_refused_total.
type bound string

const (
	boundBucketID   bound = "bucket_id"  // too many keys or bytes: no assignment
	boundStream     bound = "stream"     // Bounds.PerStream
	boundConnection bound = "connection" // Bounds.PerConnection or StreamsPerBucket
	boundPeer       bound = "peer"       // Bounds.PerPeer or StreamsPerBucket
	boundService    bound = "service"    // Bounds.Total
	boundTracker    bound = "tracker"    // the fair-share tracker's own bounds
)

// bounds lists every bound, for the metric's series.
var bounds = [...]bound{boundBucketID, boundStream, boundConnection, boundPeer, boundService, boundTracker}

// account counts the buckets held against the bounds of one connection,
// one peer, or the service: the holdings of its open streams and those of
// its ended streams whose assignments are still in force (departures). An
// account lives in Service.conns or Service.peers while it has an open
// stream or a holding.
type account struct {
	key      any            // its key in Service.conns or Service.peers; nil for the service's
	held     int            // holdings, live and departed
	byBucket map[string]int // holdings by bucket key; nil for the service's
	streams  int            // open streams
}

// accounts are the accounts a stream's holdings count in: the service's,
// its connection's, and its peer's (nil without one).
type accounts struct{ service, conn, peer *account }

// each calls f with each of a's accounts.
func (a accounts) each(f func(*account)) {
	f(a.service)
	f(a.conn)
	if a.peer != nil {
		f(a.peer)
	}
}

// departure is a holding of an ended stream, counted until the assignment
// it was last sent expires.
type departure struct {
	expires time.Time
	bucket  string
	accts   accounts
}

// departures is a min-heap of departures by expiry.
type departures []departure

func (d departures) Len() int           { return len(d) }
func (d departures) Less(i, j int) bool { return d[i].expires.Before(d[j].expires) }
func (d departures) Swap(i, j int)      { d[i], d[j] = d[j], d[i] }
func (d *departures) Push(x any)        { *d = append(*d, x.(departure)) }
func (d *departures) Pop() any {
	old := *d
	x := old[len(old)-1]
	*d = old[:len(old)-1]
	return x
}

// identify returns the keys of the connection and of the authenticated
// peer ("" for none) of a stream's context. A connection is told by its
// peer's address: the daemon's gRPC listener is TCP, and two connections
// open at once never share a remote address and port (one that reused the
// port of a closed connection whose buckets are still counted shares their
// account, which only bounds it sooner).
func identify(ctx context.Context) (conn any, peerName string) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, ""
	}
	if p.Addr != nil {
		conn = p.Addr.Network() + "://" + p.Addr.String()
	}
	if info, ok := p.AuthInfo.(credentials.TLSInfo); ok {
		peerName = tlsconfig.PeerIdentity(info.State)
	}
	return conn, peerName
}

// open returns the accounts of a new stream on ctx's connection and peer.
// s.mu must be held.
func (s *Service) open(ctx context.Context) accounts {
	connKey, peerName := identify(ctx)
	a := accounts{service: &s.all, conn: s.accountIn(s.conns, connKey)}
	a.conn.streams++
	if peerName != "" {
		a.peer = s.accountIn(s.peers, peerName)
		a.peer.streams++
	}
	return a
}

// close undoes open, when its stream has ended and dropped its buckets.
// s.mu must be held.
func (s *Service) close(a accounts) {
	a.conn.streams--
	s.retire(a.conn)
	if a.peer != nil {
		a.peer.streams--
		s.retire(a.peer)
	}
}

// accountIn returns the account of key in m, adding it.
func (s *Service) accountIn(m map[any]*account, key any) *account {
	a := m[key]
	if a == nil {
		a = &account{key: key, byBucket: make(map[string]int)}
		m[key] = a
	}
	return a
}

// retire removes a connection's or peer's account that has no stream and
// holds nothing. s.mu must be held.
func (s *Service) retire(a *account) {
	if a.streams > 0 || a.held > 0 || a.key == nil {
		return
	}
	if s.conns[a.key] == a {
		delete(s.conns, a.key)
	}
	if s.peers[a.key] == a {
		delete(s.peers, a.key)
	}
}

// admit reports which bound, if any, the accounts a meet if they take
// bucket key; "" means none. s.mu must be held.
func (s *Service) admit(a accounts, key string) bound {
	b := s.bounds
	switch {
	case a.conn.byBucket[key] >= b.StreamsPerBucket || a.conn.held >= b.PerConnection:
		return boundConnection
	case a.peer != nil && (a.peer.byBucket[key] >= b.StreamsPerBucket || a.peer.held >= b.PerPeer):
		return boundPeer
	case a.service.held >= b.Total:
		return boundService
	}
	return ""
}

// take counts a holding of bucket key in a. s.mu must be held.
func take(a accounts, key string) {
	a.each(func(x *account) {
		x.held++
		if x.byBucket != nil {
			x.byBucket[key]++
		}
	})
}

// give undoes take. s.mu must be held.
func (s *Service) give(a accounts, key string) {
	a.each(func(x *account) {
		x.held--
		if x.byBucket != nil {
			if x.byBucket[key]--; x.byBucket[key] <= 0 {
				delete(x.byBucket, key)
			}
		}
		s.retire(x)
	})
}

// depart keeps a's holding of bucket key counted until expires, when the
// assignment an ended stream was last sent on it expires. s.mu must be
// held.
func (s *Service) depart(a accounts, key string, expires time.Time) {
	heap.Push(&s.departed, departure{expires: expires, bucket: key, accts: a})
}

// expireDepartures gives back the holdings of the departures expired at
// now. s.mu must be held.
func (s *Service) expireDepartures(now time.Time) {
	for len(s.departed) > 0 && !now.Before(s.departed[0].expires) {
		d := heap.Pop(&s.departed).(departure)
		s.give(d.accts, d.bucket)
	}
}
