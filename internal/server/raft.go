package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/quicksilver-kv/qs/internal/clusterauth"
	"github.com/quicksilver-kv/qs/internal/config"
	"github.com/quicksilver-kv/qs/internal/metrics"
	"github.com/quicksilver-kv/qs/internal/raftroot"
	"github.com/quicksilver-kv/qs/internal/repl"
	"github.com/quicksilver-kv/qs/internal/service"
	"github.com/quicksilver-kv/qs/internal/store"
)

// A database with [database.raft] is one member of a replicated root: its
// store is written only by its raftroot.Node, which applies the committed
// Raft log; HTTP and memcached writes are proposed through the node.

// raftMetrics counts for the Raft members of every database of the
// process (and of every Server, where a test runs several in one process).
var raftMetrics = metrics.MustRegister(raftroot.NewMetrics())

// raftDBID is the database id a new member's store is created with: the
// configured db_id; for a joining member, the cluster's (asked from the
// peers); otherwise one derived from the database name and the initial
// members, the same on every initial member.
func raftDBID(d config.Database, peers map[uint64]string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (store.DBID, error) {
	if d.DBID != "" {
		return store.ParseDBID(d.DBID)
	}
	if d.Raft.Join {
		var addrs []string
		for id, a := range peers {
			if id != d.Raft.NodeID {
				addrs = append(addrs, a)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return raftroot.LearnClusterID(ctx, addrs, dial)
	}
	var items []string
	for id, a := range peers {
		items = append(items, fmt.Sprintf("%d=%s", id, a))
	}
	slices.Sort(items)
	h := sha256.Sum256([]byte("qs raft root\x00" + d.Name + "\x00" + strings.Join(items, ",")))
	var id store.DBID
	copy(id[:], h[:])
	return id, nil
}

// startRaft starts the Raft member of database d on ln (its Raft
// listener), once the replication listener (which serves snapshots to
// members that fell behind) is up.
func (s *Server) startRaft(d config.Database, db *service.Database, ln net.Listener) error {
	peers, err := config.ParsePeers(d.Raft.Peers)
	if err != nil {
		return err
	}
	replAddr := ""
	if s.replAddr != nil {
		replAddr = s.replAddr.String()
	}
	st := db.Store
	cfg := raftroot.Config{
		Database: d.Name, NodeID: d.Raft.NodeID, Listen: d.Raft.Listen, Peers: peers, Join: d.Raft.Join,
		Dir:             filepath.Join(s.cfg.Data, d.Name+".raft"),
		ReplAddr:        replAddr,
		TickInterval:    d.Raft.Tick.Duration,
		ElectionTicks:   d.Raft.ElectionTicks,
		SnapshotEntries: d.Raft.SnapshotEntries,
		CatchUpEntries:  d.Raft.CatchUpEntries,
		ProposalTimeout: d.Raft.ProposalTimeout.Duration,
		Heartbeat:       d.Heartbeat.Duration,
		Logger:          s.log,
		Metrics:         raftMetrics,
		FetchSnapshot: func(ctx context.Context, src string, minIndex uint64) error {
			r, err := repl.NewReplica(repl.ReplicaConfig{Database: d.Name, Sources: []string{src}, Dial: s.replDial(),
				BootstrapLock: s.cfg.BootstrapLock, Metrics: replMetrics}, st, s.log.With("db", d.Name))
			if err != nil {
				return err
			}
			return r.Bootstrap(ctx, src, minIndex)
		},
		AfterPersist: failpointAfterPersist(st),
		Describe:     s.describe(db, s.raftNodes[d.Name]),
		// The cluster key and repl_tls authenticate the Raft transport too.
		Dial:     s.auth.Dialer(clusterauth.RaftClaim(d.Raft.NodeID)),
		Listener: func(ln net.Listener) net.Listener { return s.auth.Listener(ln, "raft", maxRaftConns) },
		Ln:       ln,
	}
	n, err := raftroot.Start(cfg, st)
	if err != nil {
		return fmt.Errorf("database %s: %w", d.Name, err)
	}
	s.rafts[d.Name] = n
	s.raftNodes[d.Name].Store(n)
	s.announcef("raft listening on %s db=%s\n", n.Addr(), d.Name)
	s.log.Info("raft member started", "db", d.Name, "node_id", d.Raft.NodeID, "raft", n.Addr(), "peers", d.Raft.Peers, "join", d.Raft.Join)
	return nil
}

// raftSlot holds a database's Raft member once it started: HTTP and
// memcached requests can arrive before (the listeners start first), and
// must never write the store directly.
type raftSlot struct {
	atomic.Pointer[raftroot.Node]
	peers clusterTree // what the member learned of its peers (clustertree.go)
}

var errRaftStarting = fmt.Errorf("%w: raft member starting", store.ErrUnavailable)

func (r *raftSlot) Write(ctx context.Context, b store.Batch) (store.WriteResult, error) {
	n := r.Load()
	if n == nil {
		return store.WriteResult{}, errRaftStarting
	}
	return n.Write(ctx, b)
}

func (r *raftSlot) AddMember(ctx context.Context, id uint64, addr string) error {
	n := r.Load()
	if n == nil {
		return errRaftStarting
	}
	return n.AddMember(ctx, id, addr)
}

func (r *raftSlot) RemoveMember(ctx context.Context, id uint64) error {
	n := r.Load()
	if n == nil {
		return errRaftStarting
	}
	return n.RemoveMember(ctx, id)
}

// status is the raft part of the database's status.
func (r *raftSlot) status() map[string]any {
	n := r.Load()
	if n == nil {
		return map[string]any{"role": "root", "raft": nil, "members": nil}
	}
	rs := n.Status()
	members := map[string]string{}
	for id, a := range rs.Members {
		members[strconv.FormatUint(id, 10)] = a
	}
	return map[string]any{"role": "root", "raft": rs, "members": members}
}

// stopRaft stops every Raft member (before the stores close).
func (s *Server) stopRaft() error {
	var errs []error
	for name, n := range s.rafts {
		if err := n.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("raft %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// Unhealthy implements httpapi.HealthReporter: a database whose Raft
// member was removed from the membership no longer follows the root, so
// the node answers /healthz 503 (and a load balancer sends it no reads).
func (s *Server) Unhealthy() []string {
	var why []string
	for _, name := range s.order {
		if slot := s.raftNodes[name]; slot != nil {
			if n := slot.Load(); n != nil && n.Removed() {
				why = append(why, fmt.Sprintf("database %s: this member was removed from the raft membership; its data no longer follows the root", name))
			}
		}
	}
	return append(why, s.forkedReasons()...)
}
