package indexer

import (
	"cmp"
	"slices"
	"sync/atomic"
)

// index is one named secondary index over the slots of a core. It is not safe for
// concurrent use; the Indexer's lock guards it.
//
// Layout: every distinct indexed value gets a small integer id (interned in ids) whose
// entry lists the member slots. Every slot remembers where it sits in those member
// lists, so removing a slot never calls the index function again and costs O(values of
// that slot), not O(members). A slot with more than sortedMin values keeps its
// memberships sorted by value id, so that moving another slot's membership (setPos)
// finds it by binary search: an object indexed under V values shared with others then
// costs O(V log V) to remove, not O(V²).
//
// Invariants, checked by validate in tests:
//   - ids[v] == id iff vals[id].value == v and vals[id] is live (len(members) > 0);
//     a value with no members left is deleted from ids and its id goes to freeIDs.
//   - slot s is a member of value id at position p iff vals[id].members[p] == s and
//     either slotVal[s] == id && slotPos[s] == p (the single-value case) or slotVal[s]
//     == multiValue and multi[slotPos[s]] holds {id, p}.
//   - the entries of multi are those of the multi-valued slots (one each) and those
//     listed in freeMulti (nil), nothing else; an entry of more than sortedMin
//     memberships is sorted by val.
//   - slotVal[s] == noValue iff s is indexed under no value (or is a free slot).
//   - vals[id].snap is nil or holds, in order, the objects of vals[id].members as
//     they are stored now (see snapshot); every change of the members of id or of the
//     object of one of them drops it first.
type index[T any] struct {
	ids     map[string]int32
	vals    []valueEntry[T]
	freeIDs []int32

	// slotVal and slotPos are parallel to the core's slots (they may be shorter; a
	// missing entry means noValue).
	slotVal []int32
	slotPos []int32
	// multi holds the memberships of slots indexed under two or more values
	// (slotVal == multiValue): such a slot's slotPos is its entry in multi. freeMulti
	// lists the entries no slot uses.
	multi     [][]membership
	freeMulti []int32

	// same, set only with the mutation detector on, tells whether two objects are the
	// same one; drop uses it to find snapshots a caller changed, whose values it
	// records in mutatedSnaps until CheckMutations reports them.
	same         func(a, b T) bool
	mutatedSnaps []string

	// byNamespace is set when the index function is NamespaceIndex and the keys are
	// derived from the objects: core.put then indexes the namespace of the key and
	// ignores the (nil) values computed for this index.
	byNamespace bool
	// sole, only on a byNamespace index, says that every object of the core is in
	// one namespace, the index's only value (id 0, while the core holds any object),
	// and that the index keeps nothing per object: the members of that value are the
	// core's live slots, in slot order, and slotVal, slotPos, multi and the value's
	// members are empty. This is the common case of an informer of one namespace or
	// of a cluster-scoped resource, where the per-object state (12 bytes an object)
	// would say nothing. An object stored in a second namespace makes the core
	// build that state (core.materialize) and turn sole off for good.
	sole bool
}

const (
	noValue    int32 = -1
	multiValue int32 = -2
)

type valueEntry[T any] struct {
	value   string
	members []int32
	// snap is the cached ByIndex result of value, or nil. Readers build and publish it
	// under the Indexer's shared lock (several may race; one wins the swap); writers
	// drop it under the exclusive lock.
	snap atomic.Pointer[snapshot[T]]
}

// snapshot is the shared, read-only result of ByIndex for one index value: objs holds
// the objects of the value's members, in member order, with len == cap so that an
// append by a caller copies. It is never written after it is published.
type snapshot[T any] struct {
	objs []T
	// ref is a copy of objs taken when the snapshot was built, kept only with the
	// mutation detector on, to find a caller that changed objs.
	ref []T
}

// intact reports whether no caller changed the snapshot's elements.
func (p *snapshot[T]) intact(same func(a, b T) bool) bool {
	for i := range p.objs {
		if !same(p.objs[i], p.ref[i]) {
			return false
		}
	}
	return true
}

type membership struct {
	val, pos int32
}

// newIndex returns an empty index with room for slot ids below slots. same is nil
// unless the mutation detector is on.
func newIndex[T any](slots int, same func(a, b T) bool) *index[T] {
	return &index[T]{
		ids:     make(map[string]int32),
		slotVal: make([]int32, 0, slots),
		slotPos: make([]int32, 0, slots),
		same:    same,
	}
}

// drop forgets the snapshot of value id, if any, recording it as mutated if a caller
// changed it. Writers call it before they change the members of id or the object of
// one of them. It costs O(1) unless the mutation detector is on.
func (ix *index[T]) drop(id int32) {
	e := &ix.vals[id]
	p := e.snap.Load()
	if p == nil {
		return
	}
	if p.ref != nil && !p.intact(ix.same) {
		ix.mutatedSnaps = append(ix.mutatedSnaps, e.value)
	}
	e.snap.Store(nil)
}

// checkSnapshots appends the values whose live snapshots a caller changed.
func (ix *index[T]) checkSnapshots(dst []string) []string {
	for id := range ix.vals {
		e := &ix.vals[id]
		if p := e.snap.Load(); p != nil && p.ref != nil && !p.intact(ix.same) {
			dst = append(dst, e.value)
		}
	}
	return dst
}

// grow makes room for slot ids below n.
func (ix *index[T]) grow(n int) {
	old := len(ix.slotVal)
	if n <= old {
		return
	}
	if n <= cap(ix.slotVal) {
		ix.slotVal = ix.slotVal[:n]
		ix.slotPos = ix.slotPos[:n]
	} else {
		// Grow like append does, amortizing the copies.
		c := max(n, 2*cap(ix.slotVal))
		ix.slotVal = append(make([]int32, 0, c), ix.slotVal...)[:n]
		ix.slotPos = append(make([]int32, 0, c), ix.slotPos...)[:n]
	}
	for i := old; i < n; i++ {
		ix.slotVal[i] = noValue
		ix.slotPos[i] = 0
	}
}

// reserve makes room for n slots in the per-slot state, keeping its length.
func (ix *index[T]) reserve(n int) {
	if n <= cap(ix.slotVal) {
		return
	}
	ix.slotVal = append(make([]int32, 0, n), ix.slotVal...)
	ix.slotPos = append(make([]int32, 0, n), ix.slotPos...)
}

// set makes slot s a member of exactly the given values; a value given twice counts
// once (see dedupe). It does nothing when s already has exactly these values (in any
// order), except dropping their snapshots: the slot's object changes.
func (ix *index[T]) set(s int32, values []string) {
	if len(values) == 1 {
		ix.setOne(s, values[0])
		return
	}
	if int(s) >= len(ix.slotVal) {
		ix.grow(int(s) + 1)
	}
	var ms []membership
	entry := int32(-1)
	if ix.slotVal[s] == multiValue {
		entry = ix.slotPos[s]
		ms = ix.multi[entry]
		if ix.holds(ms, values) {
			for _, m := range ms {
				ix.drop(m.val)
			}
			return
		}
		// Leave the old values but keep the entry (and its memory) for the new ones.
		ix.slotVal[s] = noValue
		for _, m := range ms {
			ix.removeMember(m.val, m.pos)
		}
	} else {
		ix.clear(s)
	}
	if len(values) == 0 {
		if entry >= 0 {
			ix.slotPos[s] = 0
			ix.freeEntry(entry)
		}
		return
	}
	if cap(ms) < len(values) {
		ms = make([]membership, len(values))
	}
	ms = ms[:len(values)]
	n := 0
	for _, v := range values {
		id := ix.intern(v)
		// s is in no value yet, and each value it joins gets it last: a value whose
		// last member is s was given before.
		if m := ix.vals[id].members; len(m) > 0 && m[len(m)-1] == s {
			continue
		}
		ms[n] = membership{val: id, pos: ix.addMember(id, s)}
		n++
	}
	ms = ms[:n]
	if n == 1 { // repeats of one value
		if entry >= 0 {
			ix.freeEntry(entry)
		}
		ix.slotVal[s], ix.slotPos[s] = ms[0].val, ms[0].pos
		return
	}
	if len(ms) > sortedMin {
		slices.SortFunc(ms, func(a, b membership) int { return cmp.Compare(a.val, b.val) })
	}
	if entry < 0 {
		if n := len(ix.freeMulti); n > 0 {
			entry = ix.freeMulti[n-1]
			ix.freeMulti = ix.freeMulti[:n-1]
		} else {
			entry = int32(len(ix.multi))
			ix.multi = append(ix.multi, nil)
		}
	}
	ix.multi[entry] = ms
	ix.slotVal[s], ix.slotPos[s] = multiValue, entry
}

// holds reports whether the memberships ms are exactly of the values (both free of
// duplicates): by a scan of ms for each value up to sortedMin of them, else by a
// binary search of the sorted ms for each value's id.
func (ix *index[T]) holds(ms []membership, values []string) bool {
	if len(ms) != len(values) {
		return false
	}
	if len(ms) > sortedMin {
		for _, v := range values {
			id, ok := ix.ids[v]
			if !ok {
				return false
			}
			if _, found := slices.BinarySearchFunc(ms, id, byVal); !found {
				return false
			}
		}
		return true
	}
	for _, v := range values {
		found := false
		for _, m := range ms {
			if ix.vals[m.val].value == v {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// setOne makes slot s a member of exactly the value v, like set with one value.
func (ix *index[T]) setOne(s int32, v string) {
	if int(s) >= len(ix.slotVal) {
		ix.grow(int(s) + 1)
	}
	if cur := ix.slotVal[s]; cur >= 0 && ix.vals[cur].value == v {
		ix.drop(cur)
		return
	}
	ix.clear(s)
	id := ix.intern(v)
	ix.slotVal[s] = id
	ix.slotPos[s] = ix.addMember(id, s)
}

// clear removes slot s from every value it is indexed under.
func (ix *index[T]) clear(s int32) {
	if int(s) >= len(ix.slotVal) {
		return
	}
	switch cur := ix.slotVal[s]; {
	case cur >= 0:
		ix.slotVal[s] = noValue
		ix.removeMember(cur, ix.slotPos[s])
	case cur == multiValue:
		entry := ix.slotPos[s]
		ms := ix.multi[entry]
		ix.slotVal[s], ix.slotPos[s] = noValue, 0
		for _, m := range ms {
			ix.removeMember(m.val, m.pos)
		}
		ix.freeEntry(entry)
	}
}

// freeEntry gives back entry of multi, which no slot uses any more.
func (ix *index[T]) freeEntry(entry int32) {
	ix.multi[entry] = nil
	if len(ix.freeMulti)+1 == len(ix.multi) {
		// No multi-valued slot left: give the table back.
		ix.multi, ix.freeMulti = nil, nil
		return
	}
	ix.freeMulti = append(ix.freeMulti, entry)
}

func (ix *index[T]) intern(v string) int32 {
	if id, ok := ix.ids[v]; ok {
		return id
	}
	var id int32
	if n := len(ix.freeIDs); n > 0 {
		id = ix.freeIDs[n-1]
		ix.freeIDs = ix.freeIDs[:n-1]
		ix.vals[id].value = v
	} else {
		id = int32(len(ix.vals))
		ix.vals = append(ix.vals, valueEntry[T]{value: v})
	}
	ix.ids[v] = id
	return id
}

func (ix *index[T]) addMember(id, s int32) int32 {
	ix.drop(id)
	e := &ix.vals[id]
	e.members = append(e.members, s)
	return int32(len(e.members) - 1)
}

// removeMember drops the member at position pos of value id by moving the last member
// into its place. The slot owning that membership must already have forgotten it.
func (ix *index[T]) removeMember(id, pos int32) {
	ix.drop(id)
	e := &ix.vals[id]
	last := int32(len(e.members) - 1)
	if pos != last {
		moved := e.members[last]
		e.members[pos] = moved
		ix.setPos(moved, id, pos)
	}
	e.members = e.members[:last]
	switch {
	case last == 0:
		delete(ix.ids, e.value)
		e.value, e.members = "", nil
		ix.freeIDs = append(ix.freeIDs, id)
	case cap(e.members) > 64 && len(e.members) < cap(e.members)/4:
		// Give memory back once a value that was large has shrunk.
		e.members = append(make([]int32, 0, 2*len(e.members)), e.members...)
	}
}

// setPos records that slot s now sits at position pos among the members of value id.
func (ix *index[T]) setPos(s, id, pos int32) {
	if ix.slotVal[s] == id {
		ix.slotPos[s] = pos
		return
	}
	ms := ix.multi[ix.slotPos[s]]
	if len(ms) > sortedMin {
		if i, found := slices.BinarySearchFunc(ms, id, byVal); found {
			ms[i].pos = pos
		}
		return
	}
	for i := range ms {
		if ms[i].val == id {
			ms[i].pos = pos
			return
		}
	}
}

// sortedMin is the number of memberships above which a slot keeps them sorted by value
// id; up to it a scan is faster than sorting and searching.
const sortedMin = 16

// byVal orders a membership against a value id.
func byVal(m membership, id int32) int { return cmp.Compare(m.val, id) }

// members returns the slots indexed under value v. The slice is owned by the index.
func (ix *index[T]) members(v string) []int32 {
	id, ok := ix.ids[v]
	if !ok {
		return nil
	}
	return ix.vals[id].members
}

// valuesOf appends the values slot s is indexed under.
func (ix *index[T]) valuesOf(dst []string, s int32) []string {
	if int(s) >= len(ix.slotVal) {
		return dst
	}
	switch cur := ix.slotVal[s]; {
	case cur >= 0:
		dst = append(dst, ix.vals[cur].value)
	case cur == multiValue:
		for _, m := range ix.multi[ix.slotPos[s]] {
			dst = append(dst, ix.vals[m.val].value)
		}
	}
	return dst
}

// renumber rewrites slot ids after the core compacted its slots: slot s becomes
// remap[s] (every indexed slot is live, so remap[s] >= 0), and n slots remain.
// Snapshots stay: the members keep their objects and their order.
func (ix *index[T]) renumber(remap []int32, n int) {
	if ix.sole {
		// Nothing per slot, and compacting keeps the live slots' order.
		return
	}
	for i := range ix.vals {
		for j, s := range ix.vals[i].members {
			ix.vals[i].members[j] = remap[s]
		}
	}
	slotVal := make([]int32, n)
	slotPos := make([]int32, n)
	for i := range slotVal {
		slotVal[i] = noValue
	}
	for s := range min(len(ix.slotVal), len(remap)) {
		if ns := remap[s]; ns >= 0 {
			slotVal[ns] = ix.slotVal[s]
			slotPos[ns] = ix.slotPos[s]
		}
	}
	// A multi-valued slot's entry moves with its slotPos.
	ix.slotVal, ix.slotPos = slotVal, slotPos
}
