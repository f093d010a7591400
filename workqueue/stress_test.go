package workqueue

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/time/rate"
)

// TestStressInvariants runs producers and workers concurrently over a small set of items,
// with every kind of add, priorities and fairness keys, then drains the queue. It checks:
// no item is ever held by two workers; every item is processed after its last add (the
// last processing of each item saw its final add count); nothing is lost at drain.
func TestStressInvariants(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const items, producers, workers, addsEach = 300, 4, 8, 4000
		q := New(Config[int]{
			FairnessKey:  func(i int) string { return strconv.Itoa(i % 5) },
			AgingLimit:   3,
			KeepFinished: 16,
			RateLimiter: NewMaxOf[int](
				NewExponential[int](time.Millisecond, 100*time.Millisecond),
				NewBucket[int](rate.NewLimiter(1000, 50)),
			),
		})
		var adds, seen [items]atomic.Int64
		var held [items]atomic.Bool
		var processed atomic.Int64

		var workersWG sync.WaitGroup
		for range workers {
			workersWG.Go(func() {
				for {
					item, err := q.Get(context.Background())
					if err != nil {
						return
					}
					if !held[item].CompareAndSwap(false, true) {
						t.Errorf("item %d handed to two workers", item)
					}
					seen[item].Store(adds[item].Load())
					if item%7 == 0 {
						time.Sleep(time.Millisecond) // some slow work
					}
					if item%3 == 0 {
						q.Forget(item)
					}
					processed.Add(1)
					held[item].Store(false)
					q.Done(item)
				}
			})
		}

		var producersWG sync.WaitGroup
		for p := range producers {
			producersWG.Go(func() {
				r := rand.New(rand.NewPCG(uint64(p), 7))
				for range addsEach {
					item := r.IntN(items)
					adds[item].Add(1) // counted before the add takes effect
					switch r.IntN(5) {
					case 0:
						q.AddWithOptions(item, AddOptions{Priority: r.IntN(4)})
					case 1:
						q.AddAfter(item, time.Duration(r.IntN(5000))*time.Microsecond)
					case 2:
						q.AddRateLimited(item)
					case 3:
						q.AddWithOptions(item, AddOptions{Delay: time.Millisecond, Priority: r.IntN(4), RateLimited: r.IntN(2) == 0})
					default:
						q.Add(item)
					}
				}
			})
		}
		producersWG.Wait()
		time.Sleep(time.Hour) // every delayed add has fired
		if n := scheduled(q); n != 0 {
			t.Fatalf("%d adds still scheduled after an hour", n)
		}
		if err := q.ShutDownWithDrain(context.Background()); err != nil {
			t.Fatalf("drain: %v", err)
		}
		workersWG.Wait()

		if n := q.Len(); n != 0 {
			t.Fatalf("%d items left after drain", n)
		}
		checkSeenLastAdd(t, adds[:], seen[:])
		if processed.Load() == 0 {
			t.Fatal("nothing processed")
		}
		checkInvariants(t, q)
	})
}

// TestStressManyWaitingGets: 64 workers over 10 items, so that nearly every add finds Gets
// waiting and wakes one, while the workers back from a Done take items first. In the first
// half a third of the Gets wait with a context that ends after a while, so woken Gets also
// race their context's end; in the second half no Get has a deadline, so nothing but an
// add wakes a Get. After the producer stops, the queue must run dry with no item left
// behind sleeping Gets: every item's last processing saw its last add, and no item was
// held by two workers. Every fifth processing adds its item again before its Done (a
// requeue), so Dones staged while mu is taken meet adds of their own item.
func TestStressManyWaitingGets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const items, workers, rounds = 10, 64, 3000
		q := New(Config[int]{})
		var adds, seen [items]atomic.Int64
		var held [items]atomic.Bool
		var timeouts atomic.Int64
		var deadlines atomic.Bool
		deadlines.Store(true)

		var workersWG sync.WaitGroup
		for w := range workers {
			workersWG.Go(func() {
				for n := 0; ; n++ {
					ctx, cancel := context.Background(), context.CancelFunc(func() {})
					if (w+n)%3 == 0 && deadlines.Load() {
						ctx, cancel = context.WithTimeout(ctx, time.Duration(1+n%5)*time.Microsecond)
					}
					item, err := q.Get(ctx)
					cancel()
					if errors.Is(err, context.DeadlineExceeded) {
						timeouts.Add(1)
						continue
					}
					if err != nil {
						return
					}
					if !held[item].CompareAndSwap(false, true) {
						t.Errorf("item %d handed to two workers", item)
					}
					seen[item].Store(adds[item].Load())
					if item%4 == 0 {
						time.Sleep(time.Microsecond) // some work that lets the others run
					}
					held[item].Store(false)
					if (w+n)%5 == 0 && deadlines.Load() {
						adds[item].Add(1)
						q.Add(item) // requeue
					}
					q.Done(item)
				}
			})
		}
		r := rand.New(rand.NewPCG(3, 5))
		for i := range rounds {
			if i == rounds/2 {
				deadlines.Store(false)
				time.Sleep(time.Millisecond) // the Gets with a deadline have all ended
			}
			for range 1 + r.IntN(items) {
				item := r.IntN(items)
				adds[item].Add(1) // counted before the add takes effect
				q.Add(item)
			}
			if i%16 == 0 {
				time.Sleep(time.Duration(r.IntN(4)) * time.Microsecond)
			}
		}
		// Then into an idle queue, bursts of 1 to 10 adds: each must be taken.
		for k := 1; k <= items; k++ {
			idle(t, q)
			for item := range k {
				adds[item].Add(1)
				q.Add(item)
			}
		}
		idle(t, q)
		checkSeenLastAdd(t, adds[:], seen[:])
		if timeouts.Load() == 0 {
			t.Error("no Get timed out: the test did not race wake-ups against contexts")
		}
		checkInvariants(t, q)
		if err := q.ShutDownWithDrain(context.Background()); err != nil {
			t.Fatalf("drain: %v", err)
		}
		workersWG.Wait()
	})
}

// checkSeenLastAdd reports every item whose last processing did not see its last add:
// adds[i] counts item i's adds, seen[i] is what adds[i] was when it was last handed out.
func checkSeenLastAdd(t *testing.T, adds, seen []atomic.Int64) {
	t.Helper()
	for i := range adds {
		if a, s := adds[i].Load(), seen[i].Load(); a != s {
			t.Errorf("item %d: %d adds, last processing saw %d", i, a, s)
		}
	}
}

// idle returns once every other goroutine of the synctest bubble waits on something other
// than a timer (workers sleep only while processing), and fails if items are ready then:
// an item left behind sleeping Gets.
func idle(t *testing.T, q *Queue[int]) {
	t.Helper()
	time.Sleep(time.Second) // the workers' sleeps end
	synctest.Wait()
	if n := q.Len(); n != 0 {
		t.Fatalf("%d items ready while every worker waits", n)
	}
}
