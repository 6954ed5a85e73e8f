// Package rlqs serves Envoy's Rate Limit Quota Service,
// envoy.service.rate_limit_quota.v3.RateLimitQuotaService, from the same
// rules as the RateLimitService: clients (Envoy's rate_limit_quota filter)
// report their usage per bucket over a stream, and receive for each bucket
// an assignment that they enforce locally.
//
// # Matching a bucket id
//
// A stream's first report names the domain (one without it ends the stream
// with InvalidArgument, and later reports may omit it); each bucket id, a map of keys
// to values, is matched against that domain's rule tree, whatever the map's
// order. The walk starts at the top level and, at each level, looks at the
// bucket id's keys not used yet: for each, the rule that RLS would pick for
// that entry (the exact value, else the first wildcard value in file order
// that matches, else the key-only rule). Of those, it takes the rule
// defined first in the file (the lowest line; ties to the key first in byte
// order), uses up its key and descends into that rule's children. It never
// backtracks. The walk ends when no unused key matches at the next level;
// the rule it took last applies. Keys the walk never uses are ignored.
// Keys and values are bytes, as in RLS: the service reads its reports
// with the types of gen/ratelimit/wire/rlqs/v1, a mirror of Envoy's
// messages whose strings are bytes (protobuf strings would have to be
// UTF-8, and a header copied into a bucket id may hold any byte), and its
// answers carry the bucket ids with their own bytes.
//
// With these rules:
//
//	descriptors:
//	  - key: tenant            # line 1
//	    value: acme
//	    descriptors:
//	      - key: path
//	        rate_limit: {unit: second, requests_per_unit: 10}
//	  - key: path              # line 6
//	    value: /login
//	    rate_limit: {unit: minute, requests_per_unit: 5}
//	  - key: tenant            # line 9
//	    rate_limit: {unit: second, requests_per_unit: 100}
//
// {tenant: acme, path: /x} gets tenant=acme.path (10/s); {path: /login,
// tenant: other} gets path=/login (line 6 comes before the key-only tenant
// rule of line 9); {tenant: acme, path: /login} gets tenant=acme.path
// (line 1 first); {tenant: other, region: eu} gets tenant (region is
// ignored); {region: eu} matches no rule.
//
// Every distinct bucket id is its own quota, ignored keys included: {tenant:
// other, region: eu} and {tenant: other, region: us} each get the tenant
// rule's full limit, as two RLS descriptors with different values of a
// key-only rule do. Bucket ids are built by the client's configuration, which
// should only use the keys its rules name. ip_prefix and share_threshold are
// not applied.
//
// # Assignments
//
// Each assignment is a QuotaAssignmentAction whose assignment_time_to_live
// is twice the client's reporting interval (the time_elapsed of its last
// report on the bucket; DefaultReportingInterval before one), within MinTTL
// and MaxTTL:
//
//   - A rule with limits gives a TokenBucket: this client's share of the
//     tightest limit's rate, from the max-min fair division among the clients
//     that report on the bucket, to this replica and, with a store, to every
//     replica sharing it (package fairshare; see Across replicas). A
//     client whose stream ends, or that stops reporting a bucket, stays in
//     it until its last assignment expires
//     (and at least fairshare.DefaultTTL, 30 s), so that every share in
//     force is counted; after that it has no share, is pushed nothing,
//     and gets a share again at its next report. Pushed assignments live
//     only until the one answering the last report would have expired.
//     The bucket fills floor(share) tokens (one under a request per
//     second) every that many seconds' worth of the share, rounded up to
//     the millisecond: never more than the share, so the shares' sum stays
//     within the limit, and at most 0.2% less (a share under one request
//     a day is DENY_ALL). max_tokens is
//     the same fraction of each limit's burst (burst, or requests_per_unit
//     without one; the smallest across the limits), and at least one fill.
//   - unlimited, or a rule without limits, gives ALLOW_ALL; so does a bucket
//     id that matches no rule, or a domain with no rules, as RLS answers OK.
//   - requests_per_unit: 0 (a ban) gives DENY_ALL.
//   - shadow_mode (the rule's, or the server's) gives ALLOW_ALL, while the
//     reports are still counted in the metrics.
//   - quota_mode, replaces and consume_when_over change how RLS combines the
//     descriptors of one request and counts refused hits. An RLQS bucket is
//     one descriptor, and its client reports refused requests itself, so here
//     they change nothing (an unlimited rule's replaces included).
//
// The service answers each report with the assignment of every bucket it
// names, which renews their time to live. It also pushes, unasked, the
// assignments that changed: when another client's report or departure moves
// the shares of a bucket, and when SetRules brings new rules. A share that
// falls is pushed at once; one that rises is pushed only when it grows by
// more than 10% (pushRise), for a client may refill its token bucket on
// each new assignment, and noisy demand would otherwise bring a push, and a
// burst, at nearly every report; the smaller rise comes with the answer to
// the client's next report. A client whose entry the fair-share tracker
// dropped (its assignment has expired) is pushed nothing. After a
// reload, a bucket that matched a rule and now matches none is abandoned
// (AbandonAction), and the client reports it afresh on its next request.
//
// # Bounds
//
// No stream, connection or authenticated peer can fill what the service
// holds for all of its clients (Bounds, each a flag of the daemon). A bucket id that no rule matches is
// answered ALLOW_ALL and held nowhere: it takes no place under any bound,
// and costs only its answer. A bucket that a rule matches counts, from
// its first report until its stream drops it, against the bound of its
// stream (Bounds.PerStream, 1000), of the gRPC connection its stream came
// on (Bounds.PerConnection, 10,000, all the connection's streams
// together), of its authenticated peer under mutual TLS (Bounds.PerPeer,
// 50,000 over all the connections of one client certificate's identity:
// tlsconfig.PeerIdentity), and of the service (Bounds.Total, 100,000). At
// most Bounds.StreamsPerBucket (16) streams of one connection, or of one
// peer, hold the same bucket: each would be a client the limit is divided
// among. When a stream ends, the buckets whose assignments are still in
// force stay counted, against the same bounds, until those expire: the
// fair-share tracker counts their shares that long, so that opening and
// closing streams on a connection, or connections of a peer, cannot hold
// more than its bound allows. (Without mutual TLS, a client that opens
// many connections is many clients: only the service's bound holds it.)
//
// A bucket past a bound is refused, counted in
// ratelimitd_rlqs_buckets_refused_total by the bound it met, and takes no
// place from a bucket held already: a rule that needs no share
// (unlimited, a ban, shadow mode) still answers it; a limited one gets the
// Fallback, the assignment of the failure mode, as when the store cannot
// share. So does a limited bucket the fair-share tracker refuses (its
// clients per bucket are bounded too). A bucket id with more than
// MaxBucketEntries keys, or MaxBucketIDBytes bytes of keys and values,
// gets no assignment (the client applies its own no_assignment
// behaviour). A bucket not reported within its assignment's time to live
// is dropped: at its stream's next report or wake-up, and on every stream
// (at most once a second) when a report is refused at the service's
// bound; a client still using it reports it again as a new bucket.
//
// # Across replicas
//
// With Options.Store (the daemon's counter store: memory for one replica,
// Redis for many), the replicas divide each bucket's limit among all the
// clients reporting on it, wherever they report (fairshare.Pool). Each
// replica keeps one entry per bucket in the store: its clients' demands
// and the rate the store granted it. A replica asks for what its clients
// get in the max-min division of the limit over every client it knows of,
// its own and the other replicas'; the store grants that, or what the
// other replicas' grants leave, in one atomic step, and returns their
// clients' demands. A replica's clients share its grant. The grants in
// force never add up to more than the limit, so neither do the shares of
// all the clients of all the replicas.
//
// A replica exchanges a bucket with the store when something changed,
// not because it holds it: at once when the bucket is new to it or its
// limit changed; at the next turn of its loop (every SyncInterval, a
// second by default) when its clients' demands moved (by more than a
// tenth), a client came or left, or the store told it that another
// replica changed its entry on the bucket (Redis publishes the bucket on
// that replica's channel); and before its entry would lapse while a
// client may still be handed a share from it. A bucket whose clients
// report the same demand costs a store operation (a script run, on the
// bucket's node in a Redis Cluster) every few reporting intervals, and one
// whose clients have all left, none until its entry goes. A replica that
// learns of a new client elsewhere asks for less at its next turn, and the
// newcomer's replica gets the rest at its own: until then the newcomer's
// share is what its replica's grant leaves, possibly nothing. Shares
// settle within three turns of a change. Exchanges go in calls of at most
// fairshare.DefaultChunk buckets, the nearest to lapsing first, each call
// with its own deadline (the sync interval), so that a flood of buckets
// cannot make one call time out and every grant lapse.
//
// A replica's entry lives until the last assignment it made expires, plus
// the longest assignment's time to live (for the assignments it may make
// before its next exchange), plus, while a client may still report, one
// more (so that it is renewed every few reports), so a replica that dies
// leaves its grant in force at least as long as its clients may enforce
// what it assigned. Names must be unique per process: the daemon's
// default is the host name, the gRPC listen address and a random part, so
// that a restarted replica starts with entries of its own (a process
// reusing a name would take over the old entry at once, while the
// assignments made from it may still be in force).
//
// When the store cannot be reached, a replica keeps to the grants it holds
// until its entries would expire in the store (after which the others may
// take them over): an assignment that would outlive its entry is not made
// from it. Those buckets, and new ones, then get the Fallback, which the
// daemon sets from --failure-mode: allow gives ALLOW_ALL, deny gives
// DENY_ALL, error gives no assignment (the client's no_assignment or
// expired_assignment behaviour applies). They get shares again at their
// next report once the store answers. Buckets that do not limit (ALLOW_ALL
// or DENY_ALL by their rule) never need the store.
//
// Without a store, each replica divides each limit among its own clients
// only.
//
// # Where things live
//
// service.go holds the Service, its options and bounds' bookkeeping
// (bounds.go) and the streams that hold each bucket; stream.go is one
// stream's loop: a report is read (wire.go, through the generated mirror
// of Envoy's messages in gen/ratelimit/wire/rlqs/v1), each bucket id
// matched (match.go: the walk above, through config.Match, and the
// bucket's key, written as backend.AppendKeyPart writes a counter key's
// parts), counted in the fair-share core and answered with an assignment
// (assign.go), which wire.go writes. The fair-share core, package
// fairshare, is held through one handle, a fairshare.Pool: the stream
// asks it for shares, and a goroutine of the Service (follow) takes from
// it the buckets its exchanges with the store moved, and wakes their
// streams. metrics.go and view.go are what operators see: the metrics and
// GET /rlqs.
package rlqs
