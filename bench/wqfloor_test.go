package bench

import "time"

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
