package informer

import (
	"context"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctrlkit/ctrlkit/reflector"
)

// Handler receives the changes of an Informer's cache, one call at a time, from a
// goroutine of its own.
//
// For each key the calls form a consistent story: OnAdd for a key the handler does
// not know, then OnUpdate calls whose old object is the one the handler was last
// given, then OnDelete; after OnDelete, only OnAdd (the object was created again).
// A resync is an OnUpdate whose old and new objects are the same. Objects are shared
// with the cache and with other handlers: treat them as read-only.
type Handler[T any] interface {
	// OnAdd is called for an object the handler does not know yet. inInitialList is
	// true for the objects of the informer's first list, and for the whole cache as
	// replayed to a handler added after that list.
	OnAdd(obj T, inInitialList bool)
	// OnUpdate is called when an object the handler knows changed (new is the latest
	// state), and with old == new on resync.
	OnUpdate(old, new T)
	// OnDelete is called when an object the handler knows is gone.
	OnDelete(d Deleted[T])
}

// Deleted describes the deletion of an object, as given to Handler.OnDelete.
type Deleted[T any] struct {
	// Key is the object's key, "namespace/name" or "name".
	Key string
	// Obj is the object's last state: the one the server reported with the deletion,
	// or, with FinalStateUnknown, the last state the cache held.
	Obj T
	// FinalStateUnknown is true when the deletion was not seen as it happened but
	// inferred from a relist (the informer was disconnected meanwhile): Obj may be
	// older than the object's real final state.
	FinalStateUnknown bool
}

// HandlerFuncs adapts functions to a Handler. A nil function ignores its calls.
type HandlerFuncs[T any] struct {
	AddFunc    func(obj T, inInitialList bool)
	UpdateFunc func(old, new T)
	DeleteFunc func(d Deleted[T])
}

// OnAdd calls f.AddFunc if it is set.
func (f HandlerFuncs[T]) OnAdd(obj T, inInitialList bool) {
	if f.AddFunc != nil {
		f.AddFunc(obj, inInitialList)
	}
}

// OnUpdate calls f.UpdateFunc if it is set.
func (f HandlerFuncs[T]) OnUpdate(old, new T) {
	if f.UpdateFunc != nil {
		f.UpdateFunc(old, new)
	}
}

// OnDelete calls f.DeleteFunc if it is set.
func (f HandlerFuncs[T]) OnDelete(d Deleted[T]) {
	if f.DeleteFunc != nil {
		f.DeleteFunc(d)
	}
}

// HandlerOptions configures one handler. The zero value takes the informer's
// defaults.
type HandlerOptions struct {
	// ResyncPeriod is how often the handler is given every cached object again, as
	// OnUpdate(obj, obj). 0 means the informer's Config.ResyncPeriod; a negative value
	// means never. A positive value must be at least MinResyncPeriod.
	ResyncPeriod time.Duration
	// BufferLimit is how many changes may wait for the handler one by one; past it,
	// the waiting changes are coalesced to the latest state per key until the
	// handler has caught up. 0 means the informer's Config.BufferLimit. It must not
	// be negative.
	BufferLimit int
}

// HandlerStats are a handler's counters, from Registration.Stats.
type HandlerStats struct {
	// Delivered counts the calls the handler returned from.
	Delivered uint64
	// Panicked counts the calls in which the handler panicked. Each panic is
	// recovered and reported to Config.OnError and the Logger as a *PanicError;
	// the handler is not called again for that change, and goes on with the next
	// one (a later change of the key, or a resync, brings the key again).
	Panicked uint64
	// Coalesced counts the changes that were not delivered as calls of their own
	// because they were merged with later changes of the same key while the handler
	// lagged more than its BufferLimit behind.
	Coalesced uint64
	// Backlog is the number of changes waiting now: changes queued one by one,
	// coalesced keys, and objects of a list or resync not yet delivered.
	Backlog int
	// MaxBacklog is the largest Backlog seen so far.
	MaxBacklog int
	// Coalescing is true while the handler lags past its BufferLimit and its
	// changes are being coalesced.
	Coalescing bool
}

// takeMax is how many calls a handler's goroutine takes from its backlog at once.
const takeMax = 64

// Registration is a handler added to an Informer, from AddHandler. Its methods are
// safe for concurrent use. Remove it with Informer.RemoveHandler.
type Registration[T reflector.Object] struct {
	inf     *Informer[T]
	handler Handler[T]
	resync  time.Duration // > 0, or no resync

	// Guarded by inf.mu.
	nextResync time.Time // when the next resync is due (resync > 0, once started)
	resyncDue  bool      // the next resync batch goes to this handler
	needMarker bool      // HasSynced waits for the informer's initial list

	mu      sync.Mutex
	cond    sync.Cond // on mu: the backlog got work, or the registration stopped
	log     backlog[T]
	stopped bool // no more calls: removed, or the informer stopped

	halted    atomic.Bool // stopped, readable without mu
	delivered atomic.Uint64
	panics    atomic.Uint64
	synced    atomic.Bool
	syncedCh  chan struct{} // closed when synced turns true
	doneCh    chan struct{} // closed when stopped turns true
}

func newRegistration[T reflector.Object](inf *Informer[T], h Handler[T], resync time.Duration, limit int) *Registration[T] {
	r := &Registration[T]{
		inf:      inf,
		handler:  h,
		resync:   resync,
		syncedCh: make(chan struct{}),
		doneCh:   make(chan struct{}),
	}
	r.log.limit = limit
	r.cond.L = &r.mu
	return r
}

// HasSynced reports whether the handler has returned from OnAdd for every object
// of its initial list: the informer's first list, or, for a handler added later,
// the cache as it was then.
func (r *Registration[T]) HasSynced() bool { return r.synced.Load() }

// WaitForSync waits until HasSynced is true. It returns ctx.Err() if ctx ends first,
// and ErrStopped if the handler was removed or the informer stopped first.
func (r *Registration[T]) WaitForSync(ctx context.Context) error {
	select {
	case <-r.syncedCh:
		return nil
	default:
	}
	select {
	case <-r.syncedCh:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-r.doneCh:
		if r.synced.Load() {
			return nil
		}
		return ErrStopped
	}
}

// Stats returns the handler's counters.
func (r *Registration[T]) Stats() HandlerStats {
	r.mu.Lock()
	s := HandlerStats{
		Coalesced:  r.log.coalesced,
		Backlog:    r.log.size(),
		MaxBacklog: r.log.peak,
		Coalescing: r.log.coalescing,
	}
	r.mu.Unlock()
	s.Delivered = r.delivered.Load()
	s.Panicked = r.panics.Load()
	return s
}

// enqueue hands notes to the handler's goroutine. It never blocks on the handler.
func (r *Registration[T]) enqueue(notes []note[T]) {
	if len(notes) == 0 {
		return
	}
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	for i := range notes {
		r.log.push(notes[i])
	}
	r.mu.Unlock()
	r.cond.Signal()
}

// enqueueList hands the handler a whole list of objects to deliver as op (opAdd for
// an initial list, opSync for a resync), followed by the sync marker if marker is set.
// objs is shared and must not change.
func (r *Registration[T]) enqueueList(objs []T, keys []string, o op, marker bool) {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	r.log.pushList(objs, keys, o)
	if marker {
		r.log.pushMarker()
	}
	r.mu.Unlock()
	r.cond.Signal()
}

// stop ends the registration: the backlog is dropped, no new call starts, and the
// goroutine returns after the call in progress. It reports whether it stopped it.
func (r *Registration[T]) stop() bool {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return false
	}
	r.stopped = true
	r.halted.Store(true)
	r.log.clear()
	r.mu.Unlock()
	r.cond.Broadcast()
	close(r.doneCh)
	return true
}

// run is the handler's goroutine: it delivers the backlog until stop.
func (r *Registration[T]) run() {
	var calls []note[T]
	for {
		r.mu.Lock()
		for r.log.empty() && !r.stopped {
			r.cond.Wait()
		}
		if r.stopped {
			r.mu.Unlock()
			return
		}
		calls = r.log.take(calls[:0], takeMax)
		r.mu.Unlock()
		for i := range calls {
			if r.halted.Load() {
				break
			}
			r.call(&calls[i])
		}
		clear(calls)
	}
}

// call makes one call to the handler, with no lock held. A panic of the handler
// is recovered, counted and reported (see PanicError); the handler goes on with
// its next change.
func (r *Registration[T]) call(n *note[T]) {
	defer func() {
		if v := recover(); v != nil {
			r.panicked(n, v)
		}
	}()
	switch n.op {
	case opAdd:
		r.handler.OnAdd(n.obj, n.flag)
	case opUpdate:
		r.handler.OnUpdate(n.old, n.obj)
	case opSync:
		r.handler.OnUpdate(n.obj, n.obj)
	case opDelete:
		r.handler.OnDelete(Deleted[T]{Key: n.key, Obj: n.obj, FinalStateUnknown: n.flag})
	case opMarker:
		if r.synced.CompareAndSwap(false, true) {
			close(r.syncedCh)
		}
		return
	}
	r.delivered.Add(1)
}

// panicked records a panic of the handler during n's call.
func (r *Registration[T]) panicked(n *note[T], v any) {
	r.panics.Add(1)
	key := n.key
	if key == "" {
		key = keyOf(n.obj)
	}
	r.inf.report(&PanicError{Informer: r.inf.name, Key: key, Call: n.op.call(), Value: v, Stack: debug.Stack()})
}
