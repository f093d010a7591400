package workqueue

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

// checkInvariants verifies every documented invariant of q's core, waiters, staging buffer
// and timer; tests call it between operations, when no timer callback is about to run.
func checkInvariants[T comparable](t testing.TB, q *Queue[T]) {
	t.Helper()
	q.fmu.Lock()
	defer q.fmu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	q.smu.Lock()
	defer q.smu.Unlock()
	q.amu.Lock()
	defer q.amu.Unlock()
	err := q.c.check()
	if err == nil && (q.woken < 0 || q.nwaiting > 0 && q.c.ready > q.woken) {
		err = fmt.Errorf("%d waiters while %d items are ready and %d Gets being woken", q.nwaiting, q.c.ready, q.woken)
	}
	switch {
	case err != nil:
	case (q.nadds.Load() != 0) != (len(q.adds) > 0):
		err = fmt.Errorf("nadds %d, %d adds staged", q.nadds.Load(), len(q.adds))
	case !stagedCovered(q):
		err = fmt.Errorf("staged %#x misses the tag of a staged add", q.staged.Load())
	case len(q.adds) >= stageMax:
		err = fmt.Errorf("%d adds staged, limit %d", len(q.adds), stageMax)
	case q.ashut && len(q.adds) > 0:
		err = fmt.Errorf("%d adds staged after shut-down", len(q.adds))
	case int(q.nwait.Load()) != q.nwaiting:
		err = fmt.Errorf("nwait %d, %d waiters", q.nwait.Load(), q.nwaiting)
	case len(q.adds) > 0 && q.nwaiting > 0:
		err = fmt.Errorf("%d adds staged while %d Gets wait", len(q.adds), q.nwaiting)
	case len(q.waiters) > 0 && q.waiters[len(q.waiters)-1] == nil:
		err = fmt.Errorf("waiters end with a hole")
	}
	if err == nil {
		holes := 0
		for i, w := range q.waiters {
			switch {
			case w == nil:
				holes++
			case w.pos != i:
				err = fmt.Errorf("waiter at %d records position %d", i, w.pos)
			}
		}
		if err == nil && (holes != q.holes || len(q.waiters)-holes != q.nwaiting) {
			err = fmt.Errorf("%d waiters entries, %d holes (counted %d), %d waiting", len(q.waiters), holes, q.holes, q.nwaiting)
		}
	}
	nstaged := len(q.stage)
	for _, buf := range q.full {
		nstaged += len(buf)
	}
	if err == nil && (len(q.full) >= maxFull || int(q.nfull.Load()) != len(q.full)) {
		err = fmt.Errorf("%d full staging buffers (nfull %d)", len(q.full), q.nfull.Load())
	}
	if err == nil && nstaged > 0 {
		m := int64(math.MaxInt64)
		for _, buf := range append([][]staged[T]{q.stage}, q.full...) {
			for _, st := range buf {
				m = min(m, st.at)
			}
		}
		if m != q.stageMin {
			err = fmt.Errorf("stageMin %d, earliest staged %d", q.stageMin, m)
		}
	}
	if err == nil && !q.sshut {
		next, ok := q.c.nextDeadline()
		if ok && q.timerAt > next || q.timerAt > q.stageMin {
			err = fmt.Errorf("timer set for %d, next deadlines %d (heap), %d (staged)", q.timerAt, next, q.stageMin)
		}
	}
	if err == nil && q.sshut && (nstaged > 0 || q.c.scheduled() > 0) && q.shut {
		err = fmt.Errorf("shut down with %d staged and %d scheduled", nstaged, q.c.scheduled())
	}
	if err == nil && q.abort != nil {
		closed := false
		select {
		case <-q.abort:
			closed = true
		default:
		}
		if closed != q.forced {
			err = fmt.Errorf("abort channel closed %v, forced %v", closed, q.forced)
		}
	}
	if err != nil {
		t.Fatalf("invariant broken: %v", err)
	}
}

func (c *core[T]) check() error {
	counts := map[uint8]int{}
	laneRefs := map[int32]int{}
	scheduled := 0
	if err := c.checkIndex(); err != nil {
		return err
	}
	nfree := 0
	freed := map[int32]bool{}
	for _, s := range c.free {
		if s < 0 || s >= c.nslots || c.e(s).state() != stIdle || c.e(s).dat != 0 || freed[s] {
			return fmt.Errorf("free list: slot %d out of range, in use, or twice", s)
		}
		freed[s] = true
		nfree++
	}
	if nfree+c.idx.n != int(c.nslots) {
		return fmt.Errorf("%d free and %d indexed slots of %d", nfree, c.idx.n, c.nslots)
	}
	for _, v := range c.idx.b {
		if v == 0 {
			continue
		}
		s := int32(uint32(v)) - 1
		if s < 0 || int(s) >= int(c.nslots) {
			return fmt.Errorf("bucket %#x: slot %d out of range", v, s)
		}
		item := c.e(s).item
		if s < 0 || int(s) >= int(c.nslots) {
			return fmt.Errorf("item %v: slot %d out of range", item, s)
		}
		e := c.e(s)
		if e.tag != uint32(v>>32) {
			return fmt.Errorf("item %v: entry tag %#x, index tag %#x", item, e.tag, v>>32)
		}
		st, lane := e.state(), e.lane()
		counts[st]++
		if e.dat != 0 {
			scheduled++
			if dl := e.dlane; dl < 0 || int(dl) >= len(c.lanes) {
				return fmt.Errorf("item %v: delay lane %d out of range", item, dl)
			} else {
				laneRefs[dl]++
			}
		} else if e.dlane != none {
			return fmt.Errorf("item %v: delay lane %d without a delay", item, e.dlane)
		}
		switch st {
		case stQueued, stRedirty:
			if lane < 0 || int(lane) >= len(c.lanes) {
				return fmt.Errorf("item %v (state %d): lane %d out of range", item, st, lane)
			}
			laneRefs[lane]++
		case stProcessing, stCached, stIdle:
			if lane != none {
				return fmt.Errorf("item %v (state %d) names lane %d", item, st, lane)
			}
			if st == stIdle && e.dat == 0 {
				return fmt.Errorf("item %v idle without a delay", item)
			}
			if st == stCached && e.dat != 0 {
				return fmt.Errorf("item %v cached with a delay", item)
			}
		default:
			return fmt.Errorf("item %v in unknown state %d", item, st)
		}
	}
	if counts[stQueued] != c.ready {
		return fmt.Errorf("ready = %d, %d entries queued", c.ready, counts[stQueued])
	}
	if n := counts[stProcessing] + counts[stRedirty]; n != c.inflight {
		return fmt.Errorf("inflight = %d, %d entries in flight", c.inflight, n)
	}
	if counts[stRedirty] != c.redirty {
		return fmt.Errorf("redirty = %d, %d entries", c.redirty, counts[stRedirty])
	}
	if counts[stCached] != c.cached+c.ndying {
		return fmt.Errorf("cached = %d, dying = %d, %d entries", c.cached, c.ndying, counts[stCached])
	}
	if c.keep < 0 && c.cached != 0 {
		return fmt.Errorf("%d cached entries with the cache off", c.cached)
	}
	if c.keep >= 0 && c.cached > c.keep+evictBatch {
		return fmt.Errorf("%d cached entries, bound %d", c.cached, c.keep)
	}

	// Lists: in-flight, cache, lanes.
	walk := func(name string, head, tail int32, st1, st2 uint8) (int, error) {
		n := 0
		prev := none
		for s := head; s != none; s = c.e(s).next {
			e := c.e(s)
			if e.state() != st1 && e.state() != st2 {
				return 0, fmt.Errorf("%s list: slot %d in state %d", name, s, e.state())
			}
			if e.prev != prev {
				return 0, fmt.Errorf("%s list: slot %d prev %d, want %d", name, s, e.prev, prev)
			}
			prev = s
			n++
			if n > int(c.nslots) {
				return 0, fmt.Errorf("%s list: cycle", name)
			}
		}
		if prev != tail {
			return 0, fmt.Errorf("%s list: ends at %d, tail %d", name, prev, tail)
		}
		return n, nil
	}
	n, err := walk("in-flight", c.oldest, c.newest, stProcessing, stRedirty)
	if err != nil {
		return err
	}
	if n != c.inflight {
		return fmt.Errorf("in-flight list has %d entries, inflight = %d", n, c.inflight)
	}
	if c.cacheHead > len(c.cacheQ) || len(c.cacheQ) > 2*c.cached+compactMin {
		return fmt.Errorf("cache queue: head %d, length %d, %d cached", c.cacheHead, len(c.cacheQ), c.cached)
	}
	valid := map[int32]bool{}
	for _, r := range c.cacheQ[c.cacheHead:] {
		if r.slot < 0 || r.slot >= c.nslots {
			return fmt.Errorf("cache queue: slot %d out of range", r.slot)
		}
		if c.cachedWith(r) {
			if valid[r.slot] {
				return fmt.Errorf("cache queue: slot %d valid twice", r.slot)
			}
			valid[r.slot] = true
		}
	}
	if len(valid) != c.cached {
		return fmt.Errorf("cache queue has %d valid elements, cached = %d", len(valid), c.cached)
	}
	if len(c.dying) > evictBatch || c.keep < 0 && c.ndying != 0 {
		return fmt.Errorf("%d dying elements, %d dying with KeepFinished %d", len(c.dying), c.ndying, c.keep)
	}
	dying := map[int32]bool{}
	for _, r := range c.dying {
		if c.cachedWith(r) {
			if valid[r.slot] || dying[r.slot] || c.e(r.slot).next != dyingMark {
				return fmt.Errorf("dying element of slot %d: valid twice, or not marked", r.slot)
			}
			dying[r.slot] = true
		}
	}
	if len(dying) != c.ndying {
		return fmt.Errorf("%d valid dying elements, ndying = %d", len(dying), c.ndying)
	}

	live := 0
	for l := range c.lanes {
		ln := &c.lanes[l]
		if ln.refs == 0 {
			continue // free (or the idle default lane)
		}
		live++
		if want := laneRefs[int32(l)]; ln.refs != want {
			return fmt.Errorf("lane %d (%v): refs %d, %d entries name it", l, ln.laneKey, ln.refs, want)
		}
		if l != 0 {
			got, ok := c.pairLanes[ln.laneKey]
			switch {
			case ln.prio == 0:
				got, ok = c.keyLanes[ln.key]
			case ln.key == "":
				got, ok = c.prioLanes[ln.prio]
			}
			if !ok || got != int32(l) {
				return fmt.Errorf("lane %d (%v) not indexed (%d, %v)", l, ln.laneKey, got, ok)
			}
		}
		m, err := walk(fmt.Sprintf("lane %d", l), ln.head, ln.tail, stQueued, stQueued)
		if err != nil {
			return err
		}
		if m != ln.n {
			return fmt.Errorf("lane %d has %d entries, n = %d", l, m, ln.n)
		}
		for s := ln.head; s != none; s = c.e(s).next {
			if c.e(s).lane() != int32(l) {
				return fmt.Errorf("slot %d in lane %d names lane %d", s, l, c.e(s).lane())
			}
		}
	}
	for l, r := range laneRefs {
		if c.lanes[l].refs == 0 {
			return fmt.Errorf("lane %d is free but named by %d entries", l, r)
		}
	}
	if n := len(c.keyLanes) + len(c.prioLanes) + len(c.pairLanes); n > live {
		return fmt.Errorf("%d lanes indexed, %d in use", n, live)
	}
	for key, l := range c.keyLanes {
		if ln := c.lanes[l]; ln.refs == 0 || ln.prio != 0 || ln.key != key {
			return fmt.Errorf("fairness key %q indexes lane %d (%v, %d refs)", key, l, ln.laneKey, ln.refs)
		}
	}
	for prio, l := range c.prioLanes {
		if ln := c.lanes[l]; ln.refs == 0 || prio == 0 || ln.prio != prio || ln.key != "" {
			return fmt.Errorf("priority %d indexes lane %d (%v, %d refs)", prio, l, ln.laneKey, ln.refs)
		}
	}
	for k, l := range c.pairLanes {
		if ln := c.lanes[l]; ln.refs == 0 || k.prio == 0 || k.key == "" || ln.laneKey != k {
			return fmt.Errorf("%v indexes lane %d (%v, %d refs)", k, l, ln.laneKey, ln.refs)
		}
	}

	if err := c.checkLevels(); err != nil {
		return err
	}
	total := 0
	for _, r := range c.byPrio.h {
		lv := &c.levels[r.l]
		if lv.n < 0 || lv.n == 0 && len(c.byPrio.h) > 1 {
			return fmt.Errorf("level %d holds %d among %d levels", lv.prio, lv.n, len(c.byPrio.h))
		}
		if lv.since > c.handouts {
			return fmt.Errorf("level %d: since %d after handouts %d", lv.prio, lv.since, c.handouts)
		}
		n, prev := 0, none
		for l := lv.rrHead; l != none; l = c.lanes[l].rrNext {
			ln := &c.lanes[l]
			if ln.prio != lv.prio || ln.n == 0 || ln.rrPrev != prev {
				return fmt.Errorf("level %d ring: lane %d (%v, n=%d, prev %d want %d)", lv.prio, l, ln.laneKey, ln.n, ln.rrPrev, prev)
			}
			if c.levels[ln.level].prio != lv.prio {
				return fmt.Errorf("lane %d in the ring of level %d names level %d", l, lv.prio, c.levels[ln.level].prio)
			}
			n += ln.n
			prev = l
		}
		if prev != lv.rrTail {
			return fmt.Errorf("level %d ring ends at %d, tail %d", lv.prio, prev, lv.rrTail)
		}
		if n != lv.n {
			return fmt.Errorf("level %d: ring holds %d, n = %d", lv.prio, n, lv.n)
		}
		total += n
	}
	if total != c.ready {
		return fmt.Errorf("levels hold %d, ready = %d", total, c.ready)
	}
	if scheduled != c.sched.pending {
		return fmt.Errorf("%d entries scheduled, pending = %d", scheduled, c.sched.pending)
	}
	if err := c.checkMarks(); err != nil {
		return err
	}
	if err := c.checkSchedule(); err != nil {
		return err
	}
	for l := range c.lanes {
		if ln := &c.lanes[l]; ln.refs > 0 && ln.n > 0 {
			if lv := c.levels[ln.level]; lv.hp == none || lv.prio != ln.prio {
				return fmt.Errorf("lane %d has items but its level (priority %d, heap position %d) is not active at %d", l, lv.prio, lv.hp, ln.prio)
			}
		}
	}
	return nil
}

// checkLevels verifies the invariants of the levels: the two heaps hold exactly the
// active levels, in heap order, at the positions the levels record; levelAt indexes the
// active and the parked levels by priority, and nothing else; the free levels are
// neither active nor indexed.
func (c *core[T]) checkLevels() error {
	if len(c.byPrio.h) != len(c.byAge.h) {
		return fmt.Errorf("%d levels by priority, %d by age", len(c.byPrio.h), len(c.byAge.h))
	}
	for _, x := range []*levelHeap{&c.byPrio, &c.byAge} {
		for i := range x.h {
			r := &x.h[i]
			lv := &c.levels[r.l]
			pos, by := lv.hp, uint64(0)
			if x.age {
				pos, by = lv.ap, lv.since
			}
			if pos != int32(i) || r.prio != lv.prio || r.by != by {
				return fmt.Errorf("heap (age %v) holds level %d at %d as (%d, %d); the level: position %d, since %d, priority %d", x.age, r.l, i, r.by, r.prio, pos, lv.since, lv.prio)
			}
			if i > 0 && r.before(&x.h[(i-1)/2]) {
				return fmt.Errorf("heap (age %v) out of order at %d: level %d above %d", x.age, i, x.h[(i-1)/2].prio, r.prio)
			}
		}
	}
	active := 0
	for l := range c.levels {
		lv := &c.levels[l]
		if (lv.hp == none) != (lv.ap == none) {
			return fmt.Errorf("level %d: heap positions %d and %d", lv.prio, lv.hp, lv.ap)
		}
		if lv.hp != none {
			active++
		}
	}
	if active != len(c.byPrio.h) {
		return fmt.Errorf("%d levels active, %d in the heaps", active, len(c.byPrio.h))
	}
	if len(c.parked) > parkMax {
		return fmt.Errorf("%d levels parked", len(c.parked))
	}
	for _, l := range c.parked {
		if lv := &c.levels[l]; lv.hp != none || !lv.parked {
			return fmt.Errorf("parked level %d is active or not marked parked", lv.prio)
		}
	}
	parked := 0
	for l := range c.levels {
		if c.levels[l].parked {
			parked++
		}
	}
	if parked != len(c.parked) {
		return fmt.Errorf("%d levels marked parked, %d listed", parked, len(c.parked))
	}
	want := active + parked
	if len(c.levelAt) != want {
		return fmt.Errorf("%d priorities indexed, %d levels active or parked", len(c.levelAt), want)
	}
	for prio, l := range c.levelAt {
		if lv := &c.levels[l]; lv.prio != prio || lv.hp == none && !lv.parked {
			return fmt.Errorf("priority %d indexes level %d (priority %d, heap position %d)", prio, l, lv.prio, lv.hp)
		}
	}
	for _, l := range c.freeLevels {
		if lv := &c.levels[l]; lv.hp != none || lv.parked {
			return fmt.Errorf("free level %d is active or parked", l)
		}
	}
	if len(c.freeLevels)+want != len(c.levels) {
		return fmt.Errorf("%d levels: %d free, %d active or parked", len(c.levels), len(c.freeLevels), want)
	}
	return nil
}

// checkSchedule verifies the schedule's invariants (see schedule).
func (c *core[T]) checkSchedule() error {
	d := &c.sched
	validOf := map[int32]int{}
	total := 0
	see := func(el delayed) error {
		total++
		if el.slot < 0 || el.slot >= c.nslots {
			return fmt.Errorf("schedule: slot %d out of range", el.slot)
		}
		if c.valid(el) {
			validOf[el.slot]++
			if validOf[el.slot] > 1 {
				return fmt.Errorf("schedule: slot %d has two valid elements", el.slot)
			}
		}
		return nil
	}
	inRing := 0
	for i := range d.ring {
		b := &d.ring[i]
		inRing += len(b.els)
		if b.sorted && !slices.IsSortedFunc(b.els, cmpDelayed) {
			return fmt.Errorf("schedule: bucket %d marked sorted, is not", i)
		}
		for _, el := range b.els {
			k := el.at >> wheelBits
			if want := max(k, d.cur); want-d.cur >= wheelSize || int(want&wheelMask) != i {
				return fmt.Errorf("schedule: deadline %d (bucket %d) in ring slot %d, current %d", el.at, k, i, d.cur)
			}
			if err := see(el); err != nil {
				return err
			}
		}
	}
	if inRing != d.inRing {
		return fmt.Errorf("schedule: %d in ring, inRing = %d", inRing, d.inRing)
	}
	if want := (d.over.n + overSize - 1) / overSize; len(d.over.chunks) < want || len(d.over.chunks) > want+1 {
		return fmt.Errorf("schedule: %d overflow chunks for %d elements", len(d.over.chunks), d.over.n)
	}
	for _, ch := range d.over.chunks {
		if len(ch) != overSize {
			return fmt.Errorf("schedule: overflow chunk of %d elements", len(ch))
		}
	}
	for i := range d.over.n {
		el := *d.over.at(i)
		if el.at>>wheelBits-d.cur < wheelSize {
			return fmt.Errorf("schedule: deadline %d in the overflow, within the ring", el.at)
		}
		if p := (i - 1) / 4; i > 0 && cmpDelayed(*d.over.at(p), el) > 0 {
			return fmt.Errorf("schedule: overflow heap order broken at %d", i)
		}
		if err := see(el); err != nil {
			return err
		}
	}
	if len(validOf) != d.pending || total-d.pending != d.stale {
		return fmt.Errorf("schedule: %d valid and %d elements, pending %d, stale %d", len(validOf), total, d.pending, d.stale)
	}
	return nil
}

// scheduled returns how many items wait for a deadline, staged or in the schedule.
func scheduled[T comparable](q *Queue[T]) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.smu.Lock()
	defer q.smu.Unlock()
	n := q.c.scheduled() + len(q.stage)
	for _, buf := range q.full {
		n += len(buf)
	}
	return n
}

// checkIndex verifies the index's invariants: size, count and load, every bucket's tag
// is its item's, and every item is found by lookup at its own bucket.
func (c *core[T]) checkIndex() error {
	x := &c.idx
	if len(x.b) == 0 {
		if x.n != 0 {
			return fmt.Errorf("index: %d items and no buckets", x.n)
		}
		return nil
	}
	if len(x.b) < minBuckets || len(x.b)&(len(x.b)-1) != 0 || 1<<(32-x.shift) != len(x.b) {
		return fmt.Errorf("index: %d buckets, shift %d", len(x.b), x.shift)
	}
	n := 0
	for i, v := range x.b {
		if v == 0 {
			continue
		}
		n++
		s := int32(uint32(v)) - 1
		if s < 0 || s >= c.nslots {
			return fmt.Errorf("index: bucket %d: slot %d out of range", i, s)
		}
		item := c.e(s).item
		if tag := tagOf(c.seed, item); tag != uint32(v>>32) {
			return fmt.Errorf("index: bucket %d: tag %#x, item %v hashes to %#x", i, v>>32, item, tag)
		}
		if got, pos := c.lookup(item, uint32(v>>32)); got != s || pos != i {
			return fmt.Errorf("index: item %v in bucket %d (slot %d), found in %d (slot %d)", item, i, s, pos, got)
		}
	}
	if n != x.n || n*maxLoadDen > len(x.b)*maxLoadNum {
		return fmt.Errorf("index: %d items counted, %d recorded, %d buckets", n, x.n, len(x.b))
	}
	return nil
}

// checkMarks verifies the dedup fast path's marks (see shared.go): an entry has a mark iff
// markOf holds one for it, the mark names the entry and its item, a published mark is in
// its cell and gives the entry's waiting priority, an unpublished one is idle, and every
// mark in the table is its entry's published mark.
func (c *core[T]) checkMarks() error {
	t := c.table.Load()
	if len(c.markOf) > int(c.nslots) {
		return fmt.Errorf("marks: %d marks by slot for %d slots", len(c.markOf), c.nslots)
	}
	for s := range c.nslots {
		e := c.e(s)
		var m *mark[T]
		if int(s) < len(c.markOf) {
			m = c.markOf[s]
		}
		if (e.mk == mkNone) != (m == nil) {
			return fmt.Errorf("marks: slot %d in state %d has mark %p", s, e.mk, m)
		}
		if m == nil {
			continue
		}
		if m.slot != s || m.item != e.item {
			return fmt.Errorf("marks: slot %d has the mark of slot %d (%v, entry %v)", s, m.slot, m.item, e.item)
		}
		want := int64(idlePrio)
		if st := e.state(); e.mk == mkPublished && (st == stQueued || st == stRedirty) {
			want = int64(c.lanes[e.lane()].prio)
		}
		if got := m.prio.Load(); got != want {
			return fmt.Errorf("marks: slot %d (state %d, mark %d) published priority %d, want %d", s, e.state(), e.mk, got, want)
		}
		if i := e.tag & marksMask; e.mk == mkPublished && (t == nil || t[i].Load() != m && t[i^1].Load() != m) {
			return fmt.Errorf("marks: slot %d published but not in its cells", s)
		}
	}
	if t == nil {
		return nil
	}
	for i := range t {
		m := t[i].Load()
		if m == nil {
			continue
		}
		if int(m.slot) >= len(c.markOf) || c.markOf[m.slot] != m || c.e(m.slot).mk != mkPublished {
			return fmt.Errorf("marks: cell %d holds a mark of slot %d that is not published", i, m.slot)
		}
		if c.e(m.slot).tag&marksMask != uint32(i) && c.e(m.slot).tag&marksMask != uint32(i^1) {
			return fmt.Errorf("marks: cell %d holds the mark of a tag for cell %d", i, c.e(m.slot).tag&marksMask)
		}
		if t[i^1].Load() == m {
			return fmt.Errorf("marks: the mark of slot %d is in cells %d and %d", m.slot, i, i^1)
		}
	}
	return nil
}

// stagedCovered reports whether q.staged has the bit of every staged add's tag.
func stagedCovered[T comparable](q *Queue[T]) bool {
	for _, a := range q.adds {
		if !a.done && q.staged.Load()&(uint64(1)<<(a.tag%64)) == 0 {
			return false
		}
	}
	return true
}
