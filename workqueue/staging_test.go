package workqueue

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestDoneLeavesUnrelatedStagedAdds: a Done that staged adds cannot affect leaves them
// staged (no second take of the staging lock), and they still apply in order.
func TestDoneLeavesUnrelatedStagedAdds(t *testing.T) {
	q := New(Config[string]{})
	defer q.ShutDown()
	y := "y"
	for i := 0; tagOf(q.seed, y)%64 == tagOf(q.seed, "x")%64; i++ {
		y = fmt.Sprint("y", i) // one whose bit in staged is not x's
	}
	q.Add("x")
	mustGet(t, q, "x")
	q.Add(y) // staged: no Get waits
	if n := q.nadds.Load(); n != 1 {
		t.Fatalf("%d adds staged, want 1", n)
	}
	q.Done("x")
	if n := q.nadds.Load(); n != 1 {
		t.Fatal("Done applied an unrelated staged add")
	}
	checkInvariants(t, q)
	mustGet(t, q, y)
	q.Done(y)
	if n := q.Len(); n != 0 {
		t.Fatalf("%d ready, want 0", n)
	}
}

// TestDoneAppliesRelatedStagedAdds: a Done applies the staged adds before anything else
// when the item was added again (staged or applied) during its processing, so the item is
// queued behind the adds made before the Done.
func TestDoneAppliesRelatedStagedAdds(t *testing.T) {
	for _, applied := range []bool{false, true} {
		q := New(Config[string]{})
		q.Add("x")
		mustGet(t, q, "x")
		q.Add("x") // added again during processing
		if applied {
			q.Len() // applies it: x is redirty
		}
		q.Add("y")
		q.Add("z")
		q.Done("x")
		checkInvariants(t, q)
		for _, want := range []string{"y", "z", "x"} {
			mustGet(t, q, want)
			q.Done(want)
		}
		if n := q.Len(); n != 0 {
			t.Fatalf("applied %v: %d ready at the end", applied, n)
		}
		q.ShutDown()
	}
}

// otherBit returns a string, starting from base, whose bit in staged differs from those of
// the given items.
func otherBit(q *Queue[string], base string, items ...string) string {
	s := base
	for i := 0; ; i++ {
		clash := false
		for _, it := range items {
			clash = clash || tagOf(q.seed, s)%64 == tagOf(q.seed, it)%64
		}
		if !clash {
			return s
		}
		s = fmt.Sprint(base, i)
	}
}

// TestGetAppliesRelatedStagedAdds: a Get sees the adds staged before it: a duplicate of the
// item it hands out, staged while that item waited, leaves it processed once; a staged add
// of a higher priority goes first; a staged add that opens a fairness lane takes its turn
// in the round-robin from the moment it was made.
func TestGetAppliesRelatedStagedAdds(t *testing.T) {
	t.Run("duplicate of the next item", func(t *testing.T) {
		q := New(Config[string]{})
		defer q.ShutDown()
		q.Add("a")
		q.Add("b")
		mustGet(t, q, "a")
		q.Add("b") // staged while b waits: a duplicate
		mustGet(t, q, "b")
		q.Done("b")
		q.Done("a")
		if n := q.Len(); n != 0 {
			t.Fatalf("b was queued again by its own duplicate: %d ready", n)
		}
	})
	t.Run("priority", func(t *testing.T) {
		q := New(Config[string]{})
		defer q.ShutDown()
		b := otherBit(q, "b", "a")
		p := otherBit(q, "p", b)
		q.Add("a")
		q.Add(b)
		mustGet(t, q, "a")
		q.AddWithOptions(p, AddOptions{Priority: 5}) // staged, ahead of b
		mustGet(t, q, p)
		mustGet(t, q, b)
	})
	t.Run("fairness lanes", func(t *testing.T) {
		q := New(Config[string]{FairnessKey: func(s string) string { return s[:1] }})
		defer q.ShutDown()
		// Lane x alone; a staged add opens lane z before x2 is handed out, so x goes
		// behind z after x2: z1 comes before x3.
		q.Add("x1")
		q.Add("x2")
		q.Add("x3")
		mustGet(t, q, "x1")
		q.Add("z1")
		for _, want := range []string{"x2", "z1", "x3"} {
			mustGet(t, q, want)
		}
	})
}

// TestGetAppliesStagedAddsAcrossLevels: with items at two priorities the next item may come
// from a level aging promotes; a duplicate of that item, staged while it waits, still leaves
// it processed once.
func TestGetAppliesStagedAddsAcrossLevels(t *testing.T) {
	q := New(Config[string]{AgingLimit: 1})
	defer q.ShutDown()
	p2 := otherBit(q, "p2", "a")
	q.Add("a")
	q.AddWithOptions("p1", AddOptions{Priority: 5})
	q.AddWithOptions(p2, AddOptions{Priority: 5})
	mustGet(t, q, "p1") // the highest level first; level 0 has now waited through 1 handout
	q.Add("a")          // staged while a waits: a duplicate
	mustGet(t, q, "a")  // aging serves level 0 now
	q.Done("a")
	q.Done("p1")
	mustGet(t, q, p2)
	q.Done(p2)
	if n := q.Len(); n != 0 {
		t.Fatalf("a was queued again by its own duplicate: %d ready", n)
	}
}

// TestDoneWhileLockTakenIsStaged: a Done that finds the queue's lock taken does not wait
// for it: it stages itself with the adds and returns, and the next holder of the lock
// applies it in order with them. An item added again during its processing (the add
// staged too) is then queued again behind the items already waiting; one that was not is
// finished.
func TestDoneWhileLockTakenIsStaged(t *testing.T) {
	for _, requeue := range []bool{false, true} {
		q := New(Config[string]{})
		q.Add("x")
		q.Add("y")
		mustGet(t, q, "x")
		if requeue {
			q.Add("x") // staged: no Get waits
		}
		q.mu.Lock() // another holder of the lock
		doneWithoutLock(t, q, "x")
		q.amu.Lock()
		staged := len(q.adds) > 0 && q.adds[len(q.adds)-1].done && q.adds[len(q.adds)-1].item == "x"
		q.amu.Unlock()
		inflight := q.c.inflight
		q.mu.Unlock()
		if !staged || inflight != 1 {
			t.Fatalf("requeue %v: Done staged %v, %d in flight before the next holder; want staged, 1", requeue, staged, inflight)
		}
		want := []string{"y"}
		if requeue {
			want = append(want, "x")
		}
		for _, w := range want {
			mustGet(t, q, w)
			q.Done(w)
		}
		if n := q.Len(); n != 0 {
			t.Fatalf("requeue %v: %d ready at the end", requeue, n)
		}
		checkInvariants(t, q)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := q.ShutDownWithDrain(ctx) // nothing in flight: at once
		cancel()
		if err != nil {
			t.Fatalf("requeue %v: drain: %v", requeue, err)
		}
	}
}

// TestSecondDoneOfStagedDoneDoesNothing: a Done of an item whose Done is staged (a second
// Done, a caller's mistake) must do nothing, even when the item was added again during
// its processing: applying the staged Done queues it again, and the second Done must not
// then finish the queued item.
func TestSecondDoneOfStagedDoneDoesNothing(t *testing.T) {
	q := New(Config[string]{})
	q.Add("x")
	q.Add("y")
	mustGet(t, q, "x")
	q.Add("x")         // staged
	mustGet(t, q, "y") // applies it: x is in flight and added again
	q.mu.Lock()
	doneWithoutLock(t, q, "x") // staged: the lock is taken
	q.mu.Unlock()
	q.Done("x") // the second
	checkInvariants(t, q)
	q.Done("y")
	mustGet(t, q, "x")
	q.Done("x")
	if n := q.Len(); n != 0 {
		t.Fatalf("%d ready at the end", n)
	}
	checkInvariants(t, q)
	q.ShutDown()
}

// doneWithoutLock calls q.Done(item) while the caller holds q.mu, and fails if the Done
// waits for the lock instead of staging itself. The caller still holds q.mu after.
func doneWithoutLock(t *testing.T, q *Queue[string], item string) {
	t.Helper()
	returned := make(chan struct{})
	go func() {
		q.Done(item)
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		q.mu.Unlock()
		<-returned
		q.mu.Lock()
		t.Fatalf("Done(%q) waited for the lock", item)
	}
}

// TestDirectModeFollowsReAdds: workers adding the item they hold before its Done (a
// reconcile that asks to run again) turn direct mode on, in which such an add applies
// itself instead of staging, so the Done finds nothing staged; adds of items not in flight
// turn it off again, and are staged. Items come back in the order they were re-added.
func TestDirectModeFollowsReAdds(t *testing.T) {
	q := New(Config[string]{})
	defer q.ShutDown()
	const n = 20
	for i := range n {
		q.Add(fmt.Sprint("k", i))
	}
	for round := range 3 {
		for i := range n {
			want := fmt.Sprint("k", i)
			mustGet(t, q, want)
			q.Add(want) // added again while in flight
			if round > 0 || i > 0 {
				if !q.direct.Load() {
					t.Fatalf("round %d item %d: direct mode off while workers re-add", round, i)
				}
				if q.nadds.Load() != 0 {
					t.Fatalf("round %d item %d: a re-add in direct mode was staged", round, i)
				}
			}
			q.Done(want)
			checkInvariants(t, q)
		}
	}
	for i := range directMisses {
		if !q.direct.Load() {
			t.Fatalf("direct mode ended after %d adds of new items, want %d", i, directMisses)
		}
		q.Add(fmt.Sprint("new", i))
	}
	if q.direct.Load() {
		t.Fatalf("direct mode still on after %d adds of new items", directMisses)
	}
	q.Add("staged")
	if q.nadds.Load() != 1 {
		t.Fatal("an add of a new item out of direct mode was not staged")
	}
	checkInvariants(t, q)
	var want []string
	for i := range n {
		want = append(want, fmt.Sprint("k", i))
	}
	for i := range directMisses {
		want = append(want, fmt.Sprint("new", i))
	}
	for _, w := range append(want, "staged") {
		mustGet(t, q, w)
		q.Done(w)
	}
	if l := q.Len(); l != 0 {
		t.Fatalf("%d ready at the end", l)
	}
}

// TestDirectModeFollowsOneAtATime: adds that each find the queue empty (every item taken
// before the next is added) turn direct mode on after directEmpties of them, and are
// then applied at once instead of staged; adds that find items ready (a producer
// ahead of the workers) turn it off after directMisses, and are staged again.
func TestDirectModeFollowsOneAtATime(t *testing.T) {
	q := New(Config[string]{})
	defer q.ShutDown()
	for i := range directEmpties + 3 {
		item := fmt.Sprint("one", i)
		q.Add(item)
		if i >= directEmpties && q.nadds.Load() != 0 {
			t.Fatalf("add %d into an empty queue staged after %d such adds", i, directEmpties)
		}
		if i < directEmpties-1 && q.direct.Load() {
			t.Fatalf("direct mode on after %d adds into an empty queue, want %d", i+1, directEmpties)
		}
		mustGet(t, q, item)
		q.Done(item)
		checkInvariants(t, q)
	}
	if !q.direct.Load() {
		t.Fatal("direct mode off after adds one at a time")
	}
	// A producer ahead of the workers: each add finds items ready.
	q.Add("first")
	for i := range directMisses {
		if !q.direct.Load() {
			t.Fatalf("direct mode ended after %d adds into a non-empty queue, want %d", i, directMisses)
		}
		q.Add(fmt.Sprint("burst", i))
	}
	if q.direct.Load() {
		t.Fatalf("direct mode still on after %d adds into a non-empty queue", directMisses)
	}
	q.Add("staged")
	if q.nadds.Load() != 1 {
		t.Fatal("an add into a non-empty queue out of direct mode was not staged")
	}
	checkInvariants(t, q)
	want := []string{"first"}
	for i := range directMisses {
		want = append(want, fmt.Sprint("burst", i))
	}
	for _, w := range append(want, "staged") {
		mustGet(t, q, w)
		q.Done(w)
	}
	checkInvariants(t, q)
}
