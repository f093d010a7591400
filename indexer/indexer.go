package indexer

import (
	"fmt"
	"hash/maphash"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/ctrlkit/ctrlkit/internal/nilcheck"
)

// KeyFunc computes the unique key under which an object is stored. It must be
// deterministic and must not return the empty string for a valid object.
type KeyFunc[T any] func(obj T) (string, error)

// IndexFunc computes the values under which an object is indexed. It may return no
// value, one, or several; duplicates are ignored. It must be deterministic for a given
// object and must not modify it.
type IndexFunc[T any] func(obj T) ([]string, error)

// Indexers names index functions.
type Indexers[T any] map[string]IndexFunc[T]

// Config configures an Indexer. The zero value is valid for any T that implements
// metav1.Object: objects are keyed by MetaKey and there are no indexes.
type Config[T any] struct {
	// KeyFunc computes object keys. Nil means MetaKey, which requires T to implement
	// metav1.Object (New panics otherwise).
	KeyFunc KeyFunc[T]

	// Indexers are the indexes maintained from the start. More can be added later with
	// AddIndexes. A nil function makes New panic.
	Indexers Indexers[T]

	// DetectMutations makes the Indexer keep a deep copy of every object it stores and
	// compare it with the stored object when the object leaves the store (update,
	// delete, replace) and on CheckMutations. It is meant for tests: it doubles the
	// memory held and adds a deep copy to every write and a deep comparison to every
	// overwrite or delete.
	DetectMutations bool

	// DeepCopy copies an object for the mutation detector. Nil means T's own
	// DeepCopy() T or DeepCopyObject() method (all Kubernetes API types have both);
	// New panics if DetectMutations is set and T has neither.
	DeepCopy func(T) T
}

// Indexer is a thread-safe, typed store of objects by key with named secondary
// indexes.
//
// Objects are shared, not copied: Get, List, ByIndex and the Lister return the very
// values that were stored, so callers must treat them as read-only. Changing a stored
// object in place corrupts the indexes (they are not recomputed) and races with other
// readers; copy it first (DeepCopy) and store the copy. Config.DetectMutations catches
// violations in tests.
//
// Writes compute the key and every index value before taking the lock, so key and
// index functions never run under the lock, and a function that fails leaves the
// store exactly as it was. Reads take a shared lock and cost O(result).
//
// Memory: per object, one slot (the object, plus its key; with MetaKey keys of a
// pointer type, the default, no key is built: the slot keeps the object's own name
// string, split into its data pointer and a one-byte length, 9 bytes), 9 to 18 bytes
// of hash table, and per index 12 bytes plus the value's share of its member list.
// ByIndex snapshots add one T per object of each value read with ByIndex, until the
// value changes. Deleted slots are reused; when more than half of them are free the
// store compacts itself.
//
// An Indexer must be created with New; its zero value is not usable.
type Indexer[T any] struct {
	keyFunc  KeyFunc[T]
	isNil    func(T) bool
	kf       *keying[T]
	deepCopy func(T) T // non-nil iff the mutation detector is on

	// set is the current index set. It is replaced (never modified) under mu, so a
	// reader holding mu sees the set that matches c.idx; writers load it without mu to
	// compute values and check under mu that it did not change.
	set atomic.Pointer[indexSet[T]]

	// addMu serializes AddIndexes calls.
	addMu sync.Mutex

	mu sync.RWMutex
	// cond (on mu) is broadcast when an AddIndexes finishes.
	cond sync.Cond
	c    *core[T]
	// tracking is non-nil while AddIndexes indexes existing objects outside the lock:
	// every write records, by slot, the values of the pending index functions for the
	// object it stored (or that it deleted the slot).
	tracking map[int32]tracked
}

// indexSet is an immutable set of index functions, in the order of core.idx.
type indexSet[T any] struct {
	names  []string
	fns    []IndexFunc[T]
	byName map[string]int
	// byNamespace, if not nil, is parallel to fns: byNamespace[j] is true when
	// fns[j] is NamespaceIndex and the Indexer reads namespaces itself (keys derived
	// from the objects), so compute takes the namespace it already has instead of
	// calling fns[j], which would allocate the result.
	byNamespace []bool
	// pending are the functions an AddIndexes call is adding; writers compute their
	// values too and record them in Indexer.tracking.
	pendingNames []string
	pending      []IndexFunc[T]
}

type tracked struct {
	vals    [][]string
	err     error
	deleted bool
}

// New returns an empty Indexer. It panics if cfg.KeyFunc is nil and T does not
// implement metav1.Object, if an index function is nil, or if DetectMutations is set
// and no deep-copy function is available.
func New[T any](cfg Config[T]) *Indexer[T] {
	x := &Indexer[T]{keyFunc: cfg.KeyFunc, isNil: nilcheck.For[T]()}
	if x.keyFunc == nil {
		if !reflect.TypeFor[T]().Implements(reflect.TypeFor[metav1.Object]()) {
			panic(fmt.Sprintf("indexer: Config.KeyFunc is nil and %v does not implement metav1.Object", reflect.TypeFor[T]()))
		}
		x.keyFunc = func(obj T) (string, error) { return metaKey(any(obj).(metav1.Object)) }
	}
	x.kf = &keying[T]{seed: maphash.MakeSeed(), isNil: x.isNil}
	if cfg.KeyFunc == nil && reflect.TypeFor[T]().Kind() == reflect.Pointer {
		// MetaKey of a pointer type: keys are read from the objects, never stored.
		x.kf.nsName = func(obj T) (string, string) {
			m := any(obj).(metav1.Object)
			return m.GetNamespace(), m.GetName()
		}
	}
	names := make([]string, 0, len(cfg.Indexers))
	for name, fn := range cfg.Indexers {
		if fn == nil {
			panic(fmt.Sprintf("indexer: index function %q is nil", name))
		}
		names = append(names, name)
	}
	sort.Strings(names)
	set := &indexSet[T]{names: names, byName: make(map[string]int, len(names))}
	for j, name := range names {
		set.fns = append(set.fns, cfg.Indexers[name])
		set.byName[name] = j
	}
	set.byNamespace = x.namespaceIndexes(set.fns)
	x.set.Store(set)
	var equal, same func(a, b T) bool
	if cfg.DetectMutations {
		x.deepCopy = cfg.DeepCopy
		if x.deepCopy == nil {
			x.deepCopy = defaultDeepCopy[T]()
		}
		equal = func(a, b T) bool { return reflect.DeepEqual(a, b) }
		same = sameFunc[T]()
	}
	x.c = newCore(x.kf, len(names), 0, nil, equal, same)
	x.c.markNamespaceIndexes(set.byNamespace)
	x.cond.L = &x.mu
	return x
}

// Add stores obj, replacing any object with the same key. It is the same as Update.
func (x *Indexer[T]) Add(obj T) error {
	_, _, err := x.Swap(obj)
	return err
}

// Update stores obj, replacing any object with the same key (or adding it).
func (x *Indexer[T]) Update(obj T) error {
	_, _, err := x.Swap(obj)
	return err
}

// Swap stores obj, like Update, and returns the object it replaced: had is false if
// the store held no object with obj's key. It is one atomic write with one lookup,
// where Get then Update would be two steps another writer could come between. On
// error (as for Update) the store is unchanged and old is the zero T.
func (x *Indexer[T]) Swap(obj T) (old T, had bool, err error) {
	key, err := x.storeKey(obj)
	if err != nil {
		return old, false, err
	}
	var cp T
	if x.deepCopy != nil {
		cp = x.deepCopy(obj)
	}
	var buf [4][]string
	for {
		set := x.set.Load()
		vals, ierr := set.compute(buf[:0], obj)
		if ierr != nil {
			return old, false, x.withKey(ierr, obj)
		}
		var pend tracked
		if set.pending != nil {
			pend = set.computePending(obj)
			if ie, ok := pend.err.(*IndexError); ok {
				pend.err = x.withKey(ie, obj)
			}
		}
		x.mu.Lock()
		if x.set.Load() != set {
			// AddIndexes changed the index set while we computed: start over.
			x.mu.Unlock()
			continue
		}
		s, old, had := x.c.put(key, obj, vals, cp)
		if x.tracking != nil {
			x.tracking[s] = pend
		}
		x.mu.Unlock()
		return old, had, nil
	}
}

// Delete removes the object with obj's key, if any. Only the key of obj is used; with
// MetaKey keys (the default) it is not built.
func (x *Indexer[T]) Delete(obj T) error {
	k, err := x.storeKey(obj)
	if err != nil {
		return err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if s := x.c.findRef(k); s >= 0 {
		x.deleteSlotLocked(s, k.h)
	}
	return nil
}

// DeleteKey removes the object stored under key, if any.
func (x *Indexer[T]) DeleteKey(key string) error {
	if key == "" {
		return ErrEmptyKey
	}
	h := x.kf.hashString(key)
	x.mu.Lock()
	defer x.mu.Unlock()
	if s := x.c.findHashed(key, h); s >= 0 {
		x.deleteSlotLocked(s, h)
	}
	return nil
}

// deleteSlotLocked removes live slot s, found by a lookup of a key whose hash is h.
// It requires mu held exclusively.
func (x *Indexer[T]) deleteSlotLocked(s int32, h uint64) {
	x.c.removeSlotHashed(s, h)
	if x.tracking != nil {
		x.tracking[s] = tracked{deleted: true}
	} else if x.c.sparse() {
		x.c.compact()
	}
}

// Replace makes objs the whole contents of the store: objects whose keys are not in
// objs are removed. If several objects share a key the last one wins. If any object is
// nil or any key or index function fails, Replace returns the error and the store is
// unchanged. Replace does not retain objs (only its elements).
//
// Cost: the keys and index values of all of objs are computed first, outside the
// lock. When the store already holds a comparable number of objects it is then
// updated in place under the lock (O(len(objs) + Len()), no second copy of the store
// is built); when it is much smaller than objs, the new contents are built outside
// the lock and swapped in.
func (x *Indexer[T]) Replace(objs []T) error {
	var copies []T
	if x.deepCopy != nil {
		copies = make([]T, len(objs))
		for i, obj := range objs {
			if !x.isNil(obj) {
				copies[i] = x.deepCopy(obj)
			}
		}
	}
	var keys []string // stored keys of objs, once checked; nil with derived keys
	checked := false
	for {
		x.mu.Lock()
		for x.set.Load().pending != nil {
			x.cond.Wait()
		}
		set, size := x.set.Load(), x.c.len()
		x.mu.Unlock()

		if size < len(objs)/2 {
			// Mostly new contents: build them aside and swap them in.
			nc, err := x.build(set, objs, copies)
			if err != nil {
				return err
			}
			x.mu.Lock()
			if x.set.Load() != set {
				x.mu.Unlock()
				continue
			}
			old := x.c
			x.c = nc
			x.mu.Unlock()
			if old.copies != nil {
				x.checkDiscarded(old)
			}
			return nil
		}

		// Update in place: compute everything first, then apply under the lock.
		if !checked {
			if x.kf.nsName == nil {
				keys = make([]string, len(objs))
			}
			for i, obj := range objs {
				k, _, _, err := x.checkKey(obj)
				if err != nil {
					return fmt.Errorf("%w (replace item %d)", err, i)
				}
				if keys != nil {
					keys[i] = k
				}
			}
			checked = true
		}
		t := newValueTable(len(set.fns), len(objs))
		var buf [4][]string
		for i, obj := range objs {
			row, ierr := set.compute(buf[:0], obj)
			if ierr != nil {
				return fmt.Errorf("%w (replace item %d)", x.withKey(ierr, obj), i)
			}
			for j, v := range row {
				if set.byNamespace != nil && set.byNamespace[j] {
					ns, _ := x.kf.nsName(obj)
					t.addOne(ns)
				} else {
					t.add(v)
				}
			}
		}
		x.mu.Lock()
		if x.set.Load() != set {
			x.mu.Unlock()
			continue
		}
		x.c.replace(objs, keys, t, copies)
		if x.c.sparse() {
			x.c.compact()
		}
		x.mu.Unlock()
		return nil
	}
}

// build returns a new core holding objs. It runs without the lock.
func (x *Indexer[T]) build(set *indexSet[T], objs []T, copies []T) (*core[T], error) {
	nc := newCore(x.kf, len(set.fns), len(objs), set.byNamespace, x.c.equal, x.c.same)
	nc.markNamespaceIndexes(set.byNamespace)
	var buf [4][]string
	var cp T
	for i, obj := range objs {
		key, err := x.storeKey(obj)
		if err != nil {
			return nil, fmt.Errorf("%w (replace item %d)", err, i)
		}
		row, ierr := set.compute(buf[:0], obj)
		if ierr != nil {
			return nil, fmt.Errorf("%w (replace item %d)", x.withKey(ierr, obj), i)
		}
		if copies != nil {
			cp = copies[i]
		}
		nc.put(key, obj, row, cp)
	}
	nc.mutated = nil // an object given twice is not a mutation
	return nc, nil
}

// checkDiscarded records mutations of the objects and ByIndex snapshots in a core
// that Replace dropped. The snapshots are recorded in the new core's index of the
// same position (indexes are only ever appended, so positions keep their names).
func (x *Indexer[T]) checkDiscarded(old *core[T]) {
	var mutated []string
	for s := range old.objs {
		if old.live(s) && !old.equal(old.objs[s], old.copies[s]) {
			mutated = append(mutated, old.keyAt(int32(s)))
		}
	}
	mutated = append(mutated, old.mutated...)
	snaps := make([][]string, len(old.idx))
	for j, ix := range old.idx {
		snaps[j] = ix.checkSnapshots(ix.mutatedSnaps)
	}
	x.mu.Lock()
	x.c.mutated = append(x.c.mutated, mutated...)
	for j, vals := range snaps {
		if j < len(x.c.idx) {
			x.c.idx[j].mutatedSnaps = append(x.c.idx[j].mutatedSnaps, vals...)
		}
	}
	x.mu.Unlock()
}

func (x *Indexer[T]) keyOf(obj T) (string, error) {
	if x.isNil(obj) {
		return "", ErrNilObject
	}
	key, err := x.keyFunc(obj)
	if err != nil {
		return "", &KeyError{Err: err}
	}
	if key == "" {
		return "", ErrEmptyKey
	}
	return key, nil
}

// storeKey checks that obj can be stored and returns its key: the key with stored
// keys; with keys derived from the objects, its namespace and name, without building
// the key.
func (x *Indexer[T]) storeKey(obj T) (keyRef, error) {
	key, ns, name, err := x.checkKey(obj)
	if err != nil {
		return keyRef{}, err
	}
	return x.kf.ref(key, ns, name, x.kf.nsName != nil), nil
}

// checkKey is storeKey without the hash: it returns the key with stored keys, the
// namespace and name with derived keys.
func (x *Indexer[T]) checkKey(obj T) (key, ns, name string, err error) {
	if x.kf.nsName == nil {
		key, err = x.keyOf(obj)
		return key, "", "", err
	}
	if x.isNil(obj) {
		return "", "", "", ErrNilObject
	}
	ns, name = x.kf.nsName(obj)
	if name == "" {
		return "", "", "", &KeyError{Err: errNoName}
	}
	return "", ns, name, nil
}

// withKey sets the key of a valid object in an index error, and returns it.
func (x *Indexer[T]) withKey(e *IndexError, obj T) error {
	e.Key, _ = x.keyFunc(obj)
	return e
}

// compute appends the deduplicated values of every index function for obj, except
// for the byNamespace indexes, whose cells it leaves nil (core.put indexes the
// namespace of the key instead). An error leaves its Key to the caller.
func (s *indexSet[T]) compute(dst [][]string, obj T) ([][]string, *IndexError) {
	for j, fn := range s.fns {
		if s.byNamespace != nil && s.byNamespace[j] {
			dst = append(dst, nil)
			continue
		}
		v, err := fn(obj)
		if err != nil {
			return nil, &IndexError{Index: s.names[j], Err: err}
		}
		dst = append(dst, dedupe(v))
	}
	return dst, nil
}

// computePending computes the values of the pending index functions for obj. An
// error, an *IndexError, leaves its Key to the caller.
func (s *indexSet[T]) computePending(obj T) tracked {
	vals := make([][]string, len(s.pending))
	for j, fn := range s.pending {
		v, err := fn(obj)
		if err != nil {
			return tracked{err: &IndexError{Index: s.pendingNames[j], Err: err}}
		}
		vals[j] = dedupe(v)
	}
	return tracked{vals: vals}
}

// dedupe returns v without repeated values, copying it only if it has repeats. Past 8
// values it returns v as it is: index.set counts a repeated value once at no cost,
// where a set of seen values would allocate a map as large as v on every write.
func dedupe(v []string) []string {
	if len(v) < 2 || len(v) > 8 {
		return v
	}
	for i := 1; i < len(v); i++ {
		if slices.Contains(v[:i], v[i]) {
			return dedupeSlow(v)
		}
	}
	return v
}

func dedupeSlow(v []string) []string {
	seen := make(map[string]struct{}, len(v))
	out := make([]string, 0, len(v))
	for _, s := range v {
		if _, dup := seen[s]; !dup {
			seen[s] = struct{}{}
			out = append(out, s)
		}
	}
	return out
}

// AddIndexes adds indexes and indexes every object already stored. It fails, adding
// nothing, if a name is already registered, a function is nil, or a function fails
// on a stored object (including one written while AddIndexes runs).
//
// The new index functions run without the lock; readers and writers proceed
// meanwhile (writers also compute the new indexes' values for what they store).
// Replace waits until AddIndexes returns.
func (x *Indexer[T]) AddIndexes(indexers Indexers[T]) error {
	if len(indexers) == 0 {
		return nil
	}
	names := make([]string, 0, len(indexers))
	for name, fn := range indexers {
		if fn == nil {
			return fmt.Errorf("indexer: index function %q is nil", name)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	fns := make([]IndexFunc[T], len(names))
	for j, name := range names {
		fns[j] = indexers[name]
	}

	x.addMu.Lock()
	defer x.addMu.Unlock()

	// Publish the pending functions and take a snapshot of the objects to index.
	x.mu.Lock()
	set := x.set.Load()
	for _, name := range names {
		if _, ok := set.byName[name]; ok {
			x.mu.Unlock()
			return fmt.Errorf("%w: %q", ErrIndexExists, name)
		}
	}
	x.set.Store(&indexSet[T]{names: set.names, fns: set.fns, byName: set.byName, pendingNames: names, pending: fns})
	x.tracking = make(map[int32]tracked)
	snapSlots := make([]int32, 0, x.c.len())
	snapObjs := make([]T, 0, x.c.len())
	for s := range x.c.objs {
		if x.c.live(s) {
			snapSlots = append(snapSlots, int32(s))
			snapObjs = append(snapObjs, x.c.objs[s])
		}
	}
	x.mu.Unlock()

	finish := func(next *indexSet[T]) {
		x.set.Store(next)
		x.tracking = nil
		x.cond.Broadcast()
		x.mu.Unlock()
	}

	// Index the snapshot without the lock.
	pendSet := &indexSet[T]{names: names, fns: fns}
	t := newValueTable(len(fns), len(snapObjs))
	var buf [4][]string
	for _, obj := range snapObjs {
		row, ierr := pendSet.compute(buf[:0], obj)
		if ierr != nil {
			x.mu.Lock()
			finish(set)
			return x.withKey(ierr, obj)
		}
		for _, v := range row {
			t.add(v)
		}
	}

	x.mu.Lock()
	for _, tr := range x.tracking {
		if !tr.deleted && tr.err != nil {
			err := tr.err
			finish(set)
			return err
		}
	}
	built := make([]*index[T], len(fns))
	for j := range built {
		ix := newIndex(len(x.c.objs), x.c.same)
		for i, s := range snapSlots {
			if _, written := x.tracking[s]; !written {
				ix.set(s, t.cell(i*len(fns)+j))
			}
		}
		for s, tr := range x.tracking {
			if !tr.deleted {
				ix.set(s, tr.vals[j])
			}
		}
		built[j] = ix
	}
	next := &indexSet[T]{
		names:  append(slices.Clip(set.names), names...),
		fns:    append(slices.Clip(set.fns), fns...),
		byName: make(map[string]int, len(set.names)+len(names)),
	}
	next.byNamespace = x.namespaceIndexes(next.fns)
	for j, name := range next.names {
		next.byName[name] = j
	}
	x.c.idx = append(x.c.idx, built...)
	x.c.markNamespaceIndexes(next.byNamespace)
	finish(next)
	return nil
}

// Get returns the object stored under key.
func (x *Indexer[T]) Get(key string) (T, bool) {
	x.mu.RLock()
	s := x.c.find(key)
	var obj T
	if s >= 0 {
		obj = x.c.objs[s]
	}
	x.mu.RUnlock()
	return obj, s >= 0
}

// getNsName is Get for the MetaKey of namespace and name; it does not allocate.
func (x *Indexer[T]) getNsName(namespace, name string) (T, bool) {
	x.mu.RLock()
	s := x.c.findNsName(namespace, name)
	var obj T
	if s >= 0 {
		obj = x.c.objs[s]
	}
	x.mu.RUnlock()
	return obj, s >= 0
}

// GetByObject returns the stored object with obj's key. With MetaKey keys (the
// default) it does not allocate.
func (x *Indexer[T]) GetByObject(obj T) (T, bool, error) {
	if x.kf.nsName != nil {
		_, ns, name, err := x.checkKey(obj)
		if err != nil {
			var zero T
			return zero, false, err
		}
		got, ok := x.getNsName(ns, name)
		return got, ok, nil
	}
	key, err := x.keyOf(obj)
	if err != nil {
		var zero T
		return zero, false, err
	}
	got, ok := x.Get(key)
	return got, ok, nil
}

// List returns every stored object, in no particular order.
func (x *Indexer[T]) List() []T {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.appendListLocked(make([]T, 0, x.c.len()))
}

// AppendList appends every stored object to dst, in no particular order, and returns
// the extended slice, which belongs to the caller (the objects themselves remain
// read-only). It does not allocate when dst has room: a loop that lists the store
// again and again (a periodic resync, a metrics pass) can reuse one slice, dst[:0].
func (x *Indexer[T]) AppendList(dst []T) []T {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.appendListLocked(dst)
}

func (x *Indexer[T]) appendListLocked(out []T) []T {
	out = slices.Grow(out, x.c.len())
	for s := range x.c.objs {
		if x.c.live(s) {
			out = append(out, x.c.objs[s])
		}
	}
	return out
}

// ListKeys returns the key of every stored object, in no particular order. With
// derived keys (MetaKey), a store listed more than once keeps the keys it built, so
// that a listing builds only the keys of objects stored since the last: a store that
// is listed again and again allocates about what one with stored keys does. The kept
// keys cost about their bytes plus 16 bytes an object, and are dropped once more than
// half the store has left between two listings.
func (x *Indexer[T]) ListKeys() []string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.appendKeysLocked(make([]string, 0, x.c.len()))
}

// AppendKeys appends the key of every stored object to dst, in no particular order,
// and returns the extended slice, which belongs to the caller. It builds and keeps
// keys as ListKeys does, and allocates nothing else when dst has room: a loop that
// lists the keys again and again can reuse one slice, dst[:0], where ListKeys
// allocates a new one (16 bytes an object) every time.
func (x *Indexer[T]) AppendKeys(dst []string) []string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.appendKeysLocked(dst)
}

func (x *Indexer[T]) appendKeysLocked(out []string) []string {
	if x.c.keys == nil {
		return x.c.appendKeys(out)
	}
	out = slices.Grow(out, x.c.len())
	for s, k := range x.c.keys {
		if x.c.live(s) {
			out = append(out, k)
		}
	}
	return out
}

// Absent returns the keys and the objects of the stored objects whose keys are not
// among keys, in no particular order: what a relist listing exactly keys would
// delete. It costs one lookup per key and one pass over the store, under the shared
// lock, and builds no key except those it returns.
func (x *Indexer[T]) Absent(keys []string) (absentKeys []string, objs []T) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	c := x.c
	listed := make([]uint64, (len(c.objs)+63)/64)
	n := 0
	for _, k := range keys {
		if s := c.find(k); s >= 0 && listed[s/64]&(1<<(s%64)) == 0 {
			listed[s/64] |= 1 << (s % 64)
			n++
		}
	}
	if n == c.count {
		return nil, nil
	}
	absentKeys = make([]string, 0, c.count-n)
	objs = make([]T, 0, c.count-n)
	kb := keyBuf{left: c.count - n}
	for s := range c.objs {
		if listed[s/64]&(1<<(s%64)) == 0 && c.live(s) {
			absentKeys = append(absentKeys, c.keyInto(int32(s), &kb))
			objs = append(objs, c.objs[s])
		}
	}
	return absentKeys, objs
}

// Len returns the number of stored objects.
func (x *Indexer[T]) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.c.len()
}

// indexLocked returns the named index. It requires mu held (shared or exclusive).
func (x *Indexer[T]) indexLocked(name string) (*index[T], error) {
	j, ok := x.set.Load().byName[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownIndex, name)
	}
	return x.c.idx[j], nil
}

// ByIndex returns the objects indexed under value in the named index, in no
// particular order, or nil if there are none.
//
// The result is a shared, read-only snapshot: the same slice is returned to every
// caller, and again on later calls, until an Add, Update, Delete, Replace or Swap
// changes the objects indexed under value (the store then builds a new snapshot on
// the next call; slices already returned never change). Do not sort it, reorder it,
// overwrite or clear its elements, or filter it in place: copy it first
// (slices.Clone), or use AppendByIndex, which fills a slice of the caller's. Its
// capacity equals its length, so appending to it copies. Like the objects it holds,
// the snapshot is checked by the mutation detector (Config.DetectMutations).
//
// Cost: the first call for a value after it changed allocates the snapshot (one
// slice of the result's length and one small header) and costs O(result); later
// calls cost O(1) and allocate nothing. A snapshot is kept only for values that were
// read with ByIndex, and holds one T per object.
func (x *Indexer[T]) ByIndex(name, value string) ([]T, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	ix, err := x.indexLocked(name)
	if err != nil {
		return nil, err
	}
	return x.snapshotLocked(ix, value), nil
}

// snapshotLocked returns the snapshot of value in ix, building it if needed. It
// requires mu held (shared or exclusive); readers holding it concurrently may build
// the same snapshot, and all return the one that was published first.
func (x *Indexer[T]) snapshotLocked(ix *index[T], value string) []T {
	id, ok := ix.ids[value]
	if !ok {
		return nil
	}
	e := &ix.vals[id]
	if p := e.snap.Load(); p != nil {
		return p.objs
	}
	p := &snapshot[T]{objs: slices.Clip(x.c.appendMembers(nil, ix, id))}
	if ix.same != nil {
		p.ref = slices.Clone(p.objs)
	}
	if !e.snap.CompareAndSwap(nil, p) {
		// Another reader published the same snapshot first: return that one, so
		// that every caller shares it.
		p = e.snap.Load()
	}
	return p.objs
}

// AppendByIndex appends the objects indexed under value in the named index to dst,
// in no particular order, and returns the extended slice, which belongs to the
// caller (the objects themselves remain read-only). It does not allocate when dst
// has room, and costs O(result).
func (x *Indexer[T]) AppendByIndex(dst []T, name, value string) ([]T, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	ix, err := x.indexLocked(name)
	if err != nil {
		return dst, err
	}
	id, ok := ix.ids[value]
	if !ok {
		return dst, nil
	}
	e := &ix.vals[id]
	if p := e.snap.Load(); p != nil {
		return append(dst, p.objs...), nil
	}
	return x.c.appendMembers(dst, ix, id), nil
}

// IndexKeys returns the keys of the objects indexed under value in the named index,
// in no particular order.
func (x *Indexer[T]) IndexKeys(name, value string) ([]string, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	ix, err := x.indexLocked(name)
	if err != nil {
		return nil, err
	}
	id, ok := ix.ids[value]
	if !ok {
		return []string{}, nil
	}
	members := x.c.memberSlots(ix, id)
	out := make([]string, len(members))
	kb := keyBuf{left: len(members)}
	for i, s := range members {
		out[i] = x.c.keyInto(s, &kb)
	}
	return out, nil
}

// IndexValues returns every value under which at least one object is indexed in the
// named index, in no particular order.
func (x *Indexer[T]) IndexValues(name string) ([]string, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	ix, err := x.indexLocked(name)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(ix.ids))
	for v := range ix.ids {
		out = append(out, v)
	}
	return out, nil
}

// IndexNames returns the names of the registered indexes, sorted.
func (x *Indexer[T]) IndexNames() []string {
	names := slices.Clone(x.set.Load().names)
	sort.Strings(names)
	return names
}

// CheckMutations reports, as a *MutationError, every stored object that differs from
// the deep copy taken when it was stored, every ByIndex snapshot whose elements a
// caller changed (reordered, overwrote, cleared), and every object or snapshot found
// changed when it left the store since the last call. It returns nil if the mutation
// detector is off. Cost: a deep comparison of every stored object and a pass over
// every snapshot, under the lock.
func (x *Indexer[T]) CheckMutations() error {
	if x.deepCopy == nil {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	keys := x.c.mutated
	x.c.mutated = nil
	for s := range x.c.objs {
		if x.c.live(s) && !x.c.equal(x.c.objs[s], x.c.copies[s]) {
			keys = append(keys, x.c.keyAt(int32(s)))
		}
	}
	var snaps []IndexValue
	names := x.set.Load().names
	for j, ix := range x.c.idx {
		for _, v := range ix.checkSnapshots(ix.mutatedSnaps) {
			snaps = append(snaps, IndexValue{Index: names[j], Value: v})
		}
		ix.mutatedSnaps = nil
	}
	if len(keys) == 0 && len(snaps) == 0 {
		return nil
	}
	sort.Strings(keys)
	slices.SortFunc(snaps, func(a, b IndexValue) int {
		if c := strings.Compare(a.Index, b.Index); c != 0 {
			return c
		}
		return strings.Compare(a.Value, b.Value)
	})
	return &MutationError{Keys: slices.Compact(keys), Snapshots: slices.Compact(snaps)}
}

// sameFunc returns a function telling whether a and b are the same object: == for
// pointers and other comparable values, reflect.DeepEqual for the rest.
func sameFunc[T any]() func(a, b T) bool {
	if reflect.TypeFor[T]().Kind() == reflect.Pointer {
		return func(a, b T) bool { return any(a) == any(b) }
	}
	return func(a, b T) bool {
		va, vb := reflect.ValueOf(&a).Elem(), reflect.ValueOf(&b).Elem()
		if va.Comparable() && vb.Comparable() {
			return va.Equal(vb)
		}
		return reflect.DeepEqual(a, b)
	}
}

// defaultDeepCopy returns T's own deep-copy method as a function, or panics.
func defaultDeepCopy[T any]() func(T) T {
	t := reflect.TypeFor[T]()
	type typedCopier interface{ DeepCopy() T }
	switch {
	case t.Implements(reflect.TypeFor[typedCopier]()):
		return func(v T) T { return any(v).(typedCopier).DeepCopy() }
	case t.Implements(reflect.TypeFor[runtime.Object]()):
		return func(v T) T {
			if c, ok := any(v).(runtime.Object).DeepCopyObject().(T); ok {
				return c
			}
			panic(fmt.Sprintf("indexer: DeepCopyObject of %T returned another type", v))
		}
	}
	panic(fmt.Sprintf("indexer: Config.DetectMutations needs Config.DeepCopy: %v has no DeepCopy method", t))
}
