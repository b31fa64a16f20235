package server

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quicksilver-kv/qs/internal/clusterauth"
	"github.com/quicksilver-kv/qs/internal/headsig"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A running node takes new keys from its files on ReloadKeys (SIGHUP):
// its replication port then accepts the new cluster key and refuses the
// removed one, and heads signed with the new root key verify while those
// of the removed key are refused. A reload whose files do not load
// changes nothing.
func TestReloadKeysWithoutRestart(t *testing.T) {
	dir := t.TempDir()
	keyPath, pubPath := filepath.Join(dir, "cluster.key"), filepath.Join(dir, "root-public.pem")
	oldKey, newKey := strings.Repeat("1a", 32), strings.Repeat("2b", 32)
	oldPriv, oldPub, err := headsig.NewKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	newPriv, newPub, err := headsig.NewKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, keyPath, []byte(oldKey+"\n"))
	writeFile(t, pubPath, oldPub)
	s, replAddr := startNodeWith(t, "reload", "cluster_key = "+quote(keyPath)+"\nroot_public_key = "+quote(pubPath), "")

	// dial connects to the replication port holding keys (the first the
	// one it proves itself with).
	dial := func(keys ...string) error {
		var o clusterauth.Options
		for i, key := range keys {
			k, err := clusterauth.ParseKey([]byte(key))
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				o.Key = k
			} else {
				o.MoreKeys = append(o.MoreKeys, k)
			}
		}
		c, err := clusterauth.New(o).Dialer("")(context.Background(), "tcp", replAddr)
		if err == nil {
			c.Close()
		}
		return err
	}
	signer := func(pemKey []byte) *headsig.Signer {
		priv, err := headsig.ParsePrivateKey(pemKey)
		if err != nil {
			t.Fatal(err)
		}
		sg, err := headsig.NewSigner(priv)
		if err != nil {
			t.Fatal(err)
		}
		return sg
	}
	db, hash := store.DBID{9}, wal.Hash{1}
	verify := func(priv []byte) error { return s.keys.verifier.Verify(db, signer(priv).Sign(db, 5, hash)) }

	if err := dial(oldKey); err != nil {
		t.Fatalf("old key before the rotation: %v", err)
	}
	if err := dial(newKey); !errors.Is(err, clusterauth.ErrBadKey) {
		t.Fatalf("new key before the rotation: %v", err)
	}

	// The overlap, first step: every node accepts the new cluster key and
	// still proves itself with the old one; the public key file holds
	// both root keys.
	writeFile(t, keyPath, []byte(oldKey+"\n"+newKey+"\n"))
	writeFile(t, pubPath, append(append([]byte{}, oldPub...), newPub...))
	if err := s.ReloadKeys(); err != nil {
		t.Fatal(err)
	}
	if err := dial(oldKey); err != nil {
		t.Fatalf("a peer not yet changed, during the overlap: %v", err)
	}
	if err := dial(newKey, oldKey); err != nil {
		t.Fatalf("a peer proving itself with the new key, during the overlap: %v", err)
	}
	if verify(oldPriv) != nil || verify(newPriv) != nil {
		t.Fatal("a root key of the overlap does not verify")
	}
	// Second step: every node proves itself with the new key.
	writeFile(t, keyPath, []byte(newKey+"\n"+oldKey+"\n"))
	if err := s.ReloadKeys(); err != nil {
		t.Fatal(err)
	}
	if err := dial(newKey); err != nil {
		t.Fatalf("a peer done with the rotation, during the second step: %v", err)
	}
	if err := dial(oldKey, newKey); err != nil {
		t.Fatalf("a peer still in the first step, during the second: %v", err)
	}

	// The old keys removed.
	writeFile(t, keyPath, []byte(newKey+"\n"))
	writeFile(t, pubPath, newPub)
	if err := s.ReloadKeys(); err != nil {
		t.Fatal(err)
	}
	if err := dial(oldKey); !errors.Is(err, clusterauth.ErrBadKey) {
		t.Fatalf("removed cluster key: %v, want ErrBadKey", err)
	}
	if err := verify(oldPriv); !errors.Is(err, headsig.ErrBadSignature) {
		t.Fatalf("head signed with the removed root key: %v, want ErrBadSignature", err)
	}
	if verify(newPriv) != nil {
		t.Fatal("head signed with the new root key refused")
	}

	// Files that do not load: nothing changes, and it is counted.
	failed := testutil.ToFloat64(s.meters.auth.ReloadErrors())
	writeFile(t, pubPath, []byte("not a key"))
	if err := s.ReloadKeys(); err == nil {
		t.Fatal("reload of a damaged public key file succeeded")
	}
	writeFile(t, pubPath, newPub)
	writeFile(t, keyPath, []byte("short"))
	if err := s.ReloadKeys(); !errors.Is(err, clusterauth.ErrWeakKey) {
		t.Fatalf("reload of a short cluster key: %v", err)
	}
	if got := testutil.ToFloat64(s.meters.auth.ReloadErrors()); got != failed+2 {
		t.Fatalf("failed reloads counted %v -> %v", failed, got)
	}
	if err := dial(newKey); err != nil || verify(newPriv) != nil {
		t.Fatalf("keys in force after failed reloads: %v", err)
	}
}

func quote(s string) string { return `"` + s + `"` }
