package reconcile

import (
	"context"
	"errors"
	"runtime/debug"
	"sync"
)

// ErrRevoked is the cause of a reconcile's context cancelled by Restrict: its key
// is no longer this controller's.
var ErrRevoked = errors.New("reconcile: the key was revoked")

// errNotRestrictable is Restrict's error without Config.Restrictable.
var errNotRestrictable = errors.New("reconcile: Restrict needs Config.Restrictable")

// Restrict makes the controller reconcile only the keys owns accepts, from now
// on: a refused key is dropped when taken from the queue, and the reconciles in
// flight of refused keys have their contexts cancelled with cause ErrRevoked.
// Restrict returns once they have returned, so that another replica may start
// on those keys; or with ctx's error if ctx ends first. A nil owns accepts
// every key. The sources' keys that owns accepts and the previous owns refused
// are enqueued (keys a source does not hold yet come as it learns of them:
// informer.Informer.SetShard adds the objects that enter a shard). owns must
// be fast and safe for concurrent use; Restrict calls it for the keys in
// flight, under a worker's lock. A panic of owns refuses the key.
func (c *Controller[K]) Restrict(ctx context.Context, owns func(K) bool) error {
	if !c.cfg.Restrictable {
		return errNotRestrictable
	}
	var prev func(K) bool
	if p := c.owns.Load(); p != nil {
		prev = *p
	}
	if owns == nil {
		c.owns.Store(nil)
	} else {
		c.owns.Store(&owns)
	}
	if prev != nil {
		// Keys it refused that are ours now.
		c.mu.Lock()
		sources := c.sources
		c.mu.Unlock()
		for _, k := range c.resyncKeys(nil, sources) {
			if !c.callOwns(prev, k) && (owns == nil || c.callOwns(owns, k)) {
				c.enqueue(k, Live)
			}
		}
	}
	if owns == nil {
		return nil
	}
	for _, w := range c.slots {
		w.mu.Lock()
		if !w.active || c.callOwns(owns, w.key) {
			w.mu.Unlock()
			continue
		}
		w.cancel(ErrRevoked)
		if w.idle == nil {
			w.idle = make(chan struct{})
		}
		idle := w.idle
		w.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// owned reports whether key passes the last Restrict.
func (c *Controller[K]) owned(key K) bool {
	f := c.owns.Load()
	return f == nil || c.callOwns(*f, key)
}

// callOwns calls owns; a panic refuses the key (keeping a key that may be
// another replica's would be worse than dropping it) and is logged.
func (c *Controller[K]) callOwns(owns func(K) bool, key K) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			ok = false
			c.log.Error(&PanicError{Value: v, Stack: debug.Stack()}, "Restrict's owns panicked; the key is refused", "key", key)
		}
	}()
	return owns(key)
}

// workerSlot is what Restrict sees of one worker: the key it reconciles.
type workerSlot[K comparable] struct {
	mu     sync.Mutex
	active bool
	key    K
	cancel context.CancelCauseFunc
	idle   chan struct{} // closed when the reconcile in flight returns; made by Restrict
}

// begin records that the worker reconciles key, unless key is no longer owned:
// checked under the lock Restrict takes, so that Restrict either sees this
// reconcile or this reconcile sees Restrict's owns.
func (w *workerSlot[K]) begin(c *Controller[K], key K, cancel context.CancelCauseFunc) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !c.owned(key) {
		return false
	}
	w.active, w.key, w.cancel = true, key, cancel
	return true
}

func (w *workerSlot[K]) end() {
	w.mu.Lock()
	defer w.mu.Unlock()
	var zero K
	w.active, w.key, w.cancel = false, zero, nil
	if w.idle != nil {
		close(w.idle)
		w.idle = nil
	}
}
