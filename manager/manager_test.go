package manager

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// newTestManager makes a manager whose server is never contacted: the tests
// below add only Runnables, which need no request.
func newTestManager(t *testing.T, cfg Config) *Manager {
	t.Helper()
	cfg.RESTConfig = &rest.Config{Host: "https://127.0.0.1:1"}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// runnable records its runs; Run returns err once its context ends (or at
// once if quit is set).
type runnable struct {
	name    string
	started atomic.Int32
	stopped atomic.Int32
	cause   atomic.Value // context.Cause of its context when it ended
	err     error
	quit    bool
	onStop  func()
	onStart func()
}

func (r *runnable) Name() string { return r.name }

func (r *runnable) Run(ctx context.Context) error {
	if r.onStart != nil {
		r.onStart()
	}
	r.started.Add(1)
	if !r.quit {
		<-ctx.Done()
		r.cause.Store(context.Cause(ctx))
	}
	if r.onStop != nil {
		r.onStop()
	}
	r.stopped.Add(1)
	return r.err
}

func TestNewNeedsRESTConfig(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("New without a RESTConfig succeeded")
	}
}

func TestAddChecks(t *testing.T) {
	m := newTestManager(t, Config{})
	if err := m.Add(nil); err == nil {
		t.Error("Add(nil) succeeded")
	}
	r := &runnable{name: "r"}
	if err := m.Add(r); err != nil {
		t.Fatal(err)
	}
	if err := m.Add(r); err == nil {
		t.Error("adding one Runnable twice succeeded")
	}
}

// TestRunLifecycle: controllers start when Run has nothing to sync, one added
// while running starts at once, all stop before Run returns nil on its
// context's end, a second Run fails and Add after Run fails.
func TestRunLifecycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newTestManager(t, Config{})
		a := &runnable{name: "a"}
		if err := m.Add(a); err != nil {
			t.Fatal(err)
		}
		if st := m.Controllers(); len(st) != 1 || st[0].State != Waiting || st[0].Name != "a" {
			t.Fatalf("before Run: %+v", st)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		synctest.Wait()
		if a.started.Load() != 1 || !m.Leading() {
			t.Fatalf("after Run started: a started %d times, leading %v", a.started.Load(), m.Leading())
		}
		b := &runnable{name: "b"}
		if err := m.Add(b); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if b.started.Load() != 1 {
			t.Fatal("a Runnable added while Run runs did not start")
		}
		if st := m.Controllers(); st[1].State != Running || !st[1].Synced {
			t.Fatalf("running: %+v", st)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run returned %v when its context ended", err)
		}
		if a.stopped.Load() != 1 || b.stopped.Load() != 1 {
			t.Fatal("Run returned before its controllers stopped")
		}
		if m.Leading() {
			t.Error("still leading after Run returned")
		}
		if st := m.Controllers(); st[0].State != Ended || st[1].State != Ended {
			t.Errorf("after Run: %+v", st)
		}
		if err := m.Run(t.Context()); !errors.Is(err, ErrAlreadyStarted) {
			t.Errorf("second Run: %v, want ErrAlreadyStarted", err)
		}
		if err := m.Add(&runnable{name: "c"}); !errors.Is(err, ErrStopped) {
			t.Errorf("Add after Run: %v, want ErrStopped", err)
		}
	})
}

// TestRunReturnsFirstError: a controller that fails stops the others and
// Run's error names it and wraps its cause.
func TestRunReturnsFirstError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newTestManager(t, Config{})
		boom := errors.New("boom")
		other := &runnable{name: "other"}
		failing := &runnable{name: "failing", quit: true, err: boom}
		for _, r := range []Runnable{other, failing} {
			if err := m.Add(r); err != nil {
				t.Fatal(err)
			}
		}
		err := m.Run(t.Context())
		if !errors.Is(err, boom) || err.Error() != `manager: controller "failing": boom` {
			t.Fatalf("Run: %v, want the failing controller's error", err)
		}
		if other.stopped.Load() != 1 {
			t.Error("the other controller was still running when Run returned")
		}
		if st := m.Controllers(); st[1].State != Ended || !errors.Is(st[1].Err, boom) {
			t.Errorf("status: %+v", st)
		}
	})
}

// lock is an in-memory resourcelock.Interface shared by the replicas of a
// test; fail makes every call fail, as a cut-off replica's would.
type lock struct {
	id string
	st *lockState
}

type lockState struct {
	mu     sync.Mutex
	record *resourcelock.LeaderElectionRecord
	rv     int
	failID string // calls of this identity fail
}

func (l *lock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	l.st.mu.Lock()
	defer l.st.mu.Unlock()
	if l.st.failID == l.id {
		return nil, nil, errors.New("cut off")
	}
	if l.st.record == nil {
		return nil, nil, errNotFound
	}
	r := *l.st.record
	return &r, fmt.Appendf(nil, "%v", r), nil
}

func (l *lock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	l.st.mu.Lock()
	defer l.st.mu.Unlock()
	if l.st.failID == l.id {
		return errors.New("cut off")
	}
	if l.st.record != nil {
		return errors.New("exists")
	}
	l.st.record = &r
	return nil
}

func (l *lock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	l.st.mu.Lock()
	defer l.st.mu.Unlock()
	if l.st.failID == l.id {
		return errors.New("cut off")
	}
	l.st.record = &r
	return nil
}

func (l *lock) RecordEvent(string) {}
func (l *lock) Identity() string   { return l.id }
func (l *lock) Describe() string   { return "test/lock" }

var errNotFound = notFound{}

type notFound struct{}

func (notFound) Error() string { return "not found" }
func (notFound) Status() metav1.Status {
	return metav1.Status{Status: metav1.StatusFailure, Code: 404, Reason: metav1.StatusReasonNotFound}
}

var _ = coordinationv1.Lease{}

func leaderElection(id string, st *lockState) *reconcile.LeaderElection {
	return &reconcile.LeaderElection{
		Lock:            &lock{id: id, st: st},
		LeaseDuration:   3 * time.Second,
		RenewDeadline:   2 * time.Second,
		RetryPeriod:     500 * time.Millisecond,
		ReleaseOnCancel: true,
	}
}

// TestLeaderElection: of two managers on one lock, only the leader runs its
// controllers; when it stops, it releases the lock and the other takes over;
// when the new leader is cut off from the lock, its controllers stop at once
// with the cause reconcile.ErrLeadershipLost and Run returns that error.
func TestLeaderElection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &lockState{}
		var stoppedAt atomic.Int64 // when b's controller stopped, in Unix nanoseconds
		ra := &runnable{name: "a"}
		rb := &runnable{name: "b", onStop: func() { stoppedAt.Store(time.Now().UnixNano()) }}
		ma := newTestManager(t, Config{LeaderElection: leaderElection("a", st)})
		mb := newTestManager(t, Config{LeaderElection: leaderElection("b", st)})
		if err := ma.Add(ra); err != nil {
			t.Fatal(err)
		}
		if err := mb.Add(rb); err != nil {
			t.Fatal(err)
		}
		ctxA, stopA := context.WithCancel(t.Context())
		doneA := make(chan error, 1)
		go func() { doneA <- ma.Run(ctxA) }()
		synctest.Wait()
		if !ma.Leading() || ra.started.Load() != 1 {
			t.Fatalf("a: leading %v, started %d", ma.Leading(), ra.started.Load())
		}
		doneB := make(chan error, 1)
		go func() { doneB <- mb.Run(t.Context()) }()
		time.Sleep(10 * time.Second)
		if mb.Leading() || rb.started.Load() != 0 {
			t.Fatalf("b runs its controller while a leads")
		}
		if st := mb.Controllers(); st[0].State != Waiting {
			t.Fatalf("standby controller: %+v", st)
		}

		stopA()
		if err := <-doneA; err != nil {
			t.Fatalf("a's Run: %v", err)
		}
		time.Sleep(time.Second) // one retry period and its jitter
		synctest.Wait()
		if !mb.Leading() || rb.started.Load() != 1 {
			t.Fatalf("b did not take over the released lock: leading %v", mb.Leading())
		}

		// Cut b off: it cannot renew, and must stop before the lease could expire.
		st.mu.Lock()
		st.failID = "b"
		st.mu.Unlock()
		cutAt := time.Now()
		err := <-doneB
		if !errors.Is(err, reconcile.ErrLeadershipLost) {
			t.Fatalf("b's Run: %v, want ErrLeadershipLost", err)
		}
		if c, _ := rb.cause.Load().(error); !errors.Is(c, reconcile.ErrLeadershipLost) {
			t.Errorf("b's controller stopped with cause %v, want ErrLeadershipLost", c)
		}
		if took := time.Unix(0, stoppedAt.Load()).Sub(cutAt); took > 3*time.Second {
			t.Errorf("b's controller stopped %v after the cut, later than the lease duration", took)
		}
	})
}

type panicking struct{}

func (panicking) Run(context.Context) error { panic("boom") }

// TestRunnablePanic: a Runnable whose Run panics does not crash the process:
// Run returns a *PanicError naming it and stops the other controllers.
func TestRunnablePanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newTestManager(t, Config{})
		other := &runnable{name: "other"}
		for _, r := range []Runnable{other, panicking{}} {
			if err := m.Add(r); err != nil {
				t.Fatal(err)
			}
		}
		err := m.Run(t.Context())
		var pe *PanicError
		if !errors.As(err, &pe) || pe.Value != "boom" || len(pe.Stack) == 0 {
			t.Fatalf("Run: %v, want a *PanicError", err)
		}
		if other.stopped.Load() != 1 {
			t.Error("the other controller was still running when Run returned")
		}
	})
}

// TestControllersStartSoonAfterSync: Run starts its controllers within twice the
// time its informers took to sync (at most 10 ms more), not at the next tick of
// a coarse poll; an informer that takes long is still waited for.
func TestControllersStartSoonAfterSync(t *testing.T) {
	for _, syncAfter := range []time.Duration{200 * time.Microsecond, 2 * time.Millisecond, 3 * time.Second} {
		synctest.Test(t, func(t *testing.T) {
			m := newTestManager(t, Config{})
			srv := newServer(t, 3)
			// The first request, a streaming list or a LIST, takes syncAfter.
			var slept atomic.Bool
			sleep := func() {
				if !slept.Swap(true) {
					time.Sleep(syncAfter)
				}
			}
			slow := reflector.Funcs[cm]{
				ListFunc: func(ctx context.Context, opts metav1.ListOptions) ([]cm, metav1.ListMeta, error) {
					sleep()
					return srv.List(ctx, opts)
				},
				WatchFunc: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
					sleep()
					return srv.Watch(ctx, opts)
				},
			}
			mapping := &meta.RESTMapping{Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Scope: meta.RESTScopeNamespace}
			if _, err := shared(m, mapping, Options[cm]{}, func() (reflector.ListerWatcher[cm], error) { return slow, nil }); err != nil {
				t.Fatal(err)
			}
			var startedAt atomic.Int64
			r := &runnable{name: "r", onStart: func() { startedAt.Store(time.Now().UnixNano()) }}
			if err := m.Add(r); err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- m.Run(ctx) }()
			time.Sleep(min(2*syncAfter, syncAfter+syncPollMax) + time.Microsecond)
			synctest.Wait()
			if r.started.Load() != 1 {
				t.Errorf("informer synced after %v: the controller had not started %v after Run", syncAfter, time.Since(t0))
			} else if at := time.Duration(startedAt.Load() - t0.UnixNano()); at < syncAfter {
				t.Errorf("the controller started %v after Run, before the informer synced (%v)", at, syncAfter)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}
