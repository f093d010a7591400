package workqueue

import (
	"runtime"
	"sync"
	"testing"
)

// TestSpinLockExcludes: goroutines, more than processors, increment a plain counter under
// the lock; none of the increments may be lost (and the race detector sees no race).
func TestSpinLockExcludes(t *testing.T) {
	const goroutines, each = 16, 20000
	var l spinLock
	n := 0
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				l.Lock()
				n++
				l.Unlock()
			}
		})
	}
	wg.Wait()
	if n != goroutines*each {
		t.Fatalf("counter %d, want %d: two goroutines held the lock at once", n, goroutines*each)
	}
}

// TestSpinLockYieldsToHolder: on one processor, a holder that gives up the processor
// inside its section must get it back from the goroutines waiting for the lock (they
// yield instead of spinning forever).
func TestSpinLockYieldsToHolder(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var l spinLock
	n := 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				l.Lock()
				runtime.Gosched() // the others run, and find the lock taken
				n++
				l.Unlock()
			}
		})
	}
	wg.Wait()
	if n != 8*200 {
		t.Fatalf("counter %d, want %d", n, 8*200)
	}
}
