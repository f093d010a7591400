package workqueue

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// ErrShutDown is returned by Get once the queue is shut down and has nothing left to hand
// out.
var ErrShutDown = errors.New("workqueue: queue is shut down")

// ErrDrainAborted is returned, wrapped with the work left, by ShutDownWithDrain when a call
// of ShutDown (during the drain or before it) ends the wait while work is left.
var ErrDrainAborted = errors.New("workqueue: drain ended by ShutDown")

// Defaults for Config fields left zero.
const (
	DefaultAgingLimit   = 64
	DefaultKeepFinished = 16384
)

// Config configures a Queue. The zero value is a plain FIFO queue with client-go's default
// rate limiter, no fairness keys and no metrics.
type Config[T comparable] struct {
	// RateLimiter decides the delay of AddRateLimited and keeps the failure counts behind
	// NumRequeues and Forget. Nil means DefaultRateLimiter[T]().
	RateLimiter RateLimiter[T]

	// FairnessKey, if set, groups items (for example by namespace): among items of equal
	// priority, groups take turns, one item per turn, in the order they became non-empty.
	// It is called once per add (except for an add found to be a duplicate before the
	// queue's lock is taken), outside the queue's lock, and must be deterministic and safe
	// for concurrent use. Nil puts every item in one group.
	FairnessKey func(T) string

	// AgingLimit bounds how long items of a lower priority wait while higher priorities are
	// served: a priority level with waiting items that has seen AgingLimit items of other
	// levels handed out since it was last served (or became non-empty) is served next. Zero
	// or negative means DefaultAgingLimit.
	AgingLimit int

	// Metrics, if set, receives the queue's events; see Metrics. Nil costs nothing: no
	// timestamps are taken.
	Metrics Metrics

	// KeepFinished is how many finished items (Done, nothing pending) the queue keeps
	// indexed, least recently finished dropped first, so that adding one again costs one
	// hash lookup instead of an insert now and a delete at its next Done. The queue drops
	// the oldest in batches once it keeps 32 more than KeepFinished. The limit does not
	// grow with the load: an item finished that many items ago is out of the processor's
	// caches, and reviving its entry costs more than inserting it anew. A kept
	// item costs about 75 bytes plus whatever its value keeps reachable (a pointer item
	// keeps its object alive until dropped). Zero means DefaultKeepFinished; negative keeps
	// none.
	//
	// Keeping costs more than it saves when finished items rarely come back (a stream of
	// distinct items), so the queue watches the share of kept items that are added again
	// before being dropped (while it keeps fewer than KeepFinished, and at least 1024, an
	// add of an item it does not keep counts as one dropped): below 1 in 8 (over 1024
	// such events), it keeps only a sample,
	// one item in 16 chosen by hash, up to a sixteenth of the limit (so the sample reaches
	// as far back as the full cache), and drops the others at once, in batches of 33; when
	// the sample's share reaches 1 in 4 it keeps every finished item again.
	KeepFinished int
}

// AddOptions qualify an AddWithOptions.
type AddOptions struct {
	// Delay postpones the add; zero or negative adds at once.
	Delay time.Duration
	// Priority orders waiting items: higher first, FIFO (or round-robin between fairness
	// keys) among equal priorities. Default 0; negative values are allowed.
	Priority int
	// RateLimited also asks the RateLimiter (recording a failure) and waits for the longer
	// of its answer and Delay.
	RateLimited bool
}

// Queue is a work queue of comparable items: deduplicating, with delays, per-item rate
// limiting, priorities with aging, and fairness between keys. See the package doc for the
// guarantees.
//
// A Queue must be created with New; the zero Queue is not usable. All methods are safe for
// concurrent use. Add, Get and Done cost O(1) hash-table operations plus O(log L) for L
// distinct priorities waiting (a priority of its own per item makes L the number of items
// waiting). Add appends the item to a small buffer under a lock of its own and
// returns; the next Get, Done or Len applies the buffered adds, in order, before anything
// else (and an Add while a Get waits applies them itself), so an Add takes effect when it
// is made as far as any caller can tell, and adders hardly contend with workers. AddAfter and AddRateLimited also only append to a staging buffer
// under a lock of their own; staged items are moved into the queue in batches (by a Get
// that finds nothing ready, by the timer's firing, or by the adder once several buffers
// are full), so scheduling hardly contends with Get and Done. Deadlines up to about 33ms
// ahead go into a timing wheel of 65µs buckets, costing O(1) to schedule and a share of
// one sort of a small bucket to fire; later ones wait in a heap, O(log n), until they come
// that close. Memory is O(items held, scheduled and kept, see Config.KeepFinished) and is
// given back when the queue runs empty after a peak far above its recent load.
type Queue[T comparable] struct {
	// The fields come in groups, each on cache lines of its own (see the pads), so that
	// adders writing the staging buffer and workers taking mu do not pull each other's
	// lines back and forth.

	mu sync.Mutex
	// c is the state machine; guarded by mu.
	c core[T]
	// waiters are blocked Gets, most recent last, with nil holes where a Get gave up
	// waiting (its context ended): removing one costs O(1) however many wait. holes counts
	// the nil entries (never the last one), nwaiting the others; see removeWaiterLocked.
	// woken counts the Gets woken by dispatchLocked (removed from waiters) that have not
	// taken mu again since. Invariant: nwaiting > 0 only while c.ready <= woken and the
	// queue is not exhausted.
	waiters  []*waiter[T]
	nwaiting int
	holes    int
	woken    int
	// shut is set once by ShutDown or ShutDownWithDrain; guarded by mu. shutFlag mirrors it
	// for lock-free early exits.
	shut bool
	// idle, once made by ShutDownWithDrain, is closed when the queue is shut down with
	// nothing ready and nothing in flight. idleClosed records that.
	idle       chan struct{}
	idleClosed bool
	// forced is set by the first call of ShutDown (not by ShutDownWithDrain): drains no
	// longer wait. abort, once made by a waiting ShutDownWithDrain, is closed when forced
	// is set. Invariant: abort is closed iff it is non-nil and forced.
	forced bool
	abort  chan struct{}
	// spareAdds is an emptied adds buffer kept for reuse. applied counts the adds applied
	// (with metrics) that made items pending, for unlock to report.
	spareAdds []staged[T]
	applied   int
	// wake[:nwake] are waiters woken under mu whose wake-up unlock sends once mu is
	// released, so that the lock is not held while the scheduler readies them.
	wake  [wakeMax]*waiter[T]
	nwake int
	// watches are the contexts whose end wakes the Gets waiting with them, and
	// lastDone the Done channel of the last Get that waited without a watch (see
	// ctxwatch.go). Guarded by mu.
	watches  []ctxWatch
	lastDone <-chan struct{}
	// misses counts the single adds in a row that found their items not in flight and
	// the queue not empty, empties those that found it empty (see noteAdds).
	misses, empties int

	_ [cacheLine]byte

	// Set in New (shutFlag: once, at shut-down; delays: once, by the first delayed add) and
	// read without a lock by every add (and delays by Get).
	shutFlag atomic.Bool
	delays   atomic.Bool
	// direct is set while adds mostly re-add items in flight or come one at a time into
	// an empty queue (see noteAdds); written
	// under mu when the mode changes, read by every Add.
	direct  atomic.Bool
	epoch   time.Time    // origin of the monotonic clock used for deadlines and stamps
	seed    maphash.Seed // q.c.seed (itemSeed), for adders that hash items before taking a lock
	limiter RateLimiter[T]
	clk     clocked[T] // limiter, if it is a built-in one; nil otherwise
	keyOf   func(T) string
	metrics Metrics
	binned  bool // metrics is Binned: the core counts adds and bins durations (q.c.bins)

	_ [cacheLine]byte

	// smu guards the staging buffer of delayed adds, sshut and the timer. Lock order:
	// fmu, then mu, then smu.
	smu   sync.Mutex
	stage []staged[T]
	// full holds staging buffers that filled up, oldest first, waiting to be moved into the
	// core; len(full) < maxFull. spares are emptied buffers kept for reuse.
	full   [][]staged[T]
	spares [][]staged[T]
	// stageMin is the earliest deadline in stage and full (math.MaxInt64 when empty).
	stageMin int64
	sshut    bool
	// nfull mirrors len(full), for Get to read without a lock.
	nfull atomic.Int32
	// timer fires the delayed adds. It is made on the first one, never runs after
	// ShutDown returns, and timerAt is the deadline it is set for (math.MaxInt64: unset).
	// Invariant: timerAt <= every pending deadline, staged or scheduled, unless the
	// firing that consumed it is still running (it re-arms before it ends). timerWG counts
	// scheduled or running firings.
	timer   *time.Timer
	timerAt int64
	timerWG sync.WaitGroup

	_ [cacheLine]byte

	// amu guards adds, the immediate adds staged by Add and the Dones staged by Done, not
	// yet applied to the core (oldest first; fewer than stageMax whenever no Add is
	// running), and ashut, set by ShutDown, after which adds are refused and Dones not
	// staged. Lock order: mu, then amu. See addNow and stageDone. It is held for a few
	// nanoseconds by every Add and by Dones and Gets: a spinLock, so that workers and
	// producers that find it taken do not park (see spinlock.go).
	amu   spinLock
	adds  []staged[T]
	ashut bool
	// nwait counts the Gets in waiters plus those about to wait: a Get counts itself
	// before it looks at nadds a last time, and an adder reads nwait after staging, so
	// that one of the two sees the other and no item is staged while a Get sleeps.
	nwait atomic.Int32

	_ [cacheLine]byte

	// nadds is 0 iff adds is empty, for lock holders to read without amu. It is written
	// only when that changes: an atomic store is a full fence, one per batch rather than
	// one per add. staged has bit tag%64 set for the tag of every add in adds (and maybe
	// more); written under amu, read without it by Done (see Done). Both are read by every
	// Get and Done, and written by adders far less often than amu and adds, which every
	// add writes: a line of their own spares the readers a cache miss per add.
	nadds  atomic.Int32
	staged atomic.Uint64

	_ [cacheLine]byte

	// fmu serializes moving staged items into the core (a drain or a firing).
	fmu  sync.Mutex
	pool sync.Pool // of *waiter[T]
}

// cacheLine is the size of padding that keeps field groups on separate cache lines.
const cacheLine = 64

// staged is an add (delayed or immediate), or a Done, not yet applied to the core.
type staged[T comparable] struct {
	item T
	at   int64
	prio int
	key  string
	tag  uint32 // tagOf(item), computed by the adder outside the locks
	done bool   // not an add but a Done of item (see Done)
}

// stageMax is the size of a staging buffer. A full one waits (in Queue.full) to be moved
// into the core by a Get that finds nothing ready, so that an idle worker does that work,
// on its own processor, instead of the adder; the firing of the timer takes the full
// buffers too. When maxFull buffers wait, the adder moves them itself, which bounds the
// memory held by staged adds.
const (
	stageMax = 256
	maxFull  = 8
)

// waiter is a blocked Get. The waking goroutine sets res under the queue's lock and then
// sends on ch.
type waiter[T comparable] struct {
	ch  chan struct{} // capacity 1; receives exactly one wake-up per wait
	pos int           // its index in Queue.waiters while it waits there
	res uint8
	// done is the Done channel of the Get's context when the queue watches it (the
	// watch wakes w when it ends), nil when the Get selects on it itself.
	done <-chan struct{}
}

const (
	resWaiting uint8 = iota
	resReady         // items are ready: look again
	resShutDown
	resCanceled // the context w.done belongs to ended
)

// New returns an empty queue configured by cfg. It starts no goroutine.
func New[T comparable](cfg Config[T]) *Queue[T] {
	q := &Queue[T]{
		timerAt:  math.MaxInt64,
		stageMin: math.MaxInt64,
		epoch:    time.Now(),
		limiter:  cfg.RateLimiter,
		keyOf:    cfg.FairnessKey,
		metrics:  cfg.Metrics,
	}
	if q.limiter == nil {
		q.limiter = DefaultRateLimiter[T]()
	}
	q.clk, _ = q.limiter.(clocked[T])
	aging := cfg.AgingLimit
	if aging <= 0 {
		aging = DefaultAgingLimit
	}
	keep := cfg.KeepFinished
	if keep == 0 {
		keep = DefaultKeepFinished
	}
	q.seed = itemSeed
	q.c.init(q.seed, uint64(aging), keep, cfg.Metrics != nil)
	if q.metrics != nil {
		q.metrics.Attach(q.inFlight)
	}
	if b, ok := q.metrics.(Binned); ok {
		q.c.bins = newBins(b.Bounds())
		q.binned = true
		b.AttachStats(q.stats)
	}
	return q
}

// now reads the queue's monotonic clock in nanoseconds.
func (q *Queue[T]) now() int64 { return int64(time.Since(q.epoch)) }

func (q *Queue[T]) key(item T) string {
	if q.keyOf == nil {
		return ""
	}
	return q.keyOf(item)
}

// Add marks item as needing processing, at priority 0. An item already waiting is not added
// twice; an item being processed is handed out again after its Done. After shut-down Add
// does nothing.
//
// An Add of an item that waits (at priority 0 or higher) and was added twice while waiting
// before costs one hash of the item and a few atomic loads: no lock, no write to memory
// other processors read, and no call of Config.FairnessKey.
func (q *Queue[T]) Add(item T) {
	tag := tagOf(q.seed, item)
	if q.c.waiting(item, tag, 0) {
		return // a duplicate, found without the lock (see shared.go)
	}
	q.addNow(item, tag, 0, q.key(item), false)
}

// AddAfter adds item once d has passed (at once if d <= 0). If the item is already
// scheduled, the earlier deadline wins. After shut-down it does nothing, and pending
// delayed adds are dropped at shut-down.
func (q *Queue[T]) AddAfter(item T, d time.Duration) {
	if q.shutFlag.Load() {
		return
	}
	tag := tagOf(q.seed, item)
	if d <= 0 {
		q.addNow(item, tag, 0, q.key(item), true)
		return
	}
	q.addDelayed(item, tag, d, q.now(), 0, q.key(item), true)
}

// AddRateLimited records a failure of item with the RateLimiter and adds it after the
// delay the limiter returns. After shut-down it does nothing (and records nothing).
func (q *Queue[T]) AddRateLimited(item T) {
	if q.shutFlag.Load() {
		return
	}
	tag := tagOf(q.seed, item)
	now := q.now()
	q.addDelayed(item, tag, q.when(item, tag, now), now, 0, q.key(item), true)
}

// when asks the rate limiter for item's delay; tag is tagOf(item) and now the current
// time on the queue's clock.
func (q *Queue[T]) when(item T, tag uint32, now int64) time.Duration {
	if q.clk != nil {
		return q.clk.whenAt(item, tag, q.epoch.Add(time.Duration(now)))
	}
	return q.limiter.When(item)
}

// AddWithOptions adds item with a delay, a priority, rate limiting, or all three. If the
// item is already waiting or scheduled, the highest priority and the earliest deadline of
// the coalesced adds apply.
func (q *Queue[T]) AddWithOptions(item T, opts AddOptions) {
	if q.shutFlag.Load() {
		return
	}
	d := opts.Delay
	tag := tagOf(q.seed, item)
	var now int64
	if opts.RateLimited || d > 0 {
		now = q.now()
	}
	if opts.RateLimited {
		d = max(d, q.when(item, tag, now))
	}
	if d > 0 || opts.RateLimited {
		q.addDelayed(item, tag, d, now, opts.Priority, q.key(item), true)
		return
	}
	if q.c.waiting(item, tag, opts.Priority) {
		return
	}
	q.addNow(item, tag, opts.Priority, q.key(item), false)
}

// Forget clears the item's failure history in the RateLimiter. Call it when an item
// succeeded or you give up on it; it does not remove the item from the queue.
func (q *Queue[T]) Forget(item T) { q.limiter.Forget(item) }

// NumRequeues returns the item's failure count in the RateLimiter.
func (q *Queue[T]) NumRequeues(item T) int { return q.limiter.NumRequeues(item) }

// addNow adds item at once; tag is tagOf(item), computed outside the lock.
//
// The add is staged: appended to q.adds under amu, a lock held for a few nanoseconds,
// instead of applied to the core under mu, which Get and Done hold for longer. Whoever
// takes mu next applies the staged adds first, in order, before anything else (see
// applyAddsLocked), so an add takes effect at the moment it is staged, as far as anyone
// can observe. The adder applies them itself when the buffer is full, and when a Get waits
// (a waiting Get must be woken now) or, in direct mode (see noteAdds), when it finds mu
// free; in the last two cases it skips the staging.
func (q *Queue[T]) addNow(item T, tag uint32, prio int, key string, retried bool) {
	var at int64
	if q.metrics != nil {
		at = q.now()
	}
	stage := q.nwait.Load() == 0
	// In direct mode (see noteAdds) an add that finds mu free applies itself.
	held := stage && q.direct.Load() && q.mu.TryLock()
	if stage && !held {
		q.amu.Lock()
		if q.ashut {
			q.amu.Unlock()
			return
		}
		// The tag's bit is set before the add is appended: a Done that finds it clear
		// may take the add for one made after it.
		if bit := uint64(1) << (tag % 64); q.staged.Load()&bit == 0 {
			q.staged.Store(q.staged.Load() | bit)
		}
		q.adds = append(q.adds, staged[T]{item: item, at: at, prio: prio, key: key, tag: tag})
		n := len(q.adds)
		if n == 1 {
			q.nadds.Store(1)
		}
		q.amu.Unlock()
		if q.metrics != nil && retried {
			q.metrics.Retried()
		}
		if n < stageMax && q.nwait.Load() == 0 {
			return
		}
		q.mu.Lock()
		q.applyAddsLocked()
		q.unlock()
		return
	}
	if !held {
		q.mu.Lock()
	}
	if q.shut {
		q.unlock()
		return
	}
	q.applyAddsLocked()
	empty := q.c.ready == 0
	if q.c.add(item, tag, prio, key, at) && q.metrics != nil {
		q.applied++
	}
	if held {
		q.noteAdds(1, q.c.reAdded, empty)
	}
	q.dispatchLocked()
	q.unlock()
	if q.metrics != nil && retried {
		q.metrics.Retried()
	}
}

// applyAddsLocked applies the staged adds to the core, in the order they were staged, and
// hands items to waiting Gets. Every holder of mu calls it before looking at the core, and
// releases mu with unlock, which reports the adds to Metrics. Requires mu held.
func (q *Queue[T]) applyAddsLocked() {
	if q.nadds.Load() == 0 {
		return
	}
	q.amu.Lock()
	buf := q.adds
	q.adds, q.spareAdds = q.spareAdds, nil
	q.nadds.Store(0)
	q.staged.Store(0)
	q.amu.Unlock()
	q.c.touch(buf)
	adds, reAdds, empty := 0, 0, q.c.ready == 0
	for i := range buf {
		if buf[i].done {
			if s := q.c.findInFlight(buf[i].item); s != none {
				q.c.finish(s, buf[i].at) // staged with Metrics only when Binned: see Done
			}
			continue
		}
		if q.c.add(buf[i].item, buf[i].tag, buf[i].prio, buf[i].key, buf[i].at) && q.metrics != nil {
			q.applied++
		}
		adds++
		if q.c.reAdded {
			reAdds++
		}
	}
	if adds > 0 {
		q.noteAdds(adds, 2*reAdds >= adds, empty)
	}
	clear(buf)
	q.spareAdds = buf[:0]
	if q.nwaiting > 0 {
		q.dispatchLocked()
	}
}

// noteAdds switches direct mode, in which an Add that finds mu free applies itself
// instead of staging. It is told of every batch of staged adds applied and of every
// direct add: n adds, reAdds set when at least half of them found their items in
// flight (workers adding the item they hold, before its Done), empty when the queue
// had no item ready before them. Re-adds turn the mode on, and so do directEmpties
// single adds in a row into an empty queue; a batch of more than one add that are
// mostly not re-adds turns it off, and so do directMisses single adds in a row into a
// queue with items ready. A worker's add then costs its Done no trip through the
// staging buffer (the Done would apply it first: it is an add of its own item), and
// adds that come one at a time, each taken before the next (the queue never holds
// more than one item: staging would batch nothing and cost its own lock and the next
// Get's trip through the buffer), take mu once, while a producer streaming new items
// faster than the workers take them keeps staging them, so that they do not take mu
// away from the workers item by item. n is the number of adds (1 for a direct one).
// Requires mu held.
func (q *Queue[T]) noteAdds(n int, reAdds, empty bool) {
	switch {
	case reAdds:
		q.misses, q.empties = 0, 0
		q.setDirect(true)
	case n > 1:
		q.misses, q.empties = 0, 0
		q.setDirect(false)
	case empty:
		q.misses = 0
		if q.empties++; q.empties >= directEmpties {
			q.empties = 0
			q.setDirect(true)
		}
	default:
		q.empties = 0
		if q.misses++; q.misses >= directMisses {
			q.misses = 0
			q.setDirect(false)
		}
	}
}

// setDirect sets direct mode on or off, writing the flag only when it changes.
func (q *Queue[T]) setDirect(on bool) {
	if q.direct.Load() != on {
		q.direct.Store(on)
	}
}

// directMisses is how many single adds in a row (direct ones, or staged batches of
// one) may find their items not in flight and items ready before direct mode ends;
// directEmpties how many that find the queue empty turn it on.
const (
	directMisses  = 4
	directEmpties = 8
)

// wakeMax bounds the wake-ups a holder of mu defers to unlock; dispatchLocked sends
// further ones under the lock.
const wakeMax = 8

// unlock releases mu, reports to Metrics.Added the adds made pending while mu was held
// (counted in applied), then wakes the waiters dispatchLocked chose: a Get woken for an
// item takes it after its add was reported.
func (q *Queue[T]) unlock() {
	if q.binned {
		q.countAddsLocked()
	}
	if q.nwake == 0 && q.applied == 0 {
		q.mu.Unlock()
		return
	}
	n := q.applied
	q.applied = 0
	var wake [wakeMax]*waiter[T]
	k := q.nwake
	if k > 0 {
		copy(wake[:k], q.wake[:k])
		clear(q.wake[:k])
		q.nwake = 0
	}
	q.mu.Unlock()
	for range n {
		q.metrics.Added()
	}
	// A waiter receives exactly one wake-up, and is neither reused nor given up before it
	// (see Get): sending after the unlock is safe, and its channel never blocks the send.
	for _, w := range wake[:k] {
		w.ch <- struct{}{}
	}
}

// addDelayed adds item after d from now, the current time on the queue's clock; tag is
// tagOf(item).
func (q *Queue[T]) addDelayed(item T, tag uint32, d time.Duration, now int64, prio int, key string, retried bool) {
	if d <= 0 {
		q.addNow(item, tag, prio, key, retried)
		return
	}
	if !q.delays.Load() {
		q.delays.Store(true)
	}
	q.smu.Lock()
	if q.sshut {
		q.smu.Unlock()
		return
	}
	at := now + int64(d)
	if at < now { // overflow: as late as the clock goes
		at = math.MaxInt64
	}
	if q.stage == nil {
		q.stage = q.spareLocked()
	}
	q.stage = append(q.stage, staged[T]{item: item, at: at, prio: prio, key: key, tag: tag})
	q.stageMin = min(q.stageMin, at)
	if at < q.timerAt {
		q.armLocked(at, now)
	}
	self := false
	if len(q.stage) >= stageMax {
		q.full = append(q.full, q.stage)
		q.stage = q.spareLocked()
		self = len(q.full) >= maxFull
		q.nfull.Store(int32(len(q.full)))
	}
	q.smu.Unlock()
	if self {
		q.drain()
	}
	if retried && q.metrics != nil {
		q.metrics.Retried()
	}
}

// armLocked sets the timer to fire at at, or stops it when at is math.MaxInt64. Requires
// smu held and the queue not shut down.
func (q *Queue[T]) armLocked(at, now int64) {
	q.timerAt = at
	if at == math.MaxInt64 {
		if q.timer != nil && q.timer.Stop() {
			q.timerWG.Done()
		}
		return
	}
	d := time.Duration(max(at-now, 0))
	switch {
	case q.timer == nil:
		q.timerWG.Add(1)
		q.timer = time.AfterFunc(d, q.fire)
	case !q.timer.Reset(d): // no firing was pending: this schedules a new one
		q.timerWG.Add(1)
	}
}

// spareLocked returns an empty staging buffer. Requires smu held.
func (q *Queue[T]) spareLocked() []staged[T] {
	if n := len(q.spares); n > 0 {
		buf := q.spares[n-1]
		q.spares[n-1] = nil
		q.spares = q.spares[:n-1]
		return buf
	}
	return make([]staged[T], 0, stageMax)
}

// takeStage takes every staged add: the full buffers, oldest first, then the current
// one. Requires fmu held.
func (q *Queue[T]) takeStage() [][]staged[T] {
	q.smu.Lock()
	bufs := q.full
	if len(q.stage) > 0 {
		bufs = append(bufs, q.stage)
		q.stage = nil
	}
	q.full = nil
	q.nfull.Store(0)
	q.stageMin = math.MaxInt64
	q.smu.Unlock()
	return bufs
}

// applyLocked moves staged adds into the core. Requires fmu and mu held.
func (q *Queue[T]) applyLocked(bufs [][]staged[T]) {
	if len(bufs) == 0 {
		return
	}
	now := q.now()
	for _, buf := range bufs {
		q.c.touch(buf)
		for i := range buf {
			q.c.addAt(buf[i].item, buf[i].tag, buf[i].at, buf[i].prio, buf[i].key, now)
		}
	}
}

// recycle clears applied (or dropped) staging buffers and keeps them for reuse.
func (q *Queue[T]) recycle(bufs [][]staged[T]) {
	if len(bufs) == 0 {
		return
	}
	for _, buf := range bufs {
		clear(buf) // drop references to the items
	}
	q.smu.Lock()
	for _, buf := range bufs {
		if len(q.spares) <= maxFull && !q.sshut {
			q.spares = append(q.spares, buf[:0])
		}
	}
	q.smu.Unlock()
}

// drain moves the staged adds into the core.
func (q *Queue[T]) drain() {
	q.fmu.Lock()
	defer q.fmu.Unlock()
	bufs := q.takeStage()
	q.mu.Lock()
	if !q.shut {
		q.applyAddsLocked()
		q.applyLocked(bufs)
	}
	q.unlock()
	q.recycle(bufs)
}

// timerSlack is the least time between two firings of the delay timer: a deadline that
// comes due less than this after a firing waits for the next one (at most this late).
// Like Linux's default timer slack, it lets a stream of close deadlines be served in
// batches instead of one timer wake-up each.
const timerSlack = 50 * time.Microsecond

// fireBatch bounds how many due items a firing moves per hold of the queue's lock, so a
// burst of deadlines does not hold up Get and Done for long.
const fireBatch = 256

// fire runs on the timer's goroutine: it moves the staged adds into the core, adds the due
// items in deadline order, and re-arms the timer for the next deadline.
func (q *Queue[T]) fire() {
	defer q.timerWG.Done()
	q.pump(true)
}

// pump moves the staged adds into the core and adds the due items in deadline order; with
// rearm (on the timer's goroutine) it then sets the timer for the next deadline. Without,
// the timer stays set as it was, which is no later than any deadline pump leaves pending.
func (q *Queue[T]) pump(rearm bool) {
	q.fmu.Lock()
	defer q.fmu.Unlock()
	bufs := q.takeStage()
	defer q.recycle(bufs)
	applied := false
	for {
		q.mu.Lock()
		if q.shut {
			q.unlock()
			return
		}
		q.applyAddsLocked()
		if !applied {
			q.applyLocked(bufs)
			applied = true
		}
		now := q.now()
		moved, added := q.c.fire(now, fireBatch)
		if added > 0 {
			q.dispatchLocked()
		}
		more := moved == fireBatch
		if !more && rearm {
			next, ok := q.c.nextDeadline()
			if !ok {
				next = math.MaxInt64
			}
			q.smu.Lock()
			if !q.sshut {
				at := min(next, q.stageMin)
				if at != math.MaxInt64 {
					at = max(at, now+int64(timerSlack))
				}
				q.armLocked(at, now)
			}
			q.smu.Unlock()
		}
		if q.metrics != nil {
			q.applied += added // reported (or counted) by unlock, as applied adds are
		}
		q.unlock()
		if !more {
			return
		}
	}
}

// dueLocked reports whether a delayed add, staged or in the core, is due. Requires mu held.
func (q *Queue[T]) dueLocked() bool {
	next, ok := q.c.nextDeadline()
	if !ok {
		next = math.MaxInt64
	}
	q.smu.Lock()
	next = min(next, q.stageMin)
	q.smu.Unlock()
	return next != math.MaxInt64 && next <= q.now()
}

// dispatchLocked wakes blocked Gets, the last to wait first, until as many are being woken
// as items are ready; their wake-ups are sent by unlock (or here, beyond wakeMax of them).
// Requires mu held.
func (q *Queue[T]) dispatchLocked() {
	for q.nwaiting > 0 && q.c.ready > q.woken {
		n := len(q.waiters) - 1 // never a hole
		w := q.waiters[n]
		q.waiters[n] = nil
		q.waiters = q.waiters[:n]
		q.nwaiting--
		q.trimWaitersLocked()
		q.nwait.Add(-1)
		q.woken++
		w.res = resReady
		if q.nwake < wakeMax {
			q.wake[q.nwake] = w
			q.nwake++
		} else {
			w.ch <- struct{}{}
		}
	}
}

// finishLocked performs the shut-down transitions that depend on the queue running dry.
// Requires mu held and shut set.
func (q *Queue[T]) finishLocked() {
	if q.c.ready == 0 && q.c.redirty == 0 {
		for i, w := range q.waiters {
			if w == nil {
				continue
			}
			w.res = resShutDown
			w.ch <- struct{}{}
			q.waiters[i] = nil
			q.nwait.Add(-1)
		}
		q.waiters, q.nwaiting, q.holes = q.waiters[:0], 0, 0
		q.unwatchLocked() // no Get waits again
		if q.c.inflight == 0 && q.idle != nil && !q.idleClosed {
			close(q.idle)
			q.idleClosed = true
		}
	}
}

// Get blocks until an item is ready and hands it out; the caller must call Done with it
// when finished. An item that is ready is returned even if ctx is already done. Get returns
// ctx.Err() if ctx ends first, and ErrShutDown once the queue is shut down and nothing is
// left to hand out (no ready item, and no item in flight that was added again and will be
// re-queued by its Done).
//
// An item that becomes ready while Gets wait wakes one of them (the one that began to wait
// last), but is not set aside for it: whichever Get comes first takes it, so a worker that
// is running (back from a Done) takes it without a wake-up, and the Get woken for it waits
// again if it finds nothing. At most as many Gets are being woken at once as items are
// ready.
//
// A context that Gets wait with again and again (a worker's) is watched by the queue
// with context.AfterFunc, from its second wait in a row until it ends or the queue is
// shut down and has run dry, so that waiting with it costs what waiting without one
// does; up to 4 contexts are watched at once. For a context of a type of its own (not
// made by package context), AfterFunc runs a goroutine meanwhile.
func (q *Queue[T]) Get(ctx context.Context) (T, error) {
	q.mu.Lock()
	for {
		item, wait, err := q.getLocked(ctx)
		if !wait {
			return item, err
		}
		w := q.getWaiter()
		done := ctx.Done()
		watched := done != nil && q.watchLocked(ctx, done)
		if watched {
			w.done = done // ctx's end wakes w (see ctxwatch.go)
		}
		w.pos = len(q.waiters)
		q.waiters = append(q.waiters, w)
		q.nwaiting++
		q.unlock()

		if done == nil || watched {
			<-w.ch
		} else {
			select {
			case <-w.ch:
			case <-done:
				q.mu.Lock()
				if w.res == resWaiting {
					q.removeWaiterLocked(w)
					q.unlock()
					q.pool.Put(w)
					return item, ctx.Err()
				}
				q.unlock()
				<-w.ch // it was woken concurrently: see why
			}
		}
		res := w.res
		w.done = nil
		q.pool.Put(w)
		switch res {
		case resShutDown:
			return item, ErrShutDown
		case resCanceled:
			return item, ctx.Err()
		}
		// resReady: items are ready, look again (maybe another Get took them).
		q.mu.Lock()
		q.woken--
	}
}

// getLocked is one look of Get: it hands out a ready item, or returns the error Get
// returns, or, with wait set, leaves the Get counted in nwait and mu held, to wait.
// Requires mu held; releases it unless wait is set.
func (q *Queue[T]) getLocked(ctx context.Context) (item T, wait bool, err error) {
	registered := false // counted in nwait
	for {
		q.applyAddsLocked()
		if q.c.ready == 0 && !q.shut && q.delays.Load() && (q.nfull.Load() > 0 || q.dueLocked()) {
			// Rather than block, take in the staging buffers that adders filled, and add the
			// due items now instead of when the timer fires.
			q.unlock()
			q.pump(false)
			q.mu.Lock()
		}
		if q.c.ready > 0 {
			var now int64
			if q.metrics != nil {
				now = q.now()
			}
			s, waited := q.c.pop(now)
			item = q.c.e(s).item
			if q.shut {
				q.finishLocked()
			}
			if registered {
				q.nwait.Add(-1)
			}
			q.unlock()
			if q.metrics != nil && !q.binned {
				q.metrics.Started(time.Duration(waited))
			}
			return item, false, nil
		}
		if q.shut && q.c.redirty == 0 {
			err = ErrShutDown
		} else if ctx.Done() != nil {
			err = ctx.Err()
		}
		if err != nil {
			if registered {
				q.nwait.Add(-1)
			}
			q.unlock()
			return item, false, err
		}
		if registered {
			return item, true, nil
		}
		// Announce the wait before looking at the staged adds a last time: an adder that
		// stages after that look sees the announcement and applies its add itself.
		q.nwait.Add(1)
		registered = true
		if q.nadds.Load() == 0 {
			return item, true, nil
		}
	}
}

func (q *Queue[T]) getWaiter() *waiter[T] {
	if w, ok := q.pool.Get().(*waiter[T]); ok {
		w.res = resWaiting
		return w
	}
	return &waiter[T]{ch: make(chan struct{}, 1)}
}

// removeWaiterLocked removes w, a Get that gives up waiting, from waiters: it leaves a
// hole, drops the holes that end up last, and squeezes the holes out once they
// outnumber the waiters (each entry is moved at most once per hole made), so that a
// Get's context ending costs O(1) amortized, not a pass over every Get waiting.
func (q *Queue[T]) removeWaiterLocked(w *waiter[T]) {
	q.waiters[w.pos] = nil
	q.nwaiting--
	q.holes++
	q.nwait.Add(-1)
	q.trimWaitersLocked()
	if q.holes > 16 && q.holes > q.nwaiting {
		kept := q.waiters[:0]
		for _, x := range q.waiters {
			if x != nil {
				x.pos = len(kept)
				kept = append(kept, x)
			}
		}
		clear(q.waiters[len(kept):])
		q.waiters, q.holes = kept, 0
	}
}

// trimWaitersLocked drops the holes at the end of waiters.
func (q *Queue[T]) trimWaitersLocked() {
	for n := len(q.waiters); n > 0 && q.waiters[n-1] == nil; n-- {
		q.waiters = q.waiters[:n-1]
		q.holes--
	}
}

// Done marks the end of processing of an item returned by Get. If the item was added again
// meanwhile, it is queued again now. Done of an item that is not being processed (never
// handed out, or already Done) does nothing.
//
// Done applies the staged adds first only when they may matter to it: when the item was
// added again during its processing (it is then queued behind the adds staged before
// the Done), or when one of them may be an add of the item. Otherwise the item is retired
// whatever the staged adds are, and they are applied by the next holder of the lock, in
// the same order, so a worker does not take the staging lock twice per item.
//
// A Done that finds the queue's lock taken (many workers at once) does not wait for it
// unless a Get waits or the queue has Metrics that are not Binned (Metrics.Finished is
// called by the Done itself): it is staged with the adds, and the next holder of the lock
// applies it in order with them, so it takes effect when it is made, as far as any caller
// can tell, as an Add does.
func (q *Queue[T]) Done(item T) {
	switch {
	case q.metrics != nil && !q.binned:
		q.mu.Lock() // Metrics.Finished is told how long the item was processed
	case q.mu.TryLock():
	case q.stageDone(item):
		return // whoever takes mu next applies it
	default:
		q.mu.Lock()
	}
	s := q.c.findInFlight(item)
	if q.nadds.Load() != 0 && s != none && (q.c.e(s).state() == stRedirty || q.staged.Load()&(uint64(1)<<(q.c.e(s).tag%64)) != 0) {
		q.applyAddsLocked()
		// A Done of the item may have been staged before this one (a second Done): then
		// the item is finished already, and maybe queued again.
		s = q.c.findInFlight(item)
	}
	var now int64
	if q.metrics != nil {
		now = q.now()
	}
	ok := s != none
	var worked int64
	if ok {
		worked = q.c.finish(s, now)
	}
	if ok {
		q.dispatchLocked()
	}
	if q.shut {
		q.finishLocked()
	}
	q.unlock()
	if ok && q.metrics != nil && !q.binned {
		q.metrics.Finished(time.Duration(worked))
	}
}

// stageDone stages a Done of item with the adds, when mu is taken by someone else: the
// Done then costs the worker a hold of amu instead of a wait for mu, and is applied in
// order with the adds by the next holder of mu, as an add is. It reports false when the
// Done must be applied now: when a Get waits (it may be waiting for the item to be queued
// again), after shut-down, or when the buffer is full.
func (q *Queue[T]) stageDone(item T) bool {
	if q.nwait.Load() != 0 {
		return false
	}
	q.amu.Lock()
	if q.ashut || len(q.adds) >= stageMax-1 {
		q.amu.Unlock()
		return false
	}
	var at int64
	if q.binned {
		at = q.now() // the item's processing ends now, whenever the Done is applied
	}
	q.adds = append(q.adds, staged[T]{item: item, at: at, done: true})
	if len(q.adds) == 1 {
		q.nadds.Store(1)
	}
	q.amu.Unlock()
	if q.nwait.Load() != 0 { // a Get began to wait: it may have looked at nadds before
		q.mu.Lock()
		q.applyAddsLocked()
		q.unlock()
	}
	return true
}

// Len returns the number of items ready to be handed out (not those being processed or
// scheduled for later). It is a snapshot for information only.
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	defer q.unlock()
	q.applyAddsLocked()
	return q.c.ready
}

// Processing returns the items handed out by Get whose Done has not been called, the
// longest-processed first. It is a snapshot for information only, for example to name the
// work a shut-down left behind. Cost: O(items in flight), under the queue's lock.
func (q *Queue[T]) Processing() []T {
	q.mu.Lock()
	defer q.unlock()
	q.applyAddsLocked() // a staged Done ends its item's processing
	items := make([]T, 0, q.c.inflight)
	for s := q.c.oldest; s != none; s = q.c.e(s).next {
		items = append(items, q.c.e(s).item)
	}
	return items
}

// ShuttingDown reports whether ShutDown or ShutDownWithDrain has been called.
func (q *Queue[T]) ShuttingDown() bool { return q.shutFlag.Load() }

// ShutDown stops the queue: later adds are ignored, pending delayed adds are dropped, and
// the delay timer is stopped (no goroutine of the queue runs after ShutDown returns). Items
// already ready are still handed out by Get, as are items added again while being
// processed (after their Done); then Get returns ErrShutDown. The RateLimiter's Reset
// method, if any, is called to release its bookkeeping. ShutDown may be called many times.
//
// ShutDown also means "do not wait": a ShutDownWithDrain waiting when it is called returns
// at once, and one called after it does not wait (both return ErrDrainAborted if work is
// left). So a second signal can cut short a graceful shut-down in progress.
func (q *Queue[T]) ShutDown() { q.shutDown(true) }

// shutDown stops the queue; with force (ShutDown) it also ends the drains, present and
// future.
func (q *Queue[T]) shutDown(force bool) {
	q.smu.Lock()
	if !q.sshut {
		q.sshut = true
		clear(q.stage)
		q.stage = nil
		for _, buf := range q.full {
			clear(buf)
		}
		q.full, q.spares = nil, nil
		q.nfull.Store(0)
		q.stageMin = math.MaxInt64
		q.armLocked(math.MaxInt64, 0)
	}
	q.smu.Unlock()

	q.mu.Lock()
	first := !q.shut
	if first {
		// Adds staged before this point are kept (they happened before the shut-down);
		// later ones are refused.
		q.amu.Lock()
		q.ashut = true
		q.amu.Unlock()
		q.applyAddsLocked()
		q.spareAdds = nil
		q.amu.Lock()
		q.adds = nil
		q.amu.Unlock()
		q.shut = true
		q.shutFlag.Store(true)
		q.c.dropDelayed()
		q.c.dropCache()
	}
	if force && !q.forced {
		q.forced = true
		if q.abort != nil {
			close(q.abort)
		}
	}
	q.finishLocked()
	q.unlock()
	q.timerWG.Wait()
	if first {
		if rs, ok := q.limiter.(interface{ Reset() }); ok {
			rs.Reset()
		}
	}
}

// ShutDownWithDrain shuts the queue down like ShutDown and then waits until every ready
// item has been handed out and every handed-out item is Done, or until ctx ends, or until
// ShutDown is called. Workers must keep calling Get until it returns ErrShutDown and call
// Done for every item, otherwise the wait lasts until ctx ends or ShutDown is called. It
// returns nil once nothing is left (whatever ended the wait). Otherwise, on ctx's end it
// returns an error wrapping ctx.Err(), and when ShutDown ends the wait (or was called
// before ShutDownWithDrain, which then does not wait) an error wrapping ErrDrainAborted;
// both say how much work was left. Work left behind is still handed out by Get, and Done
// may still be called for items in flight. Several drains may wait at once; each returns
// as described.
func (q *Queue[T]) ShutDownWithDrain(ctx context.Context) error {
	q.shutDown(false)
	q.mu.Lock()
	if q.c.ready == 0 && q.c.inflight == 0 {
		q.unlock()
		return nil
	}
	if q.forced {
		err := q.leftLocked(ErrDrainAborted)
		q.unlock()
		return err
	}
	if q.idle == nil {
		q.idle = make(chan struct{})
	}
	if q.abort == nil {
		q.abort = make(chan struct{})
	}
	idle, abort := q.idle, q.abort
	q.unlock()
	var cause error
	select {
	case <-idle:
		return nil
	case <-abort:
		cause = ErrDrainAborted
	case <-ctx.Done():
		cause = ctx.Err()
	}
	q.mu.Lock()
	err := q.leftLocked(cause)
	q.unlock()
	return err
}

// leftLocked returns nil when no work is left (nothing ready, nothing in flight), and
// otherwise an error wrapping cause that says how much is left. Requires mu held.
func (q *Queue[T]) leftLocked(cause error) error {
	q.applyAddsLocked()
	ready, inflight := q.c.ready, q.c.inflight
	if ready == 0 && inflight == 0 {
		return nil
	}
	if cause == ErrDrainAborted {
		return fmt.Errorf("%w with %d items ready and %d in flight", ErrDrainAborted, ready, inflight)
	}
	return fmt.Errorf("workqueue: drain stopped with %d items ready and %d in flight: %w", ready, inflight, cause)
}

// inFlight is handed to Metrics.Attach.
func (q *Queue[T]) inFlight() InFlight {
	q.mu.Lock()
	q.applyAddsLocked() // so that Metrics has seen every add when it reads this
	n, total, longest := q.c.inFlight(q.now())
	ready := q.c.ready
	q.unlock()
	return InFlight{Items: n, Total: time.Duration(total), Longest: time.Duration(longest), Ready: ready}
}

// stats adds the queue's counts to *into, for a Binned Metrics (see AttachStats).
func (q *Queue[T]) stats(into *Stats) {
	q.mu.Lock()
	q.applyAddsLocked() // so that the adds buffered before the call are counted
	q.countAddsLocked()
	into.Add(&q.c.bins.stats)
	q.unlock()
}

// countAddsLocked moves the adds applied since the last count into a Binned Metrics'
// stats, instead of unlock reporting them to Added. Requires mu held and q.binned.
func (q *Queue[T]) countAddsLocked() {
	q.c.bins.stats.Adds += uint64(q.applied)
	q.applied = 0
}
