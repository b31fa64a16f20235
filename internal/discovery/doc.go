// Package discovery is the gossip overlay through which a fleet finds its
// replication tree: every member advertises what it serves, members probe
// each other's round-trip times, and a replica with no configured source
// picks one itself.
//
// The overlay is hashicorp/memberlist. Each member's node meta (Meta,
// under memberlist's 512-byte limit) carries its data centre, its
// addresses and, per database, its id, role, applied index, depth in the
// tree, child count, child limit and its path to the root (the ids of its
// ancestors). Round-trip times are estimated with Vivaldi network
// coordinates (hashicorp/serf/coordinate), exchanged in the payload of
// memberlist's probe acks, as serf does.
//
// Source choice is a pure function of the member list (Choose): the nearest
// candidate by estimated RTT that has room for another child, a shallower
// one on a tie, never one of the chooser's own descendants (a candidate
// whose path contains the chooser) and only candidates whose path reaches
// a live root, suspect candidates after all the others. A replica moves
// when its source dies, stalls, forms a cycle, stays suspect while another
// candidate is not, or becomes much slower than another candidate (the
// hysteresis of Policy keeps the tree from flapping). A source left for
// suspicion is probed until it answers (Overlay.Watch): it stays suspect,
// and is not chosen again, until then. Moving never drops the mover's own
// children: they keep streaming from it while it reconnects upstream.
//
// A proxy that names neither relays nor replicas takes its fetch pool
// from the overlay, again as a pure function of the member list
// (ChoosePool): the relays elected in its data centre (ElectRelays) are
// preferred, the nearest full replicas of its database are the
// fall-back; an elected relay fetches from those replicas and never from
// another relay.
//
// Members are read from the overlay's own copy of memberlist's node
// table, made in memberlist's event callbacks: the nodes memberlist
// returns are rewritten in place as news arrives. A member is Suspect
// when this member depends on it (Dependencies) and it missed this
// member's last direct probes (memberlist keeps its own suspicion to
// itself); relay election and the DC view leave suspect members out (an
// elected relay keeps its seat while only suspect), a proxy's pool of full
// replicas and a replica's source choice rank them last.
//
// An Agent applies Choose for one database of one process: it answers the
// replica's question "where from?" (Sources), hears its failures (Failed)
// and tells it to reconnect when the choice moves (Run).
//
// The overlay is encrypted and authenticated with memberlist's keyring
// when a key is configured (the server derives it from the cluster key,
// clusterauth.Key.Derive("gossip")); without one it binds only to
// loopback unless explicitly made insecure.
package discovery
