package discovery

import (
	"bytes"
	"crypto/hkdf"
	"crypto/sha256"
	"fmt"
	"os"
)

// gossipKeyInfo separates the gossip key from other keys derived from the
// same cluster key.
const gossipKeyInfo = "qs gossip overlay v1"

// minClusterKey is the shortest cluster key accepted: 128 bits.
const minClusterKey = 16

// GossipKey derives the overlay's 32-byte AES-GCM key from the cluster
// key (HKDF-SHA256). Every member holding the same cluster key derives the
// same gossip key; a member with another key can neither read nor join.
func GossipKey(clusterKey []byte) ([]byte, error) {
	if len(clusterKey) < minClusterKey {
		return nil, fmt.Errorf("qs: cluster key of %d bytes: want at least %d", len(clusterKey), minClusterKey)
	}
	return hkdf.Key(sha256.New, clusterKey, nil, gossipKeyInfo, 32)
}

// GossipKeyFile reads a cluster key file and derives the gossip key. The
// file's bytes are the key, surrounding white space removed.
func GossipKeyFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("qs: cluster key: %w", err)
	}
	k, err := GossipKey(bytes.TrimSpace(b))
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return k, nil
}
