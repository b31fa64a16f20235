// Package httpapi is the HTTP front door of Quicksilver: reads on every
// node, writes on the root of each database. New returns one http.Handler
// serving every database of a Catalog; the server wiring owns listeners and
// timeouts.
//
// # Endpoints
//
//	GET    /v1/{db}/keys/{key}        the raw value (application/octet-stream)
//	PUT    /v1/{db}/keys/{key}        set the value to the request body
//	DELETE /v1/{db}/keys/{key}        delete the key
//	POST   /v1/{db}/batch             atomic batch of sets and deletes, with conditions
//	GET    /v1/{db}/keys?prefix=&start=&limit=   scan one page of keys in key order
//	POST   /v1/{db}/mget              several values read at one index
//	GET    /v1/{db}/status            position, counters and role of the database
//	GET    /v1/{db}/digest            digest of all data, to compare nodes
//	POST   /v1/{db}/raft/members      HA root: add a member {"id":N,"addr":"host:port"} (members.go)
//	DELETE /v1/{db}/raft/members/{id} HA root: remove a member
//	GET    /v1/{db}/watch?prefix=&from_index=   stream changes as newline-delimited JSON
//	GET    /v1/{db}/usage?producer=   keys and bytes stored under each producer's prefixes
//	GET    /v1/{db}/usage?unread=true&window=&limit=   keys with no sampled read (unread.go)
//	GET    /v1/{db}/tree              the replication tree below this node (tree.go)
//	GET    /v1/node                   what the status page shows, every database (tree.go)
//	GET    /                          the status page (internal/statuspage)
//	GET    /metrics                   Prometheus metrics of the process
//	GET    /healthz                   200 "ok" while the process serves
//
// GET also answers HEAD. Other methods on these paths are answered 405 with
// an Allow header; other paths 404 not_found.
//
// # Keys and values
//
// In a URL a key is the rest of the path after /keys/, percent-decoded; it
// may contain '/'. ServeMux-style path cleaning is refused rather than
// applied: a path with an empty, "." or ".." segment (such as
// /v1/db/keys/a//b) is answered 400 bad_request, never redirected to a
// different key. Clients should escape every byte of a key outside
// [A-Za-z0-9_~-], '/' and '.' included (Go: url.PathEscape, then "." as
// %2E). In query parameters (prefix, start) keys are query-escaped: '+'
// means a space there, so escape '+' as %2B.
//
// In JSON bodies keys are strings and values are standard base64 with
// padding (encoding/base64.StdEncoding). JSON strings hold UTF-8 text:
// a key that is not valid UTF-8 can be written and read through the
// /keys/{key} endpoints only, and appears in scan and mget answers with
// its invalid bytes replaced by U+FFFD.
//
// # Reads
//
// Every read is served from one consistent view of the database at one log
// index. GET answers 200 with the value as body and two headers:
// Qs-Index, the index of the entry that last wrote the key, and
// Qs-Applied-Index, the index of the view the read was served at. An
// absent key is answered 404 not_found, with Qs-Applied-Index too.
//
// Reads take min_index=N (and optionally timeout=D, a Go duration such as
// 2s or 500ms; default Config.DefaultWait, capped at Config.MaxWait): the
// read waits until this node has applied index N, so that a client reads
// its own writes (pass the index a write returned) from any node. If N is
// not applied in time the answer is 504 timeout with the applied index in
// the Qs-Applied-Index header and as "applied_index" in the error object.
//
// A scan answers
//
//	{"index": N, "items": [{"key": "k", "value": "<base64>", "index": I}, ...], "next": "k2"}
//
// with the keys with prefix P (default: all) from the first key ≥ start,
// at most limit of them (default Config.DefaultScanLimit, capped at
// Config.MaxScanLimit), in key order. "next" is present when there may be
// more: pass it as start (with the same prefix) for the next page. A page
// also ends early once it reaches Config.MaxResponseBytes, with "next" set;
// it always holds at least one item. Pages are read at different indexes;
// pass the first page's index as min_index to the next pages to never go
// back in time when switching nodes.
//
// mget takes {"keys": ["a", "b"]} (at most Config.MaxMgetKeys) and answers
// {"index": N, "values": {"a": "<base64>"}}, every value read at index N;
// absent keys are left out, repeated keys are answered once. min_index and
// timeout are query parameters.
//
// Scan and mget answers up to 1 MiB are built whole and sent with a length;
// larger ones are streamed as they are read (bounds.go), and an error part
// way cuts the connection. Request bodies must arrive within BodyTimeout
// (else 408 request_timeout, connection closed); each 256 KiB of an answer
// (watch excepted) must be taken within WriteTimeout.
//
// status answers a JSON object with at least db, role ("root" or "replica",
// unless Database.Status says otherwise), db_id, applied_index,
// applied_time (RFC 3339 with nanoseconds, or null before the first
// entry), keys, key_bytes, value_bytes, log_first_index, log_bytes,
// disk_bytes and disk_full, plus the fields of Database.Status.
//
// digest answers {"index": N, "keys": K, "sha256": "<hex>"}: SHA-256 over
// every key, value and write index of the database read at index N (every
// CRC checked on the way). Two nodes of a database with the same sha256
// serve the same data; heartbeats change no data, so nodes at different
// indexes after the same last write agree. It reads the whole database
// (one digest at a time per process): a tool for comparing replicas
// (qs digest --addr A,B,C), not a request path. min_index and timeout
// work as for reads.
//
// # Watch
//
// GET /v1/{db}/watch?prefix=P&from_index=N streams the changes to keys
// with prefix P (default: all) after index N (default: the applied index,
// i.e. only future changes) as application/x-ndjson, one JSON object per
// line, flushed as they come:
//
//	{"index": I, "key": "k", "value": "<base64>"}   a set
//	{"index": I, "key": "k", "deleted": true}       a delete
//	{"progress": true, "index": N, "time": "2026-01-02T15:04:05.999999999Z"}
//
// Changes come in index order; the changes of one atomic batch share its
// index and are written together. A progress line says the stream holds
// every change under P through index N (time: that entry's commit time on
// the root, left out when unknown); one is sent first, then whenever the
// stream has been idle for about the hub's ProgressInterval (default 1s,
// drawn within ±25% each time so that watchers opened together do not
// report together), so an idle watcher still knows how fresh it is. Keys
// are JSON strings as in scan answers. The response headers are sent at
// once; lines follow as the stream gets its write turns.
//
// The database's watch hub reads each log entry once for all watchers of
// the node, and keeps and encodes each change once per watched prefix.
// Every write to a watch stream takes a turn of the process's write
// budget (watch_write_concurrency at once, at a rate that adapts up to
// watch_write_rate to what delivery costs readers): under a storm, or on
// an overloaded machine, a stream waits for its turn and then writes
// everything pending at once, so changes arrive later, never out of
// order, twice or at the expense of reads.
//
// A from_index older than the retained log is answered 410 reread: scan
// the prefix, then watch from the scan's index. Beyond watch_max_watchers
// streams (all databases of the process) the answer is 503
// too_many_watchers. Once the stream has started, the server ends it with
// one error line
//
//	{"error": {"code": "too_slow", "message": "...", "index": N}}
//
// when the client fell further behind than the node keeps for its prefix
// (too_slow; watch.Config BufferBatches and BufferBytes), when the server
// shuts down (unavailable), when the log was truncated under a watcher
// (reread, no index) or on a read error (internal). N is the index the
// stream was complete through: reconnect with from_index=N to miss
// nothing. A client that reads nothing for 5 to 10 s (the hub's
// WriteTimeout) is disconnected without an error line, which it could not
// read; it resumes from the last index it read.
//
// # Writes
//
// Writes are answered only after they are durable (fsynced), with
//
//	{"index": N, "changed": true}
//
// where N is the index of the log entry that holds the write. A write that
// changes nothing (setting a key to its current value, deleting an absent
// key) writes no entry and is answered 200 with "changed": false and the
// applied index it was evaluated at; in particular DELETE of an absent key
// is not an error.
//
// PUT and DELETE take if_index=N, a compare-and-swap condition: the write
// applies only if the key was last written at index N (N=0: the key must
// not exist); otherwise 409 condition_failed and nothing changes. A batch
// is
//
//	{"ops": [{"op": "set", "key": "k", "value": "<base64>"}, {"op": "del", "key": "k2"}],
//	 "if":  [{"key": "k", "index": 7}]}
//
// applied atomically: every condition of "if" holds and every op applies,
// or nothing does. "value" is required for set and refused for del;
// "index" is required in conditions.
//
// Every write may carry an Idempotency-Key header (1 to 64 bytes, unique
// per logical write: the Go client sends 16 random bytes in hex and keeps
// them across its retries). The root remembers the outcome of each key
// for 10 minutes: a write whose key it has seen is not applied again and
// is answered with the first attempt's index and "changed", plus
// "duplicate": true. A write refused (a failed condition, an error)
// records nothing, so its retry is evaluated afresh. This makes a retry
// after a timeout or a lost answer safe.
//
// Request bodies are limited to Config.MaxBodyBytes. JSON bodies are
// decoded strictly: unknown fields, wrong types and data after the
// document are refused. Unknown or repeated query parameters are refused.
// Stores also limit key, value and batch sizes (store.Options).
//
// # Producers
//
// When the database has a Gate (a producers file is configured; package
// internal/gateway), every write (PUT, DELETE, batch) needs
// "Authorization: Bearer <token>" of a producer: none is answered 401
// unauthenticated, an unknown token 401 invalid_token, both with a
// WWW-Authenticate challenge (RFC 6750). The token is checked before the
// body is read, and for PUT and DELETE so is the key. Every op of a batch
// must be under one of the producer's prefixes, else the whole batch is
// answered 403 forbidden, naming the first refused op:
//
//	{"error": {"code": "forbidden", "message": "...", "producer": "dns",
//	           "key": "web/x", "allowed_prefixes": ["dns/"]}}
//
// (a database the producer may not write has no key and prefixes).
// Conditions are reads and need no prefix. Then the write is charged to
// the producer's token buckets (ops: one per op; bytes: keys and values);
// if they cannot admit it within the file's max_wait it is answered 429
// quota_exceeded with a Retry-After header (whole seconds) and
// "producer", "quota" ("ops" or "bytes") and "retry_after_seconds" in the
// error; a write larger than a bucket is 413 too_large. A refused write
// changes nothing and is not charged. Without a Gate writes are open
// (development only). Reads never need a token.
//
// usage answers gateway.UsageReport, read at one index (also in the
// Qs-Applied-Index header):
//
//	{"db": "default", "index": 42,
//	 "total": {"keys": 3, "key_bytes": 20, "value_bytes": 9},
//	 "producers": [{"name": "dns", "keys": 2, "key_bytes": 12, "value_bytes": 6,
//	                "overhead_bytes": 44, "stored_bytes": 62,
//	                "prefixes": [{"prefix": "dns/", "keys": 2, ...}]}],
//	 "unowned": {"keys": 1, "key_bytes": 8, "value_bytes": 3}}
//
// producer=NAME reports that producer only (404 not_found if it may not
// write the database) and leaves out "unowned". It costs one pass over the
// value records under the prefixes reported (docs/storage.md).
//
// usage?unread=true answers gateway.UnreadReport: per producer and prefix,
// the keys with no sampled read within the window, checked against the
// root's read window (Database.KeyUse; a replica has none and answers 400).
// The JSON of tree, node and unread is in docs/protocol.md.
//
// # Errors
//
// Every error is answered with a JSON body
//
//	{"error": {"code": "condition_failed", "message": "..."}}
//
// with a stable code (also the kind label of qs_http_errors_total):
//
//	HTTP  code                when
//	400   bad_request         bad query parameter, empty key, unknown op, value not base64,
//	                          missing value or condition index, unclean path, store.ErrInvalid
//	400   bad_json            body not one JSON document of the expected shape: syntax, wrong
//	                          types, unknown fields, trailing data, empty body
//	401   unauthenticated     write without "Authorization: Bearer <token>" while producers are
//	                          configured (WWW-Authenticate: Bearer realm="qs")
//	401   invalid_token       write with a token of no producer (WWW-Authenticate with
//	                          error="invalid_token")
//	403   forbidden           a key (first refused op of a batch: "key", "allowed_prefixes") or
//	                          the database is not the producer's; nothing changed
//	403   not_root            write on a node that is not the database's root; the message
//	                          names the root when known
//	404   not_found           key absent (GET; with Qs-Applied-Index), no such endpoint, or
//	                          usage of a producer that may not write the database
//	404   unknown_database    no database of that name on this node
//	405   method_not_allowed  method not served on that path (Allow header set)
//	408   request_timeout     the request body did not arrive within Config.BodyTimeout; the
//	                          connection is closed
//	409   condition_failed    an if_index or batch condition did not hold; nothing changed
//	413   too_large           body over Config.MaxBodyBytes; key, value or batch over the store's
//	                          limits; mget over Config.MaxMgetKeys keys or Config.MaxResponseBytes;
//	                          a write larger than the producer's ops_burst or bytes_burst
//	429   quota_exceeded      the producer's quota would hold the write back longer than max_wait;
//	                          Retry-After header; nothing changed or charged
//	499   canceled            the client went away before the answer was ready (a write may
//	                          still have committed); seen in metrics and logs only
//	500   integrity           stored data failed an integrity check (store.ErrCorrupt); the
//	                          data is never served
//	500   write_failed        the storage engine failed a durable commit; not acknowledged
//	500   internal            anything else, including recovered panics
//	410   reread              watch from_index older than the retained log: scan, then watch
//	                          from the scan's index
//	503   unavailable         the store is closed (shutting down), or watch not served here, or
//	                          an HA root has no leader (store.ErrUnavailable: nothing proposed),
//	                          or a proxy could not fetch a value from any replica in time
//	503   too_many_watchers   the process already serves watch_max_watchers watch streams
//	504   timeout             min_index not applied in time (applied_index in the body and
//	                          Qs-Applied-Index), or a write's context expired (it may still commit)
//	507   disk_full           writes refused for lack of disk space; reads keep working
//
// # Metrics
//
// Declared in metrics.go with subsystem "http": requests_total{db, route,
// code} (route is get, put, delete, batch, scan, mget, status, usage, digest, members, watch or other;
// db is empty for unknown databases), errors_total{kind},
// request_duration_seconds{route}, min_index_wait_seconds and
// min_index_timeouts_total. Watch streams are not timed in
// request_duration_seconds; their metrics are the watch package's
// (subsystem "watch"). The codes of stream error lines (too_slow,
// unavailable, reread, internal) are counted in errors_total too. The
// gateway's per-producer metrics are its own (subsystem "gateway").
package httpapi
