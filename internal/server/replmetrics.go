package server

import (
	"github.com/quicksilver-kv/qs/internal/metrics"
	"github.com/quicksilver-kv/qs/internal/repl"
)

// replMetrics is the process's one repl.Metrics, in the process registry:
// the replication server, the replicas (and the Raft members' snapshot
// fetches) and the prefetch subscriptions of every Server of the process
// count in it.
var replMetrics = metrics.MustRegister(repl.NewMetrics())
