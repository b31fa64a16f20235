package clusterauth

import (
	"bytes"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
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

// LoadKey reads a cluster key file and returns the key this node proves
// itself with (the first of the file: LoadKeys).
func LoadKey(path string) (Key, error) {
	ks, err := LoadKeys(path)
	if err != nil {
		return Key{}, err
	}
	return ks[0], nil
}

// ParseKeys reads the keys of a key file's content. A file whose
// non-empty lines are all hex keys (as written by qs cert key) holds one
// key per line, for a rotation: the first is the key this node proves
// itself with, the others are accepted from peers as well. Any other
// content is one key (ParseKey).
func ParseKeys(b []byte) ([]Key, error) {
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > 1 {
		keys := make([]Key, 0, len(lines))
		for i, l := range lines {
			if _, err := hex.DecodeString(l); err != nil {
				keys = nil
				break
			}
			k, err := ParseKey([]byte(l))
			if err != nil {
				return nil, fmt.Errorf("key %d of %d: %w", i+1, len(lines), err)
			}
			keys = append(keys, k)
		}
		if keys != nil {
			return keys, nil
		}
	}
	k, err := ParseKey(b)
	if err != nil {
		return nil, err
	}
	return []Key{k}, nil
}

// LoadKeys reads a cluster key file (ParseKeys).
func LoadKeys(path string) ([]Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster key: %w", err)
	}
	ks, err := ParseKeys(b)
	if err != nil {
		return nil, fmt.Errorf("cluster key %s: %w", path, err)
	}
	return ks, nil
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
