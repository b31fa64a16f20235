// Package gateway is the producer gateway of a root: who may write (bearer
// tokens), what (key prefixes per producer and database), how fast (token
// bucket quotas of ops and bytes per second) and what it costs (usage by
// prefix). The HTTP API calls it on every write; the server wiring owns the
// Gateway and its reload loop.
//
// # The producers file
//
// A TOML file named by producers_file in the configuration (qs serve
// --producers); File documents its format. Tokens are stored only as
// SHA-256 hashes. The file is read again on SIGHUP (Server.ReloadProducers)
// and every Options.PollInterval (default 2s) by Run; a content that
// changed and is valid replaces the producers in force at once; an invalid
// or unreadable file leaves them in force (logged, qs_gateway_reloads_total
// {result="error"}). Quota buckets are kept across reloads by producer
// name, with their new rates and sizes.
//
// Without a producers file there is no Gateway and writes are open to
// anyone who reaches the HTTP API: for development only. A file with no
// producer refuses every write.
//
// # Invariants
//
//   - The write path takes no lock of its own: it reads the table in force
//     through one atomic pointer; rate.Limiter locks for a few instructions.
//   - A write is checked before it reaches the store: authentication before
//     the body is read, every op of a batch against the prefixes before
//     anything is written (a batch is refused whole), then the quota.
//   - A refused write charges nothing to the quotas.
//   - Every wait is bounded by the file's max_wait and the request context.
//   - Reads and conditions of a batch need no token.
package gateway
