package ctrim

import (
	"context"
	"runtime"
	"testing"
	"time"
)

func TestResidentBytes(t *testing.T) {
	n, ok := ResidentBytes()
	if runtime.GOOS != "linux" {
		if ok {
			t.Errorf("resident bytes %d read off Linux", n)
		}
		return
	}
	if !ok || n <= 0 {
		t.Fatalf("ResidentBytes() = %d, %v on Linux", n, ok)
	}
	// 64 MiB more written Go memory is resident.
	b := make([]byte, 64<<20)
	for i := range b {
		b[i] = 1
	}
	m, _ := ResidentBytes()
	runtime.KeepAlive(b)
	if m-n < 32<<20 {
		t.Errorf("resident %d → %d after writing 64 MiB", n, m)
	}
}

func TestNextInterval(t *testing.T) {
	const s, mib = time.Second, 1 << 20
	for _, c := range []struct {
		cur      time.Duration
		released int64
		want     time.Duration
	}{
		{30 * s, 0, 60 * s},                 // little: back off
		{60 * s, mib - 1, 120 * s},          //
		{160 * s, 0, MaxInterval},           // no further than the longest
		{MaxInterval, 0, MaxInterval},       //
		{120 * s, mib, 120 * s},             // some: keep the pace
		{120 * s, 8*mib - 1, 120 * s},       //
		{120 * s, 8 * mib, 60 * s},          // much: come back sooner
		{MinInterval, 1 << 30, MinInterval}, // no sooner than the shortest
		{0, 8 * mib, MinInterval},           //
	} {
		if got := NextInterval(c.cur, c.released); got != c.want {
			t.Errorf("NextInterval(%v, %d) = %v, want %v", c.cur, c.released, got, c.want)
		}
	}
}

func TestRunStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); Run(ctx) }()
	time.Sleep(5 * time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

func TestEnvSettings(t *testing.T) {
	for _, c := range []struct {
		environ []string
		want    Settings
	}{
		{nil, Settings{}},
		{[]string{"PATH=/bin", "GOGC=200", "MALLOC_ARENA_MAX=2"}, Settings{}},
		{[]string{"MALLOC_TRIM_THRESHOLD_=131072"}, Settings{TrimThreshold: true}},
		{[]string{"MALLOC_MMAP_THRESHOLD_=1048576"}, Settings{MmapThreshold: true}},
		{[]string{"MALLOC_TRIM_THRESHOLD_="}, Settings{TrimThreshold: true}}, // set, if empty
		{[]string{"GLIBC_TUNABLES=glibc.malloc.trim_threshold=0"}, Settings{TrimThreshold: true}},
		{[]string{"GLIBC_TUNABLES=glibc.malloc.arena_max=2:glibc.malloc.mmap_threshold=65536"}, Settings{MmapThreshold: true}},
		{[]string{"GLIBC_TUNABLES=glibc.malloc.mmap_threshold=65536:glibc.malloc.trim_threshold=0"}, Settings{true, true}},
		{[]string{"GLIBC_TUNABLES=glibc.malloc.trim_threshold_x=1:glibc.rtld.nns=2"}, Settings{}}, // other tunables
		{[]string{"XMALLOC_TRIM_THRESHOLD_=1", "MALLOC_TRIM_THRESHOLD", "malloc_trim_threshold_=1"}, Settings{}},
	} {
		if got := EnvSettings(c.environ); got != c.want {
			t.Errorf("EnvSettings(%q) = %+v, want %+v", c.environ, got, c.want)
		}
	}
}

// An operator's trim threshold in the environment keeps Run from
// trimming: it returns at once. Without it Run trims until its context
// ends (in a build that can).
func TestRunLeavesTrimsToTheEnvironment(t *testing.T) {
	wait := func(done <-chan struct{}) {
		t.Helper()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return")
		}
	}
	t.Run("threshold set", func(t *testing.T) {
		t.Setenv("MALLOC_TRIM_THRESHOLD_", "131072")
		done := make(chan struct{})
		go func() { defer close(done); Run(context.Background()) }()
		wait(done)
		if Trimming() {
			t.Error("Trimming() after Run returned")
		}
	})
	t.Run("not set", func(t *testing.T) {
		if !Available() {
			t.Skip("nothing to trim in this build")
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); Run(ctx) }()
		for i := 0; !Trimming(); i++ {
			if i == 1000 {
				cancel()
				t.Fatal("Run is not trimming after 10 s")
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		wait(done)
		if Trimming() {
			t.Error("Trimming() after Run returned")
		}
	})
}
