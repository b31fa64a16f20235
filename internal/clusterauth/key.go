package clusterauth

import (
	"bytes"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
)

// MinKeyBytes is the least secret a cluster key file must hold.
const MinKeyBytes = 32

// ErrWeakKey: the cluster key file holds less than MinKeyBytes of secret.
var ErrWeakKey = errors.New("qs: cluster key too short")

// Key is a cluster key: the secret of a key file, from which the keys of
// each use are derived (never used directly).
type Key struct {
	secret []byte
}

// ParseKey reads the secret of a key file's content: hex digits (as
// written by qs cert key) or, otherwise, the raw bytes, trailing newlines
// trimmed. It needs at least MinKeyBytes of secret.
func ParseKey(b []byte) (Key, error) {
	b = bytes.TrimRight(b, "\r\n")
	secret := b
	if d, err := hex.DecodeString(string(b)); err == nil {
		secret = d
	}
	if len(secret) < MinKeyBytes {
		return Key{}, fmt.Errorf("%w: %d bytes, want at least %d (qs cert key writes one)", ErrWeakKey, len(secret), MinKeyBytes)
	}
	return Key{secret: bytes.Clone(secret)}, nil
}

// LoadKey reads a cluster key file.
func LoadKey(path string) (Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Key{}, fmt.Errorf("cluster key: %w", err)
	}
	k, err := ParseKey(b)
	if err != nil {
		return Key{}, fmt.Errorf("cluster key %s: %w", path, err)
	}
	return k, nil
}

// IsZero reports whether k holds no key.
func (k Key) IsZero() bool { return len(k.secret) == 0 }

// Derive returns the 32-byte key of one use of the cluster key, for the
// components outside this package that key themselves from it (the
// gossip overlay: use "gossip").
func (k Key) Derive(use string) []byte { return k.derive(use) }

// derive returns the 32-byte key of one use.
func (k Key) derive(use string) []byte {
	b, err := hkdf.Key(sha256.New, k.secret, nil, "qs cluster key v1: "+use, 32)
	if err != nil {
		panic(err) // only for lengths over 255*32
	}
	return b
}

// GossipKey is the 32-byte key for encrypting the cluster's gossip
// (memberlist's SecretKey, AES-256), derived from the cluster key so that
// one key file secures every internal port.
func (k Key) GossipKey() []byte { return k.derive("gossip") }

// handshakeKey is the HMAC key of the connection handshake.
func (k Key) handshakeKey() []byte { return k.derive("handshake") }
