// Package keyuse samples which keys are read, so that an operator can find
// the keys nobody reads (qs usage --unread).
//
// # Sampling
//
// Every node samples its own reads: one read in Rate (default 64), chosen
// by the runtime's per-thread random generator, so the read path takes no
// lock and touches no shared cache line unless the read is sampled. A
// sampled read adds one to its key's count in the node's Sampler, a map
// from the key's 64-bit hash (xxhash; the same on every node) to a count,
// bounded to MaxPending keys: a sample for a new key beyond that is
// dropped and counted. Each replica drains its Sampler into the report it
// sends its source every second (internal/tree), and adds its children's
// samples to it, so samples flow up the tree to the root. The root adds
// them, with its own, to a Window: the last time each key hash was seen
// read, bounded to MaxWindowKeys and forgotten after Retention.
//
// # What "unread" means
//
// A key is reported unread over a window when no sampled read of it
// reached the root within that window. A key read r times in the window
// is missed with probability (1 − 1/Rate)^r: about 21% for r = 100 at the
// default rate, under 0.2% for r = 400. So the report finds keys read
// never or very rarely; it does not prove a key was read zero times. A
// window longer than the root has been collecting covers only the time
// since it started (the report says since when).
package keyuse
