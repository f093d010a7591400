package workqueue

import (
	"hash/maphash"
	"sync/atomic"
)

// none marks an absent slot or lane.
const none int32 = -1

// Entry states. An entry exists for every item the queue holds (waiting to be handed out,
// being processed, or scheduled for later) and for recently finished ones (cached). The
// state says where the item is besides the delay schedule; whether a delayed add is pending
// is dat != 0, independently.
const (
	stIdle       uint8 = iota // not queued, not in flight: only a delayed add is pending
	stQueued                  // waiting in lane e.lane() to be handed out
	stProcessing              // handed out, Done not yet called
	stRedirty                 // handed out and added again; on Done it is queued in e.lane()
	stCached                  // finished, nothing pending; kept so a re-add costs one lookup
)

// maxSlots bounds slot indexes, which are int32.
const maxSlots = 1<<31 - 1

// shrinkMin is the size below which the core never bothers to give memory back.
const shrinkMin = 4096

// entry is one item's bookkeeping. It lives in core.pages at a stable index (its slot).
type entry[T comparable] struct {
	item T
	// dat is the deadline of the pending delayed add, 0 when none is pending (deadlines are
	// positive); the schedule's element with this deadline is the valid one.
	dat int64
	// dlane, while dat != 0, is the lane the delayed add will queue into; it holds a
	// reference on it.
	dlane int32
	// ls packs the state (top bits, see state) and a lane (low laneBits bits, see lane):
	// in stQueued the lane the entry is linked into, in stRedirty the lane it returns to on
	// Done, none otherwise. The lane holds a reference. Packing keeps an entry of a string
	// item at 48 bytes.
	ls int32
	// prev and next link the entry into its lane (stQueued) or into the in-flight list
	// (stProcessing, stRedirty). In stCached, prev holds the sequence number of the entry's
	// element in core.cacheQ.
	prev, next int32
	// tag is tagOf(item), kept so that dropping the entry from the index does not hash the
	// item again (its bytes are usually out of cache by then).
	tag uint32
	// mk says whether the entry has a mark, and whether it is published (see shared.go).
	mk uint8
}

const (
	laneBits = 28
	laneMask = 1<<laneBits - 1 // also the packed form of none
	maxLanes = laneMask        // lanes in use at once
)

// state returns the entry's state.
func (e *entry[T]) state() uint8 { return uint8(uint32(e.ls) >> laneBits) }

// lane returns the entry's lane, or none.
func (e *entry[T]) lane() int32 {
	if l := e.ls & laneMask; l != laneMask {
		return l
	}
	return none
}

// set sets the entry's state and lane (none allowed).
func (e *entry[T]) set(st uint8, lane int32) {
	e.ls = int32(uint32(st)<<laneBits | uint32(lane)&laneMask)
}

// setState changes the state and keeps the lane.
func (e *entry[T]) setState(st uint8) { e.set(st, e.lane()) }

// stamp holds an entry's timestamps (nanoseconds on the queue's monotonic clock). It is only
// kept when the queue has metrics.
type stamp struct {
	added   int64 // when the entry last became pending
	started int64 // when it was last handed out
}

// laneKey names a lane: the items of one priority and one fairness key.
type laneKey struct {
	prio int
	key  string
}

// lane is a FIFO of queued entries sharing a priority and a fairness key.
type lane struct {
	laneKey
	head, tail int32 // first and last queued entry, none when n == 0
	n          int   // queued entries
	// refs counts the entries whose lane or dlane names this lane; n <= refs. A lane with no
	// references is freed (except lane 0, the default lane, which lives forever).
	refs int
	// rrPrev and rrNext link the lane into its level's round-robin ring while n > 0; next
	// also links free lanes.
	rrPrev, rrNext int32
	// level is the level whose ring holds the lane, while n > 0.
	level int32
}

// level is the set of lanes with queued items at one priority, at a stable index in
// core.levels. A level is active (non-empty, in both heaps), parked (empty, out of the
// heaps, kept in core.levelAt and listed in core.parked, so that the few priorities
// that keep emptying and filling again, the default one above all, cost no map
// operation), or free.
type level struct {
	prio           int
	rrHead, rrTail int32 // active lanes; the head lane is served next
	n              int   // queued entries over all its lanes
	// since is the handout count when this level was last served or became non-empty; the
	// number of handouts from other levels it has waited through is handouts-since.
	since uint64
	// hp and ap are the level's positions in core.byPrio and core.byAge while it is
	// active, none otherwise.
	hp, ap int32
	parked bool
}

// core is the queue's state machine: dedup, priorities with aging, fairness lanes, and
// the delay schedule (schedule.go).
// It is not safe for concurrent use and calls no user code; Queue wraps it in a mutex.
// Every method requires the caller to hold that mutex.
//
// Invariants:
//   - an item is in idx iff it has an entry; an entry is live iff it is queued, in
//     flight or scheduled (dat != 0), and is otherwise cached (st == stCached,
//     with one valid element in cacheQ, or in dying if dying); live == idx.n - cached -
//     ndying;
//   - a cacheQ element is valid iff its entry is stCached with prev == its seq; elements
//     are in the order their entries were cached, and len(cacheQ) <= 2·cached + compactMin;
//   - sched holds exactly one valid element per entry with dat != 0 (see schedule);
//   - cached <= keep + evictBatch: finished items are remembered up to the configured
//     number, least recently finished evicted first; none when keep < 0;
//   - ready == number of stQueued entries == sum of levels[i].n == sum of lane n;
//   - inflight == number of stProcessing + stRedirty entries, redirty == number of stRedirty;
//   - byPrio and byAge hold exactly the active levels, which are the non-empty ones and,
//     when it is the only one, one that lingers empty (see dropLevel), one per priority:
//     byPrio is a heap with the highest priority on top, byAge one with the
//     lowest since on top (ties to the higher priority). levelAt maps the priority of
//     every active or parked level to its index; parked lists the parked levels, at
//     most parkMax, least recently parked first.
type core[T comparable] struct {
	idx  index
	seed maphash.Seed // hashes items for idx
	// pages hold the entries, pageSize each, so that growing allocates one page at a time
	// (no copying, and at most one page of slack); nslots slots have been handed out.
	pages  []*[pageSize]entry[T]
	nslots int32
	// free holds the free slots, most recently freed last. A stack rather than a list
	// threaded through the entries: taking a slot then reads this array, not the freed
	// entry, which is usually in another processor's cache.
	free []int32

	stamps   []stamp // parallel to slots when timing is on, nil otherwise
	bins     *bins   // the histograms of a Binned Metrics (timing is then on), or nil
	timing   bool
	oldest   int32 // in-flight list head (earliest handed out)
	newest   int32 // in-flight list tail
	startSum int64 // sum of started stamps of in-flight entries, when timing

	lanes    []lane
	freeLane int32
	// keyLanes, prioLanes and pairLanes hold every allocated lane but lane 0: those of
	// priority 0 in keyLanes, by fairness key, those of no key in prioLanes, by priority
	// (a map of strings or of ints hashes and compares a key at about half the cost of a
	// struct key: a distinct priority per item makes a lane per item), the others in
	// pairLanes.
	keyLanes  map[string]int32
	prioLanes map[int]int32
	pairLanes map[laneKey]int32
	lastLane  int32 // the lane acquire found or made last (maybe freed since)
	// levels are the levels by index, active, parked or free (listed in freeLevels); see
	// level. Serving the highest priority and the longest-waiting level from heaps keeps
	// a handout O(log L) for L priorities waiting: with a distinct priority per item (a
	// deadline or a timestamp used as the priority), L is the number of items.
	levels     []level
	freeLevels []int32
	levelAt    map[int]int32
	byPrio     levelHeap
	byAge      levelHeap
	parked     []int32
	lastLevel  int32 // the level levelFor returned last (maybe freed since), or none

	sched schedule // pending delayed adds

	// table is the dedup fast path's table of published marks, read by adders without the
	// lock (nil until the first duplicate add), on a cache line of its own so that the
	// writes of lock holders to the fields around it do not evict it from the adders'
	// caches; markOf holds the marks by slot (nil for entries without one; shorter than
	// nslots until needed). See shared.go.
	_      [cacheLine]byte
	table  atomic.Pointer[marks[T]]
	_      [cacheLine - 8]byte
	markOf []*mark[T]

	touched uint64 // sink of touch, so that its reads are not optimized away

	ready    int
	inflight int
	redirty  int
	// reAdded says whether the last add applied found its item in flight (handed out,
	// Done not yet called): a worker adding the item it holds.
	reAdded bool

	keep   int // Config.KeepFinished after defaults; < 0 disables the cache
	cached int // stCached entries
	// sampled is set while the cache keeps only a sample (see cacheSample); hits and evicts
	// count its events in the current window.
	sampled      bool
	hits, evicts int
	// dying are the dying entries (see die), among stale elements; ndying counts them.
	// They are stCached but not counted in cached.
	dying  []cacheRef
	ndying int
	// cacheQ[cacheHead:] are the cached entries, least recently finished first, among
	// stale elements of entries revived (or released) since; see cacheRef.
	cacheQ    []cacheRef
	cacheHead int
	cacheSeq  int32 // sequence number of the next element (wraps)

	handouts uint64
	aging    uint64 // a level waiting through this many other handouts is served next

	// Memory give-back (see emptied): activations counts entries ever made live, high is
	// the highest live count since the containers were made, and the current epoch started
	// at activation epochStart with epochPeak its highest live count.
	activations uint64
	high        int
	epochStart  uint64
	epochPeak   int
}

func (c *core[T]) init(seed maphash.Seed, aging uint64, keep int, timing bool) {
	c.keep = keep
	c.seed = seed
	c.timing = timing
	c.oldest, c.newest = none, none
	c.lanes = []lane{{head: none, tail: none, rrPrev: none, rrNext: none}}
	c.freeLane = none
	c.keyLanes = make(map[string]int32)
	c.prioLanes = make(map[int]int32)
	c.pairLanes = make(map[laneKey]int32)
	c.levelAt = make(map[int]int32)
	c.lastLevel = none
	c.byAge.age = true
	c.aging = aging
}

// --- slots ---

const (
	pageBits = 10
	pageSize = 1 << pageBits
)

// e returns the entry in slot s.
func (c *core[T]) e(s int32) *entry[T] {
	return &c.pages[s>>pageBits][s&(pageSize-1)]
}

// alloc makes an idle entry for item, which is absent from idx; tag and pos are what the
// failed lookup of item used and returned.
func (c *core[T]) alloc(item T, tag uint32, pos int) int32 {
	var s int32
	if n := len(c.free); n > 0 {
		s = c.free[n-1]
		c.free = c.free[:n-1]
	} else {
		if int(c.nslots) >= maxSlots {
			panic("workqueue: more than 2^31-1 items")
		}
		s = c.nslots
		if int(s)>>pageBits == len(c.pages) {
			c.pages = append(c.pages, new([pageSize]entry[T]))
		}
		c.nslots++
		if c.timing {
			c.stamps = append(c.stamps, stamp{})
		}
	}
	e := c.e(s)
	*e = entry[T]{item: item, dlane: none, prev: none, next: none, tag: tag}
	e.set(stIdle, none)
	c.idx.put(tag, pos, s)
	c.activated()
	c.cacheMiss(tag)
	return s
}

// cacheMiss counts the add of an item the cache does not hold (tag is its tag) as a
// miss, when the cache holds at least a window of entries and is under its limit. At
// the limit every such add evicts an entry, which is counted already; under it nothing
// would be counted, and a stream of distinct items with a KeepFinished far above the
// load would keep every one of them, never switching to the sample. In sampled mode
// only the sample's items count (see cacheSample).
func (c *core[T]) cacheMiss(tag uint32) {
	if c.keep <= 0 || c.cached >= c.cacheLimit() {
		return
	}
	if c.sampled {
		if tag%cacheSample == 0 && c.cached >= cacheWindow/cacheSample {
			c.cacheEvent(0, 1)
		}
	} else if c.cached >= cacheWindow {
		c.cacheEvent(0, 1)
	}
}

// live returns the number of live (not cached) entries.
func (c *core[T]) live() int { return c.idx.n - c.cached - c.ndying }

// activated records that an entry became live.
func (c *core[T]) activated() {
	c.activations++
	if n := c.live(); n > c.epochPeak {
		c.epochPeak = n
		if n > c.high {
			c.high = n
		}
	}
}

// revive makes a cached entry live again (idle, to be queued or delayed by the caller).
func (c *core[T]) revive(e *entry[T]) {
	if e.next != dyingMark { // hits on the sample only: see cacheSample
		c.cacheEvent(1, 0)
	}
	c.uncacheEntry(e)
	c.activated()
	c.maybeCompact()
}

// cacheRef is an element of the cache queue: a cached entry's slot and the sequence number
// it was cached with. Reviving an entry leaves its element in the queue, stale, instead of
// unlinking it from a list (which would touch two other entries): an element is valid iff
// its entry is still cached with the same number. A number is reused only after 2^32
// elements; a stale element taken for valid merely evicts a cached entry early.
type cacheRef struct {
	slot, seq int32
}

// compactMin is the number of stale cache elements always tolerated before compacting.
const compactMin = 64

// cachedWith reports whether r is a valid cache element.
func (c *core[T]) cachedWith(r cacheRef) bool {
	e := c.e(r.slot)
	return e.state() == stCached && e.prev == r.seq
}

// uncache makes a cached entry idle; its cache element becomes stale.
func (c *core[T]) uncache(s int32) { c.uncacheEntry(c.e(s)) }

// uncacheEntry is uncache of the entry itself.
func (c *core[T]) uncacheEntry(e *entry[T]) {
	if e.next == dyingMark {
		c.ndying--
	} else {
		c.cached--
	}
	e.prev, e.next = none, none
	e.setState(stIdle)
}

// maybeCompact compacts the cache queue when stale and taken elements are the majority.
func (c *core[T]) maybeCompact() {
	if len(c.cacheQ) > 2*c.cached+compactMin {
		c.compactCache()
	}
}

// compactCache drops the stale and taken elements of the cache queue. It removes more than
// half of the elements it reads, each pushed once, so its cost is O(1) amortized per push.
func (c *core[T]) compactCache() {
	q := c.cacheQ[:0]
	for _, r := range c.cacheQ[c.cacheHead:] {
		if c.cachedWith(r) {
			q = append(q, r)
		}
	}
	clear(c.cacheQ[len(q):])
	c.cacheQ = q
	c.cacheHead = 0
}

// retire handles an entry that is neither queued nor in flight any more: it stays live if a
// delayed add is pending; otherwise it is cached, evicting the least recently finished
// entries beyond the bound, or freed when the cache is off.
func (c *core[T]) retire(s int32, e *entry[T]) {
	if e.dat != 0 {
		e.setState(stIdle)
		return
	}
	if c.keep < 0 {
		c.release(s)
		if c.live() == 0 {
			c.emptied()
		}
		return
	}
	if c.sampled && e.tag%cacheSample != 0 {
		c.die(s)
		if c.cached > 0 {
			c.trimCache()
		}
		if c.live() == 0 {
			c.emptied()
		}
		return
	}
	e.setState(stCached)
	e.next = none
	e.prev = c.cacheSeq
	c.cacheQ = append(c.cacheQ, cacheRef{slot: s, seq: c.cacheSeq})
	c.cacheSeq++
	c.cached++
	c.trimCache()
	c.maybeCompact()
	if c.live() == 0 {
		c.emptied()
	}
}

// cacheLimit is the number of finished items the cache keeps: the configured number, or a
// cacheSample-th of it in sampled mode. It is not raised to the peak load: an entry kept
// that long is out of the processor's caches when its item comes back, and reviving it
// (a cold index bucket and a cold entry) then costs more than dropping it at its Done and
// inserting it again (a cold bucket, and an entry from the free slots, which are warm).
// With 100,000 items cycling, keeping them all made Add/Get/Done about 15% slower.
func (c *core[T]) cacheLimit() int {
	if !c.sampled {
		return c.keep
	}
	return c.keep / cacheSample
}

// trimCache evicts the least recently finished entries while the cache is more than
// evictBatch over its limit.
func (c *core[T]) trimCache() {
	for limit := c.cacheLimit(); c.cached > limit+evictBatch; {
		c.evict(min(c.cached-limit, evictBatch+1)) // one batch: the cache grows by one at a time
	}
}

// The cache pays when finished items come back: a hit saves an insert into the index and a
// delete later, while an entry evicted unused costs more than one released at once (it is
// read again, cold, to be dropped). So the cache watches its hit rate, in windows of
// cacheWindow events (hits, and evictions or, under the limit, misses: see cacheMiss): below 1 in 8 it switches to sampled mode, where
// it keeps only the items whose tag is a multiple of cacheSample, up to a cacheSample-th
// of its limit (so the sample reaches back as far as the full cache would), and releases the
// others when they finish; when the sample's hit rate reaches 1 in 4 the cache keeps every
// finished item again.
const (
	cacheSample = 16
	cacheWindow = 1024
)

// cacheEvent counts a hit or evictions and switches modes at the end of a window.
func (c *core[T]) cacheEvent(hits, evicts int) {
	c.hits += hits
	c.evicts += evicts
	total := c.hits + c.evicts
	if total < cacheWindow {
		return
	}
	switch {
	case !c.sampled && 8*c.hits < total:
		c.sampled = true
	case c.sampled && 4*c.hits >= total:
		c.sampled = false
	}
	c.hits, c.evicts = 0, 0
}

// dyingMark in the next field of a cached entry says that it is dying: out of the sample
// in sampled mode, held in core.dying only until a batch of them is released.
const dyingMark = -2

// die caches entry s as dying; once evictBatch+1 entries are dying, they are released
// together, which overlaps the cache misses of their index buckets (a bucket was last
// touched when the item was added, usually long ago and on another processor).
func (c *core[T]) die(s int32) {
	e := c.e(s)
	e.setState(stCached)
	e.next = dyingMark
	e.prev = c.cacheSeq
	c.dying = append(c.dying, cacheRef{slot: s, seq: c.cacheSeq})
	c.cacheSeq++
	c.ndying++
	if len(c.dying) > evictBatch {
		c.releaseDying()
	}
}

// releaseDying releases the dying entries.
func (c *core[T]) releaseDying() {
	var slots [evictBatch + 1]int32
	var tags [evictBatch + 1]uint32
	n := 0
	for _, r := range c.dying {
		if c.cachedWith(r) {
			slots[n] = r.slot
			tags[n] = c.e(r.slot).tag
			n++
		}
	}
	c.dying = c.dying[:0]
	var acc uint64
	for i := range n {
		acc |= c.idx.b[c.idx.home(tags[i])]
	}
	c.touched = acc
	for i := range n {
		c.uncache(slots[i])
		c.releaseTag(slots[i], tags[i])
	}
}

// evictBatch is how far the cache may exceed its limit before it is cut back to it. Evicting
// an entry costs several cache misses in a large queue (the entry, its item's bytes to
// hash, its index bucket); evicting in batches lets the processor overlap them.
const evictBatch = 32

// evict releases the n <= evictBatch+1 least recently finished cached entries.
func (c *core[T]) evict(n int) {
	var slots [evictBatch + 1]int32
	var tags [evictBatch + 1]uint32
	for i := 0; i < n; c.cacheHead++ { // the entries are read in parallel
		if r := c.cacheQ[c.cacheHead]; c.cachedWith(r) {
			slots[i] = r.slot
			tags[i] = c.e(r.slot).tag
			i++
		}
	}
	var acc uint64
	for i := range n { // independent: their buckets are fetched in parallel
		acc |= c.idx.b[c.idx.home(tags[i])]
	}
	c.touched = acc
	for i := range n {
		c.uncache(slots[i])
		c.releaseTag(slots[i], tags[i])
	}
	c.cacheEvent(0, n)
}

// dropCache forgets every cached entry.
func (c *core[T]) dropCache() {
	for _, r := range c.cacheQ[c.cacheHead:] {
		if c.cachedWith(r) {
			c.uncache(r.slot)
			c.release(r.slot)
		}
	}
	c.cacheQ, c.cacheHead = nil, 0
	c.releaseDying()
	c.dying = nil
}

// release frees an idle entry.
func (c *core[T]) release(s int32) { c.releaseTag(s, c.e(s).tag) }

// releaseTag frees an idle entry whose item's tag is tag.
func (c *core[T]) releaseTag(s int32, tag uint32) {
	if e := c.e(s); e.mk != mkNone {
		c.dropMark(s, e)
	}
	c.idx.del(tag, s)
	*c.e(s) = entry[T]{dlane: none, prev: none, next: none}
	c.free = append(c.free, s)
}

// emptied runs when the last live entry is gone; it gives memory back when the containers are
// far larger than the recent load needs. Time is measured in allocations: an epoch ends at
// the first empty moment after 4·high allocations, and if the epoch's peak was below a
// quarter of high (and high is at least shrinkMin), the containers are made anew. So a queue
// whose load is stable never reallocates, one whose load fell keeps O(recent peak) memory,
// and the cost of rebuilding is amortized over at least 4·high operations.
func (c *core[T]) emptied() {
	if c.activations-c.epochStart < 4*uint64(c.high) {
		return
	}
	if c.high >= shrinkMin && 4*c.epochPeak < c.high {
		c.cached, c.ndying = 0, 0
		c.cacheQ, c.cacheHead = nil, 0
		c.dying = nil
		c.idx = index{}
		c.pages = nil
		c.nslots = 0
		if c.timing {
			c.stamps = nil
		}
		c.free = nil
		c.lanes = []lane{c.lanes[0]}
		c.freeLane = none
		c.keyLanes = make(map[string]int32)
		c.prioLanes = make(map[int]int32)
		c.pairLanes = make(map[laneKey]int32)
		c.levels, c.freeLevels = nil, nil // no level is active
		c.byPrio, c.byAge = levelHeap{}, levelHeap{age: true}
		c.levelAt = make(map[int]int32)
		c.parked, c.lastLevel = nil, none
		c.sched = schedule{seq: c.sched.seq} // only stale elements are left
		c.dropMarks()
		c.high = c.epochPeak
	}
	c.epochStart = c.activations
	c.epochPeak = 0
}

// --- lanes ---

// acquire returns the lane for (prio, key), creating it, and takes a reference on it.
func (c *core[T]) acquire(prio int, key string) int32 {
	if prio == 0 && key == "" {
		c.lanes[0].refs++
		return 0
	}
	// Adds come in runs of one priority and key (an informer's initial list at a
	// background priority, a namespace's objects): try the last lane first.
	if l := c.lastLane; int(l) < len(c.lanes) {
		if ln := &c.lanes[l]; ln.refs > 0 && ln.prio == prio && ln.key == key {
			ln.refs++
			return l
		}
	}
	k := laneKey{prio, key}
	var l int32
	var ok bool
	switch {
	case prio == 0:
		l, ok = c.keyLanes[key]
	case key == "":
		l, ok = c.prioLanes[prio]
	default:
		l, ok = c.pairLanes[k]
	}
	if ok {
		c.lanes[l].refs++
		c.lastLane = l
		return l
	}
	if c.freeLane != none {
		l = c.freeLane
		c.freeLane = c.lanes[l].rrNext
	} else {
		if len(c.lanes) >= maxLanes {
			panic("workqueue: more than 2^28-1 (priority, fairness key) pairs in use")
		}
		l = int32(len(c.lanes))
		c.lanes = append(c.lanes, lane{})
	}
	c.lanes[l] = lane{laneKey: k, head: none, tail: none, rrPrev: none, rrNext: none, refs: 1}
	switch {
	case prio == 0:
		c.keyLanes[key] = l
	case key == "":
		c.prioLanes[prio] = l
	default:
		c.pairLanes[k] = l
	}
	c.lastLane = l
	return l
}

// unref drops a lane reference and frees the lane when it was the last.
func (c *core[T]) unref(l int32) {
	ln := &c.lanes[l]
	ln.refs--
	if ln.refs == 0 && l != 0 {
		switch {
		case ln.prio == 0:
			delete(c.keyLanes, ln.key)
		case ln.key == "":
			delete(c.prioLanes, ln.prio)
		default:
			delete(c.pairLanes, ln.laneKey)
		}
		*ln = lane{rrNext: c.freeLane}
		c.freeLane = l
	}
}

func (c *core[T]) rrAppend(lv *level, l int32) {
	ln := &c.lanes[l]
	ln.rrNext = none
	ln.rrPrev = lv.rrTail
	if lv.rrTail != none {
		c.lanes[lv.rrTail].rrNext = l
	} else {
		lv.rrHead = l
	}
	lv.rrTail = l
}

func (c *core[T]) rrRemove(lv *level, l int32) {
	ln := &c.lanes[l]
	if ln.rrPrev != none {
		c.lanes[ln.rrPrev].rrNext = ln.rrNext
	} else {
		lv.rrHead = ln.rrNext
	}
	if ln.rrNext != none {
		c.lanes[ln.rrNext].rrPrev = ln.rrPrev
	} else {
		lv.rrTail = ln.rrPrev
	}
	ln.rrPrev, ln.rrNext = none, none
}

// push links entry s at the tail of lane l; the entry already holds a reference on l.
func (c *core[T]) push(s, l int32) {
	e := c.e(s)
	ln := &c.lanes[l]
	e.set(stQueued, l)
	e.next = none
	e.prev = ln.tail
	if ln.tail != none {
		c.e(ln.tail).next = s
	} else {
		ln.head = s
	}
	ln.tail = s
	ln.n++
	c.markWaiting(s, e)
	if ln.n == 1 {
		ln.level = c.levelFor(ln.prio)
		c.rrAppend(&c.levels[ln.level], l)
	}
	lv := &c.levels[ln.level]
	if lv.n == 0 { // it becomes non-empty (it may have lingered: see dropLevel)
		lv.since = c.handouts
		c.byAge.h[lv.ap].by = c.handouts
	}
	lv.n++
	c.ready++
}

// unlink removes queued entry s from its lane and returns the lane (the entry keeps its
// reference on it).
func (c *core[T]) unlink(s int32) int32 {
	e := c.e(s)
	l := e.lane()
	ln := &c.lanes[l]
	if e.prev != none {
		c.e(e.prev).next = e.next
	} else {
		ln.head = e.next
	}
	if e.next != none {
		c.e(e.next).prev = e.prev
	} else {
		ln.tail = e.prev
	}
	e.prev, e.next = none, none
	ln.n--
	li := ln.level
	lv := &c.levels[li]
	lv.n--
	if ln.n == 0 {
		c.rrRemove(lv, l)
	}
	if lv.n == 0 {
		c.dropLevel(li)
	}
	c.ready--
	return l
}

// --- adds ---

// enqueue applies an add of slot s into lane l (whose reference the caller hands over).
// It reports whether the item became pending (it was neither queued nor due to be
// re-queued before), which is what the metrics count as an add.
func (c *core[T]) enqueue(s, l int32, now int64) bool {
	e := c.e(s)
	st := e.state()
	c.reAdded = st == stProcessing || st == stRedirty
	switch st {
	case stIdle:
		c.push(s, l)
		if c.timing {
			c.stamps[s].added = now
		}
		return true
	case stQueued:
		if c.lanes[l].prio > c.lanes[e.lane()].prio {
			old := c.unlink(s)
			c.unref(old)
			c.push(s, l) // keeps its added stamp: it has been pending all along
		} else {
			c.unref(l)
		}
		return false
	case stProcessing:
		e.set(stRedirty, l)
		c.markWaiting(s, e)
		c.redirty++
		if c.timing {
			c.stamps[s].added = now
		}
		return true
	default: // stRedirty
		if c.lanes[l].prio > c.lanes[e.lane()].prio {
			c.unref(e.lane())
			e.set(stRedirty, l)
			c.markWaiting(s, e)
		} else {
			c.unref(l)
		}
		return false
	}
}

// add marks item as needing processing at priority prio in fairness lane key.
// tag is tagOf(item).
func (c *core[T]) add(item T, tag uint32, prio int, key string, now int64) bool {
	s, pos := c.lookup(item, tag)
	if s == none {
		s = c.alloc(item, tag, pos)
	} else if e := c.e(s); e.state() == stCached {
		c.revive(e)
	} else if (e.state() == stQueued || e.state() == stRedirty) && prio <= c.lanes[e.lane()].prio {
		c.reAdded = e.state() == stRedirty
		if e.mk != mkPublished {
			c.publish(s) // so that the next duplicates need no lock
		}
		return false // the common duplicate: nothing to change
	}
	return c.enqueue(s, c.acquire(prio, key), now)
}

// touch reads the home buckets of a batch of staged adds before they are applied. The reads
// are independent, so the processor overlaps their cache misses, and the lookups that follow
// mostly find their buckets in cache: in a large table this is most of their cost.
// The entries of the free slots that new items will take are read too: they were last
// written by whoever freed them, often on another processor.
func (c *core[T]) touch(buf []staged[T]) {
	var acc uint64
	for _, s := range c.free[max(len(c.free)-len(buf), 0):] {
		acc |= uint64(c.e(s).ls)
	}
	if x := &c.idx; len(x.b) > 0 {
		for i := range buf {
			acc |= x.b[x.home(buf[i].tag)]
		}
	}
	c.touched = acc
}

// --- handing out ---

// pickLevel chooses the level to serve: the highest priority, unless the level that has
// waited longest has waited through aging handouts of other levels, in which case that one.
// Ties in waiting go to the higher priority.
func (c *core[T]) pickLevel() int32 {
	top := c.byPrio.h[0].l
	if len(c.byPrio.h) == 1 {
		return top
	}
	if old := &c.byAge.h[0]; c.handouts-old.by >= c.aging {
		return old.l
	}
	return top
}

// pop hands out the next item and returns its slot and how long it waited (0 without
// timing). It requires ready > 0.
func (c *core[T]) pop(now int64) (int32, int64) {
	li := c.pickLevel()
	lv := &c.levels[li]
	l := lv.rrHead
	ln := &c.lanes[l]
	s := ln.head
	e := c.e(s)
	ln.head = e.next
	if ln.head != none {
		c.e(ln.head).prev = none
	} else {
		ln.tail = none
	}
	ln.n--
	lv.n--
	c.ready--
	if ln.n == 0 {
		c.rrRemove(lv, l)
	} else if lv.rrHead != lv.rrTail { // another key waits: this one goes to the back
		c.rrRemove(lv, l)
		c.rrAppend(lv, l)
	}
	c.handouts++
	if lv.n == 0 {
		c.dropLevel(li)
	} else {
		lv.since = c.handouts // the latest: its place in byAge is at the bottom
		c.byAge.h[lv.ap].by = c.handouts
		if len(c.byAge.h) > 1 {
			c.byAge.down(c.levels, int(lv.ap))
		}
	}
	c.markIdle(s, e)
	e.set(stProcessing, none)
	e.prev, e.next = none, none
	c.unref(l)
	c.inflight++
	e.prev = c.newest
	if c.newest != none {
		c.e(c.newest).next = s
	} else {
		c.oldest = s
	}
	c.newest = s
	var waited int64
	if c.timing {
		st := &c.stamps[s]
		waited = now - st.added
		st.started = now
		c.startSum += now
		if c.bins != nil {
			c.bins.observe(&c.bins.stats.Waited, waited)
		}
	}
	return s, waited
}

// scanMax is how many of the most recently handed out items done compares with its item
// (a few cache-resident comparisons, no hashing) before it looks the item up in the index.
// Workers usually finish the item they took last; with many workers finishing in any
// order, walking further would cost more than the lookup.
const scanMax = 4

// findInFlight returns the slot of item if it is in flight, or none.
func (c *core[T]) findInFlight(item T) int32 {
	s := c.newest
	for range scanMax {
		if s == none {
			return none // the whole in-flight list was walked
		}
		e := c.e(s)
		if e.item == item {
			return s
		}
		s = e.prev
	}
	if s == none {
		return none
	}
	s = c.find(item)
	if s == none {
		return none
	}
	if st := c.e(s).state(); st != stProcessing && st != stRedirty {
		return none
	}
	return s
}

// finish ends the processing of in-flight entry s (as found by findInFlight) and returns
// how long it was processed (0 without timing).
func (c *core[T]) finish(s int32, now int64) int64 {
	e := c.e(s)
	var worked int64
	if c.timing {
		started := c.stamps[s].started
		worked = now - started
		c.startSum -= started
		if c.bins != nil {
			c.bins.observe(&c.bins.stats.Worked, worked)
		}
	}
	if e.prev != none {
		c.e(e.prev).next = e.next
	} else {
		c.oldest = e.next
	}
	if e.next != none {
		c.e(e.next).prev = e.prev
	} else {
		c.newest = e.prev
	}
	e.prev, e.next = none, none
	c.inflight--
	if e.state() == stRedirty {
		c.redirty--
		c.push(s, e.lane()) // pending since its re-add: keep that stamp
		return worked
	}
	c.retire(s, e)
	return worked
}

// inFlight reports the in-flight count, their summed processing time and the longest.
func (c *core[T]) inFlight(now int64) (int, int64, int64) {
	if c.inflight == 0 || !c.timing {
		return c.inflight, 0, 0
	}
	total := int64(c.inflight)*now - c.startSum
	longest := now - c.stamps[c.oldest].started
	return c.inflight, total, longest
}
