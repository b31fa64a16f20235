// Package headsig signs and verifies the head of a database's log: the
// index of an entry and its chain hash, signed by the root with an
// Ed25519 key. Because every entry's hash covers the hash before it, a
// signature on one head vouches for the whole log up to that index: a
// replica that holds entries whose chain ends in a signed hash holds the
// root's entries, whoever relayed them.
//
// # Invariants
//
//   - A signature covers a domain-separation prefix, the database id, the
//     index and the hash: it cannot be replayed for another database or
//     another index. A seal covers another prefix, so neither can be
//     taken for the other.
//   - Only the holders of the private key (the root, or every member of
//     an HA root) sign; every other node forwards signatures it verified
//     and never signs.
//   - Keys are read from PEM files (PKCS #8 private key, PKIX public
//     key), as written by NewKeyPair; anything else is refused with an
//     error naming the file.
package headsig
