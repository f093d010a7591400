package workqueue

import "slices"

// parkMax is how many empty levels are kept parked.
const parkMax = 4

// levelFor returns the active level of priority prio, activating its parked level or
// making one if there is none.
func (c *core[T]) levelFor(prio int) int32 {
	l := c.lastLevel
	if l == none || c.levels[l].prio != prio || (c.levels[l].hp == none && !c.levels[l].parked) {
		l = c.findLevel(prio)
		c.lastLevel = l
	}
	if c.levels[l].hp == none {
		c.activate(l)
	}
	return l
}

// findLevel returns the active or parked level of priority prio, or a new one.
func (c *core[T]) findLevel(prio int) int32 {
	if l, ok := c.levelAt[prio]; ok {
		return l
	}
	var l int32
	if n := len(c.freeLevels); n > 0 {
		l = c.freeLevels[n-1]
		c.freeLevels = c.freeLevels[:n-1]
	} else {
		l = int32(len(c.levels))
		c.levels = append(c.levels, level{})
	}
	c.levels[l] = level{prio: prio, hp: none, ap: none}
	c.levelAt[prio] = l
	return l
}

// activate puts level l, parked or new, into the heaps, after parking the level that
// lingers there empty, if any (see dropLevel).
func (c *core[T]) activate(l int32) {
	lv := &c.levels[l]
	if lv.parked { // unparked first: parking the lingering level may free the oldest
		lv.parked = false
		if n := len(c.parked) - 1; c.parked[n] == l {
			c.parked = c.parked[:n]
		} else {
			i := slices.Index(c.parked, l)
			c.parked = append(c.parked[:i], c.parked[i+1:]...)
		}
	}
	if len(c.byPrio.h) == 1 {
		if s := c.byPrio.h[0].l; c.levels[s].n == 0 {
			c.byPrio.h, c.byAge.h = c.byPrio.h[:0], c.byAge.h[:0]
			c.park(s)
		}
	}
	lv.rrHead, lv.rrTail, lv.n, lv.since = none, none, 0, c.handouts
	if len(c.byPrio.h) == 0 {
		c.byPrio.h = append(c.byPrio.h, levelRef{prio: lv.prio, l: l})
		c.byAge.h = append(c.byAge.h, levelRef{by: c.handouts, prio: lv.prio, l: l})
		lv.hp, lv.ap = 0, 0
		return
	}
	c.byPrio.push(c.levels, levelRef{prio: lv.prio, l: l})
	c.byAge.push(c.levels, levelRef{by: c.handouts, prio: lv.prio, l: l})
}

// dropLevel deactivates level l, which has run empty, unless it is the only active
// level: that one lingers in the heaps, empty, until another level is activated (a
// queue whose only priority keeps emptying and filling again then does nothing more
// than count). A level deactivated is parked, and the level parked longest is freed if
// parkMax are.
func (c *core[T]) dropLevel(l int32) {
	if len(c.byPrio.h) == 1 {
		return
	}
	lv := &c.levels[l]
	c.byPrio.remove(c.levels, int(lv.hp))
	c.byAge.remove(c.levels, int(lv.ap))
	c.park(l)
}

// park parks level l, out of the heaps.
func (c *core[T]) park(l int32) {
	lv := &c.levels[l]
	lv.hp, lv.ap = none, none
	if len(c.parked) == parkMax {
		p := c.parked[0]
		c.parked = append(c.parked[:0], c.parked[1:]...)
		delete(c.levelAt, c.levels[p].prio)
		c.levels[p] = level{hp: none, ap: none}
		c.freeLevels = append(c.freeLevels, p)
	}
	lv.parked = true
	c.parked = append(c.parked, l)
}

// levelRef is an element of a levelHeap: a level and the keys it is ordered by, kept in
// the element so that sifting reads no level. by is the level's since in byAge, and 0 in
// byPrio.
type levelRef struct {
	by   uint64
	prio int
	l    int32
}

// before reports whether a comes before b: the lower by first, then the higher priority.
func (a *levelRef) before(b *levelRef) bool {
	return a.by < b.by || a.by == b.by && a.prio > b.prio
}

// levelHeap is a binary heap of the active levels, the first (see levelRef.before) on
// top; each level records its position in it (hp in byPrio, ap in byAge).
type levelHeap struct {
	h   []levelRef
	age bool // byAge: positions go to ap, else to hp
}

// place puts r at position i and records it in its level.
func (x *levelHeap) place(levels []level, i int, r levelRef) {
	x.h[i] = r
	if x.age {
		levels[r.l].ap = int32(i)
	} else {
		levels[r.l].hp = int32(i)
	}
}

func (x *levelHeap) push(levels []level, r levelRef) {
	x.h = append(x.h, r)
	x.up(levels, len(x.h)-1)
}

// up moves the element at position i up to its place.
func (x *levelHeap) up(levels []level, i int) {
	r := x.h[i]
	for i > 0 {
		p := (i - 1) / 2
		if !r.before(&x.h[p]) {
			break
		}
		x.place(levels, i, x.h[p])
		i = p
	}
	x.place(levels, i, r)
}

// down moves the element at position i down to its place.
func (x *levelHeap) down(levels []level, i int) {
	h := x.h
	r := h[i]
	for {
		k := 2*i + 1
		if k >= len(h) {
			break
		}
		if j := k + 1; j < len(h) && h[j].before(&h[k]) {
			k = j
		}
		if !h[k].before(&r) {
			break
		}
		x.place(levels, i, h[k])
		i = k
	}
	x.place(levels, i, r)
}

// remove removes the element at position i.
func (x *levelHeap) remove(levels []level, i int) {
	last := len(x.h) - 1
	r := x.h[last]
	x.h = x.h[:last]
	if i == last {
		return
	}
	x.place(levels, i, r)
	x.down(levels, i)
	if x.h[i].l == r.l { // it did not move down: maybe up
		x.up(levels, i)
	}
}
