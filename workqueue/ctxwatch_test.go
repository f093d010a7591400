package workqueue

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"weak"
)

// waitBlocked hands item to a Get with ctx that blocks first, and checks it got it.
func waitBlocked(t *testing.T, q *Queue[string], ctx context.Context, item string) {
	t.Helper()
	got := make(chan string)
	go func() {
		v, err := q.Get(ctx)
		if err != nil {
			t.Errorf("Get: %v", err)
		}
		got <- v
	}()
	synctest.Wait()
	if n := q.nwait.Load(); n != 1 {
		t.Fatalf("%d Gets waiting, want 1", n)
	}
	q.Add(item)
	if v := <-got; v != item {
		t.Fatalf("Get = %q, want %q", v, item)
	}
	q.Done(item)
}

// getInto runs a Get of q with ctx in a goroutine of its own, and sends its error
// to errs.
func getInto[T comparable](q *Queue[T], ctx context.Context, errs chan<- error) {
	go func() {
		_, err := q.Get(ctx)
		errs <- err
	}()
}

func watched[T comparable](q *Queue[T]) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.watches)
}

// TestWatchedContext: a context Gets wait with again and again is watched from the
// second wait on; its end still wakes the Gets waiting with it, with its error, and
// only those; the watch ends with it.
func TestWatchedContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		defer q.ShutDown()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		waitBlocked(t, q, ctx, "a")
		if n := watched(q); n != 0 {
			t.Fatalf("%d contexts watched after one wait, want 0", n)
		}
		waitBlocked(t, q, ctx, "b")
		if n := watched(q); n != 1 {
			t.Fatalf("%d contexts watched after two waits, want 1", n)
		}
		// A context derived with a value shares the Done channel: the same watch.
		vctx := context.WithValue(ctx, struct{}{}, 1)
		waitBlocked(t, q, vctx, "c")
		if n := watched(q); n != 1 {
			t.Fatalf("%d contexts watched, want 1", n)
		}

		errs := make(chan error, 3)
		for _, c := range []context.Context{ctx, vctx, context.Background()} {
			getInto(q, c, errs)
		}
		synctest.Wait()
		cancel()
		synctest.Wait()
		for range 2 {
			if err := <-errs; !errors.Is(err, context.Canceled) {
				t.Fatalf("Get = %v, want context.Canceled", err)
			}
		}
		if n := watched(q); n != 0 {
			t.Fatalf("%d contexts watched after the context ended, want 0", n)
		}
		// The Get with another context still waits, and gets the next item.
		if n := q.nwait.Load(); n != 1 {
			t.Fatalf("%d Gets waiting, want 1", n)
		}
		q.Add("d")
		if err := <-errs; err != nil {
			t.Fatalf("Get = %v, want d", err)
		}
		q.Done("d")
		checkInvariants(t, q)
	})
}

// TestContextPerGetNotWatched: contexts made for one Get each (a timeout per call) are
// not watched, and their deadlines still end the Gets.
func TestContextPerGetNotWatched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		defer q.ShutDown()
		for range 5 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if _, err := q.Get(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Get = %v, want DeadlineExceeded", err)
			}
			cancel()
		}
		if n := watched(q); n != 0 {
			t.Fatalf("%d contexts watched, want 0", n)
		}
		checkInvariants(t, q)
	})
}

// TestWatchesBounded: at most maxWatches contexts are watched; the Gets of others
// still end with their contexts.
func TestWatchesBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		defer q.ShutDown()
		var cancels []context.CancelFunc
		var ctxs []context.Context
		for range maxWatches + 2 {
			ctx, cancel := context.WithCancel(context.Background())
			ctxs, cancels = append(ctxs, ctx), append(cancels, cancel)
			waitBlocked(t, q, ctx, "x")
			waitBlocked(t, q, ctx, "x")
		}
		if n := watched(q); n != maxWatches {
			t.Fatalf("%d contexts watched, want %d", n, maxWatches)
		}
		errs := make(chan error, len(ctxs))
		for _, ctx := range ctxs {
			getInto(q, ctx, errs)
		}
		synctest.Wait()
		for _, cancel := range cancels {
			cancel()
		}
		for range ctxs {
			if err := <-errs; !errors.Is(err, context.Canceled) {
				t.Fatalf("Get = %v, want context.Canceled", err)
			}
		}
		synctest.Wait()
		if n := watched(q); n != 0 {
			t.Fatalf("%d contexts watched after they ended, want 0", n)
		}
		checkInvariants(t, q)
	})
}

// TestWatchesEndAtShutDown: once the queue is shut down and no Get waits, its watches
// are stopped: the context ending later runs nothing.
func TestWatchesEndAtShutDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		waitBlocked(t, q, ctx, "a")
		waitBlocked(t, q, ctx, "b")
		errs := make(chan error, 1)
		getInto(q, ctx, errs)
		synctest.Wait()
		q.ShutDown()
		if err := <-errs; !errors.Is(err, ErrShutDown) {
			t.Fatalf("Get = %v, want ErrShutDown", err)
		}
		q.mu.Lock()
		watches, last := q.watches, q.lastDone
		q.mu.Unlock()
		if watches != nil || last != nil {
			t.Fatalf("after ShutDown: watches %v, last context %v; want none", watches, last)
		}
		if context.AfterFunc(ctx, func() {})() != true {
			t.Fatal("the context is done")
		}
		// After the shut-down, Gets may still wait for an item in flight that was added
		// again: a new context is not watched then, and ends its Gets all the same.
		q2 := New(Config[string]{})
		waitBlocked(t, q2, ctx, "a")
		waitBlocked(t, q2, ctx, "b") // ctx is watched
		q2.Add("c")
		c, _ := q2.Get(ctx)
		q2.Add("c")
		q2.ShutDown()
		ctx2, cancel2 := context.WithCancel(context.Background())
		errs2 := make(chan error, 2)
		for range 2 {
			getInto(q2, ctx2, errs2)
			synctest.Wait()
		}
		if n := watched(q2); n != 1 {
			t.Fatalf("%d contexts watched after ShutDown, want 1 (the one watched before)", n)
		}
		cancel2()
		for range 2 {
			if err := <-errs2; !errors.Is(err, context.Canceled) {
				t.Fatalf("Get = %v, want context.Canceled", err)
			}
		}
		q2.Done(c) // queues c again: it was added again in flight
		if v, err := q2.Get(ctx); v != c || err != nil {
			t.Fatalf("Get = %q, %v; want %q", v, err, c)
		}
		q2.Done(c)
		if _, err := q2.Get(ctx); !errors.Is(err, ErrShutDown) {
			t.Fatalf("Get = %v, want ErrShutDown", err)
		}
		if n := watched(q2); n != 0 {
			t.Fatalf("%d contexts watched once the shut-down queue ran dry, want 0", n)
		}
	})
}

// TestWatchDoesNotKeepQueue: a watch holds its queue weakly: a queue dropped without
// ShutDown is collected while the context it watched lives on.
func TestWatchDoesNotKeepQueue(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wq := func() weak.Pointer[Queue[string]] {
		q := New(Config[string]{})
		for i := range 2 {
			got := make(chan error)
			getInto(q, ctx, got)
			for q.nwait.Load() == 0 {
				time.Sleep(time.Millisecond)
			}
			q.Add("a")
			if err := <-got; err != nil {
				t.Fatalf("Get %d: %v", i, err)
			}
			q.Done("a")
		}
		if n := watched(q); n != 1 {
			t.Fatalf("%d contexts watched, want 1", n)
		}
		return weak.Make(q)
	}()
	for range 10 {
		runtime.GC()
		if wq.Value() == nil {
			return
		}
	}
	t.Fatal("the queue was not collected: its context's watch keeps it")
}

// TestWatchedCancelStress: Gets of many workers on one watched context, adds, and the
// context's end race; every item added is handed out exactly once, and every Get ends.
func TestWatchedCancelStress(t *testing.T) {
	for round := range 50 {
		q := New(Config[int]{})
		ctx, cancel := context.WithCancel(context.Background())
		const workers, items = 8, 2000
		var mu sync.Mutex
		seen := make(map[int]int)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				c := ctx
				for {
					v, err := q.Get(c)
					if errors.Is(err, ErrShutDown) {
						return
					}
					if errors.Is(err, context.Canceled) {
						c = context.Background() // go on without a context that ends
						continue
					}
					if err != nil {
						t.Errorf("Get: %v", err)
						return
					}
					mu.Lock()
					seen[v]++
					mu.Unlock()
					q.Done(v)
				}
			})
		}
		for i := range items {
			q.Add(i)
			if i == items/2+round*10 {
				cancel()
			}
			if i%64 == 0 {
				runtime.Gosched()
			}
		}
		if err := q.ShutDownWithDrain(context.Background()); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		cancel()
		for i := range items {
			if seen[i] != 1 {
				t.Fatalf("round %d: item %d handed out %d times", round, i, seen[i])
			}
		}
		checkInvariants(t, q)
	}
}

// TestCanceledGetsKeepOrder: Gets that give up waiting (each context its own, and a run
// of Gets sharing a watched context) leave the others in the order they began to wait:
// items go to the Get that began last among those left, and the waiters' bookkeeping
// (holes left by removals, squeezed out later) stays consistent throughout.
func TestCanceledGetsKeepOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 300
		q := New(Config[int]{})
		defer q.ShutDown()
		shared, cancelShared := context.WithCancel(context.Background())
		defer cancelShared()
		cancels := make([]context.CancelFunc, n)
		results := make([]chan int, n)
		for i := range n {
			ctx := shared
			if i < 150 || i >= 160 { // Gets 150..159 share a context, watched from the second
				ctx, cancels[i] = context.WithCancel(context.Background())
			}
			results[i] = make(chan int, 1)
			go func() {
				v, err := q.Get(ctx)
				if err != nil {
					v = -1
				}
				results[i] <- v
			}()
			synctest.Wait() // Get i waits before Get i+1 starts
		}
		if w := watched(q); w != 1 {
			t.Fatalf("%d contexts watched, want 1", w)
		}
		r := rand.New(rand.NewPCG(3, 7))
		gone := make([]bool, n)
		order := r.Perm(n)
		for k, i := range order[:2*n/3] {
			if cancels[i] == nil {
				continue
			}
			cancels[i]()
			gone[i] = true
			if k == n/3 {
				cancelShared()
				for j := 150; j < 160; j++ {
					gone[j] = true
				}
			}
			synctest.Wait()
			if k%7 == 0 {
				checkInvariants(t, q)
			}
		}
		for i := range n {
			if gone[i] {
				if v := <-results[i]; v != -1 {
					t.Fatalf("Get %d, canceled, returned item %d", i, v)
				}
			}
		}
		checkInvariants(t, q)
		for i := n - 1; i >= 0; i-- {
			if gone[i] {
				continue
			}
			q.Add(1000 + i)
			synctest.Wait()
			select {
			case v := <-results[i]:
				if v != 1000+i {
					t.Fatalf("Get %d returned %d, want %d", i, v, 1000+i)
				}
			default:
				t.Fatalf("the item added for Get %d (the last left waiting) did not reach it", i)
			}
			q.Done(1000 + i)
		}
		checkInvariants(t, q)
	})
}
