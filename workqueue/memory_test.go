package workqueue

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("namespace-%d/object-%d", i%97, i)
	}
	return out
}

// TestSteadyStateAllocatesNothing: once warmed up, Add, Get and Done of string keys make no
// allocation, with or without the finished-item cache and with a blocking Get.
func TestSteadyStateAllocatesNothing(t *testing.T) {
	ks := keys(1000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, keep := range []int{0, -1} {
		q := New(Config[string]{KeepFinished: keep})
		i := 0
		cycle := func() {
			q.Add(ks[i%len(ks)])
			q.Add(ks[(i+1)%len(ks)])
			item, _ := q.Get(ctx)
			q.Done(item)
			item, _ = q.Get(ctx)
			q.Done(item)
			i += 2
		}
		for range 5000 {
			cycle()
		}
		if a := testing.AllocsPerRun(2000, cycle); a != 0 {
			t.Errorf("KeepFinished %d: %v allocations per Add/Get/Done cycle", keep, a)
		}
		q.ShutDown()
	}

	// A Get that blocks and is woken by Add (the waiter comes from a pool).
	q := New(Config[string]{})
	defer q.ShutDown()
	got := make(chan struct{})
	go func() {
		for {
			item, err := q.Get(ctx)
			if err != nil {
				return
			}
			q.Done(item)
			got <- struct{}{}
		}
	}()
	handoff := func() {
		q.Add("x")
		<-got
	}
	for range 1000 {
		handoff()
	}
	if a := testing.AllocsPerRun(1000, handoff); a > 0.05 {
		t.Errorf("%v allocations per blocking Get woken by Add", a)
	}
}

// TestKeepFinishedBound: finished items are remembered up to KeepFinished, oldest dropped
// first, and not at all when it is negative. Every other add is a re-add of an item just
// finished, so the cache stays in full mode.
func TestKeepFinishedBound(t *testing.T) {
	ks := keys(10_000)
	for _, tc := range []struct{ keep, want int }{{100, 100}, {-1, 0}, {0, DefaultKeepFinished}} {
		q := New(Config[string]{KeepFinished: tc.keep})
		for i, k := range ks {
			q.Add(k)
			item, _ := q.Get(doneCtx)
			q.Done(item)
			if i%2 == 1 { // a hit: the item finished just before comes back
				q.Add(ks[i-1])
				item, _ := q.Get(doneCtx)
				q.Done(item)
			}
		}
		for _, k := range ks[:50] { // more load than the bound only if keep is tiny
			q.Add(k)
		}
		for range 50 {
			item, _ := q.Get(doneCtx)
			q.Done(item)
		}
		want := min(tc.want, len(ks))
		q.mu.Lock()
		n, cached := q.c.idx.n, q.c.cached
		q.mu.Unlock()
		slack := 0 // over the limit, the oldest are dropped in batches
		if tc.keep > 0 && want < len(ks) {
			slack = evictBatch
		}
		if n != cached || cached < want || cached > want+slack {
			t.Errorf("KeepFinished %d: %d indexed, %d cached; want %d (+%d)", tc.keep, n, cached, want, slack)
		}
		checkInvariants(t, q)
		q.ShutDown()
		q.mu.Lock()
		n = q.c.idx.n
		q.mu.Unlock()
		if n != 0 {
			t.Errorf("KeepFinished %d: %d items indexed after ShutDown", tc.keep, n)
		}
	}
}

// TestKeepFinishedIgnoresPeak: a peak of 5,000 items held at once does not raise the
// number of finished items kept above KeepFinished.
func TestKeepFinishedIgnoresPeak(t *testing.T) {
	const keep = 100
	ks := keys(5_000)
	q := New(Config[string]{KeepFinished: keep})
	defer q.ShutDown()
	for round := range 3 {
		for _, k := range ks {
			q.Add(k)
		}
		for range ks {
			item, _ := q.Get(doneCtx)
			q.Done(item)
		}
		q.mu.Lock()
		n, cached, sampled := q.c.idx.n, q.c.cached+q.c.ndying, q.c.sampled
		q.mu.Unlock()
		if n != cached || cached > keep+evictBatch {
			t.Fatalf("round %d: %d indexed, %d cached (sampled %v); want at most %d", round, n, cached, sampled, keep+evictBatch)
		}
		checkInvariants(t, q)
	}
}

// addGetDone adds k, takes the item and finishes it.
func addGetDone(q *Queue[string], k string) {
	q.Add(k)
	item, _ := q.Get(doneCtx)
	q.Done(item)
}

// cacheState returns how many finished items q's cache keeps and whether it samples.
func cacheState(q *Queue[string]) (int, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.c.cached, q.c.sampled
}

// TestKeepFinishedAdapts: a stream of distinct items, which never hits the cache, switches
// it to sampled mode (a sixteenth of the items, a sixteenth of the limit); items coming
// back switch it to full mode again.
func TestKeepFinishedAdapts(t *testing.T) {
	const keep = 1000
	ks := keys(40_000)
	q := New(Config[string]{KeepFinished: keep})
	defer q.ShutDown()
	cycle := func(k string) { addGetDone(q, k) }
	cached := func() (int, bool) { return cacheState(q) }
	for _, k := range ks[:20_000] {
		cycle(k)
	}
	if n, sampled := cached(); !sampled || n > keep/cacheSample+evictBatch {
		t.Fatalf("after 20,000 distinct items: %d cached, sampled %v; want at most %d, sampled", n, sampled, keep/cacheSample+evictBatch)
	}
	checkInvariants(t, q)
	// Now every item comes back once, 200 items after its first time: well within the
	// limit, so the sample hits half the time.
	for i, k := range ks[20_000:] {
		cycle(k)
		if i >= 200 {
			cycle(ks[20_000+i-200])
		}
	}
	if n, sampled := cached(); sampled || n < keep {
		t.Fatalf("after re-adds: %d cached, sampled %v; want at least %d, full", n, sampled, keep)
	}
	checkInvariants(t, q)
}

// TestKeepFinishedAdaptsUnderItsLimit: with KeepFinished far above the load, a stream
// of distinct items never fills the cache, so nothing is ever evicted; the adds that
// miss it count instead, and the cache switches to sampled mode after a window of them
// rather than keeping every item ever finished. Items coming back switch it back.
func TestKeepFinishedAdaptsUnderItsLimit(t *testing.T) {
	const keep = 1 << 20
	ks := keys(60_000)
	q := New(Config[string]{KeepFinished: keep})
	defer q.ShutDown()
	cycle := func(k string) { addGetDone(q, k) }
	cached := func() (int, bool) { return cacheState(q) }
	for _, k := range ks[:40_000] {
		cycle(k)
	}
	// A window of misses after a window of entries (2,048 items), then a sixteenth.
	if n, sampled := cached(); !sampled || n > 2*cacheWindow+40_000/cacheSample {
		t.Fatalf("after 40,000 distinct items under a limit of %d: %d cached, sampled %v; want sampled, at most %d", keep, n, sampled, 2*cacheWindow+40_000/cacheSample)
	}
	checkInvariants(t, q)
	for i, k := range ks[40_000:] {
		cycle(k)
		if i >= 200 {
			cycle(ks[40_000+i-200])
		}
	}
	if _, sampled := cached(); sampled {
		t.Fatal("items coming back did not switch the cache to full mode")
	}
	checkInvariants(t, q)
}

// TestMemoryGivenBack: after a peak of 20,000 items (half of them scheduled), a long
// stretch of light load (two epochs of 4·peak operations) makes the queue give its
// containers back, and the heap returns near where it started.
func TestMemoryGivenBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ks := keys(20_000)
		q := New(Config[string]{KeepFinished: -1})
		defer q.ShutDown()
		base := heapInUse()
		for i, k := range ks {
			if i%2 == 0 {
				q.Add(k)
			} else {
				q.AddAfter(k, time.Duration(i)*time.Millisecond)
			}
		}
		time.Sleep(time.Duration(len(ks)) * time.Millisecond)
		synctest.Wait()
		if n := q.Len(); n != len(ks) {
			t.Fatalf("%d ready, want %d", n, len(ks))
		}
		for range ks {
			item, _ := q.Get(doneCtx)
			q.Done(item)
		}
		peak := heapInUse()
		for i := range 9 * len(ks) { // light load: one item at a time
			q.Add(ks[i%100])
			item, _ := q.Get(doneCtx)
			q.Done(item)
		}
		q.mu.Lock()
		slots, heap := q.c.nslots, len(q.c.sched.over.chunks)*overSize
		for _, b := range q.c.sched.ring {
			heap += cap(b.els)
		}
		q.mu.Unlock()
		if slots > 1000 || heap > 1000 {
			t.Fatalf("after light load, %d slots and %d schedule elements still allocated", slots, heap)
		}
		if grown := int64(heapInUse()) - int64(base); grown > 1<<20 {
			t.Fatalf("heap %d bytes above the start after the peak went away (peak was %d above)", grown, int64(peak)-int64(base))
		}
		checkInvariants(t, q)
	})
}

// TestKeepFinishedOrder: the cache drops the least recently finished items first, and an
// item added again and finished again counts from its last finish (its earlier place in
// the cache is void).
func TestKeepFinishedOrder(t *testing.T) {
	const keep = 100
	ks := keys(300)
	q := New(Config[string]{KeepFinished: keep})
	defer q.ShutDown()
	cycle := func(k string) {
		q.Add(k)
		item, err := q.Get(doneCtx)
		if err != nil || item != k {
			t.Fatalf("Get = %q, %v; want %q", item, err, k)
		}
		q.Done(item)
	}
	indexed := func(k string) bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.c.find(k) != none
	}
	for _, k := range ks[:200] {
		cycle(k)
	}
	q.mu.Lock()
	cached := q.c.cached
	q.mu.Unlock()
	if cached < keep || cached > keep+evictBatch {
		t.Fatalf("%d cached, want %d to %d", cached, keep, keep+evictBatch)
	}
	for i, k := range ks[:200] {
		if want := i >= 200-cached; indexed(k) != want {
			t.Fatalf("key %d of 200 indexed: %v, want %v (%d cached)", i, !want, want, cached)
		}
	}
	// Revive the oldest cached item; after enough new ones to evict everything cached
	// before it, it is still kept and its old neighbours are gone.
	old := ks[200-cached]
	cycle(old)
	for _, k := range ks[200 : 200+keep-1] {
		cycle(k)
	}
	if !indexed(old) {
		t.Errorf("item finished %d items ago was dropped", keep)
	}
	if indexed(ks[200-cached+1]) {
		t.Errorf("older item still kept")
	}
	checkInvariants(t, q)
}

// TestKeepFinishedReAddAll: adding every cached item again (each leaves a stale element in
// the cache queue) keeps the cache's bookkeeping bounded, and each item is handed out once.
func TestKeepFinishedReAddAll(t *testing.T) {
	ks := keys(500)
	q := New(Config[string]{KeepFinished: 1000})
	defer q.ShutDown()
	for round := range 3 {
		for _, k := range ks {
			q.Add(k)
		}
		checkInvariants(t, q) // cache queue bounded with nothing cached
		seen := map[string]bool{}
		for range ks {
			item, err := q.Get(doneCtx)
			if err != nil || seen[item] {
				t.Fatalf("round %d: Get = %q, %v (seen before: %v)", round, item, err, seen[item])
			}
			seen[item] = true
			q.Done(item)
		}
		if n := q.Len(); n != 0 {
			t.Fatalf("round %d: %d items left", round, n)
		}
		checkInvariants(t, q)
		q.mu.Lock()
		cached, qlen := q.c.cached, len(q.c.cacheQ)
		q.mu.Unlock()
		if cached != len(ks) || qlen > 2*cached+compactMin {
			t.Fatalf("round %d: %d cached, cache queue %d", round, cached, qlen)
		}
	}
}
