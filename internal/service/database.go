package service

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/quicksilver-kv/qs/internal/gateway"
	"github.com/quicksilver-kv/qs/internal/keyuse"
	"github.com/quicksilver-kv/qs/internal/statuspage"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/tree"
	"github.com/quicksilver-kv/qs/internal/wal"
	"github.com/quicksilver-kv/qs/internal/watch"
)

// Database is one database served by this node.
type Database struct {
	Name  string
	Store *store.Store
	// Node is the name of the node serving the database (its status
	// shows it as "node").
	Node string
	// Refuse returns nil when this node takes writes for the database, or
	// why it does not: an error wrapping store.ErrNotRoot that names the
	// root. Nil: the node takes them. Callers ask CanWrite, not Refuse.
	Refuse func() error
	// Status returns the role-specific fields (role, upstream, lag, ...)
	// of the database's status: GET /v1/{db}/status, the memcached stats'
	// role, this node's line of the tree. May be nil.
	Status func() map[string]any
	// Watch is the database's watch hub, created and run by the server
	// wiring. Nil: the node serves no watches (GET /v1/{db}/watch answers
	// 503 unavailable).
	Watch *watch.Hub
	// Gate admits writes: producer token, key prefixes, quotas. Nil:
	// writes are open to anyone (development only).
	Gate *gateway.Gateway
	// Propose, when set, commits writes in place of Store.Write: the Raft
	// member of a replicated root (internal/raftroot), which answers once
	// the write is committed by a quorum and applied here.
	Propose func(ctx context.Context, b store.Batch) (store.WriteResult, error)
	// Bridge, set on a bridged root only, appends entries of the source's
	// log verbatim (store.Apply). Nil: the database takes no bridged
	// entries.
	Bridge func(ctx context.Context, entries []wal.Entry) error
	// Members changes the membership of a replicated root. Nil: the
	// database is not one.
	Members Members
	// Tree returns this node's subtree of the replication tree for the
	// database, as its children reported it (internal/tree). Nil: the
	// node alone.
	Tree func() tree.Node
	// Reads samples the keys read by GET, mget and memcache get
	// (internal/keyuse). Nil: reads are not sampled.
	Reads *keyuse.Sampler
	// KeyUse is what the node and the nodes below it sampled, kept by the
	// root. Nil (on replicas): the node cannot tell which keys go unread.
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

// Catalog finds databases by name.
type Catalog interface {
	Database(name string) (*Database, bool)
}

// Databases is a fixed Catalog: the databases of a node by name.
type Databases map[string]*Database

// Database returns the database named name.
func (c Databases) Database(name string) (*Database, bool) {
	d, ok := c[name]
	return d, ok
}

// Write commits b through Propose, or Store.Write when there is none.
func (d *Database) Write(ctx context.Context, b store.Batch) (store.WriteResult, error) {
	if d.Propose != nil {
		return d.Propose(ctx, b)
	}
	return d.Store.Write(ctx, b)
}

// CanWrite returns nil when this node takes writes for the database, or
// the refusal of Refuse. A refusal that wraps none of the store's errors
// a door answers (refusedKinds) is wrapped in store.ErrNotRoot: whatever
// the reason, a node that takes no writes is not the database's root.
func (d *Database) CanWrite() error {
	if d.Refuse == nil {
		return nil
	}
	err := d.Refuse()
	if err == nil {
		return nil
	}
	for _, k := range refusedKinds {
		if errors.Is(err, k) {
			return err
		}
	}
	return fmt.Errorf("%w: %w", store.ErrNotRoot, err)
}

// refusedKinds are the errors a refusal keeps as they are: the store's
// (a closed store, a Raft member starting, ...) and the context's.
var refusedKinds = []error{
	store.ErrNotRoot, store.ErrClosed, store.ErrUnavailable, store.ErrCorrupt, store.ErrDiskFull,
	store.ErrWriteFailed, store.ErrInvalid, store.ErrTooLarge, store.ErrConditionFailed,
	context.Canceled, context.DeadlineExceeded,
}

// RoleStatus is the role-specific part of the database's status, in a map
// of its own: the fields of Status, with "role" set from CanWrite ("root"
// when the node takes writes, else "replica") when Status sets none.
func (d *Database) RoleStatus() map[string]any {
	out := map[string]any{}
	if d.Status != nil {
		maps.Copy(out, d.Status())
	}
	if _, ok := out["role"]; !ok {
		out["role"] = d.writeRole()
	}
	return out
}

// Role is the database's role on this node: the "role" of Status when it
// is a string, else "root" when the node takes writes, "replica" when not.
func (d *Database) Role() string {
	if d.Status != nil {
		if r, ok := d.Status()["role"].(string); ok {
			return r
		}
	}
	return d.writeRole()
}

// writeRole is the role CanWrite tells: "root" or "replica".
func (d *Database) writeRole() string {
	if d.CanWrite() != nil {
		return "replica"
	}
	return "root"
}
