package bench

import (
	"sync"
	"time"
)

// wqFloor is the floor of the Add/Get/Done shapes (impl=floor): a buffered Go channel
// with room for the whole key set, the runtime's own hand-off of an item from one
// goroutine to another, parking and waking included. It keeps no set, so it neither
// dedups nor tracks items in flight, and Done does nothing: the harness never adds a
// key that is queued or being processed, so it needs neither. Where a shape's cost is
// mostly the hand-off, no queue that parks its idle workers goes much below it, and
// the speed-up over client-go that a queue can reach is about client-go's time over
// this one's. It is a reference, not a strict bound: a queue that wakes its workers in
// another order (the last to wait first) can beat it when many workers wait.
type wqFloor struct{ ch chan string }

// wqWithFloor returns impls and impl=floor, a channel with room for k keys.
func wqWithFloor(impls []wqImpl, k int) []wqImpl {
	return append(impls[:len(impls):len(impls)], wqImpl{"floor", func() wqQueue {
		return &wqFloor{ch: make(chan string, k)}
	}})
}

func (f *wqFloor) add(item string) { f.ch <- item }
func (f *wqFloor) get() (string, bool) {
	item, ok := <-f.ch
	return item, ok
}
func (f *wqFloor) done(string) {}
func (f *wqFloor) drain()      { close(f.ch) }
func (f *wqFloor) shutDown()   { close(f.ch) }

// The floor runs only the Add/Get/Done harness, which never schedules an add.
func (f *wqFloor) addAfter(string, time.Duration) { panic("bench: the floor has no delayed adds") }
func (f *wqFloor) addRateLimited(string)          { panic("bench: the floor has no rate limiter") }

// wqLockFloor is the floor of BenchmarkWorkqueueSerial (impl=floor-locks): a FIFO ring
// under a sync.Mutex that Add, Get and Done each take once, as both queues here take a
// lock in each (client-go its one lock, ctrlkit its staging lock in Add and its lock in
// Get and Done). It keeps no set, so it neither dedups nor tracks items in flight: its
// cost is three uncontended lock round trips an item and the ring, what is left of the
// cycle once the bookkeeping is taken away. It is a reference for the serial cycle
// only: Get does not block (the harness adds before it gets).
type wqLockFloor struct {
	mu      sync.Mutex
	ring    []string
	head, n int
}

// wqWithLockFloor returns impls and impl=floor-locks.
func wqWithLockFloor(impls []wqImpl) []wqImpl {
	return append(impls[:len(impls):len(impls)], wqImpl{"floor-locks", func() wqQueue {
		return &wqLockFloor{ring: make([]string, 16)}
	}})
}

func (f *wqLockFloor) add(item string) {
	f.mu.Lock()
	if f.n == len(f.ring) {
		grown := make([]string, 2*len(f.ring))
		for i := range f.n {
			grown[i] = f.ring[(f.head+i)%len(f.ring)]
		}
		f.ring, f.head = grown, 0
	}
	f.ring[(f.head+f.n)%len(f.ring)] = item
	f.n++
	f.mu.Unlock()
}

func (f *wqLockFloor) get() (string, bool) {
	f.mu.Lock()
	if f.n == 0 {
		f.mu.Unlock()
		return "", false
	}
	item := f.ring[f.head]
	f.ring[f.head] = ""
	f.head = (f.head + 1) % len(f.ring)
	f.n--
	f.mu.Unlock()
	return item, true
}

func (f *wqLockFloor) done(string) {
	f.mu.Lock() // a queue records the end of the item's processing under its lock
	f.mu.Unlock()
}

func (f *wqLockFloor) drain()    {}
func (f *wqLockFloor) shutDown() {}

// The lock floor runs only the serial cycle, which never schedules an add.
func (f *wqLockFloor) addAfter(string, time.Duration) { panic("bench: the floor has no delayed adds") }
func (f *wqLockFloor) addRateLimited(string)          { panic("bench: the floor has no rate limiter") }
