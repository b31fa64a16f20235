package headsig

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
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

// Verifier checks heads with the cluster's public key.
type Verifier struct {
	pub ed25519.PublicKey
}

// NewVerifier returns a verifier for pub.
func NewVerifier(pub ed25519.PublicKey) (*Verifier, error) {
	if len(pub) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("headsig: public key of %d bytes, want %d", len(pub), ed25519.PublicKeySize)
	}
	return &Verifier{pub: pub}, nil
}

// Verify reports whether h is the root's signature of its index and hash
// in database db; ErrBadSignature if not.
func (v *Verifier) Verify(db store.DBID, h Head) error {
	if !ed25519.Verify(v.pub, message(db, h.Index, h.Hash), h.Sig[:]) {
		return fmt.Errorf("%w: index %d", ErrBadSignature, h.Index)
	}
	return nil
}

// Signer signs heads with the root's private key. It remembers its most
// recent signatures, so the many streams of one server sending the same
// head sign it once. Safe for concurrent use.
type Signer struct {
	priv ed25519.PrivateKey
	pub  ed25519.PublicKey

	mu struct {
		sync.Mutex
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
	if len(priv) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("headsig: private key of %d bytes, want %d", len(priv), ed25519.PrivateKeySize)
	}
	return &Signer{priv: priv, pub: priv.Public().(ed25519.PublicKey)}, nil
}

// Public is the signer's public key.
func (s *Signer) Public() ed25519.PublicKey { return s.pub }

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
	s.mu.Unlock()
	h := Head{Index: index, Hash: hash}
	copy(h.Sig[:], ed25519.Sign(s.priv, message(db, index, hash)))
	s.mu.Lock()
	s.mu.recent[s.mu.next] = cached{db: db, head: h}
	s.mu.next = (s.mu.next + 1) % recentHeads
	s.mu.Unlock()
	return h
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

// LoadSigner reads the root's private key file.
func LoadSigner(path string) (*Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("root signing key: %w", err)
	}
	priv, err := ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("root signing key %s: %w", path, err)
	}
	return NewSigner(priv)
}

// LoadVerifier reads the cluster's public key file.
func LoadVerifier(path string) (*Verifier, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("root public key: %w", err)
	}
	pub, err := ParsePublicKey(b)
	if err != nil {
		return nil, fmt.Errorf("root public key %s: %w", path, err)
	}
	return NewVerifier(pub)
}

// Matches reports whether v verifies what s signs.
func (v *Verifier) Matches(s *Signer) bool { return v.pub.Equal(s.pub) }
