package repl

import (
	"context"
	"crypto/sha256"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/quicksilver-kv/qs/internal/headsig"
	"github.com/quicksilver-kv/qs/internal/store"
)

// bootstrap answers a bootstrap Hello: Welcome, the snapshot's manifest,
// its files from the resume point on (Chunk… FileEnd per file), the
// seal when asked (seal.go), Done. A replica relays a bootstrap that asks
// for a seal to its own source (seal_relay.go). Reading the snapshot's files holds
// nothing open in the live database.
func (cn *conn) bootstrap(ctx context.Context, st *store.Store, h *Hello) error {
	s := cn.s
	var signer *headsig.Signer
	if h.Version >= SealVersion {
		var heads HeadSource
		if s.cfg.Heads != nil {
			heads = s.cfg.Heads(h.Database)
		}
		signer = heads.Signer
		if signer == nil && heads.Upstream != nil {
			return cn.relayBootstrap(ctx, h, heads.Upstream)
		}
		if signer == nil {
			s.cfg.Metrics.snapshotsServed.WithLabelValues("unsealable").Inc()
			cn.refuse(RefuseUnavailable, "%q: this node does not hold the root's signing key, so it cannot seal a snapshot; bootstrap from the root", st.Name())
			return nil
		}
	}
	snap, err := s.snaps.acquire(st, h.Resume.Snapshot, h.LastIndex)
	if err != nil {
		s.cfg.Metrics.snapshotsServed.WithLabelValues("unavailable").Inc()
		cn.refuse(RefuseUnavailable, "cannot make a snapshot of %q: %v", st.Name(), err)
		return err
	}
	defer s.snaps.release(snap)
	from := ResumePoint{Snapshot: snap.id}
	if h.Resume.Snapshot == snap.id {
		from = h.Resume
		if int(from.File) > len(snap.files) || (int(from.File) < len(snap.files) && from.Offset > snap.files[from.File].Size) {
			s.cfg.Metrics.snapshotsServed.WithLabelValues("bad_resume").Inc()
			cn.refuse(RefuseBadHello, "resume point file %d offset %d is outside snapshot %s", from.File, from.Offset, snap.id)
			return nil
		}
	}
	lr, err := st.LogRange()
	if err != nil {
		return err
	}
	w := &Welcome{Version: h.Version, ProcessID: s.cfg.ProcessID, DBID: st.DBID(), AppliedIndex: lr.Last,
		LogFirst: lr.First, NextIndex: snap.head.Index + 1}
	if t := st.AppliedTime(); !t.IsZero() {
		w.AppliedTime = t.UnixNano()
	}
	if err := cn.send(w); err != nil {
		return err
	}
	if err := cn.send(&Snapshot{ID: snap.id, Index: snap.head.Index, Time: snap.head.Time, Hash: snap.head.Hash, Files: snap.files}); err != nil {
		return err
	}
	s.cfg.Metrics.snapshotTransfers.Inc()
	defer s.cfg.Metrics.snapshotTransfers.Dec()
	cn.log.Info("bootstrap transfer started", "snapshot", snap.id.String(), "index", snap.head.Index,
		"bytes", snap.size, "resume_file", from.File, "resume_offset", from.Offset)
	t0 := time.Now()
	for i := int(from.File); i < len(snap.files); i++ {
		off := uint64(0)
		if i == int(from.File) {
			off = from.Offset
		}
		if err := cn.sendFile(ctx, snap, i, off, signer != nil); err != nil {
			s.cfg.Metrics.snapshotsServed.WithLabelValues("broken").Inc()
			return fmt.Errorf("snapshot file %s: %w", snap.files[i].Name, err)
		}
	}
	if signer != nil {
		d, err := snap.digest()
		if err != nil {
			s.cfg.Metrics.snapshotsServed.WithLabelValues("broken").Inc()
			return fmt.Errorf("seal snapshot %s: %w", snap.id, err)
		}
		if err := cn.send(&Seal{Sig: signer.Seal(st.DBID(), snap.head.Index, snap.head.Hash, d)}); err != nil {
			s.cfg.Metrics.snapshotsServed.WithLabelValues("broken").Inc()
			return err
		}
	}
	s.cfg.Metrics.snapshotsServed.WithLabelValues("complete").Inc()
	cn.log.Info("bootstrap transfer complete", "snapshot", snap.id.String(), "took", time.Since(t0))
	return cn.send(&Done{LastIndex: snap.head.Index})
}

// sendFile sends file i of snap from off on, then its FileEnd. The CRC
// covers the whole file, so a resumed file's first off bytes are read
// again here, as the receiver reads its copy of them. With sum, a file
// sent whole has its SHA-256 recorded for the seal.
func (cn *conn) sendFile(ctx context.Context, snap *snapshot, i int, off uint64, sum bool) error {
	sf := snap.files[i]
	f, err := os.Open(filepath.Join(snap.dir, sf.Name))
	if err != nil {
		return err
	}
	defer f.Close()
	crc, err := crcPrefix(f, off)
	if err != nil {
		return err
	}
	var sha hash.Hash
	if sum && off == 0 {
		sha = sha256.New()
	}
	buf := make([]byte, cn.s.cfg.ChunkBytes)
	for off < sf.Size {
		n, err := io.ReadFull(f, buf[:min(uint64(len(buf)), sf.Size-off)])
		if err != nil {
			return fmt.Errorf("read at %d: %w", off, err)
		}
		if l := cn.s.limit; l != nil {
			if err := l.WaitN(ctx, n); err != nil {
				return err
			}
		}
		if err := cn.send(&Chunk{File: uint32(i), Offset: off, Data: buf[:n]}); err != nil {
			return err
		}
		crc = crc32.Update(crc, crcTable, buf[:n])
		if sha != nil {
			sha.Write(buf[:n])
		}
		off += uint64(n)
		cn.s.cfg.Metrics.snapshotBytesSent.Add(float64(n))
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if sha != nil {
		snap.setSum(i, fileSum(sha.Sum(nil)))
	}
	return cn.send(&FileEnd{File: uint32(i), Size: sf.Size, CRC: crc})
}

// crcPrefix returns the CRC-32C of the first n bytes of f and leaves f
// positioned at n.
func crcPrefix(f *os.File, n uint64) (uint32, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	h := crc32.New(crcTable)
	if _, err := io.CopyN(h, f, int64(n)); err != nil {
		return 0, fmt.Errorf("read the first %d bytes: %w", n, err)
	}
	return h.Sum32(), nil
}
