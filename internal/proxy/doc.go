// Package proxy is the replica pool of a proxy database: it implements
// store.Fetcher by asking full replicas (and, as a fall-back, the proxy's
// upstream sources) for the values the proxy store does not hold, over
// fetch connections of the replication protocol (internal/repl). A proxy
// with relays asks them first, with its replicas and sources as the
// fall-back; each request to a fall-back member is counted.
//
// L2 (l2.go) is the data centre's tier in front of the pool: it asks the
// proxy owning each key's shard (its --dc-peers, known by node name) for
// exactly the version the proxy's record names, and passes every miss to
// the pool. An answer that is not that version, or does not match the
// record, is a miss; a peer that fails or stalls is sidelined.
//
// # Invariants
//
//   - A value is returned only if it is the version the proxy asked for:
//     the replica's answer names the version's index, which must equal
//     the one in the proxy's record, and the value must have the length
//     and CRC-32C the record holds. Anything else counts against the
//     replica, and the key is asked elsewhere.
//   - Each request asks for the versions current at the reader's view
//     index (asOf); a replica answers from its MVCC history when it is
//     ahead, and says "behind" when it has not applied the version yet.
//     The proxy's sliding window keeps the values a replica less than the
//     window behind cannot have; see internal/store/proxy.go.
//   - A failing replica costs the reader latency, not an error: a request
//     that fails, times out or gets a wrong answer is retried on another
//     member until the reader's deadline; the failing member is sidelined
//     for a doubling, bounded time, then tried again.
//   - A request times out when its member sends no byte for
//     AttemptTimeout (stalled), or has not answered by AttemptTimeout plus
//     the value bytes expected on its connection at MinFetchRate (too
//     slow): a large batch from a slow but healthy member is waited for.
//     A timeout closes only that request's connection.
//   - A value larger than repl.MaxFetchValueBytes is never asked for: the
//     read fails at once with store.ErrTooLarge.
//   - Requests are spread over the members that can answer (power of two
//     choices on in-flight requests × latency); members whose applied
//     index is known to be below the version needed are tried last.
//   - Members can change while reads run (SetMembers, for a proxy that
//     finds its relays and replicas through the overlay): a retired
//     member takes no new request, finishes those it is answering (one
//     it can no longer take is asked elsewhere), then its connections
//     close and its metric series are deleted. Reads do not fail for it.
//   - Every goroutine belongs to a connection and ends with Close.
//
// Metrics (subsystem "proxy") are counted in the Metrics the owner gives
// each pool, L2 tier and warmer (the server's one per process; a private
// one when none is given): fetch_seconds (one read's remote values, end
// to end), fetches_total{result} (ok, failed, retried, too_large,
// fallback), replica_requests_total{replica, result} (ok, partial, error,
// timeout, bad_answer, aborted), replica_up{replica},
// replica_latency_seconds{replica}, replica_applied_index{replica},
// member_changes_total{change} (added, retired, retiered), members{tier}
// (preferred, fallback); for L2: l2_requests_total{peer, result} (ok,
// error, timeout, bad_answer), l2_skipped_total, l2_peer_up{peer}; for
// the shard warm-up: shard_warm_total{result} (held, not_held, bad,
// failed, full, done).
package proxy
