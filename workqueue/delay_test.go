package workqueue

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// getAll takes every ready item, calling Done for each, and returns them in order.
func getAll[T comparable](t *testing.T, q *Queue[T]) []T {
	t.Helper()
	var out []T
	for q.Len() > 0 {
		item, err := q.Get(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, item)
		q.Done(item)
	}
	return out
}

func TestAddAfterFiresAtDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		defer q.ShutDown()
		q.AddAfter("a", 10*time.Second)
		time.Sleep(10*time.Second - time.Nanosecond)
		if n := q.Len(); n != 0 {
			t.Fatalf("Len = %d before the deadline", n)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if got := getAll(t, q); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("got %v at the deadline, want [a]", got)
		}
		checkInvariants(t, q)
	})
}

func TestAddAfterEarliestDeadlineWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		defer q.ShutDown()
		q.AddAfter("a", 10*time.Second)
		q.AddAfter("a", 5*time.Second) // earlier: wins
		q.AddAfter("b", 5*time.Second)
		q.AddAfter("b", 10*time.Second) // later: ignored
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if got := getAll(t, q); len(got) != 2 {
			t.Fatalf("got %v at 5s, want a and b once each", got)
		}
		time.Sleep(time.Hour)
		if n := q.Len(); n != 0 {
			t.Fatalf("Len = %d: a coalesced delayed add fired twice", n)
		}
		checkInvariants(t, q)
	})
}

func TestAddAfterFiresInDeadlineOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[int]{})
		defer q.ShutDown()
		// More items than one firing batch, with distinct deadlines in random order.
		n := 3*fireBatch + 17
		perm := rand.Perm(n)
		for _, i := range perm {
			q.AddAfter(i, time.Second+time.Duration(i)*time.Microsecond)
		}
		checkInvariants(t, q)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		got := getAll(t, q)
		if len(got) != n || !slices.IsSorted(got) {
			t.Fatalf("fired %d items, sorted %v; want %d in deadline order", len(got), slices.IsSorted(got), n)
		}
		checkInvariants(t, q)
	})
}

func TestAddAfterNonPositiveAddsNow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		defer q.ShutDown()
		q.AddAfter("a", 0)
		q.AddAfter("b", -time.Second)
		q.AddWithOptions("c", AddOptions{Delay: -1})
		if got := getAll(t, q); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("got %v, want [a b c] at once", got)
		}
	})
}

// A delayed add is independent of the item's current state, as in client-go: it fires
// later even if the item was added and processed meanwhile, and is deduplicated if the item
// is waiting when it fires.
func TestAddAfterIsAnOrdinaryAddWhenItFires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		defer q.ShutDown()
		q.AddAfter("a", time.Second)
		q.Add("a")
		if got := getAll(t, q); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("got %v", got)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got := getAll(t, q); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("delayed add after processing: got %v, want [a]", got)
		}

		q.AddAfter("b", time.Second)
		q.Add("b") // still waiting when the delayed add fires
		time.Sleep(time.Second)
		synctest.Wait()
		if got := getAll(t, q); !slices.Equal(got, []string{"b"}) {
			t.Fatalf("delayed add of a waiting item: got %v, want [b] once", got)
		}

		q.Add("c")
		item, _ := q.Get(context.Background())
		q.AddAfter("c", time.Second) // fires while c is processed
		time.Sleep(time.Second)
		synctest.Wait()
		if n := q.Len(); n != 0 {
			t.Fatalf("Len = %d: an item in flight was handed out", n)
		}
		q.Done(item)
		if got := getAll(t, q); !slices.Equal(got, []string{"c"}) {
			t.Fatalf("delayed add during processing: got %v, want [c] after Done", got)
		}
		checkInvariants(t, q)
	})
}

func TestAddWithOptionsDelayAndPriority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		defer q.ShutDown()
		q.Add("low")
		q.AddWithOptions("high", AddOptions{Delay: time.Second, Priority: 2})
		q.AddWithOptions("mid", AddOptions{Delay: time.Second, Priority: 1})
		q.AddWithOptions("mid", AddOptions{Delay: 2 * time.Second, Priority: 3}) // raises priority only
		time.Sleep(time.Second)
		synctest.Wait()
		if got := getAll(t, q); !slices.Equal(got, []string{"mid", "high", "low"}) {
			t.Fatalf("got %v, want [mid high low]", got)
		}
		checkInvariants(t, q)
	})
}

func TestAddAfterHugeDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		q.AddAfter("a", math.MaxInt64)
		q.AddAfter("b", math.MaxInt64-1)
		time.Sleep(100 * 365 * 24 * time.Hour)
		if n := q.Len(); n != 0 {
			t.Fatalf("Len = %d", n)
		}
		checkInvariants(t, q)
		q.ShutDown()
	})
}

func TestBlockedGetWakesWhenADelayFires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		defer q.ShutDown()
		q.AddAfter("a", time.Minute)
		start := time.Now()
		item, err := q.Get(context.Background())
		if item != "a" || err != nil || time.Since(start) != time.Minute {
			t.Fatalf("Get = %q, %v after %v; want a after 1m", item, err, time.Since(start))
		}
		q.Done(item)
	})
}

// TestOneFiringWakesManyGets: a firing that makes many items due hands them to as many
// blocked Gets (more than the wake-ups deferred to the unlock), half of whose contexts end
// at the very moment of the firing: each item is handed out once or stays ready.
func TestOneFiringWakesManyGets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 3*wakeMax + 1
		q := New(Config[int]{})
		defer q.ShutDown()
		type got struct {
			item int
			err  error
		}
		results := make(chan got, n)
		for i := range n {
			ctx := context.Background()
			if i%2 == 1 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Minute)
				defer cancel()
			}
			go func() {
				item, err := q.Get(ctx)
				results <- got{item, err}
			}()
		}
		synctest.Wait() // every Get waits
		for i := range n {
			q.AddAfter(i, time.Minute)
		}
		time.Sleep(time.Minute)
		seen := map[int]bool{}
		for range n {
			r := <-results
			switch {
			case r.err == nil:
				if seen[r.item] {
					t.Fatalf("item %d handed out twice", r.item)
				}
				seen[r.item] = true
				q.Done(r.item)
			case !errors.Is(r.err, context.DeadlineExceeded):
				t.Fatalf("Get: %v", r.err)
			}
		}
		if ready := q.Len(); len(seen)+ready != n {
			t.Fatalf("%d handed out and %d ready, want %d in all", len(seen), ready, n)
		}
		if plain := (n + 1) / 2; len(seen) < plain {
			t.Fatalf("%d handed out, want at least the %d Gets without a deadline served", len(seen), plain)
		}
		checkInvariants(t, q)
	})
}

func TestShutDownDropsScheduledItems(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		q.AddAfter("a", time.Second)
		q.AddRateLimited("b")
		q.ShutDown()
		time.Sleep(time.Hour)
		if _, err := q.Get(context.Background()); !errors.Is(err, ErrShutDown) {
			t.Fatalf("Get = %v, want ErrShutDown", err)
		}
		checkInvariants(t, q)
		if n := scheduled(q); n != 0 {
			t.Fatalf("%d items still scheduled", n)
		}
	})
}

func TestAddRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{RateLimiter: NewExponential[string](10*time.Millisecond, time.Second)})
		defer q.ShutDown()
		for i, want := range []time.Duration{10, 20, 40, 80} {
			start := time.Now()
			q.AddRateLimited("a")
			item, _ := q.Get(context.Background())
			if took := time.Since(start); took != want*time.Millisecond {
				t.Fatalf("retry %d: handed out after %v, want %v", i, took, want*time.Millisecond)
			}
			q.Done(item)
			if n := q.NumRequeues("a"); n != i+1 {
				t.Fatalf("NumRequeues = %d, want %d", n, i+1)
			}
		}
		q.Forget("a")
		if n := q.NumRequeues("a"); n != 0 {
			t.Fatalf("NumRequeues = %d after Forget", n)
		}
		start := time.Now()
		q.AddWithOptions("a", AddOptions{RateLimited: true, Delay: 5 * time.Millisecond})
		item, _ := q.Get(context.Background())
		if took := time.Since(start); took != 10*time.Millisecond {
			t.Fatalf("after Forget: handed out after %v, want the base delay", took)
		}
		q.Done(item)
		q.ShutDown()
		if n := q.NumRequeues("a"); n != 0 {
			t.Fatalf("NumRequeues = %d after ShutDown, want the limiter reset", n)
		}
	})
}

// Items with equal deadlines fire in the order they were scheduled, whether the deadline
// was near (the timing wheel) or far (the overflow heap, then the wheel), and across
// firing batches.
func TestAddAfterTiesFireInScheduleOrder(t *testing.T) {
	for _, d := range []time.Duration{10 * time.Millisecond, time.Hour} {
		synctest.Test(t, func(t *testing.T) {
			q := New(Config[int]{})
			defer q.ShutDown()
			n := 2*fireBatch + 3*stageMax + 7
			order := rand.Perm(n)
			for _, i := range order[:n/2] { // the clock stands still: equal deadlines
				q.AddAfter(i, d)
			}
			q.AddAfter(-1, d-time.Nanosecond) // an earlier one scheduled in between
			for _, i := range order[n/2:] {
				q.AddAfter(i, d)
			}
			checkInvariants(t, q)
			time.Sleep(d + time.Millisecond) // past the deadlines and the timer slack
			synctest.Wait()
			got := getAll(t, q)
			want := append([]int{-1}, order...)
			if !slices.Equal(got, want) {
				t.Fatalf("delay %v: %d fired, not in the order scheduled", d, len(got))
			}
			checkInvariants(t, q)
		})
	}
}

// TestScheduleCompactionEmptiesOverflow: a compaction of the schedule that finds every
// element of the overflow heap stale (all pending deadlines moved into the timing wheel)
// leaves an empty heap and the deadlines intact.
func TestScheduleCompactionEmptiesOverflow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[int]{})
		defer q.ShutDown()
		const n = 100 // > compactMin: the third pass compacts
		for i := range n {
			q.AddAfter(i, time.Hour) // overflow heap
		}
		for i := range n {
			q.AddAfter(i, 2*time.Millisecond) // timing wheel: the heap's elements are stale
		}
		for i := range n {
			q.AddAfter(i, time.Millisecond) // more stale elements: compaction
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		checkInvariants(t, q)
		if got := getAll(t, q); len(got) != n {
			t.Fatalf("%d items at 1ms, want %d", len(got), n)
		}
		time.Sleep(2 * time.Hour)
		synctest.Wait()
		if l := q.Len(); l != 0 {
			t.Fatalf("Len = %d after the stale deadlines passed", l)
		}
		checkInvariants(t, q)
	})
}
