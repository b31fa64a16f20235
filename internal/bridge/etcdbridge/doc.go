// Package etcdbridge copies the keys under a prefix of an etcd cluster
// into qs at one revision, then follows etcd's watch from that revision:
// each etcd revision (one put, delete or transaction) becomes one atomic qs
// batch that also stores the revision under the bridge's state key (see
// package bridge). After a crash it resumes the watch from the revision qs
// holds; when etcd has compacted its history past that revision the
// changes in between are gone, and the bridge stops with ErrCompacted
// (recover with a fresh copy: Config.Resync).
//
// Batching (Group, Ops) is pure and tested directly; Bridge does the I/O.
package etcdbridge
