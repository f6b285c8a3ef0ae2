package manager

import (
	"context"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"
)

func TestMemoryReleaserWorthIt(t *testing.T) {
	const mib = 1 << 20
	r := MemoryReleaser{MinFree: 8 * mib}
	cases := []struct {
		name          string
		free, objects uint64
		want          bool
	}{
		{"a burst's pages: 80 MiB free beside 40 MiB of objects", 80 * mib, 40 * mib, true},
		{"a quarter of the objects, over the floor", 10 * mib, 40 * mib, true},
		{"under a quarter of the objects", 9 * mib, 40 * mib, false},
		{"under the floor, however small the heap", 7 * mib, 1 * mib, false},
	}
	for _, tc := range cases {
		if got := r.worthIt(tc.free, tc.objects); got != tc.want {
			t.Errorf("%s: worthIt = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestMemoryReleaserReturnsABurst frees a real 96 MiB burst and checks
// that the running releaser finds it due and returns it, and that it was
// the releaser that did.
func TestMemoryReleaserReturnsABurst(t *testing.T) {
	var released atomic.Int32
	r := MemoryReleaser{MinFree: 16 << 20, Interval: 10 * time.Millisecond,
		release: func() { released.Add(1); debug.FreeOSMemory() }}
	burst := make([][]byte, 96)
	for i := range burst {
		burst[i] = make([]byte, 1<<20)
		burst[i][0] = 1
	}
	runtime.KeepAlive(burst)
	burst = nil
	runtime.GC()
	if free, objects, due := r.due(); !due {
		t.Fatalf("after a 96 MiB burst: %d MiB free beside %d MiB of objects, not due", free>>20, objects>>20)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		free, _, due := r.due()
		if !due && released.Load() > 0 {
			if free >= 16<<20 {
				t.Errorf("%d MiB still free after the release", free>>20)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d MiB free after 5 s, %d releases", free>>20, released.Load())
		}
	}
}
