package workqueue

// The conformance suite: one test (or table row) per semantic asserted by the unit tests of
// client-go's util/workqueue (v0.37.2: queue_test.go, delaying_queue_test.go,
// rate_limiting_queue_test.go, default_rate_limiters_test.go) and of controller-runtime's
// priority queue (v0.25.2: pkg/controller/priorityqueue/priorityqueue_test.go), adapted to
// this package's API and written anew. Each names the upstream test it covers. Where this
// package deliberately behaves otherwise, the test asserts this package's documented
// behaviour and says "Deviation:", what upstream does, and why.
//
// This file holds the plain queue (client-go queue_test.go); conformance_delay_test.go the
// delays and rate-limited adds, conformance_ratelimit_test.go the limiters, and
// conformance_priority_test.go the priority queue.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"weak"
)

// asyncGet is the outcome of a Get run in a goroutine.
type asyncGet[T comparable] struct {
	item T
	err  error
}

// getAsync runs Get(ctx) in a goroutine and returns the channel its outcome arrives on.
func getAsync[T comparable](ctx context.Context, q *Queue[T]) <-chan asyncGet[T] {
	res := make(chan asyncGet[T], 1)
	go func() {
		item, err := q.Get(ctx)
		res <- asyncGet[T]{item, err}
	}()
	return res
}

// stillBlocked fails the test if the Get behind res has returned. Call it inside a synctest
// bubble, where synctest.Wait lets the Get run as far as it can first.
func stillBlocked[T comparable](t *testing.T, res <-chan asyncGet[T]) {
	t.Helper()
	synctest.Wait()
	select {
	case r := <-res:
		t.Fatalf("Get returned %v, %v; want it still blocked", r.item, r.err)
	default:
	}
}

// shutDownOrDrain shuts q down with ShutDownWithDrain if drain is set, with ShutDown
// otherwise.
func shutDownOrDrain[T comparable](t *testing.T, q *Queue[T], drain bool) {
	t.Helper()
	if !drain {
		q.ShutDown()
		return
	}
	if err := q.ShutDownWithDrain(context.Background()); err != nil {
		t.Fatalf("ShutDownWithDrain: %v", err)
	}
}

// covers client-go TestBasic: 50 producers add their item 50 times each while 10 workers
// process; after ShutDown (or ShutDownWithDrain) a late add is never handed out, every
// worker ends with ErrShutDown and the queue is empty. Beyond upstream: no add made before
// the shut-down is lost (each item's last processing started after its last add), and a
// drain returns only when nothing is in flight.
func TestConformanceBasic(t *testing.T) {
	for _, drain := range []bool{false, true} {
		t.Run(fmt.Sprintf("drain=%v", drain), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const producers, consumers, addsEach, late = 50, 10, 50, -1
				q := New(Config[int]{})
				var adds, seen [producers]atomic.Int32
				var prod sync.WaitGroup
				for p := range producers {
					prod.Go(func() {
						for range addsEach {
							adds[p].Add(1)
							q.Add(p)
							time.Sleep(time.Millisecond)
						}
					})
				}
				var cons sync.WaitGroup
				for range consumers {
					cons.Go(func() {
						for {
							item, err := q.Get(context.Background())
							if err != nil {
								if !errors.Is(err, ErrShutDown) {
									t.Errorf("Get: %v", err)
								}
								return
							}
							if item == late {
								t.Errorf("handed out an item added after shut-down")
								q.Done(item)
								continue
							}
							seen[item].Store(adds[item].Load())
							time.Sleep(3 * time.Millisecond)
							q.Done(item)
						}
					})
				}
				prod.Wait()
				shutDownOrDrain(t, q, drain)
				if drain {
					if n := q.inFlight().Items; n != 0 {
						t.Fatalf("drain returned with %d items in flight", n)
					}
				}
				q.Add(late)
				cons.Wait()
				checkLen(t, q, 0, "at the end")
				for p := range producers {
					if a, s := adds[p].Load(), seen[p].Load(); a != s {
						t.Errorf("item %d: %d adds, last processing saw %d", p, a, s)
					}
				}
				checkInvariants(t, q)
			})
		})
	}
}

// covers client-go TestAddWhileProcessing: workers add each item they process back while
// processing it (up to twice per worker); with ShutDown or ShutDownWithDrain after the
// producers, every worker ends and nothing is left. Beyond upstream: an item is never held
// by two workers at once.
func TestConformanceAddWhileProcessing(t *testing.T) {
	for _, drain := range []bool{false, true} {
		t.Run(fmt.Sprintf("drain=%v", drain), func(t *testing.T) {
			const producers, consumers = 50, 10
			q := New(Config[int]{})
			var held [producers]atomic.Bool
			var prod sync.WaitGroup
			for p := range producers {
				prod.Go(func() { q.Add(p) })
			}
			var cons sync.WaitGroup
			for range consumers {
				cons.Go(func() {
					counts := map[int]int{}
					for {
						item, err := q.Get(context.Background())
						if err != nil {
							return
						}
						if !held[item].CompareAndSwap(false, true) {
							t.Errorf("item %d handed to two workers", item)
						}
						counts[item]++
						if counts[item] < 2 {
							q.Add(item)
						}
						held[item].Store(false)
						q.Done(item)
					}
				})
			}
			prod.Wait()
			shutDownOrDrain(t, q, drain)
			cons.Wait()
			checkLen(t, q, 0, "at the end")
			checkInvariants(t, q)
		})
	}
}

// TestConformanceSteps: the single-goroutine semantics of client-go's queue tests, as
// steps checked against the queue's invariants after each.
func TestConformanceSteps(t *testing.T) {
	tests := []struct {
		name  string
		steps []step
	}{
		// covers client-go TestLen: Len counts waiting items, a duplicate does not count.
		{"client-go TestLen", []step{
			add("foo"), wantLen(1), add("bar"), wantLen(2), add("foo"), wantLen(2),
		}},
		// covers client-go TestReinsert: an item added back while processing is handed out
		// again after its Done, then the queue is empty.
		{"client-go TestReinsert", []step{
			add("foo"), get("foo"), add("foo"), wantLen(0), done("foo"), wantLen(1),
			get("foo"), done("foo"), wantLen(0), getNothing(),
		}},
		// covers client-go TestCollapse: an item added twice while waiting is handed out
		// once.
		{"client-go TestCollapse", []step{
			add("bar", "bar"), wantLen(1), get("bar"), done("bar"), wantLen(0), getNothing(),
		}},
		// covers client-go TestNoQueueDrainageUsingShutDown (single goroutine part): items
		// still in flight do not keep ShutDown from returning, and their Done after it is
		// harmless.
		{"client-go TestNoQueueDrainageUsingShutDown", []step{
			add("foo", "bar"), get("foo", "bar"), shutDown(), getShutDown(), done("foo", "bar"),
			getShutDown(), wantLen(0),
		}},
		// covers client-go TestBasic's late add: an add after ShutDown is ignored, while
		// what was waiting is still handed out.
		{"add after ShutDown is ignored", []step{
			add("a"), shutDown(), add("late"), wantLen(1), get("a"), done("a"), getShutDown(),
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runSteps(t, Config[string]{}, tc.steps...) })
	}
}

// covers client-go TestCollapseWhileProcessing: an item added twice while a worker
// processes it is not handed to a second worker meanwhile; the second worker's Get blocks
// until the first one's Done, then receives the item once.
func TestConformanceCollapseWhileProcessing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		defer q.ShutDown()
		q.Add("foo")
		item, _ := q.Get(context.Background())
		q.Add("foo")
		q.Add("foo")
		second := getAsync(context.Background(), q)
		stillBlocked(t, second)
		q.Done(item)
		if r := <-second; r.item != "foo" || r.err != nil {
			t.Fatalf("second worker got %q, %v; want foo", r.item, r.err)
		}
		q.Done("foo")
		checkLen(t, q, 0, "(the two re-adds collapsed into one)")
		stillBlocked(t, getAsync(t.Context(), q))
		checkInvariants(t, q)
	})
}

// drainTwoInFlight makes a queue with two items in flight, starts ShutDownWithDrain and
// checks that Get reports the shut-down while the drain waits.
func drainTwoInFlight(t *testing.T) (q *Queue[string], first, second string, drained <-chan error) {
	t.Helper()
	q = New(Config[string]{})
	q.Add("foo")
	q.Add("bar")
	first, _ = q.Get(context.Background())
	second, _ = q.Get(context.Background())
	drained = startDrain(t, q)
	if _, err := q.Get(context.Background()); !errors.Is(err, ErrShutDown) {
		t.Fatalf("Get during the drain = %v, want ErrShutDown", err)
	}
	return q, first, second, drained
}

// covers client-go TestQueueDrainageUsingShutDownWithDrain: with two items in flight,
// ShutDownWithDrain waits; workers see ErrShutDown from Get; the drain returns once both
// are Done.
func TestConformanceDrainWaitsForInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, first, second, drained := drainTwoInFlight(t)
		q.Done(first)
		synctest.Wait()
		select {
		case err := <-drained:
			t.Fatalf("ShutDownWithDrain returned %v with an item in flight", err)
		default:
		}
		q.Done(second)
		if err := <-drained; err != nil {
			t.Fatalf("ShutDownWithDrain: %v", err)
		}
		checkInvariants(t, q)
	})
}

// covers client-go TestNoQueueDrainageUsingShutDown: ShutDown does not wait for the items
// in flight.
func TestConformanceShutDownDoesNotWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		q.Add("foo")
		q.Add("bar")
		q.Get(context.Background())
		q.Get(context.Background())
		returned := make(chan struct{})
		go func() {
			q.ShutDown()
			close(returned)
		}()
		synctest.Wait()
		select {
		case <-returned:
		default:
			t.Fatal("ShutDown waits for the items in flight")
		}
	})
}

// covers client-go TestForceQueueShutdownUsingShutDown: a ShutDown while ShutDownWithDrain
// waits for items in flight (a second SIGTERM) makes the drain return without any Done;
// here it returns ErrDrainAborted.
func TestConformanceShutDownForcesDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, first, second, drained := drainTwoInFlight(t)
		q.ShutDown()
		wantAborted(t, <-drained, "0 items ready and 2 in flight")
		q.Done(first)
		q.Done(second)
		checkInvariants(t, q)
	})
}

// covers client-go TestQueueDrainageUsingShutDownWithDrainWithDirtyItem: an item added
// again while in flight is handed out once more after its Done, during the drain, and
// the drain ends after that second processing. Deviation: client-go's Get reports shut-down
// until the Done re-queues the item and then hands it out after all; here Get does not
// report shut-down while such an item is pending: it waits for the Done and returns the
// item.
func TestConformanceDrainWithDirtyItem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		q.Add("foo")
		item, _ := q.Get(context.Background())
		q.Add("foo")
		drained := startDrain(t, q)
		if _, err := q.Get(doneCtx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Get = %v, want no item yet and no shut-down (context.Canceled)", err)
		}
		waiting := getAsync(context.Background(), q)
		stillBlocked(t, waiting)
		q.Done(item)
		if r := <-waiting; r.item != "foo" || r.err != nil {
			t.Fatalf("Get = %q, %v; want foo again", r.item, r.err)
		}
		select {
		case err := <-drained:
			t.Fatalf("ShutDownWithDrain returned %v during the second processing", err)
		default:
		}
		q.Done("foo")
		if _, err := q.Get(context.Background()); !errors.Is(err, ErrShutDown) {
			t.Fatalf("Get = %v, want ErrShutDown", err)
		}
		if err := <-drained; err != nil {
			t.Fatalf("ShutDownWithDrain: %v", err)
		}
		checkInvariants(t, q)
	})
}

// bigObject is a pointer item for the garbage-collection tests: large enough to have a
// heap block of its own.
type bigObject struct{ data [64]byte }

// collected reports whether the object behind p has been garbage collected.
func collected(p weak.Pointer[bigObject]) bool {
	runtime.GC()
	runtime.GC()
	return p.Value() == nil
}

// processOnce adds a new bigObject, hands it out and marks it Done, and returns a weak
// pointer to it.
func processOnce(t *testing.T, q *Queue[*bigObject]) weak.Pointer[bigObject] {
	t.Helper()
	obj := &bigObject{}
	q.Add(obj)
	item, err := q.Get(context.Background())
	if err != nil || item != obj {
		t.Fatalf("Get = %p, %v; want %p", item, err, obj)
	}
	q.Done(item)
	return weak.Make(obj)
}

// covers client-go TestGarbageCollection: an item that was added, handed out and Done is
// not kept alive by the queue. Deviation: by default the queue keeps up to KeepFinished
// finished items indexed (so that adding one again is cheap), which keeps a pointer item
// reachable until it is dropped from that cache or the queue is shut down; with
// KeepFinished < 0 it is released at its Done, as in client-go.
func TestConformanceGarbageCollection(t *testing.T) {
	q := New(Config[*bigObject]{KeepFinished: -1})
	p := processOnce(t, q)
	if !collected(p) {
		t.Fatal("KeepFinished -1: a finished item is still reachable")
	}
	runtime.KeepAlive(q)
	q.ShutDown()

	q = New(Config[*bigObject]{})
	p = processOnce(t, q)
	if collected(p) {
		t.Fatal("default KeepFinished: the finished item is not kept (cache missing?)")
	}
	q.ShutDown()
	if !collected(p) {
		t.Fatal("a finished item is still reachable after ShutDown")
	}
	runtime.KeepAlive(q)

	q = New(Config[*bigObject]{KeepFinished: 1})
	p = processOnce(t, q)
	for range 1 + evictBatch + 1 { // more finished items than kept, beyond the eviction batch
		processOnce(t, q)
	}
	if !collected(p) {
		t.Fatal("KeepFinished 1: the oldest finished item is still reachable after newer ones")
	}
	runtime.KeepAlive(q)
	q.ShutDown()
}
