package server

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3"

	"github.com/quicksilver-kv/qs/internal/service"
	"github.com/quicksilver-kv/qs/internal/store"
)

// expiryEvery is how often the root looks for keys whose expiry has come:
// a key is deleted at most about this long after its expiry (later
// while the root cannot write).
const expiryEvery = 250 * time.Millisecond

// expiryLoop deletes the keys whose expiry has come while this node is
// the root of db (the leader, for an HA root): every expiryEvery it lists
// the keys due by its clock and writes the deletions the store's policy
// (store.ExpiryBatch) gives, at most max_batch_ops keys per entry. A key
// written again in between makes the entry fail and the round list the
// keys again. The deletions are ordinary entries of the log: every node
// applies them at the same index.
func (s *Server) expiryLoop(db *service.Database, leads func() bool) {
	t := time.NewTicker(expiryEvery)
	defer t.Stop()
	failures := repeatLog{interval: time.Minute}
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
		}
		if !leads() {
			continue
		}
		switch err := expireDue(db, time.Now().UnixNano(), s.meters.server.expired); {
		case err == nil:
			failures.ok(s.log, "expired keys deleted again", "db", db.Name)
		case !errors.Is(err, store.ErrClosed):
			s.meters.server.expiryFailures.WithLabelValues(db.Name).Inc()
			failures.failed(s.log, time.Now(), "expired keys not deleted", err, "db", db.Name)
		}
	}
}

// expireDue writes the deletions of the keys of db due at now, in as many
// entries as it takes (bounded), counts them in expired, and returns the
// first failure.
func expireDue(db *service.Database, now int64, expired *prometheus.CounterVec) error {
	limit := db.Store.Options().MaxBatchOps
	for range 64 {
		due, _, err := db.Store.DueExpiries(now, limit)
		if err != nil {
			return err
		}
		b := store.ExpiryBatch(due, now, limit)
		if len(b.Ops) == 0 {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r, err := db.Write(ctx, b)
		cancel()
		switch {
		case errors.Is(err, store.ErrConditionFailed):
			continue // a key changed since it was listed: list again
		case err != nil:
			return err
		}
		if r.Changed && !r.Duplicate {
			expired.WithLabelValues(db.Name).Add(float64(len(b.Ops)))
		}
		if len(due) < limit {
			return nil
		}
	}
	return nil
}

// leadsFor returns whether this node writes the expiry deletions of a
// root database: always for a single root, only while it leads for an HA
// root (slot not nil).
func leadsFor(slot *raftSlot) func() bool {
	if slot == nil {
		return func() bool { return true }
	}
	return func() bool {
		n := slot.Load()
		return n != nil && n.Status().State == raft.StateLeader.String()
	}
}
