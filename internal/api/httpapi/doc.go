// Package httpapi is the HTTP front door of Quicksilver: reads on every
// node, writes on the root of each database. New returns one http.Handler
// serving every database of a service.Catalog; the server wiring owns
// listeners, timeouts and the connection limit (ConnLimit). The database
// itself (its store, role, write path and admission) is a
// service.Database, shared with the memcached door: this package adds the
// HTTP answers, codes and JSON.
//
// The protocol (endpoints, key escaping, answers, error codes, metrics) is
// described once, for clients and operators, in docs/protocol.md ("HTTP
// API"); a change to what a client sees changes that page too.
//
// # Where things are
//
//	handler.go    the routes, path checks and the per-route wrapper (metrics, panics)
//	fastget.go    plain GETs of a key, recognized without the router
//	errors.go     the stable error codes and the HTTP status of each; classify
//	              maps store and gateway errors to them
//	decode.go     strict JSON and query decoding
//	bounds.go     body and answer deadlines; streaming of large answers
//	read.go       GET, scan, mget and min_index waits
//	write.go      PUT, DELETE and batch; gate.go the producer checks before them
//	watch.go      watch streams over the database's watch.Hub
//	status.go, digest.go, usage.go, unread.go, tree.go, members.go
//	              the other endpoints
//	catalog.go    what the handler may ask the catalog beyond its databases
//	metrics.go    Metrics: the qs_http_* collectors, one per process (Config.Metrics)
//
// # Invariants
//
//   - Every read is served from one view of the store at one log index, and
//     its answer names that index (Qs-Applied-Index, or "index" in JSON).
//   - A write is answered success only after the store reports it durable;
//     a refused write (condition, gateway, limit, bad input) changes
//     nothing and is not charged to the producer.
//   - Paths are never cleaned: a path that ServeMux would redirect is
//     refused, so a request never reaches a key other than the one named.
//   - Every error answer carries one of the codes of errors.go, which are
//     stable, and is counted in qs_http_errors_total by that code; the same
//     codes end watch streams.
//   - Stored data that fails an integrity check is never sent: scan and mget
//     answers built whole are sent only once read, and a streamed answer
//     that fails part way cuts the connection rather than end cleanly.
//   - Every request and every answer is bounded (body size and deadline,
//     answer size, per-256 KiB write deadline, keys per mget, scan limit).
package httpapi
