// Package cache is the policy of a proxy's value cache: which values a
// proxy keeps, which it gives up, and how much it may hold. It does no
// I/O: the store (internal/store) owns the records of every key (which
// version exists, its length and CRC) and the values on disk, and asks
// this package what to do with them.
//
//   - Window: the sliding window, in log entries; Window.Floor is the
//     highest index whose values may be remote.
//   - Clock: the reference bits of the CLOCK eviction of stored values.
//     Reads set a key's bit; the sweeping hand (Clock.Sweep, over a
//     SweepCursor of the store's records) clears it, and gives up a
//     stored value outside the window whose bit was already clear. One
//     round is bounded, and says where the next starts.
//   - Limits: the budget of stored values and the free-space limits of
//     the disk; Limits.Need says how many bytes to evict now.
//   - Pacer: how often the keeper sweeps while a sweep finds nothing to
//     evict (everything over the budget is in the window, or in use).
//   - Reclaim: when to compact the key range of the values given up, so
//     that their disk space comes back.
//   - Queue: the bounded queue of values waiting to be stored; a reader
//     never waits on it.
//   - Transient: the in-memory tier in front of the disk cache. A value
//     a proxy fetched enters memory first and is written to disk only
//     when it is read again while there (S3-FIFO's small queue and ghost
//     list), so a value read once costs no disk write. A value a relay
//     published for another proxy's miss enters it too (Prefetch), but
//     counts as no read.
//   - ShardMap: the shards of a data centre's L2 cache. A byte string's
//     logical shard is the top 10 bits of its XXH64; N physical shards
//     group them (logical >> (10 − log2 N)), and a node owns the shard
//     of its node name (OwnShard). Doubling N only splits shards.
//   - ShardCache: the separate budget of the values of a node's own
//     shard, which the other nodes of its data centre ask it for (L2).
//     It answers only the exact version asked, and checks each value's
//     CRC before handing it back.
//
// # Invariants
//
//   - Nothing here decides which version a reader sees. Every value this
//     package hands back is keyed by its version (the index of the write
//     that set it); the store serves it only for a record of that index,
//     after checking its length and CRC, and stores it only if the
//     key's record still names that version when the write commits.
//   - Nothing here gives up a value written inside the window: the hand
//     passes over records above the window's floor, and the store checks
//     the floor again when the eviction commits.
//   - Every structure is bounded: the queue by its capacity, the tier by
//     its byte budget, the ghost list by its entry count, the reference
//     bits by a fixed table, a sweep round by MaxSweepKeys records and
//     MaxVictims values.
package cache
