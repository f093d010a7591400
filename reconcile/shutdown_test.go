package reconcile

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// stubborn is a reconciler that, for the keys in hang, ignores its context and
// blocks until release is closed; other keys return at once.
func stubborn(release <-chan struct{}, hang ...string) Reconciler[string] {
	return Func[string](func(ctx context.Context, key string) (Result, error) {
		for _, k := range hang {
			if k == key {
				<-release
			}
		}
		return Result{}, nil
	})
}

// awaitRun returns what done delivers, failing t if nothing comes within limit
// (of the bubble's time): Run did not return.
func awaitRun(t *testing.T, done <-chan error, limit time.Duration) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		t.Fatalf("Run did not return within %v", limit)
		return nil
	}
}

// runUntil starts c.Run(ctx) and returns a channel with its error.
func runUntil(ctx context.Context, c *Controller[string]) <-chan error {
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	return done
}

func TestShutdownTimeoutAbandonsReconcileIgnoringContext(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      Config[string]
		wantWait time.Duration // from the cancel of Run's context to Run's return
		wantTO   time.Duration // ShutdownError.Timeout
	}{
		{"set", Config[string]{Workers: 3, DrainTimeout: 7 * time.Second, ShutdownTimeout: 5 * time.Second}, 12 * time.Second, 5 * time.Second},
		{"defaults", Config[string]{Workers: 3}, DefaultDrainTimeout + DefaultShutdownTimeout, DefaultShutdownTimeout},
		{"no drain", Config[string]{Workers: 3, DrainTimeout: -1, ShutdownTimeout: 5 * time.Second}, 5 * time.Second, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				release := make(chan struct{})
				defer close(release) // the abandoned reconciles end with the test
				c := New(stubborn(release, "stuck-1", "stuck-2"), tc.cfg)
				c.Watch(newKeySource("stuck-1", "fine", "stuck-2"))
				ctx, cancel := context.WithCancel(context.Background())
				done := runUntil(ctx, c)
				time.Sleep(time.Second)
				cancel()
				cancelled := time.Now()
				err := awaitRun(t, done, time.Hour)
				if took := time.Since(cancelled); took != tc.wantWait {
					t.Errorf("Run returned %v after its context ended, want %v", took, tc.wantWait)
				}
				var se *ShutdownError
				if !errors.As(err, &se) || !errors.Is(err, ErrShutdownTimeout) {
					t.Fatalf("Run = %v, want a *ShutdownError wrapping ErrShutdownTimeout", err)
				}
				want := &ShutdownError{Controller: DefaultName, Timeout: tc.wantTO, Keys: []string{"stuck-1", "stuck-2"}}
				if diff := cmp.Diff(want, se); diff != "" {
					t.Errorf("ShutdownError (-want +got):\n%s", diff)
				}
			})
		})
	}
}

func TestShutdownTimeoutNotSpentWhenReconcilesReturn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A reconcile that honours its context, cancelled after the drain: Run
		// returns as soon as it does, with nil.
		c := New(Func[string](func(ctx context.Context, _ string) (Result, error) {
			<-ctx.Done()
			time.Sleep(2 * time.Second) // cleaning up after the cancel
			return Result{}, ctx.Err()
		}), Config[string]{DrainTimeout: 3 * time.Second, ShutdownTimeout: 5 * time.Second})
		c.Watch(newKeySource("a"))
		ctx, cancel := context.WithCancel(context.Background())
		done := runUntil(ctx, c)
		time.Sleep(time.Second)
		cancel()
		cancelled := time.Now()
		if err := <-done; err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
		if took := time.Since(cancelled); took != 5*time.Second {
			t.Errorf("Run returned %v after its context ended, want 5s (drain 3s, then the 2s the reconcile took)", took)
		}
	})
}

func TestNegativeShutdownTimeoutWaitsForEver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		c := New(stubborn(release, "stuck"), Config[string]{DrainTimeout: time.Second, ShutdownTimeout: -1})
		c.Watch(newKeySource("stuck"))
		ctx, cancel := context.WithCancel(context.Background())
		done := runUntil(ctx, c)
		synctest.Wait()
		cancel()
		time.Sleep(24 * time.Hour)
		select {
		case err := <-done:
			t.Fatalf("Run = %v while a reconcile was running, with no shutdown bound", err)
		default:
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	})
}

func TestLeadershipLostWhileReconcileHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		store := &memStore{}
		c := New(stubborn(release, "k1"), Config[string]{
			Workers:         2,
			DrainTimeout:    time.Hour, // lease loss does not drain
			ShutdownTimeout: 5 * time.Second,
			LeaderElection: &LeaderElection{
				Lock:          &memLock{store: store, id: "a"},
				LeaseDuration: 4 * time.Second,
				RenewDeadline: 3 * time.Second,
				RetryPeriod:   500 * time.Millisecond,
			},
		})
		c.Watch(newKeySource("k1", "k2"))
		done := runUntil(context.Background(), c)
		time.Sleep(2 * time.Second)
		// Someone else holds the lock now: a cannot renew.
		intruder := resourcelock.LeaderElectionRecord{HolderIdentity: "intruder", LeaseDurationSeconds: 600}
		intruder.RenewTime.Time = time.Now()
		store.set(intruder)
		lostAt := time.Now()
		err := awaitRun(t, done, time.Hour)
		if !errors.Is(err, ErrLeadershipLost) || !errors.Is(err, ErrShutdownTimeout) {
			t.Fatalf("Run = %v, want ErrLeadershipLost and ErrShutdownTimeout", err)
		}
		var se *ShutdownError
		if !errors.As(err, &se) || !cmp.Equal(se.Keys, []string{"k1"}) {
			t.Errorf("Run = %v, want a *ShutdownError naming k1", err)
		}
		// The loss is noticed within the renew deadline and a retry (4s, as in
		// TestLeadershipLostAbortsReconciles); then the reconciles are cancelled
		// and awaited 5s, not drained for an hour.
		if took := time.Since(lostAt); took < 5*time.Second || took > 9*time.Second {
			t.Errorf("Run returned %v after the lease was taken, want 5s to 9s", took)
		}
	})
}
