package repl

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"sync"

	"github.com/quicksilver-kv/qs/internal/headsig"
)

// Sealed snapshots: the root seals each snapshot it serves for a
// bootstrap, signing (internal/headsig) the snapshot's head (index and
// chain hash) and the digest of its files (filesDigest: each file's
// name, size and SHA-256). A replica that has the cluster's public key
// asks for the seal (a bootstrap Hello of SealVersion), computes the
// digest of the files it received, and installs them only if the seal
// verifies. A source that does not hold the signing key (a replica)
// refuses such a bootstrap at once: it could not prove its files are
// the root's.
const (
	// SealVersion is the bootstrap Hello version that asks for a seal;
	// a bootstrap client sends it when it has the cluster's public key.
	SealVersion uint16 = HeadVersion
	// MsgSeal carries the seal of a snapshot, server → client, after the
	// last file's FileEnd and before Done.
	MsgSeal MsgType = 17
	// kindSeal counts snapshots refused because their seal is missing or
	// does not verify (errors_total{kind="snapshot_seal"}).
	kindSeal = "snapshot_seal"
)

// Seal is the root's signature of a snapshot's head and files.
//
//	payload := signature(64)
type Seal struct {
	Sig [headsig.SigSize]byte
}

func (*Seal) Type() MsgType { return MsgSeal }

func (m *Seal) AppendPayload(dst []byte) []byte { return append(dst, m.Sig[:]...) }

func decodeSeal(p []byte) (*Seal, error) {
	m := &Seal{}
	if len(p) != len(m.Sig) {
		return nil, fmt.Errorf("%w: seal of %d bytes, want %d", ErrMalformed, len(p), len(m.Sig))
	}
	copy(m.Sig[:], p)
	return m, nil
}

// fileSum is the SHA-256 of one snapshot file.
type fileSum = [sha256.Size]byte

// filesDigest is the digest a seal signs for a snapshot's files (in the
// manifest's order) whose SHA-256s are sums:
//
//	digest := SHA-256( count(8 BE) || per file: len(name)(uvarint) name size(8 BE) sha256(32) )
func filesDigest(files []SnapshotFile, sums []fileSum) headsig.Digest {
	h := sha256.New()
	var b []byte
	b = binary.BigEndian.AppendUint64(b, uint64(len(files)))
	for i, f := range files {
		b = binary.AppendUvarint(b, uint64(len(f.Name)))
		b = append(b, f.Name...)
		b = binary.BigEndian.AppendUint64(b, f.Size)
		b = append(b, sums[i][:]...)
		h.Write(b)
		b = b[:0]
	}
	h.Write(b)
	return headsig.Digest(h.Sum(nil))
}

// sumFile returns the SHA-256 of the received file name, which must hold
// size bytes, read through open (the store's filesystem).
func sumFile(open func(name string) (io.ReadCloser, error), name string, size uint64) (fileSum, error) {
	f, err := open(name)
	if err != nil {
		return fileSum{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return fileSum{}, fmt.Errorf("read %s: %w", name, err)
	}
	if uint64(n) != size {
		return fileSum{}, fmt.Errorf("%s: %d bytes, the manifest says %d", name, n, size)
	}
	return fileSum(h.Sum(nil)), nil
}

// sealHasher reads back and hashes the files of a download in the
// background, each once it is complete (add), while the next ones
// arrive: the seal check then waits only for the last file's hash.
type sealHasher struct {
	open  func(name string) (io.ReadCloser, error)
	files []SnapshotFile
	next  chan int
	done  chan struct{}
	once  sync.Once
	// Written by the hashing goroutine, read after done.
	sums   []fileSum
	summed []bool
	err    error
}

func newSealHasher(open func(name string) (io.ReadCloser, error), files []SnapshotFile) *sealHasher {
	h := &sealHasher{open: open, files: files, next: make(chan int, len(files)), done: make(chan struct{}),
		sums: make([]fileSum, len(files)), summed: make([]bool, len(files))}
	go func() {
		defer close(h.done)
		for i := range h.next {
			if h.err != nil || h.summed[i] {
				continue // drain
			}
			f := h.files[i]
			if h.sums[i], h.err = sumFile(h.open, f.Name, f.Size); h.err == nil {
				h.summed[i] = true
			}
		}
	}()
	return h
}

// add hashes file i (complete on disk) in the background.
func (h *sealHasher) add(i int) { h.next <- i }

// stop ends the hashing; the files added so far are hashed first.
func (h *sealHasher) stop() {
	h.once.Do(func() { close(h.next) })
	<-h.done
}

// wait returns the hash of every file, each of which must have been
// added.
func (h *sealHasher) wait() ([]fileSum, error) {
	h.stop()
	if h.err != nil {
		return nil, h.err
	}
	for i, ok := range h.summed {
		if !ok {
			return nil, fmt.Errorf("snapshot file %s was not hashed", h.files[i].Name)
		}
	}
	return h.sums, nil
}
