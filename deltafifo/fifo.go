package deltafifo

import (
	"context"
	"fmt"
	"hash/maphash"
	"reflect"
	"sync"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/internal/nilcheck"
)

// KnownObjects is the consumer's view of the objects it has applied, keyed like the
// FIFO's deltas. *indexer.Indexer[T] satisfies it. The FIFO uses it, when a relist or
// resync is popped, to find deleted keys and the objects to resync.
type KnownObjects[T any] interface {
	ListKeys() []string
	Get(key string) (T, bool)
}

// AbsentFinder is an optional interface of KnownObjects: Absent returns the keys and
// objects of the known objects whose keys are not among keys. When KnownObjects has
// it, a relist finds its deletions with one call instead of listing every known key
// and building a set of the listed ones. *indexer.Indexer[T] has it.
type AbsentFinder[T any] interface {
	Absent(keys []string) (absentKeys []string, objs []T)
}

// Config configures a FIFO. The zero value is valid for any T that implements
// metav1.Object: keys are "namespace/name" (or "name"), there are no known objects
// (relists carry no deletions, Resync does nothing) and batches are unbounded.
type Config[T any] struct {
	// KeyFunc computes the key of an object. Nil means "namespace/name" ("name" for
	// cluster-scoped objects), which requires T to implement metav1.Object (New panics
	// otherwise). It must agree with the keys of KnownObjects.
	KeyFunc func(T) (string, error)

	// KnownObjects is the store the consumer applies batches to. The consumer must have
	// applied a batch to it before its Pop function returns: relist deletions and
	// resync deltas are computed against it when they are popped, after every earlier
	// batch. Nil means no deletion detection on relist and no resync.
	KnownObjects KnownObjects[T]

	// MaxBatch caps the number of ordinary deltas in one batch. Whatever it is, such a
	// batch holds at most 1024 deltas (the FIFO queues them in buffers of that size);
	// zero means that cap only. A relist batch is never split.
	MaxBatch int
}

// FIFO is the ordered queue of deltas between a reflector (the producer: Add, Update,
// Delete, Replace, Resync) and the code that applies them to a store (the consumer:
// Pop). It is safe for concurrent use.
//
// Deltas are delivered in arrival order across all keys; nothing is coalesced. Pop
// hands out a batch at a time and runs its function without holding the lock, so a
// producer never waits longer than one queue operation, however slow the consumer. One
// batch is in flight at a time: concurrent Pop calls take turns, which keeps the order.
//
// Cost: Add, Update and Delete are O(1) amortized (plus the key function); a queued
// delta costs 32 bytes (for a pointer T) besides the object. Ordinary deltas are queued
// in buffers of at most 1024 deltas, each popped as a batch of its own, and up to four
// emptied buffers are kept for reuse. With the default key function, Add, Update and
// Delete only check that the object has a name, and Pop computes the keys of the
// deltas it hands out, from a bounded cache of recent keys (64 KiB plus the key
// strings it holds, allocated by the first such Pop): a delta for a key seen lately
// builds no string, and that work is the consumer's, not the producer's. Delta.Key is
// the same either way. A relist holds the list it
// was given and one key per object until it is popped; popping it costs O(listed +
// known keys) time and, unless KnownObjects is an AbsentFinder (which finds the
// deletions itself), one more key set (4 bytes a slot) and the list of known keys
// besides the batch itself. Nothing is copied deeply.
//
// A FIFO must be created with New; its zero value is not usable.
type FIFO[T any] struct {
	keyFunc  func(T) (string, error)
	isNil    func(T) bool
	known    KnownObjects[T]
	maxBatch int
	synced   atomic.Bool

	mu sync.Mutex
	// units is the queue, oldest first. Consecutive ordinary deltas share a run unit;
	// a relist and a resync request are units of their own.
	units []unit[T]
	// queued is the number of deltas in units (see Len).
	queued int
	// spares are emptied batch buffers of capacity at most runChunk, reused for new
	// run units; there are at most maxSpares.
	spares [][]Delta[T]
	// inflight is true while a popped batch is being materialized or processed.
	inflight bool
	// populated is true once anything was queued; if that was a relist, HasSynced waits
	// for it to be popped.
	populated bool
	closed    bool
	// waiting is the number of Pop calls waiting on wake or done.
	waiting int
	// wake (capacity 1) gets a token when something a waiting Pop may want changes,
	// if a Pop waits. Every waiting Pop waits for the same thing (a unit and no batch
	// in flight), so one token wakes one of them, which passes it on when it leaves
	// something for the others. done is closed by Close. Neither allocates per wait.
	wake chan struct{}
	done chan struct{}
	// defaultKeys is set when keyFunc is the default "namespace/name". enqueue then
	// only checks that the object has a name and queues the delta without its key;
	// the keys of a run are filled in when it is popped (keyRun), from keys, which
	// reuses recent keys instead of building a string for every delta. Invariant:
	// only deltas of run units never popped may lack their key.
	defaultKeys bool
	// keys is used only by the Pop call that holds a batch in flight (inflight
	// serializes them), never under mu.
	keys keyCache
}

type unitKind uint8

const (
	runUnit    unitKind = iota // ordinary deltas in deltas
	relistUnit                 // objs and keys of a Replace, or its materialized deltas
	resyncUnit                 // a Resync request
)

type unit[T any] struct {
	kind   unitKind
	deltas []Delta[T]
	// objs and keys are set for a relist that was not yet materialized (ready false).
	objs []T
	keys []string
	// ready is set on a relist or a resync whose deltas are materialized, and on a
	// run that is a failed batch put back. A ready unit is handed out again as it
	// was: a run takes no more deltas, a resync absorbs no Resync call.
	ready   bool
	rv      string
	initial bool // the first relist: HasSynced turns true when it is popped
}

func (u *unit[T]) size() int {
	if u.kind == relistUnit && !u.ready {
		return len(u.objs)
	}
	return len(u.deltas)
}

// New returns an empty, open FIFO. It panics if cfg.KeyFunc is nil and T does not
// implement metav1.Object, or if cfg.MaxBatch is negative.
func New[T any](cfg Config[T]) *FIFO[T] {
	f := &FIFO[T]{
		keyFunc: cfg.KeyFunc, isNil: nilcheck.For[T](), known: cfg.KnownObjects, maxBatch: cfg.MaxBatch,
		wake: make(chan struct{}, 1), done: make(chan struct{}),
	}
	if cfg.MaxBatch < 0 {
		panic(fmt.Sprintf("deltafifo: negative Config.MaxBatch %d", cfg.MaxBatch))
	}
	if f.keyFunc == nil {
		if !reflect.TypeFor[T]().Implements(reflect.TypeFor[metav1.Object]()) {
			panic(fmt.Sprintf("deltafifo: Config.KeyFunc is nil and %v does not implement metav1.Object", reflect.TypeFor[T]()))
		}
		f.keyFunc = func(obj T) (string, error) {
			m := any(obj).(metav1.Object)
			if m.GetName() == "" {
				return "", errNoName
			}
			if m.GetNamespace() == "" {
				return m.GetName(), nil
			}
			return m.GetNamespace() + "/" + m.GetName(), nil
		}
		f.defaultKeys = true
	}
	return f
}

// Add queues an Added delta.
func (f *FIFO[T]) Add(obj T) error { return f.enqueue(Added, obj) }

// Update queues an Updated delta.
func (f *FIFO[T]) Update(obj T) error { return f.enqueue(Updated, obj) }

// Delete queues a Deleted delta carrying obj, the object's last state.
func (f *FIFO[T]) Delete(obj T) error { return f.enqueue(Deleted, obj) }

// DeleteKey queues a Deleted delta for key with FinalStateUnknown set and the zero
// Object: the object is gone, or its current state cannot be had (a reflector
// refused it), and its last state is not at hand. The consumer finds that state in
// its own store, which by then holds every delta queued before this one (an
// earlier delta of the same batch included); a key the store does not hold has
// nothing to delete. It is the only way a FinalStateUnknown delta enters a batch
// that is not a relist. It returns ErrEmptyKey for "", ErrClosed once closed.
func (f *FIFO[T]) DeleteKey(key string) error {
	if key == "" {
		return ErrEmptyKey
	}
	return f.push(Delta[T]{Type: Deleted, FinalStateUnknown: true, Key: key})
}

func (f *FIFO[T]) keyOf(obj T) (string, error) {
	if f.isNil(obj) {
		return "", ErrNilObject
	}
	key, err := f.keyFunc(obj)
	if err != nil {
		return "", &KeyError{Err: err}
	}
	if key == "" {
		return "", ErrEmptyKey
	}
	return key, nil
}

func (f *FIFO[T]) enqueue(t DeltaType, obj T) error {
	var key string
	if f.defaultKeys {
		// The key is computed when the delta is popped (see keyRun): that work is
		// the consumer's, not the producer's. Only what could fail is checked here.
		if f.isNil(obj) {
			return ErrNilObject
		}
		if any(obj).(metav1.Object).GetName() == "" {
			return &KeyError{Err: errNoName}
		}
	} else {
		var err error
		if key, err = f.keyOf(obj); err != nil {
			return err
		}
	}
	return f.push(Delta[T]{Type: t, Key: key, Object: obj})
}

// push queues an ordinary delta, checked.
func (f *FIFO[T]) push(d Delta[T]) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	f.populatedLocked()
	n := len(f.units)
	if n == 0 || f.units[n-1].kind != runUnit || f.units[n-1].ready || len(f.units[n-1].deltas) >= runChunk {
		var buf []Delta[T]
		if k := len(f.spares); k > 0 {
			buf, f.spares[k-1] = f.spares[k-1], nil
			f.spares = f.spares[:k-1]
		} else if n > 0 && f.units[n-1].kind == runUnit && len(f.units[n-1].deltas) >= runChunk {
			// A full run: deltas come fast, so this one will most likely fill
			// up too. Growing it by doubling would allocate twice as much.
			buf = make([]Delta[T], 0, runChunk)
		}
		f.units = append(f.units, unit[T]{kind: runUnit, deltas: buf})
		n++
	}
	u := &f.units[n-1]
	u.deltas = append(u.deltas, d)
	f.queued++
	f.wakeLocked()
	return nil
}

// populatedLocked notes that an ordinary delta was queued. If nothing was queued
// before, there is no initial list to wait for and the FIFO counts as synced (as
// client-go's FIFOs do). It requires f.mu held.
func (f *FIFO[T]) populatedLocked() {
	if !f.populated {
		f.populated = true
		f.synced.Store(true)
	}
}

// wakeLocked wakes a waiting Pop call, if any. It requires f.mu held.
func (f *FIFO[T]) wakeLocked() {
	if f.waiting > 0 {
		select {
		case f.wake <- struct{}{}:
		default: // a token is already there
		}
	}
}

// Replace queues a relist: the server holds exactly objs, as of resourceVersion. It
// is delivered as one batch, after everything queued before it: a Deleted delta with
// FinalStateUnknown for every key KnownObjects holds that objs lacks, then a
// Replaced delta for each of objs. Replace keeps objs (not a copy): the caller must
// not modify the slice afterwards. If an object is nil or its key cannot be computed,
// nothing is queued and the error says which.
func (f *FIFO[T]) Replace(objs []T, resourceVersion string) error {
	keys := make([]string, len(objs))
	for i, obj := range objs {
		k, err := f.keyOf(obj)
		if err != nil {
			return itemError(err, i)
		}
		keys[i] = k
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	u := unit[T]{kind: relistUnit, objs: objs, keys: keys, rv: resourceVersion}
	if !f.populated {
		f.populated = true
		u.initial = true
	}
	f.units = append(f.units, u)
	f.queued += len(objs)
	f.wakeLocked()
	return nil
}

// Resync queues a Sync delta for every object of KnownObjects that has no newer delta
// queued behind it. The objects are read from KnownObjects when the request is popped
// (after every earlier batch was applied), so they are current. Requests not yet popped
// are merged. Without KnownObjects, Resync does nothing.
func (f *FIFO[T]) Resync() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrClosed
	}
	if f.known == nil {
		return nil
	}
	if n := len(f.units); n > 0 && f.units[n-1].kind == resyncUnit && !f.units[n-1].ready {
		return nil
	}
	f.units = append(f.units, unit[T]{kind: resyncUnit})
	f.wakeLocked()
	return nil
}

// Pop waits for the next batch and calls fn with it, without holding the FIFO's lock.
//
// If fn returns an error, Pop returns it and the batch is not lost: it goes back to
// the front of the queue unchanged (a relist keeps the deletions already computed, a
// resync its Sync deltas and its Resync flag) and the next Pop hands it out again, so
// fn should be idempotent or apply a batch all or nothing. The same happens if fn
// panics (the panic continues).
//
// Every Replace and Resync call that is not merged yields exactly one batch, which may
// be empty (a resync when every known key has a newer delta queued, or nothing is
// known; a relist of an empty list with nothing to delete).
//
// Pop returns ctx.Err() if ctx ends while it waits, and ErrClosed once the FIFO is
// closed (even if deltas remain). fn must not call Pop; it may call the producer
// methods.
func (f *FIFO[T]) Pop(ctx context.Context, fn func(Batch[T]) error) error {
	u, skip, err := f.next(ctx)
	if err != nil {
		return err
	}
	return f.process(u, skip, fn)
}

// next waits for a unit and takes it, marking it in flight. For a resync it also
// returns the keys that have newer deltas queued.
func (f *FIFO[T]) next(ctx context.Context) (unit[T], map[string]struct{}, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		if f.closed {
			return unit[T]{}, nil, ErrClosed
		}
		if err := ctx.Err(); err != nil {
			// The token that woke this Pop, if one did, is another's now.
			f.wakeLocked()
			return unit[T]{}, nil, err
		}
		if !f.inflight && len(f.units) > 0 {
			break
		}
		f.waiting++
		f.mu.Unlock()
		select {
		case <-f.wake:
		case <-f.done:
		case <-ctx.Done():
		}
		f.mu.Lock()
		f.waiting--
	}
	u := f.takeLocked()
	f.inflight = true
	var skip map[string]struct{}
	if u.kind == resyncUnit && !u.ready {
		skip = f.queuedKeysLocked()
	}
	return u, skip, nil
}

// process materializes u and calls fn with the batch. However that ends (error or
// panic included), the batch stops being in flight, and if it did not succeed it goes
// back to the front of the queue.
func (f *FIFO[T]) process(u unit[T], skip map[string]struct{}, fn func(Batch[T]) error) (err error) {
	ok := false
	var b Batch[T]
	defer func() {
		if b.Deltas == nil && !b.Relist && !ok {
			// materialize did not finish: put the unit back as it was.
			f.finish(Batch[T]{}, false, &u)
			return
		}
		f.finish(b, ok, nil)
	}()
	b = f.materialize(u, skip)
	if b.Deltas == nil {
		b.Deltas = []Delta[T]{}
	}
	err = fn(b)
	ok = err == nil
	return err
}

// takeLocked removes and returns the oldest unit, or the first MaxBatch deltas of an
// oversized run. It requires f.mu held and a non-empty queue.
func (f *FIFO[T]) takeLocked() unit[T] {
	u := f.units[0]
	if u.kind == runUnit && f.maxBatch > 0 && len(u.deltas) > f.maxBatch {
		// Cap the capacity so that recycling the taken part cannot reach the rest.
		f.units[0].deltas = u.deltas[f.maxBatch:]
		u.deltas = u.deltas[:f.maxBatch:f.maxBatch]
		f.queued -= f.maxBatch
		return u
	}
	// Advancing the slice keeps this O(1) however many units wait (append
	// reallocates the array when its end is reached); the last unit is taken
	// without advancing, so that a queue that empties keeps its array.
	f.units[0] = unit[T]{}
	if len(f.units) == 1 {
		f.units = f.units[:0]
	} else {
		f.units = f.units[1:]
	}
	f.queued -= u.size()
	return u
}

// queuedKeysLocked returns the keys of every queued delta (nil if none). It requires
// f.mu held.
func (f *FIFO[T]) queuedKeysLocked() map[string]struct{} {
	if f.queued == 0 {
		return nil
	}
	keys := make(map[string]struct{}, f.queued)
	for i := range f.units {
		u := &f.units[i]
		for j := range u.deltas {
			d := &u.deltas[j]
			k := d.Key
			if k == "" {
				k = defaultKey(d.Object) // queued without it (see defaultKeys)
			}
			keys[k] = struct{}{}
		}
		for _, k := range u.keys {
			keys[k] = struct{}{}
		}
	}
	return keys
}

// materialize turns a unit into the batch to deliver. It runs without the lock while
// the unit is in flight, so KnownObjects reflects every earlier batch.
func (f *FIFO[T]) materialize(u unit[T], skip map[string]struct{}) Batch[T] {
	switch u.kind {
	case relistUnit:
		b := Batch[T]{Relist: true, ResourceVersion: u.rv, InitialList: u.initial, Deltas: u.deltas}
		if u.ready {
			return b
		}
		var gone []Delta[T]
		if af, ok := f.known.(AbsentFinder[T]); ok {
			keys, objs := af.Absent(u.keys)
			gone = make([]Delta[T], len(keys))
			for i, k := range keys {
				gone[i] = Delta[T]{Type: Deleted, FinalStateUnknown: true, Key: k, Object: objs[i]}
			}
		} else if f.known != nil {
			listed := newKeySet(u.keys)
			for _, k := range f.known.ListKeys() {
				if listed.has(k) {
					continue
				}
				if obj, ok := f.known.Get(k); ok {
					gone = append(gone, Delta[T]{Type: Deleted, FinalStateUnknown: true, Key: k, Object: obj})
				}
			}
		}
		b.Deltas = make([]Delta[T], len(gone), len(gone)+len(u.objs))
		copy(b.Deltas, gone)
		for i, obj := range u.objs {
			b.Deltas = append(b.Deltas, Delta[T]{Type: Replaced, Key: u.keys[i], Object: obj})
		}
		return b
	case resyncUnit:
		if u.ready {
			return Batch[T]{Deltas: u.deltas, Resync: true}
		}
		var deltas []Delta[T]
		for _, k := range f.known.ListKeys() {
			if _, newer := skip[k]; newer {
				continue
			}
			if obj, ok := f.known.Get(k); ok {
				deltas = append(deltas, Delta[T]{Type: Sync, Key: k, Object: obj})
			}
		}
		return Batch[T]{Deltas: deltas, Resync: true}
	default:
		f.keyRun(u.deltas)
		return Batch[T]{Deltas: u.deltas}
	}
}

// keyRun fills in the keys of popped ordinary deltas queued without them (see
// defaultKeys).
func (f *FIFO[T]) keyRun(deltas []Delta[T]) {
	if !f.defaultKeys {
		return
	}
	for i := range deltas {
		if d := &deltas[i]; d.Key == "" {
			m := any(d.Object).(metav1.Object)
			d.Key = f.keys.get(m.GetNamespace(), m.GetName())
		}
	}
}

// defaultKey is the default key of obj, which implements metav1.Object and has a
// name.
func defaultKey[T any](obj T) string {
	m := any(obj).(metav1.Object)
	if m.GetNamespace() == "" {
		return m.GetName()
	}
	return m.GetNamespace() + "/" + m.GetName()
}

const (
	// runChunk is the most deltas a run unit holds; past it, the next delta starts a
	// new one. Buffers stay small enough to be reused (32 KiB for a pointer T), and a
	// consumer that lags far behind gets many such batches, not one that grows,
	// reallocated and copied, with the backlog.
	runChunk = 1024
	// maxSpares is the number of emptied run buffers kept for reuse.
	maxSpares = 4
)

// finish ends the in-flight batch: on success it recycles the buffer and, for the
// first relist, marks the FIFO synced; otherwise it puts the batch (or orig, the unit
// it could not be built from) back in front.
func (f *FIFO[T]) finish(b Batch[T], ok bool, orig *unit[T]) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inflight = false
	f.wakeLocked()
	if f.closed {
		return
	}
	if orig != nil {
		f.units = append(f.units, unit[T]{})
		copy(f.units[1:], f.units)
		f.units[0] = *orig
		f.queued += orig.size()
		return
	}
	if ok {
		if b.InitialList {
			f.synced.Store(true)
		}
		if !b.Relist && cap(b.Deltas) > 0 && cap(b.Deltas) <= runChunk && len(f.spares) < maxSpares {
			clear(b.Deltas)
			f.spares = append(f.spares, b.Deltas[:0])
		}
		return
	}
	kind := runUnit
	switch {
	case b.Relist:
		kind = relistUnit
	case b.Resync:
		kind = resyncUnit
	}
	f.units = append(f.units, unit[T]{})
	copy(f.units[1:], f.units)
	f.units[0] = unit[T]{kind: kind, deltas: b.Deltas, ready: true, rv: b.ResourceVersion, initial: b.InitialList}
	f.queued += len(b.Deltas)
}

// HasSynced reports whether the first relist has been popped and processed without
// error (or whether the first thing queued was an ordinary delta, so there was no
// initial list to wait for).
func (f *FIFO[T]) HasSynced() bool { return f.synced.Load() }

// Close closes the FIFO: waiting and future Pop calls return ErrClosed, producers get
// ErrClosed, and queued deltas are dropped. A batch in flight completes. Close is
// idempotent.
func (f *FIFO[T]) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		close(f.done)
	}
	f.closed = true
	f.units, f.spares, f.queued = nil, nil, 0
}

// Len returns the number of deltas waiting to be popped: ordinary deltas plus one per
// listed object of a pending relist. The deletions of a pending relist and the Sync
// deltas of a pending resync are not counted: they are computed when popped.
func (f *FIFO[T]) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.queued
}

// keySet is a compact exact set of the keys of a relist: an open-addressing table of
// indexes into keys (4 bytes a slot, load at most 1/2).
type keySet struct {
	seed  maphash.Seed
	keys  []string
	table []int32 // index into keys, or -1
	mask  uint64
}

func newKeySet(keys []string) *keySet {
	n := 8
	for n < 2*len(keys) {
		n *= 2
	}
	s := &keySet{seed: maphash.MakeSeed(), keys: keys, table: make([]int32, n), mask: uint64(n - 1)}
	for i := range s.table {
		s.table[i] = -1
	}
	for i, k := range keys {
		h := maphash.String(s.seed, k) & s.mask
		for s.table[h] >= 0 {
			if keys[s.table[h]] == k {
				break
			}
			h = (h + 1) & s.mask
		}
		s.table[h] = int32(i)
	}
	return s
}

func (s *keySet) has(k string) bool {
	h := maphash.String(s.seed, k) & s.mask
	for {
		i := s.table[h]
		if i < 0 {
			return false
		}
		if s.keys[i] == k {
			return true
		}
		h = (h + 1) & s.mask
	}
}
