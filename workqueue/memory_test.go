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

// TestKeepFinishedBound: finished items are remembered up to KeepFinished (or the peak
// load), oldest dropped first, and not at all when it is negative.
func TestKeepFinishedBound(t *testing.T) {
	ks := keys(10_000)
	for _, tc := range []struct{ keep, want int }{{100, 100}, {-1, 0}, {0, DefaultKeepFinished}} {
		q := New(Config[string]{KeepFinished: tc.keep})
		for _, k := range ks {
			q.Add(k)
			item, _ := q.Get(doneCtx)
			q.Done(item)
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
		n, cached := len(q.c.index), q.c.cached
		q.mu.Unlock()
		if n != want || cached != want {
			t.Errorf("KeepFinished %d: %d indexed, %d cached; want %d", tc.keep, n, cached, want)
		}
		checkInvariants(t, q)
		q.ShutDown()
		q.mu.Lock()
		n = len(q.c.index)
		q.mu.Unlock()
		if n != 0 {
			t.Errorf("KeepFinished %d: %d items indexed after ShutDown", tc.keep, n)
		}
	}
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
		slots, heap := q.c.nslots, cap(q.c.heap)
		q.mu.Unlock()
		if slots > 1000 || heap > 1000 {
			t.Fatalf("after light load, %d slots and %d heap entries still allocated", slots, heap)
		}
		if grown := int64(heapInUse()) - int64(base); grown > 1<<20 {
			t.Fatalf("heap %d bytes above the start after the peak went away (peak was %d above)", grown, int64(peak)-int64(base))
		}
		checkInvariants(t, q)
	})
}
