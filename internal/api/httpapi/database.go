package httpapi

import (
	"context"

	"github.com/quicksilver-kv/qs/internal/gateway"
	"github.com/quicksilver-kv/qs/internal/keyuse"
	"github.com/quicksilver-kv/qs/internal/statuspage"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/tree"
	"github.com/quicksilver-kv/qs/internal/wal"
	"github.com/quicksilver-kv/qs/internal/watch"
)

// Database is one database as the HTTP API sees it.
type Database struct {
	Name  string
	Store *store.Store
	// Node is the name of the node serving the database (its status
	// shows it as "node").
	Node string
	// CanWrite returns nil when this node accepts writes for the database,
	// or an error wrapping store.ErrNotRoot that names the root.
	CanWrite func() error
	// Status adds role-specific fields (role, upstream, lag, ...) to
	// GET /v1/{db}/status. May be nil.
	Status func() map[string]any
	// Watch serves GET /v1/{db}/watch: the database's watch hub, created
	// and run by the server wiring. Nil answers the endpoint 503
	// unavailable.
	Watch *watch.Hub
	// Gate admits writes: producer token, key prefixes, quotas (see
	// gate.go). Nil: writes are open to anyone (development only).
	Gate *gateway.Gateway
	// Propose, when set, commits writes in place of Store.Write: the Raft
	// member of a replicated root (internal/raftroot), which answers once
	// the write is committed by a quorum and applied here.
	Propose func(ctx context.Context, b store.Batch) (store.WriteResult, error)
	// Bridge, set on a bridged root only, appends entries of the source's
	// log verbatim (store.Apply): POST /v1/{db}/bridge. Nil: that endpoint
	// answers 400 bad_request.
	Bridge func(ctx context.Context, entries []wal.Entry) error
	// Members changes the membership of a replicated root
	// (POST/DELETE /v1/{db}/raft/members). Nil: the endpoints answer
	// 400 bad_request.
	Members Members
	// Tree returns this node's subtree of the replication tree for the
	// database, as its children reported it (internal/tree); served at
	// GET /v1/{db}/tree and on the status page. Nil: the node alone.
	Tree func() tree.Node
	// Reads samples the keys read by GET, mget and memcache get
	// (internal/keyuse). Nil: reads are not sampled.
	Reads *keyuse.Sampler
	// KeyUse is what the node and the nodes below it sampled: it answers
	// GET /v1/{db}/usage?unread=true. Nil (on replicas): that request is
	// answered 400, naming the root.
	KeyUse *keyuse.Window
	// History is the recent applied index, lag and cache counters graphed
	// by the status page. Nil: no graph.
	History *statuspage.History
}

// Members adds and removes the members of a replicated root.
type Members interface {
	AddMember(ctx context.Context, id uint64, addr string) error
	RemoveMember(ctx context.Context, id uint64) error
}

// Write commits b through Propose, or Store.Write when there is none.
func (d *Database) Write(ctx context.Context, b store.Batch) (store.WriteResult, error) {
	if d.Propose != nil {
		return d.Propose(ctx, b)
	}
	return d.Store.Write(ctx, b)
}

// Catalog finds databases by name.
type Catalog interface {
	Database(name string) (*Database, bool)
}

// OverlayCatalog is a Catalog whose node may be a member of the gossip
// overlay: Members returns the member list served at GET /v1/members
// (any JSON value), false when the node is not a member.
type OverlayCatalog interface {
	Catalog
	Members() (any, bool)
}

// HealthReporter is a Catalog that can tell that the node must not be
// sent traffic although it serves (a replicated root's member removed from
// its membership, whose data no longer follows the root): Unhealthy says
// why, one line per reason, nothing when healthy. GET /healthz answers 503
// with those lines. Without it, /healthz answers 200 while the process
// serves.
type HealthReporter interface {
	Unhealthy() []string
}

// Lister is a Catalog that can list its databases, in the order the
// status page shows them. Without it, GET /v1/node lists none.
type Lister interface {
	DatabaseNames() []string
}
