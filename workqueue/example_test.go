package workqueue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ctrlkit/ctrlkit/workqueue"
)

// A plain queue: adds are deduplicated and handed out in order.
func Example() {
	q := workqueue.New(workqueue.Config[string]{})
	q.Add("default/web")
	q.Add("default/db")
	q.Add("default/web") // already waiting: not added twice
	q.ShutDown()         // workers still get what is queued, then ErrShutDown

	ctx := context.Background()
	for {
		key, err := q.Get(ctx)
		if errors.Is(err, workqueue.ErrShutDown) {
			fmt.Println("shut down")
			return
		}
		fmt.Println("processing", key)
		q.Done(key)
	}
	// Output:
	// processing default/web
	// processing default/db
	// shut down
}

// Delayed adds: the earliest deadline wins, and items come out in deadline order.
func ExampleQueue_AddAfter() {
	q := workqueue.New(workqueue.Config[string]{})
	defer q.ShutDown()
	q.AddAfter("later", 30*time.Millisecond)
	q.AddAfter("sooner", 10*time.Millisecond)
	q.AddAfter("later", time.Hour) // later than the pending deadline: ignored

	ctx := context.Background()
	for range 2 {
		key, _ := q.Get(ctx) // blocks until a deadline passes
		fmt.Println(key)
		q.Done(key)
	}
	// Output:
	// sooner
	// later
}

// Retries with per-item exponential backoff; Forget resets it after a success.
func ExampleQueue_AddRateLimited() {
	q := workqueue.New(workqueue.Config[string]{
		RateLimiter: workqueue.NewExponential[string](time.Millisecond, time.Second),
	})
	defer q.ShutDown()
	ctx := context.Background()

	q.Add("flaky")
	for {
		key, _ := q.Get(ctx)
		if q.NumRequeues(key) < 3 {
			fmt.Printf("%s failed, retry %d\n", key, q.NumRequeues(key)+1)
			q.AddRateLimited(key) // waits 1ms, 2ms, 4ms
			q.Done(key)
			continue
		}
		fmt.Println(key, "succeeded")
		q.Forget(key)
		q.Done(key)
		break
	}
	fmt.Println("requeues after Forget:", q.NumRequeues("flaky"))
	// Output:
	// flaky failed, retry 1
	// flaky failed, retry 2
	// flaky failed, retry 3
	// flaky succeeded
	// requeues after Forget: 0
}

// Fairness: namespaces take turns, so one busy namespace cannot hold up the others.
func ExampleConfig_fairnessKey() {
	q := workqueue.New(workqueue.Config[string]{
		FairnessKey: func(key string) string {
			namespace, _, _ := strings.Cut(key, "/")
			return namespace
		},
	})
	defer q.ShutDown()
	for _, key := range []string{"busy/a", "busy/b", "busy/c", "busy/d", "quiet/x", "other/y"} {
		q.Add(key)
	}
	for q.Len() > 0 {
		key, _ := q.Get(context.Background())
		fmt.Println(key)
		q.Done(key)
	}
	// Output:
	// busy/a
	// quiet/x
	// other/y
	// busy/b
	// busy/c
	// busy/d
}

// Priorities: live events before resync work; aging keeps the low priority moving.
func ExampleQueue_AddWithOptions() {
	q := workqueue.New(workqueue.Config[string]{AgingLimit: 2})
	defer q.ShutDown()
	const resync, event = 0, 10
	q.AddWithOptions("resync/1", workqueue.AddOptions{Priority: resync})
	q.AddWithOptions("resync/2", workqueue.AddOptions{Priority: resync})
	for _, key := range []string{"event/1", "event/2", "event/3", "event/4"} {
		q.AddWithOptions(key, workqueue.AddOptions{Priority: event})
	}
	for q.Len() > 0 {
		key, _ := q.Get(context.Background())
		fmt.Println(key)
		q.Done(key)
	}
	// Output:
	// event/1
	// event/2
	// resync/1
	// event/3
	// event/4
	// resync/2
}

// A graceful shut-down cut short: the first signal drains the queue, a second one calls
// ShutDown, which ends the wait for the worker still busy.
func ExampleQueue_ShutDownWithDrain() {
	q := workqueue.New(workqueue.Config[string]{})
	ctx := context.Background()
	q.Add("default/web")
	key, _ := q.Get(ctx) // a worker is processing it

	drained := make(chan error)
	go func() { drained <- q.ShutDownWithDrain(ctx) }() // first signal: wait for the work
	q.ShutDown()                                        // second signal: stop waiting
	err := <-drained
	fmt.Println(errors.Is(err, workqueue.ErrDrainAborted))
	fmt.Println(err)
	q.Done(key) // the worker may still finish
	// Output:
	// true
	// workqueue: drain ended by ShutDown with 0 items ready and 1 in flight
}
