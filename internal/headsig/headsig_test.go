package headsig

import (
	"errors"
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

// During a rotation of the signing key the public key file holds the old
// and the new key: heads signed by either verify. Once the old key is
// removed (SetKeys, as a reload does), heads it signs are refused and the
// new key's still verify.
func TestVerifierRotation(t *testing.T) {
	oldPriv, oldPub := keyFiles(t)
	newPriv, newPub := keyFiles(t)
	sOld, err := LoadSigner(oldPriv)
	if err != nil {
		t.Fatal(err)
	}
	sNew, err := LoadSigner(newPriv)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(oldPub)
	b, _ := os.ReadFile(newPub)
	both := filepath.Join(t.TempDir(), "both.pem")
	if err := os.WriteFile(both, append(append([]byte{}, a...), b...), 0o644); err != nil {
		t.Fatal(err)
	}
	v, err := LoadVerifier(both)
	if err != nil {
		t.Fatal(err)
	}
	db := store.DBID{4}
	hash := wal.Hash{7}
	for name, s := range map[string]*Signer{"old": sOld, "new": sNew} {
		if err := v.Verify(db, s.Sign(db, 10, hash)); err != nil {
			t.Fatalf("%s key during the overlap: %v", name, err)
		}
		if !v.Matches(s) {
			t.Fatalf("%s signer does not match the overlap", name)
		}
	}
	pubs, err := LoadPublicKeys(newPub)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.SetKeys(pubs...); err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(db, sOld.Sign(db, 11, hash)); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("removed key: %v, want ErrBadSignature", err)
	}
	if err := v.Verify(db, sNew.Sign(db, 11, hash)); err != nil {
		t.Fatalf("new key after the reload: %v", err)
	}
	if v.Matches(sOld) {
		t.Fatal("the removed key's signer still matches")
	}
	// A signer given the new key signs with it from then on, forgetting
	// what it signed with the old one.
	h := sOld.Sign(db, 12, hash)
	np, _ := LoadPrivateKey(newPriv)
	if err := sOld.SetKey(np); err != nil {
		t.Fatal(err)
	}
	if h2 := sOld.Sign(db, 12, hash); h2.Sig == h.Sig || v.Verify(db, h2) != nil {
		t.Fatal("the signer kept signing with its old key")
	}
	if err := v.SetKeys(); err == nil {
		t.Fatal("a verifier without keys")
	}
}

func TestParsePublicKeysRefusesJunk(t *testing.T) {
	_, pub := keyFiles(t)
	b, _ := os.ReadFile(pub)
	for name, doc := range map[string][]byte{
		"empty":         nil,
		"trailing junk": append(append([]byte{}, b...), "not pem"...),
		"a private key": []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"),
		"a damaged key": []byte("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"),
	} {
		if _, err := ParsePublicKeys(doc); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if pubs, err := ParsePublicKeys(append(append([]byte{}, b...), b...)); err != nil || len(pubs) != 2 {
		t.Fatalf("two keys: %d %v", len(pubs), err)
	}
}

// A seal verifies only for the snapshot it was made for: another
// database, index, hash or file digest, another key, or a head signature
// of the same position is refused.
func TestSealVerify(t *testing.T) {
	privPath, pubPath := keyFiles(t)
	s, err := LoadSigner(privPath)
	if err != nil {
		t.Fatal(err)
	}
	v, err := LoadVerifier(pubPath)
	if err != nil {
		t.Fatal(err)
	}
	db := store.DBID{7}
	hash := wal.Hash{1, 2}
	files := Digest{3, 4}
	sig := s.Seal(db, 42, hash, files)
	if err := v.VerifySeal(db, 42, hash, files, sig); err != nil {
		t.Fatalf("seal of the snapshot: %v", err)
	}
	otherFiles := files
	otherFiles[31] ^= 1
	otherHash := hash
	otherHash[0] ^= 1
	head := s.Sign(db, 42, hash)
	other, _, err := NewKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	otherKey, err := ParsePrivateKey(other)
	if err != nil {
		t.Fatal(err)
	}
	otherSigner, err := NewSigner(otherKey)
	if err != nil {
		t.Fatal(err)
	}
	for name, check := range map[string]func() error{
		"another file digest": func() error { return v.VerifySeal(db, 42, hash, otherFiles, sig) },
		"another index":       func() error { return v.VerifySeal(db, 43, hash, files, sig) },
		"another hash":        func() error { return v.VerifySeal(db, 42, otherHash, files, sig) },
		"another database":    func() error { return v.VerifySeal(store.DBID{8}, 42, hash, files, sig) },
		"another key":         func() error { return v.VerifySeal(db, 42, hash, files, otherSigner.Seal(db, 42, hash, files)) },
		"a head signature":    func() error { return v.VerifySeal(db, 42, hash, files, head.Sig) },
		"a seal as a head":    func() error { return v.Verify(db, Head{Index: 42, Hash: hash, Sig: sig}) },
	} {
		if err := check(); !errors.Is(err, ErrBadSeal) && !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s: %v, want refused", name, err)
		}
	}
}
