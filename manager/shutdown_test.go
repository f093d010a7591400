package manager

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ctrlkit/ctrlkit/reconcile"
)

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

// hung is a Runnable that ignores its context: its Run returns only once
// release is closed.
type hung struct {
	name    string
	release <-chan struct{}
}

func (h *hung) Name() string { return h.name }

func (h *hung) Run(context.Context) error {
	<-h.release
	return nil
}

// fixedKeys is a reconcile.Source holding a fixed set of keys, synced at once.
type fixedKeys []string

func (fixedKeys) Name() string { return "fixed" }
func (s fixedKeys) Start(enqueue func(string, reconcile.Priority)) (func(), error) {
	for _, k := range s {
		enqueue(k, reconcile.Live)
	}
	return nil, nil
}
func (fixedKeys) HasSynced() bool                    { return true }
func (s fixedKeys) AppendKeys(dst []string) []string { return append(dst, s...) }

// hangingController is a controller whose Reconcile of key "stuck" ignores its
// context and returns only once release is closed.
func hangingController(release <-chan struct{}, cfg reconcile.Config[string]) *reconcile.Controller[string] {
	c := reconcile.New(reconcile.Func[string](func(ctx context.Context, key string) (reconcile.Result, error) {
		if key == "stuck" {
			<-release
		}
		return reconcile.Result{}, nil
	}), cfg)
	c.Watch(fixedKeys{"stuck", "fine"})
	return c
}

func TestShutdownTimeoutAbandonsHungRunnable(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		want    time.Duration
	}{
		{"set", 5 * time.Second, 5 * time.Second},
		{"default", 0, DefaultShutdownTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				release := make(chan struct{})
				defer close(release) // the abandoned Run ends with the test
				m := newTestManager(t, Config{ShutdownTimeout: tc.timeout})
				for _, r := range []Runnable{&runnable{name: "polite"}, &hung{name: "stuck", release: release}} {
					if err := m.Add(r); err != nil {
						t.Fatal(err)
					}
				}
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan error, 1)
				go func() { done <- m.Run(ctx) }()
				time.Sleep(time.Second)
				cancel()
				cancelled := time.Now()
				err := awaitRun(t, done, time.Hour)
				if took := time.Since(cancelled); took != tc.want {
					t.Errorf("Run returned %v after its context ended, want %v", took, tc.want)
				}
				var se *ShutdownError
				if !errors.As(err, &se) || !errors.Is(err, reconcile.ErrShutdownTimeout) {
					t.Fatalf("Run = %v, want a *ShutdownError wrapping reconcile.ErrShutdownTimeout", err)
				}
				if diff := cmp.Diff(&ShutdownError{Timeout: tc.want, Runnables: []string{"stuck"}}, se); diff != "" {
					t.Errorf("ShutdownError (-want +got):\n%s", diff)
				}
			})
		})
	}
}

// TestShutdownReturnsControllersShutdownError: a controller bounded by its own
// shutdown timeout returns before the manager's, and the manager's Run says
// which keys it abandoned.
func TestShutdownReturnsControllersShutdownError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		m := newTestManager(t, Config{})
		c := hangingController(release, reconcile.Config[string]{Name: "hangs", Workers: 2, DrainTimeout: 2 * time.Second, ShutdownTimeout: 3 * time.Second})
		if err := m.Add(c); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		time.Sleep(time.Second)
		cancel()
		cancelled := time.Now()
		err := awaitRun(t, done, time.Hour)
		if took := time.Since(cancelled); took != 5*time.Second {
			t.Errorf("Run returned %v after its context ended, want 5s (the controller's drain and shutdown timeouts)", took)
		}
		var se *reconcile.ShutdownError
		if !errors.As(err, &se) || !cmp.Equal(se.Keys, []string{"stuck"}) {
			t.Fatalf("Run = %v, want the controller's *reconcile.ShutdownError naming key stuck", err)
		}
		var mse *ShutdownError
		if errors.As(err, &mse) {
			t.Errorf("Run = %v: the manager's own bound passed, yet the controller returned by its own", err)
		}
	})
}

// TestLeaseLostWhileUserCodeHangs: a leader cut off from its lock returns
// reconcile.ErrLeadershipLost, within the shutdown bounds, while a Reconcile
// and a Runnable ignore their contexts.
func TestLeaseLostWhileUserCodeHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		st := &lockState{}
		m := newTestManager(t, Config{LeaderElection: leaderElection("a", st), ShutdownTimeout: 20 * time.Second})
		c := hangingController(release, reconcile.Config[string]{Name: "hangs", DrainTimeout: time.Hour, ShutdownTimeout: 3 * time.Second})
		for _, r := range []Runnable{c, &hung{name: "stuck-runnable", release: release}} {
			if err := m.Add(r); err != nil {
				t.Fatal(err)
			}
		}
		done := make(chan error, 1)
		go func() { done <- m.Run(t.Context()) }()
		time.Sleep(2 * time.Second)
		if !m.Leading() {
			t.Fatal("not leading")
		}
		st.mu.Lock()
		st.failID = "a"
		st.mu.Unlock()
		cutAt := time.Now()
		err := awaitRun(t, done, time.Hour)
		if !errors.Is(err, reconcile.ErrLeadershipLost) || !errors.Is(err, reconcile.ErrShutdownTimeout) {
			t.Fatalf("Run = %v, want ErrLeadershipLost and ErrShutdownTimeout", err)
		}
		var se *reconcile.ShutdownError
		if !errors.As(err, &se) || !cmp.Equal(se.Keys, []string{"stuck"}) {
			t.Errorf("Run = %v, want the controller's *reconcile.ShutdownError naming key stuck", err)
		}
		var mse *ShutdownError
		if !errors.As(err, &mse) || !cmp.Equal(mse.Runnables, []string{"stuck-runnable"}) {
			t.Errorf("Run = %v, want a *ShutdownError naming stuck-runnable", err)
		}
		// The cut is noticed within the renew deadline (2s) and a retry; the
		// manager then waits its 20s for the Runnables, not an hour of drain.
		if took := time.Since(cutAt); took < 20*time.Second || took > 23*time.Second {
			t.Errorf("Run returned %v after the cut, want 20s to 23s", took)
		}
	})
}
