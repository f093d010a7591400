package workqueue

import (
	"runtime"
	"sync/atomic"
)

// spinLock guards critical sections of a few nanoseconds that many goroutines enter at
// once (the staging buffer). A sync.Mutex parks a goroutine that finds it taken whenever
// its processor has other goroutines to run, and waking it costs far more than the
// section; spinLock looks again while the holder, running on another processor, finishes,
// and yields the processor after spinTries looks (the holder is then likely not running).
type spinLock struct{ held atomic.Uint32 }

// spinTries is how many times Lock looks at a taken lock before it yields the processor.
const spinTries = 64

func (l *spinLock) Lock() {
	if !l.held.CompareAndSwap(0, 1) {
		l.lockSlow()
	}
}

func (l *spinLock) lockSlow() {
	for {
		for range spinTries {
			if l.held.Load() == 0 && l.held.CompareAndSwap(0, 1) {
				return
			}
		}
		runtime.Gosched()
	}
}

func (l *spinLock) Unlock() { l.held.Store(0) }
