package headsig

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

func keyFiles(t *testing.T) (privPath, pubPath string) {
	t.Helper()
	priv, pub, err := NewKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	privPath, pubPath = filepath.Join(dir, "root.key"), filepath.Join(dir, "root.pub")
	if err := os.WriteFile(privPath, priv, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pubPath, pub, 0o644); err != nil {
		t.Fatal(err)
	}
	return privPath, pubPath
}

func TestSignVerify(t *testing.T) {
	privPath, pubPath := keyFiles(t)
	s, err := LoadSigner(privPath)
	if err != nil {
		t.Fatal(err)
	}
	v, err := LoadVerifier(pubPath)
	if err != nil {
		t.Fatal(err)
	}
	db := store.DBID{1, 2, 3}
	hash := wal.Hash{9, 9, 9}
	h := s.Sign(db, 42, hash)
	if err := v.Verify(db, h); err != nil {
		t.Fatal(err)
	}
	if again := s.Sign(db, 42, hash); again != h {
		t.Fatal("a head signed twice differs")
	}
	tampered := map[string]func(h *Head, db *store.DBID){
		"index":    func(h *Head, _ *store.DBID) { h.Index++ },
		"hash":     func(h *Head, _ *store.DBID) { h.Hash[0] ^= 1 },
		"database": func(_ *Head, db *store.DBID) { db[0] ^= 1 },
		"sig":      func(h *Head, _ *store.DBID) { h.Sig[5] ^= 1 },
	}
	for name, fn := range tampered {
		h2, db2 := h, db
		fn(&h2, &db2)
		if err := v.Verify(db2, h2); err == nil {
			t.Errorf("tampered %s verifies", name)
		}
	}
	_, otherPub := keyFiles(t)
	other, err := LoadVerifier(otherPub)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Verify(db, h); err == nil {
		t.Fatal("another key verifies")
	}
}

func TestLoadKeyErrors(t *testing.T) {
	privPath, pubPath := keyFiles(t)
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk")
	os.WriteFile(junk, []byte("not a key\n"), 0o600)
	for name, load := range map[string]func() error{
		"public as private": func() error { _, err := LoadSigner(pubPath); return err },
		"private as public": func() error { _, err := LoadVerifier(privPath); return err },
		"junk private":      func() error { _, err := LoadSigner(junk); return err },
		"junk public":       func() error { _, err := LoadVerifier(junk); return err },
		"missing":           func() error { _, err := LoadVerifier(filepath.Join(dir, "none")); return err },
	} {
		if err := load(); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
	if _, err := NewVerifier(make([]byte, 5)); err == nil {
		t.Error("short public key accepted")
	}
	if _, err := NewSigner(make([]byte, 5)); err == nil {
		t.Error("short private key accepted")
	}
}

func TestBook(t *testing.T) {
	var b Book
	if _, ok := b.Latest(); ok {
		t.Fatal("empty book has a head")
	}
	for i := uint64(1); i <= 3*BookSize; i++ {
		b.Add(Head{Index: 10 * i})
	}
	b.Add(Head{Index: 5}) // behind the newest: ignored
	if h, _ := b.Latest(); h.Index != 30*BookSize {
		t.Fatalf("latest %d", h.Index)
	}
	if len(b.heads) > BookSize {
		t.Fatalf("%d heads kept", len(b.heads))
	}
	// The newest heads stay dense.
	for i := uint64(3*BookSize - 100); i <= 3*BookSize; i++ {
		if h, ok := b.Covering(10*i - 3); !ok || h.Index != 10*i {
			t.Fatalf("covering %d: %d %v", 10*i-3, h.Index, ok)
		}
	}
	if h, ok := b.Covering(1); !ok || h.Index != 10 {
		t.Fatalf("covering 1: %d %v", h.Index, ok)
	}
	if _, ok := b.Covering(30*BookSize + 1); ok {
		t.Fatal("a head beyond the newest")
	}
	b.Reset()
	if _, ok := b.Covering(1); ok {
		t.Fatal("reset book has heads")
	}
}

func BenchmarkSign(b *testing.B) {
	priv, _, _ := NewKeyPair()
	k, _ := ParsePrivateKey(priv)
	s, _ := NewSigner(k)
	db := store.DBID{1}
	for i := 0; b.Loop(); i++ {
		s.Sign(db, uint64(i)+1, wal.Hash{byte(i)})
	}
}

func BenchmarkVerify(b *testing.B) {
	priv, _, _ := NewKeyPair()
	k, _ := ParsePrivateKey(priv)
	s, _ := NewSigner(k)
	v, _ := NewVerifier(s.Public())
	db := store.DBID{1}
	h := s.Sign(db, 7, wal.Hash{7})
	for b.Loop() {
		if err := v.Verify(db, h); err != nil {
			b.Fatal(err)
		}
	}
}
