package workqueue

// levelFor returns the active level of priority prio, activating the parked one or
// making one if there is none.
func (c *core[T]) levelFor(prio int) int32 {
	l := c.lastLevel
	if l == none || c.levels[l].prio != prio || (c.levels[l].hp == none && l != c.parked) {
		var ok bool
		if l, ok = c.levelAt[prio]; !ok {
			if n := len(c.freeLevels); n > 0 {
				l = c.freeLevels[n-1]
				c.freeLevels = c.freeLevels[:n-1]
			} else {
				l = int32(len(c.levels))
				c.levels = append(c.levels, level{})
			}
			c.levels[l] = level{prio: prio, hp: none, ap: none}
			c.levelAt[prio] = l
		}
		c.lastLevel = l
	}
	if lv := &c.levels[l]; lv.hp == none {
		if l == c.parked {
			c.parked = none
		}
		lv.rrHead, lv.rrTail, lv.n, lv.since = none, none, 0, c.handouts
		c.byPrio.push(c.levels, levelRef{prio: prio, l: l})
		c.byAge.push(c.levels, levelRef{by: c.handouts, prio: prio, l: l})
	}
	return l
}

// dropLevel deactivates level l, which has run empty: it becomes the parked level, and
// the one parked before is freed.
func (c *core[T]) dropLevel(l int32) {
	lv := &c.levels[l]
	c.byPrio.remove(c.levels, int(lv.hp))
	c.byAge.remove(c.levels, int(lv.ap))
	lv.hp, lv.ap = none, none
	if p := c.parked; p != none {
		delete(c.levelAt, c.levels[p].prio)
		c.levels[p] = level{hp: none, ap: none}
		c.freeLevels = append(c.freeLevels, p)
	}
	c.parked = l
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
