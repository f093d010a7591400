package indexer

import (
	"cmp"
	"fmt"
	"slices"
)

// distinct returns the values of v, each once, sorted (dedupe leaves the repeats of a
// long list to index.set).
func distinct(v []string) []string {
	return slices.Compact(slices.Sorted(slices.Values(v)))
}

// validate checks every invariant documented on core and index, and that each index
// holds exactly the values its function gives for the stored objects.
func (x *Indexer[T]) validate() error {
	x.mu.RLock()
	defer x.mu.RUnlock()
	c := x.c
	set := x.set.Load()
	if len(c.idx) != len(set.fns) {
		return fmt.Errorf("%d indexes for %d functions", len(c.idx), len(set.fns))
	}
	if (c.keys == nil) != (c.kf.nsName != nil) {
		return fmt.Errorf("stored keys %v with derived keys %v", c.keys != nil, c.kf.nsName != nil)
	}
	if c.keys != nil && len(c.keys) != len(c.objs) {
		return fmt.Errorf("%d keys for %d slots", len(c.keys), len(c.objs))
	}
	if (c.namePtr == nil) != (c.keys != nil) || (c.namePtr != nil && (len(c.namePtr) != len(c.objs) || len(c.nameLen) != len(c.objs))) {
		return fmt.Errorf("%d name pointers and %d lengths for %d slots (stored keys %v)", len(c.namePtr), len(c.nameLen), len(c.objs), c.keys != nil)
	}
	if c.nsIdx != nil && (!c.nsIdx.byNamespace || !slices.Contains(c.idx, c.nsIdx)) {
		return fmt.Errorf("the namespace index is not one of the indexes by namespace")
	}
	for j, ix := range c.idx {
		if ix.byNamespace != (set.byNamespace != nil && set.byNamespace[j]) {
			return fmt.Errorf("index %q by namespace: %v, its set says otherwise", set.names[j], ix.byNamespace)
		}
		if ix.byNamespace && c.nsIdx == nil {
			return fmt.Errorf("index %q is by namespace, and there is no namespace index", set.names[j])
		}
	}
	if err := c.validateListed(); err != nil {
		return err
	}
	free := make(map[int32]bool, len(c.free))
	for _, s := range c.free {
		if free[s] {
			return fmt.Errorf("slot %d free twice", s)
		}
		free[s] = true
		if c.live(int(s)) {
			return fmt.Errorf("free slot %d is live (key %q)", s, c.keyAt(s))
		}
		if c.keys == nil && (!c.kf.isNil(c.objs[s]) || c.namePtr[s] != nil || c.nameLen[s] != 0) {
			return fmt.Errorf("free slot %d holds an object or a name", s)
		}
	}
	live := 0
	keys := make(map[string]bool)
	for s := range c.objs {
		if !c.live(s) {
			if !free[int32(s)] {
				return fmt.Errorf("slot %d is neither live nor free", s)
			}
			continue
		}
		live++
		if c.keys == nil {
			_, name := c.kf.nsName(c.keyObj(int32(s)))
			if got := c.nameAt(int32(s)); got != name {
				return fmt.Errorf("slot %d keeps name %q, its object's is %q", s, got, name)
			}
			if long := len(name) >= nameLong; long != (c.nameLen[s] == nameLong) {
				return fmt.Errorf("slot %d: name of %d bytes, kept length %d", s, len(name), c.nameLen[s])
			}
		}
		k := c.keyAt(int32(s))
		if k == "" || keys[k] {
			return fmt.Errorf("slot %d has key %q, empty or not unique", s, k)
		}
		keys[k] = true
		if want, err := x.keyFunc(c.objs[s]); err != nil || want != k {
			return fmt.Errorf("slot %d has key %q, its object's is %q (%v)", s, k, want, err)
		}
		if got := c.find(k); got != int32(s) {
			return fmt.Errorf("find(%q) = %d; want slot %d", k, got, s)
		}
	}
	if live != c.count {
		return fmt.Errorf("%d live slots, count %d", live, c.count)
	}
	if err := c.validateTable(); err != nil {
		return err
	}
	if c.copies != nil && len(c.copies) != len(c.objs) {
		return fmt.Errorf("%d copies for %d slots", len(c.copies), len(c.objs))
	}
	for j, ix := range c.idx {
		if ix.sole {
			if err := c.validateSole(ix, func(s int) []string {
				v, err := set.fns[j](c.objs[s])
				if err != nil {
					panic(fmt.Sprintf("stored object %q fails index %q: %v", c.keyAt(int32(s)), set.names[j], err))
				}
				return distinct(v)
			}); err != nil {
				return fmt.Errorf("index %q: %w", set.names[j], err)
			}
			continue
		}
		if err := ix.validate(len(c.objs), func(s int) ([]string, bool) {
			if !c.live(s) {
				return nil, false
			}
			v, err := set.fns[j](c.objs[s])
			if err != nil {
				panic(fmt.Sprintf("stored object %q fails index %q: %v", c.keyAt(int32(s)), set.names[j], err))
			}
			return distinct(v), true
		}); err != nil {
			return fmt.Errorf("index %q: %w", set.names[j], err)
		}
		if err := ix.validateSnapshots(c.objs); err != nil {
			return fmt.Errorf("index %q: %w", set.names[j], err)
		}
	}
	return nil
}

// validateSole checks a sole index (see index.sole): nothing kept per slot, one
// value while the core holds any object, every live object indexed under it by
// its function (want), and a snapshot holding the live objects in slot order.
func (c *core[T]) validateSole(ix *index[T], want func(s int) []string) error {
	if !ix.byNamespace {
		return fmt.Errorf("sole, and not by namespace")
	}
	if len(ix.slotVal) != 0 || len(ix.slotPos) != 0 || len(ix.multi) != 0 || len(ix.vals) > 1 {
		return fmt.Errorf("sole, with %d slot values, %d positions, %d multi-valued slots, %d values", len(ix.slotVal), len(ix.slotPos), len(ix.multi), len(ix.vals))
	}
	if len(ix.ids)+len(ix.freeIDs) != len(ix.vals) {
		return fmt.Errorf("%d ids + %d free ids != %d values", len(ix.ids), len(ix.freeIDs), len(ix.vals))
	}
	if c.count == 0 {
		if len(ix.ids) != 0 {
			return fmt.Errorf("sole, with values %v and no object", ix.ids)
		}
		if len(ix.vals) == 1 && (ix.vals[0].value != "" || ix.vals[0].snap.Load() != nil) {
			return fmt.Errorf("sole and empty, and value id 0 holds %q or a snapshot", ix.vals[0].value)
		}
		return nil
	}
	e := &ix.vals[0]
	if id, ok := ix.ids[e.value]; !ok || id != 0 || len(e.members) != 0 {
		return fmt.Errorf("sole value %q: id %d, %v, %d members kept", e.value, id, ok, len(e.members))
	}
	var liveObjs []T
	for s := range c.objs {
		if !c.live(s) {
			continue
		}
		liveObjs = append(liveObjs, c.objs[s])
		if got := want(s); len(got) != 1 || got[0] != e.value {
			return fmt.Errorf("slot %d indexed under %q by its function, the sole value is %q", s, got, e.value)
		}
	}
	if p := e.snap.Load(); p != nil {
		same := sameFunc[T]()
		if len(p.objs) != len(liveObjs) || cap(p.objs) != len(p.objs) {
			return fmt.Errorf("snapshot of %q has len %d cap %d for %d objects", e.value, len(p.objs), cap(p.objs), len(liveObjs))
		}
		for i := range liveObjs {
			if !same(p.objs[i], liveObjs[i]) {
				return fmt.Errorf("snapshot of %q is stale at %d", e.value, i)
			}
		}
		if (p.ref != nil) != (ix.same != nil) {
			return fmt.Errorf("snapshot of %q has a reference copy %v with the detector %v", e.value, p.ref != nil, ix.same != nil)
		}
	}
	return nil
}

// validateSnapshots checks that every snapshot holds exactly the objects of its
// value's members, in member order, with no spare capacity.
func (ix *index[T]) validateSnapshots(objs []T) error {
	same := sameFunc[T]()
	for id := range ix.vals {
		e := &ix.vals[id]
		p := e.snap.Load()
		if p == nil {
			continue
		}
		if len(p.objs) != len(e.members) || cap(p.objs) != len(p.objs) {
			return fmt.Errorf("snapshot of %q has len %d cap %d for %d members", e.value, len(p.objs), cap(p.objs), len(e.members))
		}
		for i, s := range e.members {
			if !same(p.objs[i], objs[s]) {
				return fmt.Errorf("snapshot of %q is stale at %d (slot %d)", e.value, i, s)
			}
		}
		if (p.ref != nil) != (ix.same != nil) {
			return fmt.Errorf("snapshot of %q has a reference copy %v with the detector %v", e.value, p.ref != nil, ix.same != nil)
		}
	}
	return nil
}

// validateTable checks the hash table: a power of two at most 7/8 full, each live slot
// in it once with its hash, reachable from its home cell without crossing an empty
// cell.
func (c *core[T]) validateTable() error {
	if len(c.table) == 0 {
		if c.count != 0 {
			return fmt.Errorf("no table for %d objects", c.count)
		}
		return nil
	}
	n := len(c.table)
	if n&(n-1) != 0 || c.count*8 > n*7 {
		return fmt.Errorf("table of %d cells for %d objects", n, c.count)
	}
	mask := uint64(n - 1)
	seen := make(map[int32]bool, c.count)
	for i, x := range c.table {
		if x == 0 {
			continue
		}
		s := cellSlot(x)
		if s < 0 || int(s) >= len(c.objs) || !c.live(int(s)) || seen[s] {
			return fmt.Errorf("table cell %d holds slot %d, free, out of range or twice", i, s)
		}
		seen[s] = true
		if h := uint32(c.hashAt(s) >> 32); h != cellHash(x) {
			return fmt.Errorf("table cell %d holds slot %d with hash %#x, want %#x", i, s, cellHash(x), h)
		}
		for j := uint64(cellHash(x)) & mask; j != uint64(i); j = (j + 1) & mask {
			if c.table[j] == 0 {
				return fmt.Errorf("slot %d at cell %d is cut off from its home cell by empty cell %d", s, i, j)
			}
		}
	}
	if len(seen) != c.count {
		return fmt.Errorf("table holds %d slots, %d are live", len(seen), c.count)
	}
	return nil
}

// validate checks the index's invariants over n slots; want reports the values slot s
// must be indexed under, and whether it is live.
func (ix *index[T]) validate(n int, want func(s int) ([]string, bool)) error {
	members := 0
	for id := range ix.vals {
		e := &ix.vals[id]
		if len(e.members) == 0 {
			if e.snap.Load() != nil {
				return fmt.Errorf("empty value id %d has a snapshot", id)
			}
			if e.value != "" || slices.Contains(ix.freeIDs, int32(id)) == false {
				return fmt.Errorf("empty value id %d (%q) is not free", id, e.value)
			}
			continue
		}
		if got, ok := ix.ids[e.value]; !ok || got != int32(id) {
			return fmt.Errorf("ids[%q] = %d, %v; want %d", e.value, got, ok, id)
		}
		members += len(e.members)
		for p, s := range e.members {
			if !ix.hasMembership(s, int32(id), int32(p)) {
				return fmt.Errorf("slot %d listed at %q[%d] does not know it", s, e.value, p)
			}
		}
	}
	if len(ix.ids)+len(ix.freeIDs) != len(ix.vals) {
		return fmt.Errorf("%d ids + %d free ids != %d values", len(ix.ids), len(ix.freeIDs), len(ix.vals))
	}
	total := 0
	entries := make([]bool, len(ix.multi))
	for s := range n {
		wantVals, live := want(s)
		got := ix.valuesOf(nil, int32(s))
		if !live && len(got) > 0 {
			return fmt.Errorf("free slot %d indexed under %q", s, got)
		}
		slices.Sort(got)
		wantVals = slices.Sorted(slices.Values(wantVals))
		if !slices.Equal(got, wantVals) {
			return fmt.Errorf("slot %d indexed under %q, want %q", s, got, wantVals)
		}
		total += len(got)
		if s < len(ix.slotVal) && ix.slotVal[s] == multiValue {
			if e := ix.slotPos[s]; e < 0 || int(e) >= len(ix.multi) || len(ix.multi[e]) < 2 {
				return fmt.Errorf("slot %d is multi-valued with entry %d of %d", s, e, len(ix.multi))
			}
			if entries[ix.slotPos[s]] {
				return fmt.Errorf("slot %d shares its multi entry %d", s, ix.slotPos[s])
			}
			if ms := ix.multi[ix.slotPos[s]]; len(ms) > sortedMin && !slices.IsSortedFunc(ms, func(a, b membership) int { return cmp.Compare(a.val, b.val) }) {
				return fmt.Errorf("slot %d has %d memberships, not sorted", s, len(ms))
			}
			entries[ix.slotPos[s]] = true
		}
	}
	for s := n; s < len(ix.slotVal); s++ {
		if ix.slotVal[s] != noValue {
			return fmt.Errorf("slot %d beyond the slab is indexed", s)
		}
	}
	if total != members {
		return fmt.Errorf("%d memberships counted from slots, %d from values", total, members)
	}
	free := make([]bool, len(ix.multi))
	for _, e := range ix.freeMulti {
		if e < 0 || int(e) >= len(ix.multi) || free[e] || entries[e] || ix.multi[e] != nil {
			return fmt.Errorf("free multi entry %d: out of range, listed twice, used or not nil", e)
		}
		free[e] = true
	}
	for e := range ix.multi {
		if !entries[e] && !free[e] {
			return fmt.Errorf("multi entry %d is neither used nor free", e)
		}
	}
	return nil
}

func (ix *index[T]) hasMembership(s, id, pos int32) bool {
	if int(s) >= len(ix.slotVal) {
		return false
	}
	if ix.slotVal[s] == id {
		return ix.slotPos[s] == pos
	}
	if ix.slotVal[s] != multiValue {
		return false
	}
	for _, m := range ix.multi[ix.slotPos[s]] {
		if m.val == id {
			return m.pos == pos
		}
	}
	return false
}

// validateListed checks the keys kept by ListKeys: only with derived keys, each the
// key of its live slot, and the counts that bound the cache.
func (c *core[T]) validateListed() error {
	l := &c.listed
	if c.keys != nil && l.keys != nil {
		return fmt.Errorf("ListKeys keeps keys though keys are stored")
	}
	if len(l.keys) > len(c.objs) {
		return fmt.Errorf("%d kept keys for %d slots", len(l.keys), len(c.objs))
	}
	n, bytes := 0, 0
	for s, k := range l.keys {
		if k == "" {
			continue
		}
		if !c.live(s) {
			return fmt.Errorf("free slot %d keeps the listed key %q", s, k)
		}
		if want := c.keyAt(int32(s)); k != want {
			return fmt.Errorf("slot %d keeps the listed key %q, its key is %q", s, k, want)
		}
		n++
		bytes += len(k)
	}
	if n != l.n || bytes != l.live {
		return fmt.Errorf("%d kept keys of %d bytes, counted %d of %d", n, bytes, l.n, l.live)
	}
	if l.dead < 0 || l.gone < 0 || l.gone > c.count/2+1 {
		return fmt.Errorf("kept keys: %d dead bytes, %d gone for %d objects", l.dead, l.gone, c.count)
	}
	return nil
}
