package indexer

import (
	"fmt"
	"slices"
)

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
	free := make(map[int32]bool, len(c.free))
	for _, s := range c.free {
		if free[s] {
			return fmt.Errorf("slot %d free twice", s)
		}
		free[s] = true
		if c.slots[s].key != "" {
			return fmt.Errorf("free slot %d has key %q", s, c.slots[s].key)
		}
	}
	live := 0
	for s := range c.slots {
		k := c.slots[s].key
		if k == "" {
			if !free[int32(s)] {
				return fmt.Errorf("slot %d is neither live nor free", s)
			}
			continue
		}
		live++
		if got, ok := c.keys[k]; !ok || got != int32(s) {
			return fmt.Errorf("keys[%q] = %d, %v; want slot %d", k, got, ok, s)
		}
	}
	if live != len(c.keys) {
		return fmt.Errorf("%d live slots, %d keys", live, len(c.keys))
	}
	if c.copies != nil && len(c.copies) != len(c.slots) {
		return fmt.Errorf("%d copies for %d slots", len(c.copies), len(c.slots))
	}
	for j, ix := range c.idx {
		if err := ix.validate(len(c.slots), func(s int) ([]string, bool) {
			if c.slots[s].key == "" {
				return nil, false
			}
			v, err := set.fns[j](c.slots[s].obj)
			if err != nil {
				panic(fmt.Sprintf("stored object %q fails index %q: %v", c.slots[s].key, set.names[j], err))
			}
			return dedupe(v), true
		}); err != nil {
			return fmt.Errorf("index %q: %w", set.names[j], err)
		}
	}
	return nil
}

// validate checks the index's invariants over n slots; want reports the values slot s
// must be indexed under, and whether it is live.
func (ix *index) validate(n int, want func(s int) ([]string, bool)) error {
	members := 0
	for id, e := range ix.vals {
		if len(e.members) == 0 {
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
		if s < len(ix.slotVal) && ix.slotVal[s] == multiValue && len(ix.multi[int32(s)]) < 2 {
			return fmt.Errorf("slot %d is multi-valued with %d values", s, len(ix.multi[int32(s)]))
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
	return nil
}

func (ix *index) hasMembership(s, id, pos int32) bool {
	if int(s) >= len(ix.slotVal) {
		return false
	}
	if ix.slotVal[s] == id {
		return ix.slotPos[s] == pos
	}
	if ix.slotVal[s] != multiValue {
		return false
	}
	for _, m := range ix.multi[s] {
		if m.val == id {
			return m.pos == pos
		}
	}
	return false
}
