package workqueue

import "slices"

// The delay schedule holds the pending delayed adds. Near deadlines go into a timing wheel:
// a ring of wheelSize buckets, each covering 2^wheelBits nanoseconds of deadlines, filled by
// appending; a bucket is sorted (by deadline, then by order of scheduling) only when it
// comes due, so scheduling costs an append and firing a share of one sort of a small,
// contiguous bucket. Deadlines beyond the ring's horizon wait in an overflow heap and move
// into the ring as it turns. Both hold elements by value and never point back from
// entries, so nothing but the element itself moves when another is scheduled or fires.
//
// An entry with a pending delayed add records its deadline (entry.dat) and lane
// (entry.dlane). Moving a deadline earlier schedules a new element and leaves the old one
// in place, stale: an element is valid iff its entry's dat equals its deadline. Stale
// elements are skipped when they come due and are compacted away when they outnumber the
// valid ones.

const (
	wheelBits = 16 // a bucket spans 2^16 ns = 65.536µs of deadlines
	wheelSize = 512
	wheelMask = wheelSize - 1
	// so the ring's horizon is 512 buckets = 33.6ms ahead of the bucket being fired.
)

// delayed is one element of the schedule.
type delayed struct {
	at   int64 // deadline on the queue's monotonic clock
	slot int32
	seq  uint32 // scheduling order, for FIFO among equal deadlines (wraps)
}

// cmpDelayed orders elements by deadline, then by scheduling order.
func cmpDelayed(a, b delayed) int {
	switch {
	case a.at < b.at:
		return -1
	case a.at > b.at:
		return 1
	}
	return int(int32(a.seq - b.seq))
}

// bucket is one slot of the wheel.
type bucket struct {
	els    []delayed
	sorted bool // els is in cmpDelayed order
}

// schedule is the delay schedule; see above.
//
// Invariants: with K(x) = x.at >> wheelBits, the ring holds inRing elements, bucket
// ring[k & wheelMask] holds elements with K == k for cur < k < cur+wheelSize, and those with
// K <= cur for k == cur; every overflow element has K >= cur+wheelSize (over is a heap in
// cmpDelayed order); pending is the number of entries with dat != 0, each has
// exactly one valid element, and stale == inRing + over.len() - pending.
type schedule struct {
	ring    []bucket // wheelSize buckets, made on first use
	cur     int64    // the bucket being fired
	inRing  int
	over    overflow
	seq     uint32
	pending int
	stale   int
	// keys and tmp are scratch space for sortBucket.
	keys []uint64
	tmp  []delayed
}

// valid reports whether el is its entry's pending delayed add.
func (c *core[T]) valid(el delayed) bool { return c.e(el.slot).dat == el.at }

// addAt schedules item to be added at deadline at (> 0). A pending earlier deadline wins;
// the priority is the highest requested. tag is tagOf(item); now is the current time (or
// earlier), on the clock of the deadlines.
func (c *core[T]) addAt(item T, tag uint32, at int64, prio int, key string, now int64) {
	s, pos := c.lookup(item, tag)
	if s == none {
		s = c.alloc(item, tag, pos)
	} else if e := c.e(s); e.state() == stCached {
		c.revive(e)
	}
	e := c.e(s)
	if e.dat != 0 {
		if prio > c.lanes[e.dlane].prio {
			l := c.acquire(prio, key)
			c.unref(e.dlane)
			e.dlane = l
		}
		if at >= e.dat {
			return
		}
		e.dat = at
		c.sched.stale++ // the element of the later deadline
		c.insert(s, at, now)
		if d := &c.sched; d.stale > d.pending+compactMin {
			c.compactSchedule()
		}
		return
	}
	e.dat = at
	e.dlane = c.acquire(prio, key)
	c.sched.pending++
	c.insert(s, at, now)
}

// insert adds an element for slot s at deadline at; now is the current time (or earlier).
func (c *core[T]) insert(s int32, at, now int64) {
	d := &c.sched
	d.seq++
	el := delayed{at: at, slot: s, seq: d.seq}
	if d.ring == nil {
		d.ring = make([]bucket, wheelSize)
	}
	k := at >> wheelBits
	if d.inRing == 0 {
		// The ring may start anywhere: at this deadline, or the overflow's first if earlier,
		// but never after the present. A ring started at a far deadline would take every
		// nearer one into its current bucket, which then sorts slowly and often.
		d.cur = min(k, now>>wheelBits)
		if d.over.len() > 0 {
			d.cur = min(d.cur, d.over.min().at>>wheelBits)
		}
		c.refill()
	}
	k = max(k, d.cur)
	if k-d.cur >= wheelSize {
		d.over.push(el)
		return
	}
	b := &d.ring[k&wheelMask]
	if n := len(b.els); n == 0 {
		b.sorted = true
	} else if b.sorted && el.at < b.els[n-1].at {
		b.sorted = false
	}
	b.els = append(b.els, el)
	d.inRing++
}

// refill moves the overflow elements that fall within the ring's horizon into the ring,
// dropping stale ones.
func (c *core[T]) refill() {
	d := &c.sched
	for d.over.len() > 0 {
		el := d.over.min()
		k := el.at >> wheelBits
		if k-d.cur >= wheelSize {
			return
		}
		d.over.pop()
		if !c.valid(el) {
			d.stale--
			continue
		}
		k = max(k, d.cur)
		b := &d.ring[k&wheelMask]
		if n := len(b.els); n == 0 {
			b.sorted = true
		} else if b.sorted && cmpDelayed(el, b.els[n-1]) < 0 {
			b.sorted = false
		}
		b.els = append(b.els, el)
		d.inRing++
	}
}

// sortBucket puts b in cmpDelayed order. A bucket's elements are in scheduling order
// (elements are appended as they are scheduled, and those moved in from the overflow come
// first, oldest first), so sorting by deadline with ties kept in place is enough; with
// every deadline within the bucket's 2^wheelBits ns, a deadline's offset and the element's
// index pack into one integer, which sorts far faster than elements with a comparison
// function. Other buckets (the current one may hold earlier deadlines) sort the slow way.
func (c *core[T]) sortBucket(b *bucket) {
	if b.sorted {
		return
	}
	b.sorted = true
	els := b.els
	base := els[0].at &^ (1<<wheelBits - 1)
	keys := c.sched.keys[:0]
	for i, el := range els {
		off := el.at - base
		if off < 0 || off >= 1<<wheelBits {
			slices.SortFunc(els, cmpDelayed)
			return
		}
		keys = append(keys, uint64(off)<<32|uint64(i))
	}
	slices.Sort(keys)
	tmp := append(c.sched.tmp[:0], els...)
	for i, k := range keys {
		els[i] = tmp[uint32(k)]
	}
	c.sched.keys, c.sched.tmp = keys[:0], tmp[:0]
}

// trim sorts bucket b and drops the stale elements at its head.
func (c *core[T]) trim(b *bucket) {
	c.sortBucket(b)
	i := 0
	for i < len(b.els) && !c.valid(b.els[i]) {
		i++
	}
	c.dropHead(b, i)
	c.sched.stale -= i
}

// dropHead removes the first i elements of b.
func (c *core[T]) dropHead(b *bucket, i int) {
	if i == 0 {
		return
	}
	n := copy(b.els, b.els[i:])
	clear(b.els[n:])
	b.els = b.els[:n]
	c.sched.inRing -= i
}

// fire adds, in deadline order, up to limit items due at now, and returns how many were
// moved and how many of those became pending.
func (c *core[T]) fire(now int64, limit int) (moved, added int) {
	d := &c.sched
	for moved < limit {
		if d.inRing == 0 {
			if d.over.len() == 0 {
				break
			}
			d.cur = max(d.cur, min(now>>wheelBits, d.over.min().at>>wheelBits))
			c.refill()
			if d.inRing == 0 {
				break
			}
		}
		b := &d.ring[d.cur&wheelMask]
		if len(b.els) == 0 {
			if now>>wheelBits <= d.cur {
				break // the bucket's time is not over: later ones are not due
			}
			d.cur++
			c.refill()
			continue
		}
		c.sortBucket(b)
		// Read the due elements' entries first, so that their cache misses overlap.
		var acc int64
		for _, el := range b.els[:min(len(b.els), limit-moved)] {
			if el.at > now {
				break
			}
			acc |= c.e(el.slot).dat
		}
		c.touched = uint64(acc)
		i, stale := 0, 0
		for i < len(b.els) && moved < limit {
			el := b.els[i]
			if el.at > now {
				break
			}
			i++
			e := c.e(el.slot)
			if e.dat != el.at {
				stale++
				continue
			}
			e.dat = 0
			l := e.dlane
			e.dlane = none
			d.pending--
			if c.enqueue(el.slot, l, now) {
				added++
			}
			moved++
		}
		d.stale -= stale
		c.dropHead(b, i)
		if len(b.els) > 0 {
			break // the rest is not due (or the limit is reached)
		}
	}
	return moved, added
}

// nextDeadline returns the earliest pending deadline, or false when none is pending.
func (c *core[T]) nextDeadline() (int64, bool) {
	d := &c.sched
	if d.pending == 0 {
		return 0, false
	}
	if d.inRing > 0 {
		for k := d.cur; k < d.cur+wheelSize; k++ {
			b := &d.ring[k&wheelMask]
			if len(b.els) == 0 {
				continue
			}
			c.trim(b)
			if len(b.els) > 0 {
				return b.els[0].at, true
			}
		}
	}
	for d.over.len() > 0 && !c.valid(d.over.min()) {
		d.over.pop()
		d.stale--
	}
	if d.over.len() == 0 {
		return 0, false // unreachable while the invariants hold
	}
	return d.over.min().at, true
}

// compactSchedule drops every stale element.
func (c *core[T]) compactSchedule() {
	d := &c.sched
	for i := range d.ring {
		b := &d.ring[i]
		n := len(b.els)
		b.els = slices.DeleteFunc(b.els, func(el delayed) bool { return !c.valid(el) })
		d.inRing -= n - len(b.els)
	}
	d.over.deleteFunc(func(el delayed) bool { return !c.valid(el) })
	d.stale = 0
}

// dropDelayed forgets every pending delayed add (at shut-down).
func (c *core[T]) dropDelayed() {
	d := &c.sched
	drop := func(el delayed) {
		e := c.e(el.slot)
		if e.dat != el.at {
			return
		}
		e.dat = 0
		c.unref(e.dlane)
		e.dlane = none
		if e.state() == stIdle {
			c.release(el.slot)
		}
	}
	for i := range d.ring {
		for _, el := range d.ring[i].els {
			drop(el)
		}
	}
	for i := range d.over.len() {
		drop(*d.over.at(i))
	}
	c.sched = schedule{seq: d.seq}
}

// scheduled returns the number of pending delayed adds.
func (c *core[T]) scheduled() int { return c.sched.pending }

// --- overflow heap ---

// overBits sets the size of an overflow chunk: 2^overBits elements, 8KiB.
const (
	overBits = 9
	overSize = 1 << overBits
)

// overflow is a 4-ary min-heap of delayed elements in cmpDelayed order, stored in chunks of
// overSize elements. Growing appends a chunk and never copies the elements: a large
// schedule (a million RequeueAfter items an hour ahead) otherwise spends more time copying
// its heap into fresh, not yet mapped, memory at each doubling than sifting.
//
// Invariants: chunks[:(n+overSize-1)/overSize] hold the n elements, in heap order; every
// chunk has length overSize; at most one chunk beyond those is kept, empty, as a spare.
// The zero value is an empty heap.
type overflow struct {
	chunks [][]delayed
	n      int
}

// at returns element i. Requires 0 <= i < n (or i == n with a chunk for it).
func (h *overflow) at(i int) *delayed { return &h.chunks[i>>overBits][i&(overSize-1)] }

// len returns the number of elements.
func (h *overflow) len() int { return h.n }

// min returns the first element in cmpDelayed order. Requires n > 0.
func (h *overflow) min() delayed { return h.chunks[0][0] }

// push adds el.
func (h *overflow) push(el delayed) {
	if h.n>>overBits == len(h.chunks) {
		h.chunks = append(h.chunks, make([]delayed, overSize))
	}
	*h.at(h.n) = el
	h.n++
	h.up(h.n - 1)
}

// pop removes the first element. Requires n > 0.
func (h *overflow) pop() {
	h.n--
	if h.n > 0 {
		*h.at(0) = *h.at(h.n)
		h.down(0)
	}
	h.trim()
}

// trim gives back the chunks beyond the one spare.
func (h *overflow) trim() {
	for used := (h.n + overSize - 1) >> overBits; len(h.chunks) > used+1; {
		h.chunks[len(h.chunks)-1] = nil
		h.chunks = h.chunks[:len(h.chunks)-1]
	}
}

// deleteFunc removes the elements for which drop returns true and restores heap order.
func (h *overflow) deleteFunc(drop func(delayed) bool) {
	n := 0
	for i := range h.n {
		if el := *h.at(i); !drop(el) {
			*h.at(n) = el
			n++
		}
	}
	h.n = n
	h.trim()
	if n > 1 { // (n-2)/4 is the last parent; n <= 1 needs nothing
		for i := (n - 2) / 4; i >= 0; i-- {
			h.down(i)
		}
	}
}

func (h *overflow) up(i int) {
	x := *h.at(i)
	for i > 0 {
		p := (i - 1) / 4
		pe := h.at(p)
		if cmpDelayed(*pe, x) <= 0 {
			break
		}
		*h.at(i) = *pe
		i = p
	}
	*h.at(i) = x
}

func (h *overflow) down(i int) {
	n := h.n
	x := *h.at(i)
	for {
		first := 4*i + 1
		if first >= n {
			break
		}
		m, me := first, *h.at(first)
		for j := first + 1; j < min(first+4, n); j++ {
			if ej := *h.at(j); cmpDelayed(ej, me) < 0 {
				m, me = j, ej
			}
		}
		if cmpDelayed(me, x) >= 0 {
			break
		}
		*h.at(i) = me
		i = m
	}
	*h.at(i) = x
}
