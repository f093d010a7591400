package workqueue

import (
	"math"
	"sync/atomic"
)

// The dedup fast path. An add of an item that already waits to be handed out (queued, or
// in flight and added again) at a priority at least as high changes nothing; under a
// producer storm most adds are such duplicates. To answer them without any lock, and
// without writing any memory that other processors read, the core publishes the waiting
// state of items seen duplicated in a table adders read with atomic loads only.
//
// Each published item has a mark: an immutable copy of the item and its slot, and an atomic
// priority, set by the core under its lock to the priority of the item's lane while the
// item waits, and to idle otherwise. An adder finds the mark at marks[tag & marksMask],
// (or its neighbour), compares the item, and drops its add if the priority is not idle and
// at least its own.
// The mark's priority is stored in the same critical section as the state it mirrors, so
// an adder that reads a waiting priority saw the item waiting at that moment: its add is a
// duplicate then, and the outcome is that of taking the lock. An adder that finds no mark,
// another item's mark, or an idle one takes the usual path.
//
// The table is 2-way set-associative: an item may sit in cell tag&marksMask or in its
// neighbour (the same cache line). An item is published when an add under the lock finds it
// duplicated and one of its two cells is empty or holds an item that does not wait (which
// is then unpublished); an empty cell is taken first, then the item's own. A mark lives as long as its item's entry (including while cached) and is
// reused when the item is published again, so steady churn allocates nothing.

// marksBits sets the table's size, 2^marksBits cells (32KiB of pointers), made on the first
// duplicate add.
const (
	marksBits = 12
	marksMask = 1<<marksBits - 1
)

// idlePrio is the priority of a mark whose item does not wait.
const idlePrio = math.MinInt64

// mark is an item's published waiting state; see above. The pad keeps the priorities of
// two marks off a shared cache line, so that a lock holder changing one item's state does
// not evict another's mark from the adders' caches.
type mark[T comparable] struct {
	item T     // never changes
	slot int32 // never changes
	prio atomic.Int64
	_    [cacheLine]byte
}

// marks is the table of published marks.
type marks[T comparable] [1 << marksBits]atomic.Pointer[mark[T]]

// Entry mark states (entry.mk).
const (
	mkNone      uint8 = iota // no mark
	mkHeld                   // a mark in core.markOf, not in the table (its priority is idle)
	mkPublished              // a mark in core.markOf and in the table
)

// waiting reports, without a lock, whether item (whose tag is tag) is published as waiting
// at a priority of at least prio, in which case an add of it at prio is a duplicate. False
// means "not known": the add takes the usual path.
func (c *core[T]) waiting(item T, tag uint32, prio int) bool {
	t := c.table.Load()
	if t == nil {
		return false
	}
	i := tag & marksMask
	return t[i].Load().waiting(item, prio) || t[i^1].Load().waiting(item, prio)
}

// waiting reports whether m (nil allowed) is item's mark, waiting at prio or higher.
func (m *mark[T]) waiting(item T, prio int) bool {
	if m == nil {
		return false
	}
	p := m.prio.Load()
	return p != idlePrio && int64(prio) <= p && m.item == item
}

// markWaiting sets the published priority of entry s (e) to that of the lane it waits in,
// if s is published. Call it whenever s starts waiting or its lane changes.
func (c *core[T]) markWaiting(s int32, e *entry[T]) {
	if e.mk == mkPublished {
		c.markOf[s].prio.Store(int64(c.lanes[e.lane()].prio))
	}
}

// markIdle sets the published priority of entry s (e) to idle, if s is published. Call it
// whenever s stops waiting.
func (c *core[T]) markIdle(s int32, e *entry[T]) {
	if e.mk == mkPublished {
		c.markOf[s].prio.Store(idlePrio)
	}
}

// publish publishes entry s, which waits, unless both its cells hold other items that
// wait.
func (c *core[T]) publish(s int32) {
	t := c.table.Load()
	if t == nil {
		t = new(marks[T])
		c.table.Store(t)
	}
	e := c.e(s)
	i := e.tag & marksMask
	cell, old := &t[i], t[i].Load()
	if old != nil {
		if other := &t[i^1]; other.Load() == nil {
			cell, old = other, nil
		} else if old.prio.Load() != idlePrio {
			cell, old = other, other.Load()
			if old.prio.Load() != idlePrio {
				return
			}
		}
	}
	if old != nil {
		c.e(old.slot).mk = mkHeld
	}
	if n := int(c.nslots); len(c.markOf) < n {
		c.markOf = append(c.markOf, make([]*mark[T], n-len(c.markOf))...)
	}
	m := c.markOf[s]
	if m == nil {
		m = &mark[T]{item: e.item, slot: s}
		c.markOf[s] = m
	}
	e.mk = mkPublished
	c.markWaiting(s, e)
	cell.Store(m)
}

// dropMark unpublishes and forgets the mark of entry s, which is about to be freed.
func (c *core[T]) dropMark(s int32, e *entry[T]) {
	m := c.markOf[s]
	if e.mk == mkPublished {
		m.prio.Store(idlePrio)
		t, i := c.table.Load(), e.tag&marksMask
		if !t[i].CompareAndSwap(m, nil) {
			t[i^1].CompareAndSwap(m, nil)
		}
	}
	c.markOf[s] = nil
	e.mk = mkNone
}

// dropMarks forgets every mark (when the core's containers are made anew). Marks that
// adders still hold are idle.
func (c *core[T]) dropMarks() {
	if c.table.Load() != nil {
		c.table.Store(nil)
	}
	c.markOf = nil
}
