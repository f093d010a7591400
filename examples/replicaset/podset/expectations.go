package podset

import (
	"sync"
	"time"
)

// DefaultExpectationsTimeout is how long Expectations waits for the cache to show
// writes before it gives up on them and lets the controller act again.
const DefaultExpectationsTimeout = 5 * time.Minute

// Expectations remembers, per owner key, the creations and deletions a controller
// has issued but not yet seen in its informer's cache, so that it does not act on a
// cache that lags behind its own writes.
//
// The protocol: before issuing n creates for an owner, call ExpectCreations(key, n);
// before deleting objects, ExpectDeletions(key, uids). When the informer reports an
// added object of that owner, call CreationObserved; a deleted one (or one marked for
// deletion), DeletionObserved. A write that fails, and so will never show up in the
// cache, is taken back with CreationFailed or DeletionObserved. Before acting on an
// owner, the controller asks Satisfied: while expectations are outstanding, what the
// cache shows does not include the controller's own writes yet, and acting on it
// would create or delete twice.
//
// Expectations that are not met within Timeout count as met (a lost event, or a
// write that failed without the controller knowing), so an owner is never stuck.
//
// The zero value is ready to use with DefaultExpectationsTimeout. An Expectations is
// safe for concurrent use; every method is O(1) except ExpectDeletions, which is
// O(len(uids)). Memory: one entry per owner with outstanding expectations, plus one
// map entry per pending deletion.
type Expectations[K comparable] struct {
	// Timeout is how long expectations stay outstanding before Satisfied ignores
	// them. Zero means DefaultExpectationsTimeout. Set it before first use.
	Timeout time.Duration

	mu sync.Mutex
	// pending holds an entry only for keys with outstanding expectations:
	// creations > 0 or a non-empty deletions set.
	pending map[K]*expectation
}

// expectation is one owner's outstanding writes. An entry in Expectations.pending
// is never met: creations > 0 or deletions is not empty.
type expectation struct {
	creations int                 // creates issued and not yet observed; never negative
	deletions map[string]struct{} // UIDs of objects whose deletion was issued and not yet observed
	since     time.Time           // when the latest expectation was recorded
}

func (e *expectation) met() bool { return e.creations <= 0 && len(e.deletions) == 0 }

// ExpectCreations records that n creations for key are about to be issued. It adds
// to creations already outstanding and restarts the timeout. n <= 0 does nothing.
func (x *Expectations[K]) ExpectCreations(key K, n int) {
	if n <= 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.entryLocked(key)
	e.creations += n
	e.since = time.Now()
}

// ExpectDeletions records that the objects with these UIDs are about to be
// deleted. It adds to deletions already outstanding and restarts the timeout.
// No UIDs does nothing.
func (x *Expectations[K]) ExpectDeletions(key K, uids []string) {
	if len(uids) == 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.entryLocked(key)
	for _, uid := range uids {
		e.deletions[uid] = struct{}{}
	}
	e.since = time.Now()
}

// entryLocked returns key's entry, creating it. Requires x.mu held.
func (x *Expectations[K]) entryLocked(key K) *expectation {
	e := x.pending[key]
	if e == nil {
		if x.pending == nil {
			x.pending = make(map[K]*expectation)
		}
		e = &expectation{deletions: make(map[string]struct{})}
		x.pending[key] = e
	}
	return e
}

// CreationObserved lowers key's outstanding creations by one: the cache shows an
// object created for it. Without outstanding creations it does nothing (objects
// created by others, or seen after the expectations timed out).
func (x *Expectations[K]) CreationObserved(key K) {
	x.lower(key, func(e *expectation) {
		if e.creations > 0 {
			e.creations--
		}
	})
}

// CreationFailed takes back one expected creation whose create call failed: no
// object will show up for it.
func (x *Expectations[K]) CreationFailed(key K) { x.CreationObserved(key) }

// DeletionObserved removes uid from key's outstanding deletions: the cache shows
// the object gone or being deleted, or the delete call failed. Calling it again
// for the same uid, or for a uid that was not expected, does nothing, so both the
// "marked for deletion" update and the final deletion may report it.
func (x *Expectations[K]) DeletionObserved(key K, uid string) {
	x.lower(key, func(e *expectation) { delete(e.deletions, uid) })
}

func (x *Expectations[K]) lower(key K, f func(*expectation)) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.pending[key]
	if e == nil {
		return
	}
	f(e)
	if e.met() {
		delete(x.pending, key)
	}
}

// Satisfied reports whether the controller may act on key: no creation or deletion
// it issued is still missing from the cache, or they have been missing for longer
// than Timeout, in which case they are dropped. When it reports false, wait is how
// long until the expectations time out, for a requeue as a fallback in case the
// events that would lower them never come.
func (x *Expectations[K]) Satisfied(key K) (ok bool, wait time.Duration) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.pending[key]
	if e == nil {
		return true, 0
	}
	timeout := x.Timeout
	if timeout <= 0 {
		timeout = DefaultExpectationsTimeout
	}
	left := timeout - time.Since(e.since)
	if left <= 0 {
		delete(x.pending, key)
		return true, 0
	}
	return false, left
}

// Pending returns key's outstanding creations and deletions, for logs and tests.
func (x *Expectations[K]) Pending(key K) (creations, deletions int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if e := x.pending[key]; e != nil {
		return e.creations, len(e.deletions)
	}
	return 0, 0
}

// Forget drops key's expectations, when its owner is gone.
func (x *Expectations[K]) Forget(key K) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.pending, key)
}
