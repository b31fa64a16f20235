// Package wal defines the Quicksilver log: the entry format, its canonical
// encoding, the hash chain over entries and the compressed blocks in which
// entries are stored and shipped.
//
// Invariants:
//   - Every entry has an index; indexes of one database start at 1 and
//     increase by exactly one.
//   - An entry's hash is SHA-256(previous entry's hash || entry body), where
//     the body is the canonical encoding returned by AppendBody. The hash of
//     the entry before index 1 is the zero hash. Two logs with the same hash
//     at the same index are identical up to that index.
//   - The encoding is versioned by its first byte; decoders reject versions
//     they do not know rather than guess.
//
// The package is pure: no I/O, no globals other than limits.
package wal
