package store

import (
	"fmt"
	"testing"
)

// TestProxyTransientOneHitCostsNoDiskWrite: with a transient tier, a value
// fetched once is held in memory and never queued for the disk cache; a
// value read again while held is stored, and then read from disk.
func TestProxyTransientOneHitCostsNoDiskWrite(t *testing.T) {
	t.Parallel()
	for _, readCache := range []int64{-1, 1 << 20} {
		t.Run(fmt.Sprintf("read_cache_%v", readCache > 0), func(t *testing.T) {
			root := openTest(t, Options{Logger: quietLogger()})
			for i := 0; i < 20; i++ {
				mustWrite(t, root, setb(fmt.Sprintf("k%02d", i), pattern(i, 1000)))
			}
			po := ProxyOptions{Window: 1, CacheBytes: 1 << 20, TransientBytes: 1 << 20}
			px := openTest(t, Options{Name: dbName(t), DBID: root.DBID(), Proxy: &po, ReadCacheBytes: readCache, Logger: quietLogger()})
			f := &storeFetcher{src: root}
			px.SetFetcher(f)
			replicate(t, root, px, 20)
			stored := px.ProxyStats().CachedValues // the window's

			keys := make([]string, 10)
			for i := range keys {
				keys[i] = fmt.Sprintf("k%02d", i)
			}
			_, got := lookupAll(t, px, keys...)
			for i, k := range keys {
				if got[k] != string(pattern(i, 1000)) {
					t.Fatalf("%s differs", k)
				}
			}
			if f.keys.Load() != 10 {
				t.Fatalf("fetched %d values, want 10", f.keys.Load())
			}
			// Nothing was queued for the disk (the queue is filled before a
			// read returns, so none can be on its way).
			if n := px.px.admits.Len(); n != 0 {
				t.Fatalf("%d one-hit values queued for the disk", n)
			}
			if a := px.Metrics().ProxyAdmissions["admitted"]; a != 0 {
				t.Fatalf("%v one-hit values admitted", a)
			}
			if st := px.ProxyStats(); st.TransientValues != 10 || st.CachedValues != stored {
				t.Fatalf("after one read: %+v, want 10 values held in memory, %d stored", st, stored)
			}
			if held := px.Metrics().ProxyTransient["held"]; held != 10 {
				t.Fatalf("proxy_transient_total{held} = %v, want 10", held)
			}

			// Read three of them again: served without a fetch, and stored.
			_, got = lookupAll(t, px, keys[:3]...)
			if len(got) != 3 || got["k01"] != string(pattern(1, 1000)) {
				t.Fatalf("second read: %d values", len(got))
			}
			if f.keys.Load() != 10 {
				t.Fatalf("a held value was fetched again (%d fetches)", f.keys.Load())
			}
			waitFor(t, "admission of the values read twice", func() bool {
				return px.Metrics().ProxyAdmissions["admitted"] == 3
			})
			if st := px.ProxyStats(); st.TransientValues != 7 || st.CachedValues != stored+3 {
				t.Fatalf("after the second read: %+v, want 7 held, %d stored", st, stored+3)
			}
			for i := 0; i < 3; i++ {
				rec, err := decodeRecord(rawGet(t, px, dataKey(nil, []byte(keys[i]))))
				if err != nil || rec.kind == recRemote {
					t.Fatalf("%s read twice is not stored: %v", keys[i], err)
				}
			}
			if a := px.Metrics().ProxyTransient["read_again"]; a != 3 {
				t.Fatalf("proxy_transient_total{read_again} = %v, want 3", a)
			}
			mustVerify(t, px)
		})
	}
}

// TestProxyTransientHeldValueOfAnOldVersionIsNotServed: a key written
// after its value was fetched is read as the new version; the held old
// one is neither served nor stored.
func TestProxyTransientHeldValueOfAnOldVersionIsNotServed(t *testing.T) {
	t.Parallel()
	root := openTest(t, Options{Logger: quietLogger()})
	mustWrite(t, root, set("k", "old value"))
	for i := 0; i < 5; i++ {
		mustWrite(t, root, set(fmt.Sprint("pad", i), "x"))
	}
	px, f := openProxy(t, root, ProxyOptions{Window: 1, CacheBytes: 1 << 20, TransientBytes: 1 << 20})
	replicate(t, root, px, 10)
	if _, got := lookupAll(t, px, "k"); got["k"] != "old value" {
		t.Fatalf("first read %q", got["k"])
	}
	mustWrite(t, root, set("k", "new value"))
	for i := 0; i < 5; i++ {
		mustWrite(t, root, set(fmt.Sprint("pad", i), "y"))
	}
	replicate(t, root, px, 10)
	if _, got := lookupAll(t, px, "k"); got["k"] != "new value" {
		t.Fatalf("read after the write: %q, want the new value", got["k"])
	}
	if f.keys.Load() != 2 {
		t.Fatalf("%d fetches, want 2 (each version once)", f.keys.Load())
	}
	if a := px.Metrics().ProxyTransient["read_again"]; a != 0 {
		t.Fatalf("an old version was taken as read again (%v)", a)
	}
}

func TestProxyTransientOptionValidated(t *testing.T) {
	t.Parallel()
	po := (&ProxyOptions{TransientBytes: -1}).withDefaults()
	if err := po.validate(); err == nil {
		t.Fatal("a negative transient tier was accepted")
	}
}
