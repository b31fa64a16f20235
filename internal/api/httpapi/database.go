package httpapi

import (
	"github.com/quicksilver-kv/qs/internal/gateway"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/watch"
)

// Database is one database as the HTTP API sees it.
type Database struct {
	Name  string
	Store *store.Store
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
}

// Catalog finds databases by name.
type Catalog interface {
	Database(name string) (*Database, bool)
}
