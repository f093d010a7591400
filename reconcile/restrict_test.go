package reconcile

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestRestrict: Restrict cancels the reconcile in flight of a key it refuses,
// with cause ErrRevoked, and returns only once that reconcile has returned;
// the refused key is not reconciled again while the others go on; a nil owns
// lets it back in, and Restrict enqueues it. Without Config.Restrictable, Restrict is an error.
func TestRestrict(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		runs := map[string]int{}
		var causes []error
		inA := make(chan struct{}, 10)
		c := New[string](Func[string](func(ctx context.Context, key string) (Result, error) {
			mu.Lock()
			runs[key]++
			mu.Unlock()
			if key == "a" {
				inA <- struct{}{}
				<-ctx.Done() // a long reconcile
				mu.Lock()
				causes = append(causes, context.Cause(ctx))
				mu.Unlock()
				time.Sleep(time.Second) // draining takes a while
				return Result{}, ctx.Err()
			}
			return Result{RequeueAfter: 100 * time.Millisecond}, nil
		}), Config[string]{Workers: 2, Restrictable: true})
		src := newKeySource("a", "b")
		if err := c.Watch(src); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		<-inA
		start := time.Now()
		if err := c.Restrict(context.Background(), func(k string) bool { return k != "a" }); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited < time.Second {
			t.Errorf("Restrict returned after %v, before the revoked reconcile had drained", waited)
		}
		mu.Lock()
		if len(causes) != 1 || !errors.Is(causes[0], ErrRevoked) {
			t.Errorf("the revoked reconcile's context ended with %v, want ErrRevoked", causes)
		}
		aRuns, bRuns := runs["a"], runs["b"]
		mu.Unlock()
		src.send("a", Live)
		time.Sleep(5 * time.Second)
		mu.Lock()
		if runs["a"] != aRuns || runs["b"] <= bRuns {
			t.Errorf("after Restrict: a ran %d more times (want 0), b %d more (want some)", runs["a"]-aRuns, runs["b"]-bRuns)
		}
		mu.Unlock()
		// Let back in: Restrict enqueues it again.
		if err := c.Restrict(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
		<-inA
		cancel()
		<-done

		plain := New[string](Func[string](func(context.Context, string) (Result, error) { return Result{}, nil }), Config[string]{})
		if err := plain.Restrict(context.Background(), func(string) bool { return true }); err == nil {
			t.Error("Restrict without Config.Restrictable succeeded")
		}
	})
}

// TestRestrictOwnsPanics: an owns that panics refuses the key instead of
// crashing the worker; the other keys go on.
func TestRestrictOwnsPanics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		runs := map[string]int{}
		c := New[string](Func[string](func(ctx context.Context, key string) (Result, error) {
			mu.Lock()
			runs[key]++
			mu.Unlock()
			return Result{RequeueAfter: 100 * time.Millisecond}, nil
		}), Config[string]{Workers: 2, Restrictable: true})
		if err := c.Restrict(context.Background(), func(k string) bool {
			if k == "bad" {
				panic("owns: " + k)
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if err := c.Watch(newKeySource("bad", "good")); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		time.Sleep(time.Second)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if runs["bad"] != 0 || runs["good"] < 5 {
			t.Errorf("runs %v: want bad refused, good reconciled on", runs)
		}
	})
}
