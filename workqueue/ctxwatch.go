package workqueue

import (
	"context"
	"slices"
	"weak"
)

// Contexts of blocked Gets. A Get that waits with a context that can end must wake when
// it ends. Selecting on the waiter's channel and ctx.Done() does that, but a select on
// two channels makes every hand-over to a blocked Get dearer, for the Get and for the
// adder that wakes it: with 4 producers and 4 workers over 8 keys, where nearly every
// item goes to a blocked Get, a quarter of the cost of an item. So the queue watches the
// contexts Gets wait with again and again (a worker's): a watch is a context.AfterFunc,
// registered once, that wakes the Gets waiting with its context when it ends, and such
// a Get waits on its channel alone. A context is watched from the second Get that
// waits with it in a row, so that contexts made for one Get each (a timeout per call)
// are not: their Gets select. At most maxWatches contexts are watched at once; a watch
// ends with its context, or once the queue is shut down and no Get waits any more. The
// watch holds the queue weakly: a queue dropped without ShutDown is not kept alive by
// a context that lives on.

// maxWatches bounds the contexts watched at once.
const maxWatches = 4

// ctxWatch is a watched context: its Done channel, and the stop function of its
// AfterFunc.
type ctxWatch struct {
	done <-chan struct{}
	stop func() bool
}

// watchLocked reports whether ctx, whose Done channel is done (not nil), is watched,
// watching it from now on if a Get waited with it last. Requires mu held.
func (q *Queue[T]) watchLocked(ctx context.Context, done <-chan struct{}) bool {
	for i := range q.watches {
		if q.watches[i].done == done {
			return true
		}
	}
	if q.shut || done != q.lastDone || len(q.watches) >= maxWatches {
		q.lastDone = done
		return false
	}
	wq := weak.Make(q)
	stop := context.AfterFunc(ctx, func() {
		if q := wq.Value(); q != nil {
			q.ctxEnded(done)
		}
	})
	q.watches = append(q.watches, ctxWatch{done: done, stop: stop})
	return true
}

// ctxEnded wakes the Gets waiting with the context whose Done channel is done, which
// has ended, and drops its watch. It runs in the goroutine of the context's AfterFunc.
func (q *Queue[T]) ctxEnded(done <-chan struct{}) {
	q.mu.Lock()
	if i := slices.IndexFunc(q.watches, func(w ctxWatch) bool { return w.done == done }); i >= 0 {
		q.watches = slices.Delete(q.watches, i, i+1)
	}
	kept := q.waiters[:0]
	for _, w := range q.waiters {
		if w == nil {
			continue // a hole: squeezed out here
		}
		if w.done != done {
			w.pos = len(kept)
			kept = append(kept, w)
			continue
		}
		q.nwaiting--
		w.res = resCanceled
		q.nwait.Add(-1)
		w.ch <- struct{}{} // its capacity is 1 and it receives one wake-up: no block
	}
	clear(q.waiters[len(kept):])
	q.waiters, q.holes = kept, 0
	q.unlock()
}

// unwatchLocked ends every watch. Requires mu held, and no Get waiting or about to.
func (q *Queue[T]) unwatchLocked() {
	for _, w := range q.watches {
		w.stop() // an AfterFunc already started finds neither its watch nor a Get
	}
	q.watches, q.lastDone = nil, nil
}
