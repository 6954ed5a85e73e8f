// Package config reads ratelimitd's rate-limit rules and compiles them into
// an immutable match tree.
//
// The rules are envoyproxy/ratelimit's YAML files, read unchanged: each YAML
// document is one domain, whose descriptors nest to any depth and carry a
// rate_limit. ratelimitd adds to each rate limit an algorithm
// (sliding_window, the default unless WithDefaultAlgorithm names another,
// fixed_window, sliding_log, token_bucket or gcra), a burst (token_bucket
// and gcra only), and a window, which is any
// Go duration such as "30s" or "5m" in place of a unit; and to each
// descriptor a list of rate_limits, several limits that all apply, such as
// 10 per second together with 1000 per day.
//
// Loading is in three steps, each usable on its own:
//
//   - Parse decodes one file into its syntax tree ([]*Domain) and checks
//     everything that one file allows, reporting every problem as an *Error
//     that names the file, line and column.
//   - Compile checks the domains of any number of files together (a domain
//     is defined once) and builds the Rules.
//   - Load reads a file, or every *.yaml and *.yml file of a directory
//     (Kubernetes ConfigMap mounts included), and does both.
//
// What loading may cost is bounded, so that no rule file can take a
// server's memory or time: Limits bound the bytes of the files, before
// and after their YAML aliases are expanded, the rules of a domain, the
// files of a directory and the bytes of the rules' paths; DefaultLimits
// apply unless a WithLimits option says otherwise. A rule that no request
// can match, nested deeper than MaxDepth or with a key over MaxKeyBytes,
// is an error too.
//
// Marshal renders a syntax tree back to YAML, so that a parsed file can be
// shown, or rules built in code can be written out.
//
// Match finds the rule that applies to one request descriptor, walking its
// entries down the tree: at each level the rule for the exact key and value
// first, then the rules whose value is a wildcard pattern ('*' matches any
// run of characters), in file order, then the rule for the key alone.
//
// Usage:
//
//	rules, err := config.Load("/etc/ratelimitd/rules")
//	if err != nil {
//		return err // every problem, one per line: "rules/api.yaml:12:14: unknown unit \"minutes\" ..."
//	}
//	if d := rules.Domain("api"); d != nil {
//		if rule := config.Match(d, descriptor.GetEntries()); rule != nil {
//			for _, l := range rule.Limits {
//				// apply l.Limit, counting under rule.Path and the request's values
//			}
//		}
//	}
//
// Parse, Marshal and Compile do no I/O. Compiled Rules are immutable and
// safe for concurrent use: a server swaps a whole new *Rules in on reload
// (for example with an atomic.Pointer) and never locks.
package config
