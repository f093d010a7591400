package informer

import "github.com/ctrlkit/ctrlkit/reflector"

// op is what a note tells a handler.
type op uint8

const (
	opAdd    op = iota + 1 // OnAdd(obj, flag: in initial list)
	opUpdate               // OnUpdate(old, obj)
	opDelete               // OnDelete(Deleted{key, obj, flag: final state unknown})
	opSync                 // OnUpdate(obj, obj): a resync
	opMarker               // no call: the handler's initial list is delivered
)

// call is the name of the Handler method op is delivered by.
func (o op) call() string {
	switch o {
	case opAdd:
		return "OnAdd"
	case opUpdate, opSync:
		return "OnUpdate"
	case opDelete:
		return "OnDelete"
	}
	return "none"
}

// note is one change of the cache as one handler is told about it, and the call it
// becomes.
type note[T any] struct {
	op   op
	flag bool // opAdd: in initial list; opDelete: final state unknown
	key  string
	old  T // opUpdate only
	obj  T
}

// pending is the coalesced state of one key: what the handler was last told about
// it, and what it must be told now.
//
// Invariants: owed implies known; a pending that is neither known nor present owes
// nothing and is dropped (dead).
type pending[T any] struct {
	key string
	// known is true when the handler was last told the key exists; before is what it
	// was told, unless the first change folded in was a delete (then owed is set).
	known  bool
	before T
	// owed is true when the object the handler knew was deleted: OnDelete(delObj) is
	// delivered first, whatever happened next.
	owed   bool
	delObj T
	delFSU bool
	// present is true when the key exists now, as after.
	present bool
	after   T
	dead    bool
}

func newPending[T any](n note[T]) *pending[T] {
	p := &pending[T]{key: n.key}
	switch n.op {
	case opUpdate:
		p.known, p.before, p.present, p.after = true, n.old, true, n.old
	case opSync:
		p.known, p.before, p.present, p.after = true, n.obj, true, n.obj
	case opDelete:
		p.known, p.present = true, true
	}
	p.merge(n)
	return p
}

// merge folds the next change of the key into p.
func (p *pending[T]) merge(n note[T]) {
	var zero T
	switch n.op {
	case opAdd, opUpdate, opSync:
		p.present, p.after = true, n.obj
	case opDelete:
		if p.known && !p.owed {
			p.owed, p.delObj, p.delFSU = true, n.obj, n.flag
		}
		p.present, p.after = false, zero
	}
}

// noop reports whether p has nothing to tell: the handler never knew the key and
// it is gone again.
func (p *pending[T]) noop() bool { return !p.known && !p.present }

// appendCalls appends the calls that bring the handler from before to now.
func (p *pending[T]) appendCalls(dst []note[T]) []note[T] {
	if p.owed {
		dst = append(dst, note[T]{op: opDelete, key: p.key, obj: p.delObj, flag: p.delFSU})
	}
	if p.present {
		if p.known && !p.owed {
			dst = append(dst, note[T]{op: opUpdate, key: p.key, old: p.before, obj: p.after})
		} else {
			dst = append(dst, note[T]{op: opAdd, key: p.key, obj: p.after})
		}
	}
	return dst
}

type slotKind uint8

const (
	slotDead    slotKind = iota // nothing (a note folded into an earlier pending)
	slotNote                    // one change (or a marker), in the slot's own fields
	slotPending                 // p, a coalesced key (nothing if p.dead)
	slotList                    // the backlog's list
)

// slot is an element of a backlog: a note inlined (to keep slots at six words for a
// pointer T), or a reference to a pending or to the list.
type slot[T any] struct {
	kind slotKind
	op   op
	flag bool
	key  string
	old  T
	obj  T
	p    *pending[T]
}

func noteSlot[T any](n note[T]) slot[T] {
	return slot[T]{kind: slotNote, op: n.op, flag: n.flag, key: n.key, old: n.old, obj: n.obj}
}

func (s *slot[T]) note() note[T] {
	return note[T]{op: s.op, flag: s.flag, key: s.key, old: s.old, obj: s.obj}
}

// isDead reports whether s delivers nothing.
func (s *slot[T]) isDead() bool {
	return s.kind == slotDead || s.kind == slotPending && s.p.dead
}

// list is a run of objects delivered with the same op: a handler's initial list, or a
// resync. The objects are shared with other handlers and never change.
type list[T any] struct {
	objs []T
	next int // index of the next object to deliver
	op   op  // opAdd (in initial list) or opSync
}

// backlog is the queue of calls owed to one handler, a ring of slots. It is not
// safe for concurrent use: a Registration guards it with its mutex.
//
// While fewer than limit notes wait, every change is delivered as it happened. When
// limit is reached, the backlog starts coalescing: the waiting notes are folded into
// one pending per key (in the order the keys first appear), and later changes merge
// into their key's pending, until the backlog is empty again. Memory is therefore
// bounded by limit notes plus one pending per key, whatever the rate of changes.
//
// A list (initial list, resync) is held as one shared slice, not counted against
// limit. It is only ever put in an empty backlog, or else split into notes, so that
// no pending is ever older than a list holding one of its keys (per key, the calls
// keep their order), and there is at most one list, in the first slot.
//
// Invariants: n slots from head (modulo len(ring), a power of two) are in use;
// notes is the number of slotNote slots among them other than markers; pend holds
// exactly their live pendings; dead counts those that deliver nothing; list is set
// iff the first slot is a slotList, and listObjs is its number of undelivered
// objects; coalescing implies no slotNote other than markers; pend is empty unless
// coalescing.
type backlog[T reflector.Object] struct {
	limit      int
	ring       []slot[T]
	head       int
	n          int
	list       *list[T]
	notes      int
	pend       map[string]*pending[T]
	dead       int
	listObjs   int
	coalescing bool
	coalesced  uint64
	peak       int
}

// size is the number of changes waiting.
func (b *backlog[T]) size() int { return b.notes + len(b.pend) + b.listObjs }

func (b *backlog[T]) empty() bool { return b.n == 0 }

// at returns the i-th slot from the oldest.
func (b *backlog[T]) at(i int) *slot[T] { return &b.ring[(b.head+i)&(len(b.ring)-1)] }

func (b *backlog[T]) append(s slot[T]) {
	if b.n == len(b.ring) {
		r := make([]slot[T], max(16, 2*len(b.ring)))
		k := copy(r, b.ring[b.head:])
		copy(r[k:], b.ring[:b.head])
		b.ring, b.head = r, 0
	}
	b.ring[(b.head+b.n)&(len(b.ring)-1)] = s
	b.n++
}

// push queues one change.
func (b *backlog[T]) push(n note[T]) {
	if b.coalescing {
		if p := b.pend[n.key]; p != nil {
			p.merge(n)
			b.coalesced++
			if p.noop() {
				b.kill(p)
				if b.dead > 64 && 2*b.dead > b.n {
					b.compact()
				}
			}
			return
		}
		p := newPending(n)
		b.pend[p.key] = p
		b.append(slot[T]{kind: slotPending, p: p})
		b.track()
		return
	}
	if b.notes >= b.limit {
		b.fold()
		b.push(n)
		return
	}
	b.append(noteSlot(n))
	b.notes++
	b.track()
}

// pushList queues objs to be delivered with op o. keys, if not nil, are the keys of
// objs. An empty backlog keeps the shared slice; otherwise each object becomes a
// note of its own (see backlog).
func (b *backlog[T]) pushList(objs []T, keys []string, o op) {
	if len(objs) == 0 {
		return
	}
	if !b.empty() {
		for i, obj := range objs {
			var k string
			if keys != nil {
				k = keys[i]
			} else {
				k = keyOf(obj)
			}
			n := note[T]{op: o, key: k, obj: obj}
			if o == opSync {
				n.old = obj
			} else {
				n.flag = true
			}
			b.push(n)
		}
		return
	}
	b.list = &list[T]{objs: objs, op: o}
	b.append(slot[T]{kind: slotList})
	b.listObjs = len(objs)
	b.track()
}

// pushMarker queues the marker after which the handler counts as synced.
func (b *backlog[T]) pushMarker() {
	b.append(slot[T]{kind: slotNote, op: opMarker})
}

// fold starts coalescing: every waiting note becomes, or merges into, its key's
// pending.
func (b *backlog[T]) fold() {
	b.coalescing = true
	if b.pend == nil {
		b.pend = make(map[string]*pending[T])
	}
	for i := range b.n {
		s := b.at(i)
		if s.kind != slotNote || s.op == opMarker {
			continue
		}
		n := s.note()
		if p := b.pend[n.key]; p != nil {
			p.merge(n)
			b.coalesced++
			*s = slot[T]{kind: slotDead}
			b.dead++
			if p.noop() {
				b.kill(p)
			}
			continue
		}
		p := newPending(n)
		b.pend[n.key] = p
		*s = slot[T]{kind: slotPending, p: p}
	}
	b.notes = 0
	b.compact()
}

// kill drops a pending that has nothing to tell; its slot stays, dead.
func (b *backlog[T]) kill(p *pending[T]) {
	p.dead = true
	delete(b.pend, p.key)
	b.dead++
	b.coalesced++ // the first note of p is not delivered either
}

// compact removes the dead slots, keeping the order of the others.
func (b *backlog[T]) compact() {
	j := 0
	for i := range b.n {
		s := b.at(i)
		if s.isDead() {
			continue
		}
		if i != j {
			*b.at(j) = *s
		}
		j++
	}
	for i := j; i < b.n; i++ {
		*b.at(i) = slot[T]{}
	}
	b.n, b.dead = j, 0
}

// take appends to dst the next calls, about max of them (a pending may give two),
// and removes them from the backlog.
func (b *backlog[T]) take(dst []note[T], max int) []note[T] {
	for len(dst) < max && b.n > 0 {
		s := b.at(0)
		switch s.kind {
		case slotDead:
			b.dead--
		case slotNote:
			dst = append(dst, s.note())
			if s.op != opMarker {
				b.notes--
			}
		case slotPending:
			p := s.p
			if p.dead {
				b.dead--
				break
			}
			delete(b.pend, p.key)
			before := len(dst)
			dst = p.appendCalls(dst)
			// Every note merged into p was counted as coalesced; when p gives two
			// calls (a delete, then an add), one of them was not.
			b.coalesced -= uint64(len(dst) - before - 1)
		case slotList:
			l := b.list
			k := min(max-len(dst), len(l.objs)-l.next)
			for _, obj := range l.objs[l.next : l.next+k] {
				dst = append(dst, note[T]{op: l.op, obj: obj, flag: l.op == opAdd})
			}
			l.next += k
			b.listObjs -= k
			if l.next < len(l.objs) {
				return dst
			}
			b.list = nil
		}
		*s = slot[T]{}
		b.head = (b.head + 1) & (len(b.ring) - 1)
		b.n--
	}
	if b.n == 0 {
		b.reset()
	}
	return dst
}

// reset ends coalescing once the backlog is empty, and releases a large ring.
func (b *backlog[T]) reset() {
	if c := len(b.ring); c > 1024 && c/4 > b.limit {
		b.ring = nil
	}
	b.head, b.n, b.dead, b.notes, b.listObjs = 0, 0, 0, 0, 0
	b.list = nil
	b.coalescing = false
	b.pend = nil
}

// clear drops everything waiting, keeping the counters.
func (b *backlog[T]) clear() {
	b.ring = nil
	b.reset()
}

func (b *backlog[T]) track() {
	if s := b.size(); s > b.peak {
		b.peak = s
	}
}
