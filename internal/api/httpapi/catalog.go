package httpapi

import "github.com/quicksilver-kv/qs/internal/service"

// The handler serves the databases of a service.Catalog (the server). A
// catalog may also implement the interfaces below, for the endpoints
// about the node rather than one database.

// OverlayCatalog is a service.Catalog whose node may be a member of the gossip
// overlay: Members returns the member list served at GET /v1/members
// (any JSON value), false when the node is not a member.
type OverlayCatalog interface {
	service.Catalog
	Members() (any, bool)
}

// HealthReporter is a service.Catalog that can tell that the node must not be
// sent traffic although it serves (a replicated root's member removed from
// its membership, whose data no longer follows the root): Unhealthy says
// why, one line per reason, nothing when healthy. GET /healthz answers 503
// with those lines. Without it, /healthz answers 200 while the process
// serves.
type HealthReporter interface {
	Unhealthy() []string
}

// Lister is a service.Catalog that can list its databases, in the order the
// status page shows them. Without it, GET /v1/node lists none.
type Lister interface {
	DatabaseNames() []string
}
