package workqueue

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
)

// published reports whether item's mark is in the table, waiting at priority prio or
// higher, as an adder sees it.
func published[T comparable](q *Queue[T], item T, prio int) bool {
	return q.c.waiting(item, tagOf(q.seed, item), prio)
}

// mustGet takes the next ready item and checks it is want.
func mustGet[T comparable](t *testing.T, q *Queue[T], want T) {
	t.Helper()
	got, err := q.Get(doneCtx)
	if err != nil || got != want {
		t.Fatalf("Get = %v, %v; want %v", got, err, want)
	}
}

// TestDuplicateFastPath walks one item through the states the dedup fast path mirrors:
// published once a duplicate add is seen, waiting while queued, idle while processing,
// waiting again when added during processing, and never taken for a duplicate when it
// would not be one.
func TestDuplicateFastPath(t *testing.T) {
	q := New(Config[string]{})
	defer q.ShutDown()
	q.Add("a")
	q.Len()
	if published(q, "a", 0) {
		t.Fatal("published before any duplicate")
	}
	q.Add("a")
	q.Len() // applies the duplicate, which publishes "a"
	checkInvariants(t, q)
	if !published(q, "a", 0) || published(q, "a", 1) || published(q, "b", 0) {
		t.Fatal(`"a" not published as waiting at priority 0 only`)
	}
	q.Add("a")
	if n := q.nadds.Load(); n != 0 {
		t.Fatalf("a duplicate was staged (%d staged adds)", n)
	}
	mustGet(t, q, "a")
	if published(q, "a", 0) {
		t.Fatal("published as waiting while processing")
	}
	q.Add("a") // during processing: must be handed out again after Done
	q.Len()
	checkInvariants(t, q)
	if !published(q, "a", 0) {
		t.Fatal("not published as waiting once added during processing")
	}
	q.Add("a")
	q.Done("a")
	checkInvariants(t, q)
	mustGet(t, q, "a")
	q.Done("a")
	if n := q.Len(); n != 0 || published(q, "a", 0) {
		t.Fatalf("%d ready after the last Done, published %v", n, published(q, "a", 0))
	}
	checkInvariants(t, q)

	// Kept finished, the item keeps its mark: added again, it is published as waiting
	// without a new duplicate.
	q.Add("a")
	q.Len()
	if !published(q, "a", 0) {
		t.Fatal("a cached item added again is not published")
	}
	mustGet(t, q, "a")
	q.Done("a")
	checkInvariants(t, q)
}

// TestDuplicateFastPathPriority: an add at a higher priority than the item waits at is not
// a duplicate, nor is an add at priority 0 of an item waiting at a negative one.
func TestDuplicateFastPathPriority(t *testing.T) {
	q := New(Config[string]{})
	defer q.ShutDown()
	for range 2 {
		q.AddWithOptions("low", AddOptions{Priority: -2})
		q.Add("mid")
	}
	q.Len()
	checkInvariants(t, q)
	if !published(q, "low", -2) || published(q, "low", 0) || !published(q, "mid", 0) {
		t.Fatal("marks do not give the priorities the items wait at")
	}
	q.AddWithOptions("mid", AddOptions{Priority: -5}) // a duplicate at a lower priority
	q.Add("low")                                      // raises "low" to 0, behind "mid"
	q.AddWithOptions("mid", AddOptions{Priority: 3})  // raises "mid" to 3
	q.Len()
	checkInvariants(t, q)
	if !published(q, "mid", 3) || !published(q, "low", 0) {
		t.Fatal("raised priorities not published")
	}
	mustGet(t, q, "mid")
	if published(q, "mid", math.MinInt) {
		t.Fatal("an item being processed is published as waiting at the lowest priority")
	}
	mustGet(t, q, "low")
	q.Done("mid")
	q.Done("low")
	checkInvariants(t, q)
}

// collide returns three distinct items that share a pair of cells of the marks table.
func collide(q *Queue[string]) (string, string, string) {
	seen := map[uint32][]string{}
	for i := 0; ; i++ {
		k := fmt.Sprint("item-", i)
		pair := tagOf(q.seed, k) & marksMask >> 1
		if seen[pair] = append(seen[pair], k); len(seen[pair]) == 3 {
			return seen[pair][0], seen[pair][1], seen[pair][2]
		}
	}
}

// TestDuplicateFastPathCollision: three items of one pair of cells take turns in it: a
// waiting item is never evicted, an idle one is, and none is ever taken for another.
func TestDuplicateFastPathCollision(t *testing.T) {
	q := New(Config[string]{})
	defer q.ShutDown()
	x, y, z := collide(q)
	for _, k := range []string{x, x, y, y, z, z} { // x and y wait in the pair: z stays out
		q.Add(k)
	}
	q.Len()
	checkInvariants(t, q)
	if !published(q, x, 0) || !published(q, y, 0) || published(q, z, 0) {
		t.Fatal("a waiting item was evicted from its cells, or one was not published")
	}
	mustGet(t, q, x) // x no longer waits
	q.Add(z)         // a duplicate of z: z takes x's cell
	q.Len()
	checkInvariants(t, q)
	if published(q, x, 0) || !published(q, y, 0) || !published(q, z, 0) {
		t.Fatal("the idle item was not replaced")
	}
	q.Add(x) // x is processing: not a duplicate, and not z's
	q.Done(x)
	mustGet(t, q, y)
	mustGet(t, q, z)
	mustGet(t, q, x)
	for _, k := range []string{x, y, z} {
		q.Done(k)
	}
	if n := q.Len(); n != 0 {
		t.Fatalf("%d ready at the end", n)
	}
	checkInvariants(t, q)
}

// TestDuplicateFastPathReleased: an item dropped from the queue loses its mark, and the
// item that reuses its slot is not taken for it.
func TestDuplicateFastPathReleased(t *testing.T) {
	q := New(Config[string]{KeepFinished: -1})
	defer q.ShutDown()
	q.Add("a")
	q.Add("a")
	mustGet(t, q, "a")
	q.Done("a") // released: nothing is kept
	checkInvariants(t, q)
	if len(q.c.free) != 1 {
		t.Fatalf("%d free slots, want 1", len(q.c.free))
	}
	q.Add("b")
	q.Add("b")
	q.Len()
	checkInvariants(t, q)
	if published(q, "a", 0) || !published(q, "b", 0) {
		t.Fatal(`"a" still published, or "b" not`)
	}
	q.Add("a")
	if n := q.Len(); n != 2 {
		t.Fatalf("%d ready, want 2", n)
	}
	mustGet(t, q, "b")
	mustGet(t, q, "a")
	checkInvariants(t, q)

	// Two items of one pair of cells, one of them in its neighbour cell: released, both
	// leave the table.
	x, y, _ := collide(q)
	for _, k := range []string{x, x, y, y} {
		q.Add(k)
	}
	mustGet(t, q, x)
	mustGet(t, q, y)
	q.Done(x)
	q.Done(y)
	checkInvariants(t, q)
	if published(q, x, math.MinInt+1) || published(q, y, math.MinInt+1) {
		t.Fatal("released items still published")
	}
}

// TestDuplicateFastPathConcurrent: producers add a few hot items as fast as they can
// while workers process them, so most adds take the fast path while the items change
// state under it. Every item's last processing must see its last add (no add is lost to a
// mark that was stale), and no item is held by two workers.
func TestDuplicateFastPathConcurrent(t *testing.T) {
	const items, producers, workers, addsEach = 64, 4, 4, 20000
	q := New(Config[int]{})
	var adds, seen [items]atomic.Int64
	var held [items]atomic.Bool
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				item, err := q.Get(context.Background())
				if err != nil {
					return
				}
				if !held[item].CompareAndSwap(false, true) {
					t.Errorf("item %d handed to two workers", item)
				}
				seen[item].Store(adds[item].Load())
				held[item].Store(false)
				q.Done(item)
			}
		})
	}
	var pwg sync.WaitGroup
	for p := range producers {
		pwg.Go(func() {
			for i := range addsEach {
				item := (i*7 + p) % items
				adds[item].Add(1) // counted before the add takes effect
				q.Add(item)
			}
		})
	}
	pwg.Wait()
	if err := q.ShutDownWithDrain(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i := range items {
		if a, s := adds[i].Load(), seen[i].Load(); a != s {
			t.Errorf("item %d: last processing saw %d adds of %d", i, s, a)
		}
	}
	if q.c.table.Load() == nil {
		t.Error("no item was ever published: the fast path was not exercised")
	}
}
