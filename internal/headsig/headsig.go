package headsig

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// PublicKey and PrivateKey are the Ed25519 keys of signed heads.
type (
	PublicKey  = ed25519.PublicKey
	PrivateKey = ed25519.PrivateKey
)

// SigSize is the size of a head signature.
const SigSize = ed25519.SignatureSize

// ErrBadSignature: a head's signature does not verify with the cluster's
// public key.
var ErrBadSignature = errors.New("qs: log head signature does not verify")

// Head is one signed position of a database's log.
type Head struct {
	Index uint64
	Hash  wal.Hash
	Sig   [SigSize]byte
}

// domain opens every signed message, so a head signature can never be
// taken for a signature of anything else made with the same key.
const domain = "qs log head v1\x00"

// message is what a signature covers.
func message(db store.DBID, index uint64, hash wal.Hash) []byte {
	b := make([]byte, 0, len(domain)+len(db)+8+len(hash))
	b = append(b, domain...)
	b = append(b, db[:]...)
	b = binary.BigEndian.AppendUint64(b, index)
	return append(b, hash[:]...)
}

// ErrBadSeal: a snapshot's seal does not verify with the cluster's
// public key.
var ErrBadSeal = errors.New("qs: snapshot seal does not verify")

// A snapshot's seal is the root's signature of the snapshot's head (the
// index and chain hash of its last entry) and of a digest of its files
// (Digest): what a replica installs when it bootstraps, whoever relayed
// it. Its own domain keeps it apart from head signatures.
const sealDomain = "qs snapshot v1\x00"

// Digest is the SHA-256 digest of a snapshot's files.
type Digest [32]byte

// sealMessage is what a seal covers.
func sealMessage(db store.DBID, index uint64, hash wal.Hash, files Digest) []byte {
	b := make([]byte, 0, len(sealDomain)+len(db)+8+len(hash)+len(files))
	b = append(b, sealDomain...)
	b = append(b, db[:]...)
	b = binary.BigEndian.AppendUint64(b, index)
	b = append(b, hash[:]...)
	return append(b, files[:]...)
}

// Verifier checks heads with the cluster's public keys: a signature by
// any of them verifies (during a rotation of the signing key, the old and
// the new). Its keys can be replaced while it runs (SetKeys). Safe for
// concurrent use.
type Verifier struct {
	pubs atomic.Pointer[[]ed25519.PublicKey]
}

// NewVerifier returns a verifier for pubs (at least one).
func NewVerifier(pubs ...ed25519.PublicKey) (*Verifier, error) {
	v := &Verifier{}
	if err := v.SetKeys(pubs...); err != nil {
		return nil, err
	}
	return v, nil
}

// SetKeys replaces the public keys heads are verified with (at least
// one); heads verified from now on need a signature by one of them.
func (v *Verifier) SetKeys(pubs ...ed25519.PublicKey) error {
	if len(pubs) == 0 {
		return errors.New("headsig: no public key")
	}
	for _, pub := range pubs {
		if len(pub) != ed25519.PublicKeySize {
			return fmt.Errorf("headsig: public key of %d bytes, want %d", len(pub), ed25519.PublicKeySize)
		}
	}
	keys := slices.Clone(pubs)
	v.pubs.Store(&keys)
	return nil
}

// Verify reports whether h is the root's signature of its index and hash
// in database db; ErrBadSignature if not.
func (v *Verifier) Verify(db store.DBID, h Head) error {
	msg := message(db, h.Index, h.Hash)
	for _, pub := range *v.pubs.Load() {
		if ed25519.Verify(pub, msg, h.Sig[:]) {
			return nil
		}
	}
	return fmt.Errorf("%w: index %d", ErrBadSignature, h.Index)
}

// VerifySeal reports whether sig is the root's seal of a snapshot of
// database db at index and hash whose files have digest files;
// ErrBadSeal if not.
func (v *Verifier) VerifySeal(db store.DBID, index uint64, hash wal.Hash, files Digest, sig [SigSize]byte) error {
	msg := sealMessage(db, index, hash, files)
	for _, pub := range *v.pubs.Load() {
		if ed25519.Verify(pub, msg, sig[:]) {
			return nil
		}
	}
	return fmt.Errorf("%w: snapshot at index %d", ErrBadSeal, index)
}

// Signer signs heads with the root's private key. It remembers its most
// recent signatures, so the many streams of one server sending the same
// head sign it once. Its key can be replaced while it runs (SetKey).
// Safe for concurrent use.
type Signer struct {
	mu struct {
		sync.Mutex
		priv   ed25519.PrivateKey
		pub    ed25519.PublicKey
		recent [recentHeads]cached
		next   int
	}
}

// recentHeads is how many signatures a Signer remembers.
const recentHeads = 64

type cached struct {
	db   store.DBID
	head Head
}

// NewSigner returns a signer for priv.
func NewSigner(priv ed25519.PrivateKey) (*Signer, error) {
	s := &Signer{}
	if err := s.SetKey(priv); err != nil {
		return nil, err
	}
	return s, nil
}

// SetKey replaces the private key heads are signed with from now on.
func (s *Signer) SetKey(priv ed25519.PrivateKey) error {
	if len(priv) != ed25519.PrivateKeySize {
		return fmt.Errorf("headsig: private key of %d bytes, want %d", len(priv), ed25519.PrivateKeySize)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.priv, s.mu.pub = priv, priv.Public().(ed25519.PublicKey)
	s.mu.recent, s.mu.next = [recentHeads]cached{}, 0
	return nil
}

// Public is the signer's public key.
func (s *Signer) Public() ed25519.PublicKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.pub
}

// Sign returns the signed head of index and hash in database db.
func (s *Signer) Sign(db store.DBID, index uint64, hash wal.Hash) Head {
	s.mu.Lock()
	for i := range s.mu.recent {
		c := &s.mu.recent[i]
		if c.head.Index == index && c.head.Hash == hash && c.db == db && index != 0 {
			h := c.head
			s.mu.Unlock()
			return h
		}
	}
	priv := s.mu.priv
	s.mu.Unlock()
	h := Head{Index: index, Hash: hash}
	copy(h.Sig[:], ed25519.Sign(priv, message(db, index, hash)))
	s.mu.Lock()
	if !s.mu.priv.Equal(priv) {
		s.mu.Unlock() // the key changed meanwhile: do not remember
		return h
	}
	s.mu.recent[s.mu.next] = cached{db: db, head: h}
	s.mu.next = (s.mu.next + 1) % recentHeads
	s.mu.Unlock()
	return h
}

// Seal returns the root's seal of a snapshot of database db at index and
// hash whose files have digest files.
func (s *Signer) Seal(db store.DBID, index uint64, hash wal.Hash, files Digest) [SigSize]byte {
	s.mu.Lock()
	priv := s.mu.priv
	s.mu.Unlock()
	var sig [SigSize]byte
	copy(sig[:], ed25519.Sign(priv, sealMessage(db, index, hash, files)))
	return sig
}

// NewKeyPair makes a key pair and returns the PEM encodings of its
// private key (PKCS #8) and public key (PKIX).
func NewKeyPair() (privPEM, pubPEM []byte, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	pk, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, err
	}
	pb, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pk}),
		pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pb}), nil
}

// ParsePrivateKey decodes a PEM PKCS #8 Ed25519 private key.
func ParsePrivateKey(b []byte) (ed25519.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, errors.New("no PEM \"PRIVATE KEY\" block")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, err
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("a %T, want an Ed25519 key", k)
	}
	return priv, nil
}

// ParsePublicKey decodes a PEM PKIX Ed25519 public key.
func ParsePublicKey(b []byte) (ed25519.PublicKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PUBLIC KEY" {
		return nil, errors.New("no PEM \"PUBLIC KEY\" block")
	}
	return parsePublicBlock(blk)
}

func parsePublicBlock(blk *pem.Block) (ed25519.PublicKey, error) {
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, err
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("a %T, want an Ed25519 key", k)
	}
	return pub, nil
}

// ParsePublicKeys decodes every PEM "PUBLIC KEY" block of b (at least
// one): a file of several keys, during a rotation of the signing key.
// Anything but PEM blocks and white space between them is refused.
func ParsePublicKeys(b []byte) ([]ed25519.PublicKey, error) {
	var pubs []ed25519.PublicKey
	rest := b
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("key %d: a PEM %q block, want \"PUBLIC KEY\"", len(pubs)+1, blk.Type)
		}
		pub, err := parsePublicBlock(blk)
		if err != nil {
			return nil, fmt.Errorf("key %d: %w", len(pubs)+1, err)
		}
		pubs = append(pubs, pub)
	}
	if len(pubs) == 0 {
		return nil, errors.New("no PEM \"PUBLIC KEY\" block")
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, fmt.Errorf("%d bytes after key %d that are not a PEM block", len(bytes.TrimSpace(rest)), len(pubs))
	}
	return pubs, nil
}

// LoadSigner reads the root's private key file.
func LoadSigner(path string) (*Signer, error) {
	priv, err := LoadPrivateKey(path)
	if err != nil {
		return nil, err
	}
	return NewSigner(priv)
}

// LoadPublicKeys reads the cluster's public key file: one key, or
// several during a rotation (ParsePublicKeys).
func LoadPublicKeys(path string) ([]ed25519.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("root public key: %w", err)
	}
	pubs, err := ParsePublicKeys(b)
	if err != nil {
		return nil, fmt.Errorf("root public key %s: %w", path, err)
	}
	return pubs, nil
}

// LoadPrivateKey reads the root's private key file.
func LoadPrivateKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("root signing key: %w", err)
	}
	priv, err := ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("root signing key %s: %w", path, err)
	}
	return priv, nil
}

// LoadVerifier reads the cluster's public key file.
func LoadVerifier(path string) (*Verifier, error) {
	pubs, err := LoadPublicKeys(path)
	if err != nil {
		return nil, err
	}
	return NewVerifier(pubs...)
}

// Matches reports whether v verifies what s signs.
func (v *Verifier) Matches(s *Signer) bool { return Trusts(*v.pubs.Load(), s.Public()) }

// Trusts reports whether pub is one of pubs.
func Trusts(pubs []ed25519.PublicKey, pub ed25519.PublicKey) bool {
	return slices.ContainsFunc(pubs, func(p ed25519.PublicKey) bool { return p.Equal(pub) })
}
