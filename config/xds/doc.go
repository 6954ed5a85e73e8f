// Package xds receives ratelimitd's rules from an xDS management server, as
// envoyproxy/ratelimit does with CONFIG_TYPE=GRPC_XDS_SOTW (the way Envoy
// Gateway configures it).
//
// A Client opens an Aggregated Discovery Service stream
// (envoy.service.discovery.v3.AggregatedDiscoveryService) and subscribes,
// State of the World, to every resource of type
// ratelimit.config.ratelimit.v3.RateLimitConfig (TypeURL). Each response
// carries the whole set: each resource is one domain. The Client converts
// the set into the syntax tree that rule files parse into and compiles it
// with config.Compile, so that it is checked exactly as files are, plus one
// check across resources: a domain is defined once. A good set replaces the
// rules in force, goes to Options.OnRules and is ACKed; a bad one is NACKed
// with the errors, each naming its resource, and the rules in force stay.
// An empty set is good: it leaves no domain.
//
// The Client reconnects with exponential backoff, subscribing again with
// the last version it ACKed, until Close. Ready turns true with the first
// good set and stays true.
//
// A RateLimitConfig holds less than a rule file: domain, descriptors (key,
// value, shadow_mode, detailed_metric, nested descriptors) and rate_limit
// (unit from second to day, requests_per_unit, unlimited, name,
// replaces). The files' other fields, such as value_to_metric and
// share_threshold, and ratelimitd's extensions cannot be expressed.
//
// A management server may send a refused version again as soon as it is
// NACKed (go-control-plane's snapshot cache does), or keep sending bad sets
// under new versions. From the second refused set in a row, whatever the
// versions, the Client holds its NACK back for an exponential backoff
// (Options.MinBackoff to MaxBackoff), so that the two do not spin; it keeps
// reading meanwhile and ACKs at once a good set that arrives, but a server
// that waits for the NACK sends its correction only after it. The first
// NACK after a good set always goes out at once.
//
// Responses of any other type than TypeURL are logged once per type and
// dropped, unanswered: on ADS, a request of that type would subscribe to it.
//
// Options.Headers, such as an authorization token, need
// Options.Credentials: New refuses to send them in plaintext unless
// Options.InsecureHeaders says so.
//
// What an operator writes has its readers here too: TLS.Credentials builds
// Options.Credentials from PEM files (CAs, a client certificate for mutual
// TLS, the server's name), and ParseNodeMetadata reads Options.NodeMetadata
// from a JSON object.
//
// Usage:
//
//	c, err := xds.New(xds.Options{
//		Target:  "xds.example:18000",
//		NodeID:  "ratelimitd",
//		OnRules: func(r *config.Rules) { current.Store(r) },
//	})
//	if err != nil {
//		return err
//	}
//	defer c.Close()
package xds
