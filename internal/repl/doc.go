// Package repl replicates a database's log from one node to another: the
// wire protocol, the server that streams a store's log, and the Replica that
// keeps one store following an ordered list of sources. Every node can
// serve, so replicas form a fan-out tree of any depth (root → intermediate
// → leaf).
//
// # Invariants
//
//   - Never apply an unverified entry. The receiver checks that every entry
//     has index = previous + 1 and that its hash is SHA-256(previous hash ||
//     body), starting from the store's applied index and hash. A batch with
//     a gap or a broken chain is dropped whole: the connection is closed,
//     the error counted, and the next source tried. (store.Apply checks the
//     chain again before committing.) With the cluster's public key, a
//     verified chain is also held back until a head signed by the root
//     vouches for it (heads.go), and a snapshot is installed only if the
//     root sealed it (seal.go).
//   - One durable commit per received batch: each Entries message is
//     applied with one store.Apply.
//   - Every log is a prefix of the root's. A root sends only entries it
//     has durably applied. A replica sends its children the entries it has
//     durably applied and, cut-through, the batch it verified and is making
//     durable, in order: a child gets each batch in parallel with its
//     source's fsync, not after it. Either way a replica's log is a prefix of
//     its source's received log, and by induction of the root's.
//   - A child may be ahead of its source, never forked from it. A replica
//     restarted after a crash replays only what it made durable; a child
//     that got relayed entries past that point is refused "ahead" and asks
//     again soon (never bootstrapping for it) until the source caught up,
//     then continues: the hash chain it checks proves the source's log
//     continues its own.
//   - A replica whose source fails keeps serving its own downstream clients:
//     servers and replicas share nothing but the store and the relay.
//
// The wire protocol (framing, messages, versions, refusal codes, reports,
// fetch connections), bootstrap and liveness are described once, for
// operators and implementers of other clients, in docs/protocol.md
// ("Replication protocol"); a change to what crosses the wire changes that
// page too. The message types, refusal codes and version bounds are
// constants of protocol.go, protocol_fetch.go and report.go.
//
// # Where things are
//
//	protocol.go           version bounds, message types, refusal codes, process ids
//	protocol_encoding.go  encoding and decoding of the stream's messages (pure)
//	protocol_frames.go    framing: writing and reading checksummed frames (pure)
//	protocol_fetch.go, report.go
//	                      the fetch and report messages
//	server.go             the server: accepting, child limits, shutdown
//	server_config.go      ServerConfig: its defaults and validation
//	server_conn.go        one client connection: Hello, Welcome, refusals
//	server_stream.go      streaming the log and the signed heads that cover it
//	relay.go              cut-through: a replica's verified, not yet durable batch
//	server_bootstrap.go, snapshots.go
//	                      serving bootstraps from shared store checkpoints
//	server_fetch.go       answering a proxy's Fetch from one view of the store
//	server_relay.go       a relay (a proxy) answering the Fetch of its data centre's proxies
//	client.go             Replica: following an ordered list of sources
//	client_config.go      ReplicaConfig: its defaults and validation
//	client_session.go     one session with a source: Hello, checking and applying batches
//	policy.go             the source policy of Replica.Run, free of I/O
//	heads.go              signed heads: the Head message, the sources a
//	                      server sends them from, the client's gate (pure)
//	protocol_root.go      the root's HTTP address told down the tree: the
//	                      Root message, the version fallback (pure)
//	bootstrap.go          downloading, resuming and installing a snapshot
//	seal.go               sealed snapshots: the root's signature of a
//	                      snapshot's head and files, checked before install
//	fetch_client.go       a proxy's fetch connection: plain and quiet
//	                      fetches, the step down to an older server
//	learn.go              learning a database id from the sources
//	writeback*.go         starting writeback of downloaded files early
//	metrics.go            Metrics: the qs_repl_* collectors, one per
//	                      process, given to servers, replicas and
//	                      prefetchers in their configurations
package repl
