package reflectortest

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/watch"
)

// fakeWatch is one open watch: events are queued without blocking the
// server, and a goroutine (pump) hands them to the result channel.
type fakeWatch struct {
	sel       selector
	bookmarks bool

	out      chan watch.Event
	done     chan struct{} // closed by Stop
	stopOnce sync.Once
	wake     chan struct{} // capacity 1: something changed
	abort    chan struct{} // closed when the server drops the watch at once

	mu    sync.Mutex
	queue []watch.Event // guarded by mu
	ended bool          // guarded by mu: close once queue is drained
}

func newFakeWatch(sel selector, bookmarks bool) *fakeWatch {
	return &fakeWatch{
		sel:       sel,
		bookmarks: bookmarks,
		out:       make(chan watch.Event),
		done:      make(chan struct{}),
		wake:      make(chan struct{}, 1),
		abort:     make(chan struct{}),
	}
}

// Stop implements watch.Interface.
func (w *fakeWatch) Stop() { w.stopOnce.Do(func() { close(w.done) }) }

// ResultChan implements watch.Interface.
func (w *fakeWatch) ResultChan() <-chan watch.Event { return w.out }

func (w *fakeWatch) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *fakeWatch) push(ev watch.Event) {
	w.mu.Lock()
	if !w.ended {
		w.queue = append(w.queue, ev)
	}
	w.mu.Unlock()
	w.signal()
}

// end makes the watch close: after ev (if not nil) and, unless drop is set,
// after the events already queued.
func (w *fakeWatch) end(ev *watch.Event, drop bool) {
	w.mu.Lock()
	if !w.ended {
		if drop {
			w.queue = nil
			close(w.abort)
		}
		if ev != nil {
			w.queue = append(w.queue, *ev)
		}
		w.ended = true
	}
	w.mu.Unlock()
	w.signal()
}

// deliver queues what this watch sees of a change: selectors turn a
// modification into an addition or a deletion when the object enters or
// leaves them, as the API server does.
func (w *fakeWatch) deliver(typ watch.EventType, obj, prev Object) {
	now := w.sel.matches(obj)
	was := typ != watch.Added && w.sel.matches(prev)
	switch {
	case typ == watch.Deleted && was:
		w.push(watch.Event{Type: watch.Deleted, Object: obj.DeepCopyObject()})
	case typ == watch.Deleted:
	case was && now:
		w.push(watch.Event{Type: watch.Modified, Object: obj.DeepCopyObject()})
	case now:
		w.push(watch.Event{Type: watch.Added, Object: obj.DeepCopyObject()})
	case was:
		w.push(watch.Event{Type: watch.Deleted, Object: obj.DeepCopyObject()})
	}
}

// pump sends the queued events until the watch ends; then it calls
// unregister and closes the result channel.
func (w *fakeWatch) pump(ctx context.Context, timeout time.Duration, unregister func()) {
	defer close(w.out)
	defer unregister()
	var expire <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expire = t.C
	}
	for {
		w.mu.Lock()
		var next *watch.Event
		if len(w.queue) > 0 {
			ev := w.queue[0]
			next = &ev
			w.queue[0] = watch.Event{}
			w.queue = w.queue[1:]
		}
		ended := w.ended
		w.mu.Unlock()
		if next == nil && ended {
			return
		}
		if next == nil {
			select {
			case <-w.wake:
				continue
			case <-w.done:
			case <-ctx.Done():
			case <-expire:
			case <-w.abort:
			}
			return
		}
		select {
		case w.out <- *next:
		case <-w.done:
			return
		case <-w.abort:
			return
		case <-ctx.Done():
			return
		case <-expire:
			return
		}
	}
}
