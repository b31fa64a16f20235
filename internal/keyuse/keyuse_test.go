package keyuse

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/tree"
)

func TestNewSamplerRefusesBadRates(t *testing.T) {
	for _, r := range []int{0, -1, 3, 100, 1 << 21} {
		if _, err := NewSampler(r); err == nil {
			t.Errorf("rate %d accepted", r)
		}
	}
	for _, r := range []int{1, 2, 64, 1 << 20} {
		s, err := NewSampler(r)
		if err != nil || s.Rate() != r {
			t.Errorf("rate %d: %v, rate %d", r, err, s.Rate())
		}
	}
}

// At rate 1 every read is sampled: Drain returns exact counts, once.
func TestSamplerCountsAndDrains(t *testing.T) {
	s, _ := NewSampler(1)
	for i := 0; i < 3; i++ {
		s.Observe([]byte("a"))
	}
	s.ObserveString("b")
	s.Merge([]tree.Sample{{Hash: Hash([]byte("a")), Count: 2}, {Hash: 99, Count: 0}})
	got, n := s.Drain()
	m := map[uint64]uint64{}
	for _, x := range got {
		m[x.Hash] = x.Count
	}
	if len(m) != 2 || m[Hash([]byte("a"))] != 5 || m[Hash([]byte("b"))] != 1 || n != 6 {
		t.Fatalf("drained %v (%d samples)", got, n)
	}
	if again, n := s.Drain(); len(again) != 0 || n != 0 {
		t.Errorf("second drain: %v %d", again, n)
	}
	if c := s.Counters(); c.Sampled != 4 || c.Merged != 1 || c.Dropped != 0 {
		t.Errorf("counters %+v", c)
	}
}

// The pending map is bounded: samples of new keys beyond MaxPending are
// dropped and counted, those of keys held still add up.
func TestSamplerBound(t *testing.T) {
	s, _ := NewSampler(1)
	var k [8]byte
	for i := 0; i < MaxPending+10; i++ {
		binary.BigEndian.PutUint64(k[:], uint64(i))
		s.Observe(k[:])
	}
	binary.BigEndian.PutUint64(k[:], 0)
	s.Observe(k[:])
	got, _ := s.Drain()
	if len(got) != MaxPending {
		t.Fatalf("%d keys held, want %d", len(got), MaxPending)
	}
	if c := s.Counters(); c.Dropped != 10 {
		t.Errorf("dropped %d, want 10", c.Dropped)
	}
}

// A nil sampler (sampling off) costs nothing and holds nothing.
func TestNilSampler(t *testing.T) {
	var s *Sampler
	s.Observe([]byte("a"))
	s.ObserveString("a")
	s.Merge([]tree.Sample{{Hash: 1, Count: 1}})
	if got, n := s.Drain(); got != nil || n != 0 || s.Rate() != 0 || s.Counters() != (Counters{}) {
		t.Error("nil sampler holds something")
	}
}

// At rate 64, a key read 10,000 times is sampled (it would be missed with
// probability (63/64)^10000, below 1e-68).
func TestSamplerSamplesAFrequentKey(t *testing.T) {
	s, _ := NewSampler(DefaultRate)
	for i := 0; i < 10000; i++ {
		s.ObserveString("hot")
	}
	got, n := s.Drain()
	if len(got) != 1 || got[0].Hash != Hash([]byte("hot")) || n == 0 || n > 10000 {
		t.Fatalf("drained %v (%d samples)", got, n)
	}
}

func TestWindowReadSince(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	w := NewWindow(t0)
	w.Add([]tree.Sample{{Hash: 1, Count: 1}}, t0.Add(time.Minute))
	w.Add([]tree.Sample{{Hash: 2, Count: 5}}, t0.Add(time.Hour))
	switch {
	case !w.ReadSince(1, t0), !w.ReadSince(2, t0.Add(30*time.Minute)):
		t.Error("a read within the window not seen")
	case w.ReadSince(1, t0.Add(30*time.Minute)):
		t.Error("a read before the window seen")
	case w.ReadSince(3, t0):
		t.Error("a key never read seen")
	}
	// Past the retention, a key is forgotten (pruning runs as samples come).
	w.Add([]tree.Sample{{Hash: 4, Count: 1}}, t0.Add(Retention+2*time.Minute))
	if st := w.Stats(); st.Keys != 2 {
		t.Errorf("%d keys after the retention, want 2 (keys 2 and 4)", st.Keys)
	}
	if !w.Since().Equal(t0) {
		t.Errorf("since %v", w.Since())
	}
}

func TestWindowBound(t *testing.T) {
	if testing.Short() {
		t.Skip("a million keys")
	}
	w := NewWindow(time.Unix(0, 0))
	now := time.Unix(10, 0)
	batch := make([]tree.Sample, 0, 1<<16)
	for i := 0; i < MaxWindowKeys+5; i++ {
		batch = append(batch, tree.Sample{Hash: uint64(i), Count: 1})
		if len(batch) == cap(batch) {
			w.Add(batch, now)
			batch = batch[:0]
		}
	}
	w.Add(batch, now)
	w.Add([]tree.Sample{{Hash: 0, Count: 1}}, now) // held: not a drop
	if st := w.Stats(); st.Keys != MaxWindowKeys || st.Dropped != 5 {
		t.Errorf("stats %+v, want %d keys and 5 dropped", st, MaxWindowKeys)
	}
}

// BenchmarkObserve is the cost a read pays for sampling, against the same
// loop without it.
func BenchmarkObserve(b *testing.B) {
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("app/config/key-%06d", i)
	}
	b.Run("off", func(b *testing.B) {
		var s *Sampler
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				s.ObserveString(keys[i&1023])
			}
		})
	})
	for _, rate := range []int{64, 1} {
		b.Run(fmt.Sprintf("rate=%d", rate), func(b *testing.B) {
			s, _ := NewSampler(rate)
			b.RunParallel(func(pb *testing.PB) {
				for i := 0; pb.Next(); i++ {
					s.ObserveString(keys[i&1023])
				}
			})
		})
	}
}
