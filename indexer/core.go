package indexer

import (
	"hash/maphash"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"unsafe"
)

// core is the store under an Indexer, without locking: a slab of slots addressed by
// small integer ids, a hash table from keys to slots, and the secondary indexes, which
// refer to objects by slot id. It is not safe for concurrent use.
//
// Keys are stored in keys, parallel to objs, unless the keying derives them from the
// objects (MetaKey): then no key string is built or allocated. The table hashes and
// compares namespace and name, and "namespace/name" is built only when a caller asks
// for keys (ListKeys, IndexKeys, errors). The namespace is read from the namespace
// index when there is one (nsIdx), else from the object. The name is kept next to the
// slot, as the two halves of the object's own string header (no copy of its bytes):
// the data pointer in namePtr and the length in nameLen, 9 bytes per object instead of
// a 16-byte header. A lookup then compares a stored key without reading the stored
// object, whose memory is usually cold (that read was about half of an Update). A name
// of nameLong bytes or more (Kubernetes names have at most 253) is read from the
// object (its mutation-detector copy when there is one).
//
// Invariants, checked by validate in tests:
//   - slot s is live iff keys[s] != "" (stored keys) or objs[s] is not nil (derived
//     keys); a slot that is not live holds the zero T and its id is in free exactly
//     once. count is the number of live slots.
//   - with derived keys, nsIdx is nil or the one index in idx marked byNamespace,
//     which indexes every live slot under its namespace; namePtr and nameLen are
//     parallel to objs, nameAt(s) is the name of live slot s, and a free slot has a
//     nil namePtr and a zero nameLen.
//   - table is empty (len 0) or a power-of-two array of cells (see cell) with at most
//     7/8 of them used; every live slot is in it exactly once, with the top 32 bits
//     of its key's hash, reachable by linear probing from the cell its key hashes to
//     with no empty cell in between, and nothing else is.
//   - idx[j] indexes every live slot under the values its index function returned for
//     objs[s] when it was stored, and no free slot.
//   - copies is nil, or parallel to objs and holds a deep copy of each live object
//     taken when it was stored (the mutation detector).
type core[T any] struct {
	kf    *keying[T]
	table []uint64
	count int
	objs  []T
	keys  []string // nil iff kf.nsName != nil
	// namePtr and nameLen are nil iff kf.nsName == nil; see nameAt.
	namePtr []*byte
	nameLen []uint8
	free    []int32
	idx     []*index[T]
	nsIdx   *index[T]
	// listed keeps the keys ListKeys built, while keys are derived; see listKeys.
	listed listedKeys

	copies []T
	// mutated collects keys whose objects were found changed when they left the
	// store, until CheckMutations reports them.
	mutated []string
	equal   func(a, b T) bool
	// same tells whether two values are the same object (==, for pointers); nil
	// unless the mutation detector is on.
	same func(a, b T) bool
}

// keying says how a core hashes and compares keys. It is shared by the cores of an
// Indexer and never changes.
type keying[T any] struct {
	seed maphash.Seed
	// nsName, if set, returns the namespace and name of a stored object, whose key is
	// then MetaKey: "namespace/name", or "name" when the namespace is empty. Set only
	// for pointer types, whose nil is the free-slot marker.
	nsName func(T) (ns, name string)
	isNil  func(T) bool
	// collide, for tests, keeps 3 bits of every hash, at both ends of the table, so
	// that keys collide, probe sequences are long and wrap around.
	collide bool
}

func (kf *keying[T]) hashString(key string) uint64 { return kf.weaken(maphash.String(kf.seed, key)) }

// hashNsName is hashString of the MetaKey of ns and name, without building it.
func (kf *keying[T]) hashNsName(ns, name string) uint64 {
	if ns == "" {
		return kf.weaken(maphash.String(kf.seed, name))
	}
	var h maphash.Hash
	h.SetSeed(kf.seed)
	h.WriteString(ns)
	h.WriteByte('/')
	h.WriteString(name)
	return kf.weaken(h.Sum64())
}

func (kf *keying[T]) weaken(h uint64) uint64 {
	if !kf.collide {
		return h
	}
	v := uint32(h>>32) & 7
	if v&4 != 0 {
		v |= 0xfffffff8
	}
	return uint64(v) << 32
}

// metaKeyIs reports whether key is the MetaKey of ns and name.
func metaKeyIs(key, ns, name string) bool {
	if ns == "" {
		return key == name
	}
	return len(key) == len(ns)+1+len(name) && key[len(ns)] == '/' && key[:len(ns)] == ns && key[len(ns)+1:] == name
}

func joinMetaKey(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// keyChunk is the most bytes a keyBuf allocates at once.
const keyChunk = 16 << 10

// keyBuf builds the keys of a listing (ListKeys, IndexKeys, Absent) with a few
// allocations instead of one a key: it packs their bytes into shared chunks of at most
// keyChunk bytes, which are never written again once a key is in them. A key the
// caller keeps alive keeps its chunk alive, never the whole listing.
type keyBuf struct {
	b     []byte
	left  int // keys still to build, to size the next chunk
	built int // keys packed so far
	// bytes counts the bytes of the keys packed in earlier chunks; the current one
	// was made with chunk bytes, of which len(b) are left.
	bytes, chunk int
}

// join returns the MetaKey of ns and name, packed into the buffer. The common case,
// a key that fits the current chunk, only copies the key's bytes; starting a chunk,
// and keys that are not packed, are left to joinSlow.
func (k *keyBuf) join(ns, name string) string {
	n := len(ns) + 1 + len(name)
	if ns == "" || n > len(k.b) {
		return k.joinSlow(ns, name)
	}
	k.left--
	k.built++
	b := k.b
	p := unsafe.Pointer(&b[0])
	putShort(p, ns)
	b[len(ns)] = '/'
	putShort(unsafe.Add(p, len(ns)+1), name)
	k.b = b[n:]
	return unsafe.String(&b[0], n)
}

// joinSlow is join of a key in no namespace, or of one that needs a new chunk.
func (k *keyBuf) joinSlow(ns, name string) string {
	n := len(ns) + 1 + len(name)
	if ns == "" || n > keyChunk/4 {
		k.left--
		if ns == "" {
			return name
		}
		return ns + "/" + name
	}
	k.bytes += k.chunk - len(k.b)
	// Size the next chunk for this key and those left, at the longer of this key and
	// the mean so far, and a quarter more: keys differ in length.
	mean := n
	if k.built > 0 {
		mean = max(n, k.bytes/k.built)
	}
	est := mean * max(k.left, 1)
	k.chunk = min(keyChunk, est+est/4) // at least n: n <= keyChunk/4
	k.b = makeNoZero(k.chunk)
	return k.join(ns, name)
}

// listedKeys keeps, by slot, the keys a listing built, so that the next listing
// builds only the keys of objects stored since: listing a large store again and
// again then allocates no key bytes, only the slice it returns. A store listed once
// pays nothing: the keys are kept from the second listing on. They are dropped once
// more than half the store has left since the last listing (keeping them then costs
// more memory than it saves work; the next listing keeps none again) and when the
// store is compacted.
//
// mu guards it for the readers of a listing, which hold the Indexer's read lock
// (lock order: Indexer.mu, then mu); writers hold the write lock and change it
// without mu.
type listedKeys struct {
	mu sync.Mutex
	// again is set by a listing: the next one keeps the keys it builds.
	again bool
	keys  []string // by slot; "" where none is kept
	n     int      // non-empty keys
	// live is the bytes of the kept keys, dead those of keys dropped since their
	// chunks were made: bytes their chunks' other keys keep reachable. The keys are
	// built anew once dead exceeds live, so they keep at most twice their bytes.
	live, dead int
	// gone counts the kept keys dropped since the last listing.
	gone int
}

// reset drops the kept keys and lets their memory go.
func (l *listedKeys) reset() {
	l.keys, l.n, l.live, l.dead, l.gone = nil, 0, 0, 0, 0
}

// forget drops the kept key of slot s, which is leaving the store, and every kept
// key once most of the store has left since the last listing. Called by writers.
func (c *core[T]) forget(s int32) {
	l := &c.listed
	if int(s) >= len(l.keys) || l.keys[s] == "" {
		return
	}
	n := len(l.keys[s])
	l.keys[s] = ""
	l.n--
	l.live -= n
	l.dead += n
	l.gone++
	if l.gone > c.count/2 {
		l.reset()
		l.again = false
	}
}

// appendKeys appends the key of every live slot to out, with derived keys, keeping
// those it builds for the next call unless it is the first. The caller holds the
// Indexer's read or write lock.
func (c *core[T]) appendKeys(out []string) []string {
	l := &c.listed
	l.mu.Lock()
	defer l.mu.Unlock()
	keep := l.again
	l.again = true
	if keep {
		if l.dead > l.live {
			l.reset()
		}
		if len(l.keys) < len(c.objs) {
			l.keys = append(l.keys, make([]string, len(c.objs)-len(l.keys))...)
		}
		l.gone = 0
	}
	out = slices.Grow(out, c.count)
	kb := keyBuf{left: c.count - l.n}
	if !keep {
		return c.appendBuiltKeys(out, &kb)
	}
	for s := range c.objs {
		if !c.live(s) {
			continue
		}
		k := l.keys[s]
		if k == "" {
			k = kb.join(c.nsAt(int32(s)), c.nameAt(int32(s)))
			if k != "" {
				l.keys[s] = k
				l.n++
				l.live += len(k)
			}
		}
		out = append(out, k)
	}
	return out
}

// appendBuiltKeys appends the key of every live slot, built in kb, to out, which has
// room for them. It is appendKeys's loop for a listing that keeps no keys, with the
// namespace index and the name arrays read once instead of once a slot.
func (c *core[T]) appendBuiltKeys(out []string, kb *keyBuf) []string {
	objs, names, lens := c.objs, c.namePtr, c.nameLen
	ix := c.nsIdx
	sole := ix != nil && ix.sole
	var soleNS string
	if sole && len(ix.vals) > 0 { // else the core holds no object
		soleNS = ix.vals[0].value
	}
	// The loop packs the common key itself, as join does, at base+off in the current
	// chunk, kb.b[:room] from base; done counts the keys it packed since kb last saw
	// its buffer, skipped the names it returned as keys. New chunks, and keys too
	// long to pack, are left to joinSlow.
	base, room, off, done, skipped := unsafe.Pointer(unsafe.SliceData(kb.b)), len(kb.b), 0, 0, 0
	for s, nl := range lens[:len(objs)] {
		if nl == 0 {
			continue // a free slot: names are never empty
		}
		var ns string
		switch {
		case sole:
			ns = soleNS
		case ix != nil:
			ns = ix.vals[ix.slotVal[s]].value
		default:
			ns = c.nsAt(int32(s))
		}
		var name string
		if nl != nameLong {
			name = unsafe.String(names[s], int(nl))
		} else {
			name = c.nameAt(int32(s))
		}
		if ns == "" {
			out = append(out, name) // a cluster-scoped object's key is its name
			skipped++
			continue
		}
		n := len(ns) + 1 + len(name)
		if n > room-off {
			kb.b, kb.left, kb.built = unsafe.Slice((*byte)(base), room)[off:], kb.left-done-skipped, kb.built+done
			out = append(out, kb.joinSlow(ns, name))
			base, room, off, done, skipped = unsafe.Pointer(unsafe.SliceData(kb.b)), len(kb.b), 0, 0, 0
			continue
		}
		p := unsafe.Add(base, off)
		putShort(p, ns)
		*(*byte)(unsafe.Add(p, len(ns))) = '/'
		putShort(unsafe.Add(p, len(ns)+1), name)
		out = append(out, unsafe.String((*byte)(p), n))
		off += n
		done++
	}
	buf := unsafe.Slice((*byte)(base), room)[off:]
	kb.b, kb.left, kb.built = buf, kb.left-done-skipped, kb.built+done
	return out
}

// makeNoZero returns a slice of n bytes that are not cleared first: a
// strings.Builder grows its buffer without clearing it, and every byte is written
// before it is read.
func makeNoZero(n int) []byte {
	var sb strings.Builder
	sb.Grow(n)
	sb.WriteByte(0)
	return unsafe.Slice(unsafe.StringData(sb.String()), n)
}

// keyInto returns the key of live slot s, built in kb when it is not stored.
func (c *core[T]) keyInto(s int32, kb *keyBuf) string {
	if c.keys != nil {
		return c.keys[s]
	}
	return kb.join(c.nsAt(s), c.nameAt(s))
}

// newCore returns an empty core with k indexes and room for n objects, except in
// the namespace indexes flagged in nsFlags (indexSet.byNamespace, which may be nil):
// they start sole. equal and same are nil unless the mutation detector is on.
func newCore[T any](kf *keying[T], k, n int, nsFlags []bool, equal, same func(a, b T) bool) *core[T] {
	c := &core[T]{
		kf:    kf,
		objs:  make([]T, 0, n),
		idx:   make([]*index[T], k),
		equal: equal,
		same:  same,
	}
	if kf.nsName == nil {
		c.keys = make([]string, 0, n)
	} else {
		c.namePtr = make([]*byte, 0, n)
		c.nameLen = make([]uint8, 0, n)
	}
	if n > 0 {
		c.table = make([]uint64, tableSize(n))
	}
	for j := range c.idx {
		room := n
		if nsFlags != nil && nsFlags[j] {
			room = 0 // it starts sole (see markNamespaceIndexes)
		}
		c.idx[j] = newIndex(room, same)
	}
	if equal != nil {
		c.copies = make([]T, 0, n)
	}
	return c
}

// tableSize is the table length that holds n keys at a load of at most 7/8.
func tableSize(n int) int {
	size := 8
	for size/8*7 < n {
		size *= 2
	}
	return size
}

func (c *core[T]) len() int { return c.count }

// live reports whether slot s holds an object.
func (c *core[T]) live(s int) bool {
	if c.keys != nil {
		return c.keys[s] != ""
	}
	// Keys are derived only for pointer types (see keying.nsName): a nil pointer
	// marks a free slot, and reading the pointer is the cheapest test.
	return *(*unsafe.Pointer)(unsafe.Pointer(&c.objs[s])) != nil
}

// keyObj returns the object the key of live slot s is derived from: its
// mutation-detector copy if there is one, which a caller cannot change, or the object.
func (c *core[T]) keyObj(s int32) T {
	if c.copies != nil {
		return c.copies[s]
	}
	return c.objs[s]
}

// nsAt returns the namespace of live slot s with derived keys: from the namespace
// index if there is one, which avoids reading the object, else from the object.
func (c *core[T]) nsAt(s int32) string {
	if ix := c.nsIdx; ix != nil {
		if ix.sole {
			return ix.vals[0].value
		}
		return ix.vals[ix.slotVal[s]].value
	}
	ns, _ := c.kf.nsName(c.keyObj(s))
	return ns
}

// keyAt returns the key of live slot s; with derived keys it builds it.
func (c *core[T]) keyAt(s int32) string {
	if c.keys != nil {
		return c.keys[s]
	}
	return joinMetaKey(c.nsAt(s), c.nameAt(s))
}

// hashAt returns the hash of the key of live slot s.
func (c *core[T]) hashAt(s int32) uint64 {
	if c.keys != nil {
		return c.kf.hashString(c.keys[s])
	}
	return c.kf.hashNsName(c.nsAt(s), c.nameAt(s))
}

// nameLong in nameLen says that the name is too long to be kept: it is read from the
// object.
const nameLong = 255

// nameAt returns the name of live slot s with derived keys.
func (c *core[T]) nameAt(s int32) string {
	if n := c.nameLen[s]; n != nameLong {
		return unsafe.String(c.namePtr[s], int(n))
	}
	_, name := c.kf.nsName(c.keyObj(s))
	return name
}

// setName keeps name, the name of the object stored in slot s (its own string, so the
// bytes kept alive are the object's), for nameAt.
func (c *core[T]) setName(s int32, name string) {
	if len(name) < nameLong {
		c.namePtr[s], c.nameLen[s] = unsafe.StringData(name), uint8(len(name))
	} else {
		c.namePtr[s], c.nameLen[s] = nil, nameLong
	}
}

// A table cell is 0 when empty, otherwise the slot id plus one in its low 32 bits and
// the top 32 bits of its key's hash in its high 32 bits. The cell a key hashes to is
// those 32 bits masked by the table size, so the table can grow and shift cells
// without hashing any key again, and a probe compares keys only when the 32 bits
// match.

func cell(s int32, h32 uint32) uint64 { return uint64(h32)<<32 | uint64(uint32(s)+1) }

func cellSlot(x uint64) int32 { return int32(uint32(x)) - 1 }

func cellHash(x uint64) uint32 { return uint32(x >> 32) }

// find returns the slot holding key, or -1.
func (c *core[T]) find(key string) int32 {
	if len(c.table) == 0 {
		return -1
	}
	return c.findHashed(key, c.kf.hashString(key))
}

// findHashed is find for a key whose hash h is known.
func (c *core[T]) findHashed(key string, h uint64) int32 {
	if len(c.table) == 0 {
		return -1
	}
	h32 := uint32(h >> 32)
	mask := uint64(len(c.table) - 1)
	for i := uint64(h32) & mask; ; i = (i + 1) & mask {
		x := c.table[i]
		if x == 0 {
			return -1
		}
		if cellHash(x) != h32 {
			continue
		}
		s := cellSlot(x)
		if c.keys != nil {
			if c.keys[s] == key {
				return s
			}
		} else if metaKeyIs(key, c.nsAt(s), c.nameAt(s)) {
			return s
		}
	}
}

// findNsName returns the slot holding the MetaKey of ns and name, or -1.
func (c *core[T]) findNsName(ns, name string) int32 {
	if len(c.table) == 0 {
		return -1
	}
	return c.findNsNameHashed(ns, name, c.kf.hashNsName(ns, name))
}

// findNsNameHashed is findNsName for a key whose hash h is known.
func (c *core[T]) findNsNameHashed(ns, name string, h uint64) int32 {
	if len(c.table) == 0 {
		return -1
	}
	h32 := uint32(h >> 32)
	mask := uint64(len(c.table) - 1)
	for i := uint64(h32) & mask; ; i = (i + 1) & mask {
		x := c.table[i]
		if x == 0 {
			return -1
		}
		if cellHash(x) != h32 {
			continue
		}
		s := cellSlot(x)
		if c.keys != nil {
			if metaKeyIs(c.keys[s], ns, name) {
				return s
			}
		} else if c.nameAt(s) == name && c.nsAt(s) == ns {
			return s
		}
	}
}

// keyRef is the key of an object being stored: key with stored keys; with derived
// keys, the object's namespace and name (key is then ""). h is the key's hash,
// computed before the lock is taken.
type keyRef struct {
	key, ns, name string
	h             uint64
}

// ref returns the keyRef of a stored key, or of the namespace and name of a derived
// one.
func (kf *keying[T]) ref(key, ns, name string, derived bool) keyRef {
	if derived {
		return keyRef{ns: ns, name: name, h: kf.hashNsName(ns, name)}
	}
	return keyRef{key: key, h: kf.hashString(key)}
}

// findRef returns the slot holding the key k, or -1.
func (c *core[T]) findRef(k keyRef) int32 {
	if c.keys != nil {
		return c.findHashed(k.key, k.h)
	}
	return c.findNsNameHashed(k.ns, k.name, k.h)
}

// insert adds live slot s, whose key hashes to h and which is in no cell, to the
// table.
func (c *core[T]) insert(s int32, h uint64) {
	if (c.count+1)*8 > len(c.table)*7 {
		c.resize(tableSize(c.count + 1))
	}
	h32 := uint32(h >> 32)
	mask := uint64(len(c.table) - 1)
	i := uint64(h32) & mask
	for c.table[i] != 0 {
		i = (i + 1) & mask
	}
	c.table[i] = cell(s, h32)
}

// resize moves the cells to a table of the given size, without hashing keys again.
func (c *core[T]) resize(size int) {
	old := c.table
	c.table = make([]uint64, size)
	mask := uint64(size - 1)
	for _, x := range old {
		if x == 0 {
			continue
		}
		i := uint64(cellHash(x)) & mask
		for c.table[i] != 0 {
			i = (i + 1) & mask
		}
		c.table[i] = x
	}
}

// unlink removes live slot s from the table, shifting back the cells after it so
// that no probe sequence breaks. It must run while slot s still holds its object.
func (c *core[T]) unlink(s int32, h uint64) {
	mask := uint64(len(c.table) - 1)
	i := uint64(uint32(h>>32)) & mask
	for n := 0; cellSlot(c.table[i]) != s; n++ {
		if c.table[i] == 0 || n > len(c.table) {
			// Not where its key hashes: the object's name or namespace was changed in
			// place. Find it by id so that the table stays consistent.
			i = c.cellOf(s)
			if i >= uint64(len(c.table)) {
				return
			}
			break
		}
		i = (i + 1) & mask
	}
	for {
		c.table[i] = 0
		j := i
		for {
			j = (j + 1) & mask
			x := c.table[j]
			if x == 0 {
				return
			}
			home := uint64(cellHash(x)) & mask
			// x may move back to i unless its home lies cyclically in (i, j].
			if i <= j {
				if i < home && home <= j {
					continue
				}
			} else if i < home || home <= j {
				continue
			}
			c.table[i] = x
			i = j
			break
		}
	}
}

// cellOf returns the cell holding s, or len(table) if none does.
func (c *core[T]) cellOf(s int32) uint64 {
	for i, x := range c.table {
		if x != 0 && cellSlot(x) == s {
			return uint64(i)
		}
	}
	return uint64(len(c.table))
}

// put stores obj under its key k, indexed under vals[j] in idx[j] (each
// deduplicated), with cp as its mutation-detector copy, and returns its slot and the
// object it replaced, if any.
func (c *core[T]) put(k keyRef, obj T, vals [][]string, cp T) (s int32, old T, had bool) {
	s = c.findRef(k)
	if s >= 0 {
		old, had = c.objs[s], true
		c.checkLeaving(s)
		// Same key, so same hash: the table does not change.
		c.objs[s] = obj
		if c.namePtr != nil {
			// The same name, but the new object's string: the old object's is not
			// kept alive.
			c.setName(s, k.name)
		}
		if c.copies != nil {
			c.copies[s] = cp
		}
	} else {
		s = c.alloc(k, obj, cp)
	}
	for j, ix := range c.idx {
		if ix.byNamespace {
			if ix.sole {
				if c.soleAdmits(ix, k.ns) {
					continue
				}
				c.materialize(ix)
			}
			ix.setOne(s, k.ns)
		} else {
			ix.set(s, vals[j])
		}
	}
	return s, old, had
}

// markNamespaceIndexes sets byNamespace on the indexes flagged in flags (see
// indexSet.byNamespace), which may be nil, and makes the first of them nsIdx. A
// flagged index that holds nothing yet starts sole.
func (c *core[T]) markNamespaceIndexes(flags []bool) {
	c.nsIdx = nil
	for j, ix := range c.idx {
		ix.byNamespace = flags != nil && flags[j]
		switch {
		case ix.byNamespace && !ix.sole && len(ix.ids) == 0 && len(ix.slotVal) == 0 && c.count == 0:
			ix.sole = true
			ix.slotVal, ix.slotPos = nil, nil // the room newIndex made
		case !ix.byNamespace && ix.sole:
			c.materialize(ix)
		}
		if ix.byNamespace && c.nsIdx == nil {
			c.nsIdx = ix
		}
	}
}

// soleAdmits reports whether the sole index ix can take a live slot in namespace
// ns as it is: ns is its value, or the slot is the core's only object (ns then
// becomes the value). Either way the value's snapshot is dropped: its members or
// one of their objects change.
func (c *core[T]) soleAdmits(ix *index[T], ns string) bool {
	if len(ix.ids) == 0 {
		// The slot being stored is the only live one.
		ix.intern(ns)
		return true
	}
	if ix.vals[0].value != ns {
		return false
	}
	ix.drop(0)
	return true
}

// resole makes the empty byNamespace index ix sole again, giving back its
// per-object state: its values, which have no members left, have no snapshots.
func (ix *index[T]) resole() {
	ix.sole = true
	ix.ids = make(map[string]int32)
	ix.vals, ix.freeIDs, ix.multi, ix.freeMulti = nil, nil, nil, nil
	ix.slotVal, ix.slotPos = nil, nil
}

// soleLeave is clear for the sole index ix: the slot leaving is the last object
// when last is set, and the value then goes.
func (ix *index[T]) soleLeave(last bool) {
	if len(ix.ids) == 0 {
		return
	}
	ix.drop(0)
	if last {
		delete(ix.ids, ix.vals[0].value)
		ix.vals[0].value = ""
		ix.freeIDs = append(ix.freeIDs, 0)
	}
}

// materialize turns the sole index ix into an ordinary one: every live slot
// becomes a member of the value under which it was indexed implicitly. The caller
// then indexes under other values as usual.
func (c *core[T]) materialize(ix *index[T]) {
	ix.sole = false
	if len(ix.ids) == 0 {
		return
	}
	v := ix.vals[0].value
	ix.drop(0)
	delete(ix.ids, v)
	ix.vals[0].value = ""
	ix.freeIDs = append(ix.freeIDs, 0)
	// As much room as the core has: a Replace made it for every object it stores,
	// and materializes on the second namespace it meets.
	ix.reserve(cap(c.objs))
	ix.grow(len(c.objs))
	for s := range c.objs {
		if c.live(s) {
			ix.setOne(int32(s), v)
		}
	}
}

// memberSlots returns the slots indexed under value id of ix: the value's members,
// or, for a sole index, every live slot (allocated for the call).
func (c *core[T]) memberSlots(ix *index[T], id int32) []int32 {
	if !ix.sole {
		return ix.vals[id].members
	}
	out := make([]int32, 0, c.count)
	for s := range c.objs {
		if c.live(s) {
			out = append(out, int32(s))
		}
	}
	return out
}

// appendMembers appends the objects indexed under value id of ix to dst.
func (c *core[T]) appendMembers(dst []T, ix *index[T], id int32) []T {
	if !ix.sole {
		dst = slices.Grow(dst, len(ix.vals[id].members))
		for _, s := range ix.vals[id].members {
			dst = append(dst, c.objs[s])
		}
		return dst
	}
	dst = slices.Grow(dst, c.count)
	for s := range c.objs {
		if c.live(s) {
			dst = append(dst, c.objs[s])
		}
	}
	return dst
}

func (c *core[T]) alloc(k keyRef, obj, cp T) int32 {
	key := k.key
	var s int32
	if n := len(c.free); n > 0 {
		s = c.free[n-1]
		c.free = c.free[:n-1]
		c.objs[s] = obj
		if c.keys != nil {
			c.keys[s] = key
		}
		if c.copies != nil {
			c.copies[s] = cp
		}
	} else {
		s = int32(len(c.objs))
		c.objs = append(c.objs, obj)
		if c.keys != nil {
			c.keys = append(c.keys, key)
		} else {
			c.namePtr = append(c.namePtr, nil)
			c.nameLen = append(c.nameLen, 0)
		}
		if c.copies != nil {
			c.copies = append(c.copies, cp)
		}
	}
	if c.namePtr != nil {
		c.setName(s, k.name)
	}
	c.insert(s, k.h)
	c.count++
	return s
}

func (c *core[T]) removeSlot(s int32) { c.removeSlotHashed(s, c.hashAt(s)) }

// removeSlotHashed is removeSlot of the slot found by a lookup of a key whose hash
// is h, which it does not compute again.
func (c *core[T]) removeSlotHashed(s int32, h uint64) {
	c.checkLeaving(s)
	// Unlink first: the key of s may be read from the namespace index.
	c.unlink(s, h)
	for _, ix := range c.idx {
		if ix.sole {
			ix.soleLeave(c.count == 1)
			continue
		}
		ix.clear(s)
	}
	var zero T
	c.objs[s] = zero
	if c.keys != nil {
		c.keys[s] = ""
	} else {
		c.namePtr[s], c.nameLen[s] = nil, 0
		c.forget(s)
	}
	if c.copies != nil {
		c.copies[s] = zero
	}
	c.free = append(c.free, s)
	c.count--
	if c.count == 0 {
		for _, ix := range c.idx {
			if ix.byNamespace && !ix.sole {
				ix.resole()
			}
		}
	}
}

// checkLeaving records the key of slot s if its object no longer equals the copy taken
// when it was stored. It is a no-op unless the mutation detector is on.
func (c *core[T]) checkLeaving(s int32) {
	if c.copies != nil && !c.equal(c.objs[s], c.copies[s]) {
		c.mutated = append(c.mutated, c.keyAt(s))
	}
}

// replace makes the core hold exactly objs (stored under keys, which is nil with
// derived keys, with index values from t and mutation-detector copies from copies,
// which may be nil) by updating it in place: no second copy of the store is built.
// Later duplicates of a key win.
func (c *core[T]) replace(objs []T, keys []string, t *valueTable, copies []T) {
	old := len(c.objs)
	seen := make([]uint64, (old+63)/64)
	var buf [4][]string
	row := buf[:0]
	var cp T
	var k keyRef
	for i, obj := range objs {
		row = t.row(row[:0], i)
		if copies != nil {
			cp = copies[i]
		}
		if keys != nil {
			k = c.kf.ref(keys[i], "", "", false)
		} else {
			ns, name := c.kf.nsName(obj)
			k = c.kf.ref("", ns, name, true)
		}
		if s, _, _ := c.put(k, obj, row, cp); int(s) < old {
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
			if c.live(int(s)) {
				c.removeSlot(s)
			}
		}
	}
}

// sparse reports whether enough slots are free that compacting is worth its O(n) cost.
func (c *core[T]) sparse() bool {
	return len(c.objs) >= 1024 && len(c.free) > len(c.objs)/2
}

// compact renumbers the live slots densely and gives back the memory of free ones.
func (c *core[T]) compact() {
	remap := make([]int32, len(c.objs))
	objs := make([]T, 0, c.count)
	var keys []string
	var namePtr []*byte
	var nameLen []uint8
	if c.keys != nil {
		keys = make([]string, 0, c.count)
	} else {
		namePtr = make([]*byte, 0, c.count)
		nameLen = make([]uint8, 0, c.count)
	}
	var copies []T
	if c.copies != nil {
		copies = make([]T, 0, c.count)
	}
	for s := range c.objs {
		if !c.live(s) {
			remap[s] = -1
			continue
		}
		remap[s] = int32(len(objs))
		objs = append(objs, c.objs[s])
		if keys != nil {
			keys = append(keys, c.keys[s])
		} else {
			namePtr = append(namePtr, c.namePtr[s])
			nameLen = append(nameLen, c.nameLen[s])
		}
		if copies != nil {
			copies = append(copies, c.copies[s])
		}
	}
	for _, ix := range c.idx {
		ix.renumber(remap, len(objs))
	}
	c.objs, c.keys, c.copies, c.free = objs, keys, copies, nil
	c.namePtr, c.nameLen = namePtr, nameLen
	c.listed.reset()
	// Renumber the cells, then shrink the table to the live count.
	for i, x := range c.table {
		if x != 0 {
			c.table[i] = cell(remap[cellSlot(x)], cellHash(x))
		}
	}
	c.resize(tableSize(c.count))
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

// addOne appends the next cell, holding the single value v.
func (t *valueTable) addOne(v string) {
	if t.offs != nil {
		t.flat = append(t.flat, v)
		t.offs = append(t.offs, int32(len(t.flat)))
		return
	}
	t.flat = append(t.flat, v)
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
