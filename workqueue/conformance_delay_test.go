package workqueue

// Conformance: delayed and rate-limited adds (client-go delaying_queue_test.go and
// rate_limiting_queue_test.go). See conformance_test.go.

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// advance lets the bubble's clock run for d and every goroutine and timer settle.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// wantReady checks the items ready now, in order, by taking them all (with Done).
func wantReady(t *testing.T, q *Queue[string], want ...string) {
	t.Helper()
	if got := getAll(t, q); !slices.Equal(got, want) {
		t.Fatalf("ready %q, want %q", got, want)
	}
}

// covers client-go TestSimpleQueue: a delayed item is not ready before its delay, is ready
// after it, and once processed is not added again later (no heartbeat re-adds it).
func TestConformanceAddAfterSimple(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		defer q.ShutDown()
		q.AddAfter("foo", 50*time.Millisecond)
		advance(49 * time.Millisecond)
		checkLen(t, q, 0, "before the delay")
		advance(11 * time.Millisecond)
		wantReady(t, q, "foo")
		advance(10 * time.Second)
		checkLen(t, q, 0, "(the delayed item came back)")
		checkInvariants(t, q)
	})
}

// covers client-go TestDeduping: two delayed adds of one item make one add, at the earlier
// deadline, whichever order they were made in; nothing is added at the later one.
func TestConformanceAddAfterDedup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		defer q.ShutDown()
		// The later deadline second: ignored.
		q.AddAfter("foo", 50*time.Millisecond)
		q.AddAfter("foo", 70*time.Millisecond)
		checkLen(t, q, 0, "before the delays")
		advance(60 * time.Millisecond)
		wantReady(t, q, "foo")
		advance(20 * time.Millisecond) // past the later deadline
		wantReady(t, q)

		// The earlier deadline second: it replaces the later one.
		q.AddAfter("foo", 50*time.Millisecond)
		q.AddAfter("foo", 30*time.Millisecond)
		advance(29 * time.Millisecond)
		wantReady(t, q)
		advance(11 * time.Millisecond)
		wantReady(t, q, "foo")
		advance(20 * time.Millisecond) // past the replaced deadline
		wantReady(t, q)
		checkInvariants(t, q)
	})
}

// covers client-go TestAddTwoFireEarly: items fire in deadline order, not in the order
// they were added, and an item added after an earlier one fired gets its own deadline.
func TestConformanceAddAfterFireEarly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		defer q.ShutDown()
		q.AddAfter("foo", time.Second)
		q.AddAfter("bar", 50*time.Millisecond)
		wantReady(t, q)
		advance(60 * time.Millisecond)
		wantReady(t, q, "bar")
		q.AddAfter("baz", 2*time.Second)
		advance(time.Second)
		wantReady(t, q, "foo")
		advance(2 * time.Second)
		wantReady(t, q, "baz")
		checkInvariants(t, q)
	})
}

// covers client-go TestCopyShifting: several items whose deadlines all passed are handed
// out in deadline order.
func TestConformanceAddAfterDeadlineOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		defer q.ShutDown()
		q.AddAfter("foo", time.Second)
		q.AddAfter("bar", 500*time.Millisecond)
		q.AddAfter("baz", 250*time.Millisecond)
		wantReady(t, q)
		advance(2 * time.Second)
		checkLen(t, q, 3, "now")
		wantReady(t, q, "baz", "bar", "foo")
		checkInvariants(t, q)
	})
}

// covers the delaying queue's shut-down (client-go delayingType: AddAfter after ShutDown
// is ignored; pending delays are dropped) and controller-runtime "Get from priority queue
// might get stuck when the priority queue is shut down" (a delayed add after ShutDown
// never arrives and Get does not block on it).
func TestConformanceAddAfterShutDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		q.AddAfter("pending", time.Second)
		q.ShutDown()
		q.AddAfter("late", time.Second)
		q.AddAfter("now", 0)
		q.AddWithOptions("opts", AddOptions{Delay: time.Second, Priority: 1})
		q.AddRateLimited("limited")
		if _, err := q.Get(context.Background()); !errors.Is(err, ErrShutDown) {
			t.Fatalf("Get = %v, want ErrShutDown at once", err)
		}
		advance(time.Hour)
		checkLen(t, q, 0, "(a delayed add arrived after shut-down)")
		if n := q.NumRequeues("limited"); n != 0 {
			t.Fatalf("NumRequeues = %d: AddRateLimited after shut-down recorded a failure", n)
		}
		checkInvariants(t, q)
	})
}

// readyAfter returns how long after the call item became ready, by blocking in Get; the
// item is marked Done.
func readyAfter(t *testing.T, q *Queue[string], item string) time.Duration {
	t.Helper()
	start := time.Now()
	got, err := q.Get(context.Background())
	if err != nil || got != item {
		t.Fatalf("Get = %q, %v; want %q", got, err, item)
	}
	q.Done(got)
	return time.Since(start)
}

// covers client-go TestRateLimitingQueue: AddRateLimited delays an item by the limiter's
// answer (1ms, then 2ms for a second failure), counts failures per item (NumRequeues),
// keeps items independent, and Forget resets the item to the base delay. Two rate-limited
// adds of a waiting item make one add, at the earlier deadline.
func TestConformanceRateLimitingQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{RateLimiter: NewExponential[string](time.Millisecond, time.Second)})
		defer q.ShutDown()
		q.AddRateLimited("one")
		if d := readyAfter(t, q, "one"); d != time.Millisecond {
			t.Fatalf("first failure: ready after %v, want 1ms", d)
		}
		q.AddRateLimited("one")
		if d := readyAfter(t, q, "one"); d != 2*time.Millisecond {
			t.Fatalf("second failure: ready after %v, want 2ms", d)
		}
		if n := q.NumRequeues("one"); n != 2 {
			t.Fatalf("NumRequeues(one) = %d, want 2", n)
		}
		q.AddRateLimited("two")
		if d := readyAfter(t, q, "two"); d != time.Millisecond {
			t.Fatalf("two, first failure: ready after %v, want 1ms", d)
		}
		q.AddRateLimited("two")
		if d := readyAfter(t, q, "two"); d != 2*time.Millisecond {
			t.Fatalf("two, second failure: ready after %v, want 2ms", d)
		}
		q.Forget("one")
		if n := q.NumRequeues("one"); n != 0 {
			t.Fatalf("NumRequeues(one) = %d after Forget", n)
		}
		q.AddRateLimited("one")
		if d := readyAfter(t, q, "one"); d != time.Millisecond {
			t.Fatalf("after Forget: ready after %v, want 1ms", d)
		}

		// Two failures before the retry: one add, at the earlier (1ms) deadline.
		q.Forget("one")
		q.AddRateLimited("one")
		q.AddRateLimited("one")
		if d := readyAfter(t, q, "one"); d != time.Millisecond {
			t.Fatalf("two failures in a row: ready after %v, want 1ms", d)
		}
		advance(time.Second)
		wantReady(t, q)
		if n := q.NumRequeues("one"); n != 2 {
			t.Fatalf("NumRequeues(one) = %d, want 2", n)
		}
		checkInvariants(t, q)
	})
}
