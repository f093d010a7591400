package indexer

import "math/bits"

// core is the store under an Indexer, without locking: a slab of slots addressed by
// small integer ids, a key → slot map, and the secondary indexes, which refer to
// objects by slot id. It is not safe for concurrent use.
//
// Invariants, checked by validate in tests:
//   - keys[k] == s iff slots[s].key == k and k != ""; a slot with an empty key is free
//     and its id is in free exactly once.
//   - idx[j] indexes every live slot under the values its index function returned for
//     slots[s].obj when it was stored, and no free slot.
//   - copies is nil, or parallel to slots and holds a deep copy of each live object
//     taken when it was stored (the mutation detector).
type core[T any] struct {
	keys   map[string]int32
	slots  []slot[T]
	free   []int32
	idx    []*index
	copies []T
	// mutated collects keys whose objects were found changed when they left the
	// store, until CheckMutations reports them.
	mutated []string
	equal   func(a, b T) bool
}

type slot[T any] struct {
	key string
	obj T
}

// newCore returns an empty core with k indexes and room for n objects.
func newCore[T any](k, n int, detect bool, equal func(a, b T) bool) *core[T] {
	c := &core[T]{
		keys:  make(map[string]int32, n),
		slots: make([]slot[T], 0, n),
		idx:   make([]*index, k),
		equal: equal,
	}
	for j := range c.idx {
		c.idx[j] = newIndex(n)
	}
	if detect {
		c.copies = make([]T, 0, n)
	}
	return c
}

func (c *core[T]) len() int { return len(c.keys) }

// put stores obj under key, indexed under vals[j] in idx[j] (each deduplicated), with
// cp as its mutation-detector copy, and returns its slot.
func (c *core[T]) put(key string, obj T, vals [][]string, cp T) int32 {
	s, ok := c.keys[key]
	if ok {
		c.checkLeaving(s)
		c.slots[s].obj = obj
	} else {
		s = c.alloc(key, obj)
	}
	if c.copies != nil {
		c.copies[s] = cp
	}
	for j, ix := range c.idx {
		ix.set(s, vals[j])
	}
	return s
}

func (c *core[T]) alloc(key string, obj T) int32 {
	var s int32
	if n := len(c.free); n > 0 {
		s = c.free[n-1]
		c.free = c.free[:n-1]
		c.slots[s] = slot[T]{key: key, obj: obj}
	} else {
		s = int32(len(c.slots))
		c.slots = append(c.slots, slot[T]{key: key, obj: obj})
		if c.copies != nil {
			var zero T
			c.copies = append(c.copies, zero)
		}
	}
	c.keys[key] = s
	return s
}

// remove deletes the object stored under key and reports its slot.
func (c *core[T]) remove(key string) (int32, bool) {
	s, ok := c.keys[key]
	if !ok {
		return 0, false
	}
	c.removeSlot(s)
	return s, true
}

func (c *core[T]) removeSlot(s int32) {
	c.checkLeaving(s)
	for _, ix := range c.idx {
		ix.clear(s)
	}
	delete(c.keys, c.slots[s].key)
	c.slots[s] = slot[T]{}
	if c.copies != nil {
		var zero T
		c.copies[s] = zero
	}
	c.free = append(c.free, s)
}

// checkLeaving records the key of slot s if its object no longer equals the copy taken
// when it was stored. It is a no-op unless the mutation detector is on.
func (c *core[T]) checkLeaving(s int32) {
	if c.copies != nil && !c.equal(c.slots[s].obj, c.copies[s]) {
		c.mutated = append(c.mutated, c.slots[s].key)
	}
}

// replace makes the core hold exactly objs (stored under keys, with index values from
// t and mutation-detector copies from copies, which may be nil) by updating it in
// place: no second copy of the store is built. Later duplicates of a key win.
func (c *core[T]) replace(objs []T, keys []string, t *valueTable, copies []T) {
	old := len(c.slots)
	seen := make([]uint64, (old+63)/64)
	var buf [4][]string
	row := buf[:0]
	var cp T
	for i, obj := range objs {
		row = t.row(row[:0], i)
		if copies != nil {
			cp = copies[i]
		}
		if s := c.put(keys[i], obj, row, cp); int(s) < old {
			seen[s/64] |= 1 << (s % 64)
		}
	}
	for w, word := range seen {
		// Walk the unseen slots of this word; free slots are skipped below.
		for missing := ^word; missing != 0; missing &= missing - 1 {
			s := int32(w*64 + bits.TrailingZeros64(missing))
			if int(s) >= old {
				break
			}
			if c.slots[s].key != "" {
				c.removeSlot(s)
			}
		}
	}
}

// sparse reports whether enough slots are free that compacting is worth its O(n) cost.
func (c *core[T]) sparse() bool {
	return len(c.slots) >= 1024 && len(c.free) > len(c.slots)/2
}

// compact renumbers the live slots densely and gives back the memory of free ones.
func (c *core[T]) compact() {
	remap := make([]int32, len(c.slots))
	slots := make([]slot[T], 0, len(c.keys))
	var copies []T
	if c.copies != nil {
		copies = make([]T, 0, len(c.keys))
	}
	keys := make(map[string]int32, len(c.keys))
	for s := range c.slots {
		if c.slots[s].key == "" {
			remap[s] = -1
			continue
		}
		ns := int32(len(slots))
		remap[s] = ns
		slots = append(slots, c.slots[s])
		keys[c.slots[s].key] = ns
		if copies != nil {
			copies = append(copies, c.copies[s])
		}
	}
	for _, ix := range c.idx {
		ix.renumber(remap, len(slots))
	}
	c.slots, c.copies, c.keys, c.free = slots, copies, keys, nil
}

// valueTable holds the index values computed for a run of objects, k cells per object
// (one per index function), without a slice header per cell in the common case where
// every cell holds exactly one value.
type valueTable struct {
	k    int
	flat []string
	// offs is nil while every cell holds exactly one value (cell c is flat[c]);
	// otherwise cell c is flat[offs[c]:offs[c+1]].
	offs []int32
}

func newValueTable(k, n int) *valueTable {
	return &valueTable{k: k, flat: make([]string, 0, k*n)}
}

// add appends the next cell.
func (t *valueTable) add(v []string) {
	if t.offs == nil && len(v) != 1 {
		t.offs = make([]int32, len(t.flat)+1, cap(t.flat)+1)
		for i := range t.offs {
			t.offs[i] = int32(i)
		}
	}
	t.flat = append(t.flat, v...)
	if t.offs != nil {
		t.offs = append(t.offs, int32(len(t.flat)))
	}
}

func (t *valueTable) cell(c int) []string {
	if t.offs == nil {
		return t.flat[c : c+1 : c+1]
	}
	return t.flat[t.offs[c]:t.offs[c+1]:t.offs[c+1]]
}

// row appends the k cells of object i.
func (t *valueTable) row(dst [][]string, i int) [][]string {
	for j := range t.k {
		dst = append(dst, t.cell(i*t.k+j))
	}
	return dst
}
