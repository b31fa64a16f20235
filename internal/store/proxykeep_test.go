package store

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
)

// TestProxySweepPassesOverDamagedRecord: the CLOCK hand gives up the
// stored values outside the window that were not read since it last
// passed, passes over a value record that fails its check (leaving it
// as it is), and completes its turn.
func TestProxySweepPassesOverDamagedRecord(t *testing.T) {
	t.Parallel()
	root := openTest(t, Options{Logger: quietLogger()})
	keys := []string{"k0", "k1", "k2", "k3", "k4"}
	for _, k := range keys {
		mustWrite(t, root, set(k, "value of "+k))
	}
	for i := 0; i < 3; i++ {
		mustWrite(t, root, set(fmt.Sprint("pad", i), "x"))
	}
	// A budget and free-space limits the keeper never sweeps for: the
	// rounds are the test's.
	px, _ := openProxy(t, root, ProxyOptions{Window: 1, CacheBytes: 1 << 30, SoftFreeBytes: 1, HardFreeBytes: 1})
	replicate(t, root, px, 100)
	lookupAll(t, px, keys...) // fetched, then admitted: stored outside the window
	waitFor(t, "admissions", func() bool { return px.Metrics().ProxyAdmissions["admitted"] == float64(len(keys)) })
	k := dataKey(nil, []byte("k2"))
	damaged := flip(rawGet(t, px, k), recHeader+1)
	rawSet(t, px, k, damaged)

	bad := func() float64 { return px.Metrics().IntegrityErrors["value_crc"] }
	before := bad()
	victims, next, cycled := px.sweep(nil, 1<<40)
	if len(victims) != 0 || next != nil || !cycled {
		t.Fatalf("first turn: %d victims, next %q, cycled %v; want none (every value was just read), a whole turn", len(victims), next, cycled)
	}
	victims, next, cycled = px.sweep(nil, 1<<40)
	var got []string
	for _, v := range victims {
		got = append(got, fmt.Sprintf("%s@%d", v.key, v.index))
	}
	var want []string
	for _, k := range []string{"k0", "k1", "k3", "k4"} {
		want = append(want, fmt.Sprintf("%s@%d", k, keyIndex(t, root, k)))
	}
	if !slices.Equal(got, want) || next != nil || !cycled {
		t.Fatalf("second turn gave up %v (next %q, cycled %v); want %v, a whole turn", got, next, cycled, want)
	}
	if !bytes.Equal(rawGet(t, px, k), damaged) {
		t.Fatal("the sweep changed the damaged record")
	}
	if got := bad() - before; got != 2 {
		t.Fatalf("two turns over the damaged record counted %v integrity errors, want 2", got)
	}
	// A round that frees what it needs stops there, and says where the
	// next one goes on from.
	victims, next, cycled = px.sweep(nil, 1)
	if len(victims) != 1 || string(victims[0].key) != "k0" || string(next) != "k1" || cycled {
		t.Fatalf("a round needing 1 byte: %d victims, next %q, cycled %v; want k0, then k1", len(victims), next, cycled)
	}
}
