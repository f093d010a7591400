package workqueue

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// startDrain runs ShutDownWithDrain in a goroutine of the bubble and returns the channel
// its result arrives on, after checking that it is still waiting. The drain gives up after
// an hour of the bubble's time, so a drain that nothing ends fails the test with
// DeadlineExceeded instead of deadlocking the bubble.
func startDrain(t *testing.T, q *Queue[string]) <-chan error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	t.Cleanup(cancel)
	res := make(chan error, 1)
	go func() { res <- q.ShutDownWithDrain(ctx) }()
	synctest.Wait()
	select {
	case err := <-res:
		t.Fatalf("ShutDownWithDrain returned %v with work left", err)
	default:
	}
	return res
}

// wantAborted checks that err says a ShutDown ended the drain with the given work left.
func wantAborted(t *testing.T, err error, left string) {
	t.Helper()
	if !errors.Is(err, ErrDrainAborted) {
		t.Fatalf("ShutDownWithDrain = %v, want ErrDrainAborted", err)
	}
	if !strings.HasPrefix(err.Error(), "workqueue: ") || !strings.Contains(err.Error(), left) {
		t.Fatalf("error %q does not say %q", err, left)
	}
}

// TestShutDownEndsPendingDrain: a ShutDown while ShutDownWithDrain waits (a second
// SIGTERM) makes the drain return at once with ErrDrainAborted; the work left behind is
// still handed out, Done still works, and Get ends with ErrShutDown.
func TestShutDownEndsPendingDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		q.Add("a")
		q.Add("b")
		q.Add("c")
		held, _ := q.Get(context.Background()) // in flight, never Done before the ShutDown
		redirtied, _ := q.Get(context.Background())
		q.Add(redirtied) // added again while in flight
		drained := startDrain(t, q)
		start := time.Now()
		q.ShutDown()
		wantAborted(t, <-drained, "1 items ready and 2 in flight")
		if waited := time.Since(start); waited != 0 {
			t.Fatalf("the drain returned %v after ShutDown", waited)
		}
		// The work left is still served, as after any ShutDown.
		if item, err := q.Get(context.Background()); item != "c" || err != nil {
			t.Fatalf("Get = %q, %v; want c", item, err)
		}
		q.Done("c")
		q.Done(held)
		q.Done(redirtied) // re-queued by its Done
		if item, err := q.Get(context.Background()); item != redirtied || err != nil {
			t.Fatalf("Get = %q, %v; want %q", item, err, redirtied)
		}
		q.Done(redirtied)
		if _, err := q.Get(context.Background()); !errors.Is(err, ErrShutDown) {
			t.Fatalf("Get = %v, want ErrShutDown", err)
		}
		checkInvariants(t, q)
		// Once nothing is left, a drain succeeds again.
		if err := q.ShutDownWithDrain(context.Background()); err != nil {
			t.Fatalf("ShutDownWithDrain of a drained queue: %v", err)
		}
	})
}

// TestShutDownBeforeDrain: after a ShutDown a drain does not wait: it returns
// ErrDrainAborted if work is left, nil otherwise.
func TestShutDownBeforeDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		q.Add("a")
		q.Add("b")
		item, _ := q.Get(context.Background())
		q.ShutDown()
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		wantAborted(t, q.ShutDownWithDrain(ctx), "1 items ready and 1 in flight")
		if waited := time.Since(start); waited != 0 {
			t.Fatalf("ShutDownWithDrain waited %v after ShutDown", waited)
		}
		q.Done(item)
		if item, err := q.Get(context.Background()); item != "b" || err != nil {
			t.Fatalf("Get = %q, %v; want b", item, err)
		}
		q.Done("b")
		if err := q.ShutDownWithDrain(context.Background()); err != nil {
			t.Fatalf("ShutDownWithDrain with nothing left: %v", err)
		}
		checkInvariants(t, q)
	})
}

// TestConcurrentDrains: several drains wait together; they all return nil when the work
// is done, and all return ErrDrainAborted when a ShutDown comes first.
func TestConcurrentDrains(t *testing.T) {
	// threeDrains holds one item in flight and starts three drains.
	threeDrains := func(t *testing.T) (*Queue[string], string, [3]<-chan error) {
		t.Helper()
		q := New(Config[string]{})
		q.Add("a")
		item, _ := q.Get(context.Background())
		var res [3]<-chan error
		for i := range res {
			res[i] = startDrain(t, q)
		}
		return q, item, res
	}
	synctest.Test(t, func(t *testing.T) {
		q, item, res := threeDrains(t)
		q.Done(item)
		for i := range res {
			if err := <-res[i]; err != nil {
				t.Fatalf("drain %d: %v", i, err)
			}
		}
	})
	synctest.Test(t, func(t *testing.T) {
		q, item, res := threeDrains(t)
		q.ShutDown()
		for i := range res {
			wantAborted(t, <-res[i], "0 items ready and 1 in flight")
		}
		q.Done(item)
		checkInvariants(t, q)
	})
}

// TestDrainContextEndsFirst: a drain whose context ends first returns the context's
// error; a ShutDown after that is harmless, and a later drain still waits for the work.
func TestDrainContextEndsFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		q.Add("a")
		item, _ := q.Get(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		err := q.ShutDownWithDrain(ctx)
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrDrainAborted) {
			t.Fatalf("ShutDownWithDrain = %v, want DeadlineExceeded only", err)
		}
		if waited := time.Since(start); waited != time.Second {
			t.Fatalf("drain gave up after %v, want 1s", waited)
		}
		later := startDrain(t, q)
		q.Done(item)
		if err := <-later; err != nil {
			t.Fatalf("second drain: %v", err)
		}
		q.ShutDown()
		checkInvariants(t, q)
	})
}

// TestShutDownRacesDrain races a ShutDown against a drain that is just starting: whichever
// comes first, the drain must not miss the ShutDown (it returns ErrDrainAborted, as an
// item stays in flight), and nothing is left running.
func TestShutDownRacesDrain(t *testing.T) {
	for i := range 500 {
		q := New(Config[int]{})
		q.Add(i)
		item, _ := q.Get(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res := make(chan error, 1)
		go func() { res <- q.ShutDownWithDrain(ctx) }()
		var wg sync.WaitGroup
		wg.Go(q.ShutDown)
		err := <-res
		wg.Wait()
		cancel()
		if !errors.Is(err, ErrDrainAborted) {
			t.Fatalf("round %d: ShutDownWithDrain = %v, want ErrDrainAborted", i, err)
		}
		q.Done(item)
		checkInvariants(t, q)
	}
}
