package discovery

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/quicksilver-kv/qs/internal/store"
)

// ErrBadMeta: a member's node meta cannot be decoded.
var ErrBadMeta = errors.New("qs: malformed member meta")

// MetaMaxSize is the most bytes of node meta memberlist carries.
const MetaMaxSize = memberlist.MetaMaxSize

// metaVersion opens every encoded Meta.
const metaVersion = 1

// maxPath bounds the path a member advertises (and accepts).
const maxPath = 32

// Role of a member for one database.
type Role uint8

const (
	RoleRoot    Role = 0
	RoleReplica Role = 1
	RoleProxy   Role = 2
	// RoleRelay is a proxy that serves the other proxies of its data
	// centre (it was elected, see ElectRelays, or is configured so).
	RoleRelay Role = 3
	// RoleRelayClient is a proxy whose relays are fixed by its
	// configuration: a client of those relays, never elected one itself
	// (it would fetch for the others from its own relays). Members that
	// do not know this role see the member's meta as malformed, and so
	// never elect it either.
	RoleRelayClient Role = 4
)

// IsProxy reports whether r is a proxy's role (a relay, and a client of
// fixed relays, are proxies).
func (r Role) IsProxy() bool { return r == RoleProxy || r == RoleRelay || r == RoleRelayClient }

// RelayCandidate reports whether a member of role r may be elected a
// relay of its data centre: a proxy whose relays are not fixed.
func (r Role) RelayCandidate() bool { return r == RoleProxy || r == RoleRelay }

func (r Role) String() string {
	switch r {
	case RoleRoot:
		return "root"
	case RoleReplica:
		return "replica"
	case RoleProxy:
		return "proxy"
	case RoleRelay:
		return "relay"
	case RoleRelayClient:
		return "relay-client"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// Meta is what a member advertises in the overlay.
type Meta struct {
	// Process is the member's replication process id, by which a source
	// recognises a replica's handshake as this member's.
	Process [16]byte
	DC      string
	HTTP    string // HTTP API address
	Repl    string // replication address; "" while not listening
	DBs     []DBMeta
}

// DBMeta is a member's position for one database.
type DBMeta struct {
	Name        string
	ID          store.DBID
	Role        Role
	Applied     uint64
	Depth       int
	Children    int
	MaxChildren int      // 0: no limit
	Path        []uint64 // ancestors' ids, source first, root last
}

// AppliedRefresh is how often a member of an overlay of size members
// re-advertises its applied index when nothing else in its advertisement
// changed. The index only tells a stalled source apart (a candidate ahead
// of a replica that lags), yet every change of an advertisement is
// gossiped to every member: refreshed every 10 s by each member, the
// overlay carried members/10 updates a second, and each member passed on
// each of them, so gossip grew with the square of the overlay (about
// 29 kB/s per member at 200 members). The refresh is every 10 s up to 50
// members and then slows down so that the whole overlay carries at most
// 5 refreshes a second, up to once a minute (300 members and more). A
// stalled source is then seen once a candidate has advertised an index
// past the replica's: after the stall limit and, for a member that
// lagged at the refresh of every candidate, up to one refresh later.
func AppliedRefresh(members int) time.Duration {
	const minRefresh, maxRefresh, overlayRate = 10 * time.Second, time.Minute, 5
	return min(maxRefresh, max(minRefresh, time.Duration(members)*time.Second/overlayRate))
}

// NodeID is the id under which a member appears in paths: a 64-bit FNV-1a
// hash of its node name.
func NodeID(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64()
}

// Encode returns m's wire form. Databases that would take it over
// MetaMaxSize are left out; dropped says how many.
//
//	meta := version(1) process(16) dc http repl count(uvarint) db*
//	db   := name dbid(16) role(1) applied(uvarint) depth(uvarint)
//	        children(uvarint) max(uvarint) pathlen(uvarint) id(8 BE)*
//	string := len(uvarint) bytes
func (m Meta) Encode() (b []byte, dropped int) {
	head := append([]byte{metaVersion}, m.Process[:]...)
	head = appendString(head, m.DC)
	head = appendString(head, m.HTTP)
	head = appendString(head, m.Repl)
	var dbs [][]byte
	size := len(head) + binary.MaxVarintLen16
	for _, d := range m.DBs {
		e := d.append(nil)
		if size+len(e) > MetaMaxSize {
			dropped++
			continue
		}
		size += len(e)
		dbs = append(dbs, e)
	}
	b = binary.AppendUvarint(head, uint64(len(dbs)))
	for _, e := range dbs {
		b = append(b, e...)
	}
	return b, dropped
}

func (d *DBMeta) append(b []byte) []byte {
	b = appendString(b, d.Name)
	b = append(b, d.ID[:]...)
	b = append(b, byte(d.Role))
	b = binary.AppendUvarint(b, d.Applied)
	b = binary.AppendUvarint(b, uint64(d.Depth))
	b = binary.AppendUvarint(b, uint64(d.Children))
	b = binary.AppendUvarint(b, uint64(d.MaxChildren))
	b = binary.AppendUvarint(b, uint64(len(d.Path)))
	for _, id := range d.Path {
		b = binary.BigEndian.AppendUint64(b, id)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// DecodeMeta parses a member's node meta. An empty meta is a member that
// advertises nothing yet.
func DecodeMeta(b []byte) (Meta, error) {
	var m Meta
	if len(b) == 0 {
		return m, nil
	}
	if len(b) > MetaMaxSize {
		return m, fmt.Errorf("%w: %d bytes", ErrBadMeta, len(b))
	}
	if b[0] != metaVersion {
		return m, fmt.Errorf("%w: version %d", ErrBadMeta, b[0])
	}
	r := reader{b: b[1:]}
	copy(m.Process[:], r.bytes(16))
	m.DC, m.HTTP, m.Repl = r.string(), r.string(), r.string()
	n := r.uvarint(MetaMaxSize)
	for i := uint64(0); i < n && r.err == nil; i++ {
		var d DBMeta
		d.Name = r.string()
		copy(d.ID[:], r.bytes(16))
		d.Role = Role(r.byte())
		d.Applied = r.uvarint(1<<64 - 1)
		d.Depth = int(r.uvarint(maxPath))
		d.Children = int(r.uvarint(1 << 31))
		d.MaxChildren = int(r.uvarint(1 << 31))
		np := r.uvarint(maxPath)
		for j := uint64(0); j < np && r.err == nil; j++ {
			d.Path = append(d.Path, binary.BigEndian.Uint64(r.bytes(8)))
		}
		if r.err == nil && d.Role > RoleRelayClient {
			r.err = fmt.Errorf("unknown role %d", d.Role)
		}
		m.DBs = append(m.DBs, d)
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%d bytes after the meta", len(r.b))
	}
	if r.err != nil {
		return Meta{}, fmt.Errorf("%w: %v", ErrBadMeta, r.err)
	}
	return m, nil
}

// reader decodes; the first error sticks and later reads return zeros.
type reader struct {
	b   []byte
	err error
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil || len(r.b) < n {
		if r.err == nil {
			r.err = errors.New("truncated")
		}
		return make([]byte, n)
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}

func (r *reader) byte() byte { return r.bytes(1)[0] }

func (r *reader) uvarint(limit uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errors.New("bad varint")
		return 0
	}
	if v > limit {
		r.err = fmt.Errorf("value %d over %d", v, limit)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) string() string {
	n := r.uvarint(MetaMaxSize)
	return string(r.bytes(int(n)))
}
