package repl

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// A replica cannot seal a snapshot, but a replica below it that has the
// public key needs one to bootstrap. So a replica passes such a bootstrap
// (a Hello of SealVersion) on to its own source, and the source's answer
// back, byte for byte: the client checks the seal end to end, so the
// replica in between is trusted with nothing. Up the tree, the Hello
// reaches a node that holds the signing key (the root). Snapshot bytes
// then cross every level (fan-out does not spread bootstraps of sealed
// snapshots), paced by the root's bootstrap_rate.

// DialSource opens a connection to the source this replica follows (or,
// between sessions, its first configured source) with its dialer: where a
// server of this node relays the bootstraps it cannot seal.
func (r *Replica) DialSource(ctx context.Context) (net.Conn, string, error) {
	src := r.State().Source
	if src == "" && len(r.cfg.Sources) > 0 {
		src = r.cfg.Sources[0]
	}
	if src == "" {
		return nil, "", errors.New("this replica has no source")
	}
	dctx, cancel := context.WithTimeout(ctx, r.cfg.DialTimeout)
	defer cancel()
	c, err := r.cfg.Dial(dctx, "tcp", src)
	if err != nil {
		return nil, src, fmt.Errorf("dial %s: %w", src, err)
	}
	return c, src, nil
}

// sealRelays are the clients whose sealed bootstraps a server relays now:
// a Hello of one of them coming back (the sources form a cycle) is
// refused instead of relayed again.
type sealRelays struct {
	mu      sync.Mutex
	clients map[ProcessID]bool
}

func (s *sealRelays) take(id ProcessID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.clients[id] {
		return false
	}
	if s.clients == nil {
		s.clients = map[ProcessID]bool{}
	}
	s.clients[id] = true
	return true
}

func (s *sealRelays) release(id ProcessID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.clients, id)
}

// relayBootstrap passes h on to the source dial reaches and copies its
// answer to the client until either side ends (ctx ends when the client
// hangs up).
func (cn *conn) relayBootstrap(ctx context.Context, h *Hello, dial func(context.Context) (net.Conn, string, error)) error {
	s := cn.s
	if !s.sealRelays.take(h.ProcessID) {
		s.cfg.Metrics.snapshotsServed.WithLabelValues("unavailable").Inc()
		cn.refuse(RefuseCycle, "a sealed bootstrap of this client is already relayed through this server: the sources form a cycle")
		return nil
	}
	defer s.sealRelays.release(h.ProcessID)
	up, src, err := dial(ctx)
	if err != nil {
		s.cfg.Metrics.snapshotsServed.WithLabelValues("unavailable").Inc()
		cn.refuse(RefuseUnavailable, "this node cannot seal a snapshot and cannot reach its source to relay one: %v", err)
		return nil
	}
	defer up.Close()
	stop := context.AfterFunc(ctx, func() { up.Close() })
	defer stop()
	up.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
	if err := WriteMessage(up, h); err != nil {
		s.cfg.Metrics.snapshotsServed.WithLabelValues("unavailable").Inc()
		cn.refuse(RefuseUnavailable, "this node cannot seal a snapshot and could not ask its source %s for one: %v", src, err)
		return nil
	}
	up.SetWriteDeadline(time.Time{})
	cn.log.Info("relaying a sealed bootstrap to this node's source", "source", src)
	buf := make([]byte, writePiece)
	var n int64
	var tail frameTail
	for {
		k, rerr := up.Read(buf)
		if k > 0 {
			cn.c.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
			if _, err := cn.c.Write(buf[:k]); err != nil {
				s.cfg.Metrics.snapshotsServed.WithLabelValues("broken").Inc()
				return err
			}
			tail.write(buf[:k])
			n += int64(k)
		}
		if rerr != nil {
			if ctx.Err() != nil {
				s.cfg.Metrics.snapshotsServed.WithLabelValues("broken").Inc()
				return ctx.Err()
			}
			if !tail.ended() {
				// The client resumes through this node or another.
				s.cfg.Metrics.snapshotsServed.WithLabelValues("broken").Inc()
				return fmt.Errorf("the answer of %s to a relayed sealed bootstrap stopped short after %d bytes: %w", src, n, rerr)
			}
			s.cfg.Metrics.snapshotsServed.WithLabelValues("relayed").Inc()
			cn.log.Info("sealed bootstrap relayed", "source", src, "bytes", n)
			return nil
		}
	}
}

// frameTail follows the frames of a relayed answer as its bytes pass, to
// tell an answer that ended (after its Done, or a Refuse) from one cut
// short.
type frameTail struct {
	hdr  [frameHeader]byte
	nhdr int     // bytes of the current frame's header seen
	left uint64  // bytes of the current frame's payload and trailer not seen
	last MsgType // the type of the last whole frame
}

func (ft *frameTail) write(p []byte) {
	for len(p) > 0 {
		if ft.left > 0 {
			k := min(uint64(len(p)), ft.left)
			ft.left -= k
			p = p[k:]
			if ft.left == 0 {
				ft.last, ft.nhdr = MsgType(ft.hdr[0]), 0
			}
			continue
		}
		k := copy(ft.hdr[ft.nhdr:], p)
		ft.nhdr += k
		p = p[k:]
		if ft.nhdr == frameHeader {
			ft.left = uint64(binary.BigEndian.Uint32(ft.hdr[1:])) + frameTrailer
		}
	}
}

// ended reports whether the bytes so far end with a whole Done or Refuse.
func (ft *frameTail) ended() bool {
	return ft.nhdr == 0 && (ft.last == MsgDone || ft.last == MsgRefuse)
}
