// Package service is the per-database service object of a node: one
// Database holds what the front doors (internal/api/httpapi,
// internal/api/memcache through the server's adapter) and the server's
// background loops (heartbeats, expiry, reports, the Raft member's
// description) share about one database served here: its store, its
// role-specific status, how a write is committed (Raft proposal or the
// store's own commit), whether this node takes writes, and the parts that
// report and sample (tree, read sampler, read window, history).
//
// The server wiring (internal/server) builds each Database when it opens
// the database, sets its fields before any door serves it, and finds it
// again through a Catalog. The doors keep their protocol specifics (HTTP
// status codes and JSON, memcached reply lines) to themselves.
//
// # Invariants
//
//   - A write goes through Database.Write only: through Propose when set
//     (a replicated root, whose store only the Raft member writes), else
//     through Store.Write. No caller writes the store directly.
//   - Database.CanWrite is asked before a write is accepted; its refusal
//     always wraps a store error, store.ErrNotRoot when the refusal names
//     no other, so every door tells it apart with errors.Is.
//   - Fields are set by the wiring before the database is served and are
//     read-only afterwards; nil fields have the meaning their comment
//     gives, so a test builds a Database from a store alone.
package service
