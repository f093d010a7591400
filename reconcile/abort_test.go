package reconcile

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestAbortOnLeadershipLostCause: a controller whose Run context is cancelled
// with the cause ErrLeadershipLost (a process-wide election lost, as package
// manager reports it) cancels its reconciles in flight at once instead of
// draining them for DrainTimeout; a plain cancel still drains. HasSynced turns
// true once the sources synced.
func TestAbortOnLeadershipLostCause(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cause error
		want  time.Duration // how long Run takes to return after the cancel
	}{
		{"leadership lost", ErrLeadershipLost, 0},
		{"plain cancel", nil, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := New[string](Func[string](func(ctx context.Context, key string) (Result, error) {
					<-ctx.Done() // a reconcile that runs until its context ends
					return Result{}, ctx.Err()
				}), Config[string]{DrainTimeout: time.Hour})
				src := newKeySource("a")
				if err := c.Watch(src); err != nil {
					t.Fatal(err)
				}
				if c.HasSynced() {
					t.Fatal("HasSynced before Run")
				}
				ctx, cancel := context.WithCancelCause(t.Context())
				done := make(chan error, 1)
				go func() { done <- c.Run(ctx) }()
				synctest.Wait()
				if !c.HasSynced() {
					t.Fatal("HasSynced false while running")
				}
				cancelAt := time.Now()
				cancel(tc.cause)
				if err := <-done; err != nil {
					t.Fatalf("Run: %v", err)
				}
				if took := time.Since(cancelAt); took != tc.want {
					t.Errorf("Run returned %v after the cancel, want %v", took, tc.want)
				}
			})
		})
	}
}
