package repl

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/headsig"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// testKeys returns a signer and the verifier of its public key.
func testKeys(t *testing.T) (*headsig.Signer, *headsig.Verifier) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := headsig.NewSigner(priv)
	if err != nil {
		t.Fatal(err)
	}
	v, err := headsig.NewVerifier(s.Public())
	if err != nil {
		t.Fatal(err)
	}
	return s, v
}

// lookupValue reads one key of st.
func lookupValue(t *testing.T, st *store.Store, key string) (string, bool) {
	t.Helper()
	var val string
	var found bool
	if _, err := st.Lookup([][]byte{[]byte(key)}, func(_ uint64, _ int, v []byte, _ uint64, ok bool) error {
		val, found = string(v), ok
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return val, found
}

// rewritingProxy forwards connections to target and rewrites the server's
// stream as an attacker on the path would: every value of a key starting
// with "secret" becomes "F" bytes of the same length, and the hash chain
// (from prev, the client's applied hash) and every frame's CRC are
// computed again, so the stream stays well formed. With dropHeads, it
// also drops the signed heads it cannot forge.
func rewritingProxy(t *testing.T, target string, prev wal.Hash, dropHeads bool) (addr string, rewritten func() int) {
	ln := listen(t)
	var mu sync.Mutex
	n := 0
	serveConns(t, ln, func(c net.Conn) {
		up, err := net.Dial("tcp", target)
		if err != nil {
			return
		}
		defer up.Close()
		go func() { copyAll(up, c); up.Close() }()
		fprev := prev
		var buf []byte
		for {
			typ, p, err := ReadFrame(up)
			if err != nil {
				return
			}
			m, err := DecodePayload(typ, p)
			if err != nil {
				return
			}
			switch m := m.(type) {
			case *Entries:
				for i := range m.Entries {
					e := &m.Entries[i]
					for j := range e.Ops {
						if op := &e.Ops[j]; op.Type == wal.OpSet && bytes.HasPrefix(op.Key, []byte("secret")) {
							op.Value = bytes.Repeat([]byte("F"), len(op.Value))
							mu.Lock()
							n++
							mu.Unlock()
						}
					}
					e.Seal(fprev, nil)
					fprev = e.Hash
				}
			case *Head:
				if dropHeads {
					continue
				}
			}
			if buf, err = AppendFrame(buf[:0], m); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	})
	return ln.Addr().String(), func() int { mu.Lock(); defer mu.Unlock(); return n }
}

func copyAll(dst, src net.Conn) {
	b := make([]byte, 4096)
	for {
		n, err := src.Read(b)
		if n > 0 {
			if _, werr := dst.Write(b[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// A stream rewritten on the path, hash chain and CRCs recomputed, is
// applied by a replica without the root's public key, and refused by one
// with it: nothing forged is applied, the error is counted as
// "signature" and the state says why.
func TestSignedHeadsRefuseRewrittenStream(t *testing.T) {
	signer, verifier := testKeys(t)
	for _, keyed := range []bool{false, true} {
		t.Run(map[bool]string{false: "unkeyed", true: "keyed"}[keyed], func(t *testing.T) {
			name := dbName(t)
			root := openStore(t, "", name, store.DBID{}, store.Retention{})
			src := startServer(t, root, NewProcessID(), func(c *ServerConfig) {
				c.Heads = func(string) HeadSource { return HeadSource{Signer: signer} }
			})
			write(t, root, "plain", "hello")
			write(t, root, "secret", "genuine-value")
			mitm, rewritten := rewritingProxy(t, src, wal.Hash{}, false)

			rep := openStore(t, "", name, root.DBID(), store.Retention{})
			before := errCount(t, name, kindSignature)
			r, _ := startReplica(t, rep, NewProcessID(), []string{mitm}, func(c *ReplicaConfig) {
				if keyed {
					c.Verifier = verifier
				}
			})
			if !keyed {
				waitCaughtUp(t, rep, root)
				if v, _ := lookupValue(t, rep, "secret"); v != "FFFFFFFFFFFFF" {
					t.Fatalf("without the public key the forged value should be applied (the attack works), got %q", v)
				}
				return
			}
			waitFor(t, "a signature error", 30*time.Second, func() bool { return errCount(t, name, kindSignature) >= before+2 })
			if rewritten() == 0 {
				t.Fatal("the proxy rewrote nothing")
			}
			if v, ok := lookupValue(t, rep, "secret"); ok {
				t.Fatalf("forged stream applied: secret=%q", v)
			}
			if rep.AppliedIndex() != 0 {
				t.Fatalf("applied index %d from a forged stream", rep.AppliedIndex())
			}
			st := r.State()
			if st.LastError == nil || !strings.Contains(st.LastError.Error(), "signed head") || st.SignedIndex != 0 {
				t.Fatalf("state %+v", st)
			}
		})
	}
}

// An attacker who drops the heads it cannot forge gets nothing applied:
// the replica holds entries back, then drops the source once more than
// MaxUnsignedBytes arrived without a head.
func TestSignedHeadsWithheld(t *testing.T) {
	signer, verifier := testKeys(t)
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	src := startServer(t, root, NewProcessID(), func(c *ServerConfig) {
		c.Heads = func(string) HeadSource { return HeadSource{Signer: signer} }
	})
	write(t, root, "secret", "genuine-value")
	writeN(t, root, "a", 30)
	mitm, _ := rewritingProxy(t, src, wal.Hash{}, true)
	rep := openStore(t, "", name, root.DBID(), store.Retention{})
	before := errCount(t, name, kindUnsigned)
	startReplica(t, rep, NewProcessID(), []string{mitm}, func(c *ReplicaConfig) {
		c.Verifier = verifier
		c.MaxUnsignedBytes = 200
	})
	waitFor(t, "an unsigned error", 30*time.Second, func() bool { return errCount(t, name, kindUnsigned) > before })
	if rep.AppliedIndex() != 0 {
		t.Fatalf("applied index %d without a signed head", rep.AppliedIndex())
	}
}

// Heads signed with another key are refused before anything is applied.
func TestSignedHeadsWrongKey(t *testing.T) {
	signer, _ := testKeys(t)
	_, other := testKeys(t)
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	src := startServer(t, root, NewProcessID(), func(c *ServerConfig) {
		c.Heads = func(string) HeadSource { return HeadSource{Signer: signer} }
	})
	writeN(t, root, "a", 20)
	rep := openStore(t, "", name, root.DBID(), store.Retention{})
	before := errCount(t, name, kindSignature)
	r, _ := startReplica(t, rep, NewProcessID(), []string{src}, func(c *ReplicaConfig) { c.Verifier = other })
	waitFor(t, "a signature error", 30*time.Second, func() bool { return errCount(t, name, kindSignature) > before })
	if rep.AppliedIndex() != 0 {
		t.Fatalf("applied index %d under a wrong key", rep.AppliedIndex())
	}
	if err := r.State().LastError; !errors.Is(err, headsig.ErrBadSignature) {
		t.Fatalf("last error %v", err)
	}
}

// Signed heads cross a tree: the root signs, an intermediate verifies and
// forwards the heads it holds with the entries it serves, and a leaf
// verifies them; both follow writes made while they stream.
func TestSignedHeadsThroughTree(t *testing.T) {
	signer, verifier := testKeys(t)
	name := dbName(t)
	root := openStore(t, "", name, store.DBID{}, store.Retention{})
	src := startServer(t, root, NewProcessID(), func(c *ServerConfig) {
		c.Heads = func(string) HeadSource { return HeadSource{Signer: signer} }
	})
	writeN(t, root, "a", 50)

	mid := openStore(t, "", name, root.DBID(), store.Retention{})
	midPID := NewProcessID()
	mr, _ := startReplica(t, mid, midPID, []string{src}, func(c *ReplicaConfig) { c.Verifier = verifier })
	midAddr := startServer(t, mid, midPID, func(c *ServerConfig) {
		c.Heads = func(string) HeadSource { return HeadSource{Book: mr.Book()} }
	})
	leaf := openStore(t, "", name, root.DBID(), store.Retention{})
	lr, _ := startReplica(t, leaf, NewProcessID(), []string{midAddr}, func(c *ReplicaConfig) { c.Verifier = verifier })
	waitCaughtUp(t, mid, root)
	waitCaughtUp(t, leaf, root)
	writeN(t, root, "b", 50)
	waitCaughtUp(t, leaf, root)
	assertSame(t, root, leaf)
	want := root.AppliedIndex()
	waitFor(t, "signed index at the root's head", 30*time.Second, func() bool {
		return mr.State().SignedIndex == want && lr.State().SignedIndex == want
	})
	for _, k := range []string{kindSignature, kindUnsigned, kindHash} {
		if n := errCount(t, name, k); n != 0 {
			t.Errorf("%s errors: %v", k, n)
		}
	}
}

// The gate releases entries only up to a verified head whose hash
// matches, and refuses a mismatch or a forked applied head.
func TestHeadGate(t *testing.T) {
	signer, verifier := testKeys(t)
	db := store.DBID{7}
	var prev wal.Hash
	var es []wal.Entry
	for i := uint64(1); i <= 6; i++ {
		e := wal.Entry{Index: i, Time: int64(i), Ops: []wal.Op{{Type: wal.OpSet, Key: []byte("k"), Value: []byte("v")}}}
		e.Seal(prev, nil)
		prev = e.Hash
		es = append(es, e)
	}
	g := &headGate{v: verifier, db: db, limit: 1 << 20}
	if out, _, err := g.entries(es[:3]); err != nil || out != nil {
		t.Fatalf("released %d before a head, err %v", len(out), err)
	}
	// A head beyond what arrived waits for the entries.
	if out, _, err := g.head(signer.Sign(db, 4, es[3].Hash)); err != nil || out != nil {
		t.Fatalf("released %d early, err %v", len(out), err)
	}
	out, h, err := g.entries(es[3:5])
	if err != nil || len(out) != 4 || h == nil || h.Index != 4 {
		t.Fatalf("released %d head %v err %v", len(out), h, err)
	}
	// The applied head itself: matches, or is a fork.
	if _, h, err := g.head(signer.Sign(db, 4, es[3].Hash)); err != nil || h == nil {
		t.Fatalf("applied head: %v %v", h, err)
	}
	if _, _, err := g.head(signer.Sign(db, 4, es[2].Hash)); !errors.Is(err, ErrForked) {
		t.Fatalf("forked applied head: %v", err)
	}
	// A signed hash that is not the pending entry's.
	if _, _, err := g.head(signer.Sign(db, 5, es[0].Hash)); errorKind(err) != kindSignature {
		t.Fatalf("mismatched head: %v", err)
	}
	// A head of another database.
	if _, _, err := g.head(signer.Sign(store.DBID{8}, 5, es[4].Hash)); !errors.Is(err, headsig.ErrBadSignature) {
		t.Fatalf("other database: %v", err)
	}
	// Too much unsigned.
	g2 := &headGate{v: verifier, db: db, limit: 10}
	if _, _, err := g2.entries(es); errorKind(err) != kindUnsigned {
		t.Fatalf("unsigned: %v", err)
	}
}

func TestHeadMessageRoundTrip(t *testing.T) {
	signer, _ := testKeys(t)
	m := &Head{signer.Sign(store.DBID{1}, 99, wal.Hash{3})}
	b, err := AppendFrame(nil, m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadMessage(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := got.(*Head); !ok || g.Head != m.Head {
		t.Fatalf("got %+v", got)
	}
	if _, err := DecodePayload(MsgHead, b[frameHeader:len(b)-frameTrailer-1]); !errors.Is(err, ErrMalformed) {
		t.Fatalf("short head: %v", err)
	}
}
