// Package tree keeps the replication tree as each node learns it from its
// children: every replica reports its subtree upward to its source over the
// replication stream (internal/repl, message Report), and every node keeps
// the latest report of each child until the child stops reporting.
//
// It holds no sockets and no clocks of its own: callers pass the time, so
// the policy (what a report may hold, when a child drops out, how a subtree
// is cut to its size bound) is tested directly.
//
// # Invariants
//
//   - A report from a child replaces its previous one; the child is
//     identified by the process id of its replication client and the
//     database it replicates.
//   - A child whose last report is older than the registry's TTL is not
//     shown and is forgotten (it disconnected, or stopped reporting).
//   - A subtree never holds more than MaxNodes nodes nor nests deeper than
//     MaxDepth: what does not fit is counted in Truncated, nearest nodes
//     kept first.
//   - A decoded report is valid or an error: field lengths, node count and
//     depth are checked before anything is kept.
package tree
