// Package clusterauth authenticates the connections of a cluster's internal
// ports (Raft, replication) before any protocol byte is exchanged, by
// mutual TLS, by a shared cluster key, or both.
//
// With a cluster key, both sides prove they hold the key by an HMAC
// challenge-response (see handshake.go and docs/protocol.md): nonces come
// from crypto/rand, MACs are compared in constant time, and a server tells
// a caller nothing about itself (not its cluster, not its node id) until
// the caller has proved it holds the key. With mutual TLS, both sides
// present certificates signed by the cluster's CA; a node certificate names
// the Raft member ids it may speak for (URI SANs "qs:raft-node/<id>").
//
// Every connection carries the identity it authenticated as (Peer): the
// claims of its certificate, or the one claim its keyed handshake carried
// under the MAC. Protocols bind their own ids to those claims (the Raft
// transport accepts messages from member N only on a connection that
// claims "raft-node/N").
//
// A Listener also bounds what a stranger can cost: at most MaxConns
// connections are open at once (more are closed at accept), and the
// handshake must complete within HandshakeTimeout, reading at most a few
// hundred bytes before the peer is authenticated.
//
// The cluster key authenticates the peer at connection time; it does not
// encrypt the traffic or protect it from an attacker on the path who can
// take over an established TCP connection. Mutual TLS does both.
package clusterauth
