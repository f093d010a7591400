package reconcile

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Defaults of LeaderElection fields left zero: client-go's usual values.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// LeaderElection makes a controller reconcile only while it holds a lock, through
// client-go's tools/leaderelection. The sources start and sync before the election
// (caches are warm when leadership comes); on losing the lock the workers stop
// taking keys, the contexts of reconciles in flight are cancelled at once, and Run
// returns ErrLeadershipLost once they have returned, or once Config.ShutdownTimeout
// has passed (the error then also wraps a *ShutdownError).
//
// Safety: the old leader stops taking keys when it fails to renew within
// RenewDeadline, and another replica can take the lock only LeaseDuration after
// the last renewal; reconciles must honour their context well within
// LeaseDuration-RenewDeadline, or two replicas may overlap.
type LeaderElection struct {
	// Lock is the lock to hold, usually from NewLeaseLock. Required.
	Lock resourcelock.Interface
	// LeaseDuration, RenewDeadline and RetryPeriod are those of
	// leaderelection.LeaderElectionConfig; zero means the defaults above.
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// ReleaseOnCancel gives the lock up when Run's context ends, after the workers
	// have stopped, so that another replica takes over without waiting for the
	// lease to expire.
	ReleaseOnCancel bool
}

// NewLeaseLock returns a coordination.k8s.io Lease lock named namespace/name held
// under identity (unique per replica, for example the pod name).
func NewLeaseLock(client kubernetes.Interface, namespace, name, identity string) *resourcelock.LeaseLock {
	return &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: name},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
}

// election is one campaign of a controller for its lock.
type election[K comparable] struct {
	c       *Controller[K]
	lock    resourcelock.Interface
	elector *leaderelection.LeaderElector
	sources []Source[K]

	// Set by run before the elector runs, read by onStarted.
	stop        context.Context // ends when the workers must stop taking keys
	stopWork    context.CancelFunc
	abort       context.Context // parent of the reconciles' contexts
	cancelAbort context.CancelFunc

	mu       sync.Mutex
	stopping bool           // run is stopping: onStarted must not start workers
	workers  sync.WaitGroup // onStarted calls in progress; Add only under mu while !stopping
	err      error          // what the workers' shutdown returned; guarded by mu
}

// newElection validates the configuration and makes the elector; it starts nothing.
func (c *Controller[K]) newElection() (*election[K], error) {
	le := c.cfg.LeaderElection
	if le.Lock == nil {
		return nil, fmt.Errorf("reconcile: controller %q: LeaderElection.Lock is nil", c.cfg.Name)
	}
	e := &election[K]{c: c, lock: le.Lock}
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            le.Lock,
		LeaseDuration:   orDefault(le.LeaseDuration, DefaultLeaseDuration),
		RenewDeadline:   orDefault(le.RenewDeadline, DefaultRenewDeadline),
		RetryPeriod:     orDefault(le.RetryPeriod, DefaultRetryPeriod),
		ReleaseOnCancel: le.ReleaseOnCancel,
		Name:            c.cfg.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: e.onStarted,
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("reconcile: controller %q: leader election: %w", c.cfg.Name, err)
	}
	e.elector = elector
	return e, nil
}

// onStarted runs the workers while leading; the elector calls it in a goroutine
// of its own when it wins, and cancels leading when the lease is lost.
func (e *election[K]) onStarted(leading context.Context) {
	e.mu.Lock()
	if e.stopping {
		e.mu.Unlock()
		return
	}
	e.workers.Add(1)
	e.mu.Unlock()
	defer e.workers.Done()
	e.c.log.Info("leader election won", "lock", e.lock.Describe())
	// Losing the lease: stop taking keys and cancel the reconciles in flight.
	unlink := context.AfterFunc(leading, func() { e.stopWork(); e.cancelAbort() })
	defer unlink()
	if err := e.c.work(e.stop, e.abort, e.cancelAbort, e.sources); err != nil {
		e.mu.Lock()
		e.err = err
		e.mu.Unlock()
	}
}

// run campaigns and reconciles while leading, until ctx ends or the lease is lost.
func (e *election[K]) run(ctx context.Context) error {
	// The elector runs on a context of its own, cancelled only once the workers
	// have stopped, so that ReleaseOnCancel never frees the lock while a reconcile
	// is still running.
	electCtx, stopElect := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElect()
	// client-go's elector logs to the logger in its context: the controller's.
	electCtx = logr.NewContext(electCtx, e.c.log.WithName("leaderelection"))
	e.stop, e.stopWork = context.WithCancel(ctx)
	defer e.stopWork()
	e.abort, e.cancelAbort = context.WithCancel(context.WithoutCancel(ctx))
	defer e.cancelAbort()

	electDone := make(chan struct{})
	go func() {
		defer close(electDone)
		e.elector.Run(electCtx)
	}()
	lost := false
	select {
	case <-ctx.Done():
	case <-electDone: // the elector returns on its own only when the lease is lost
		lost = true
	}
	e.mu.Lock()
	e.stopping = true
	e.mu.Unlock()
	e.stopWork()
	if lost {
		e.cancelAbort()
	}
	e.workers.Wait()
	stopElect()
	<-electDone
	e.mu.Lock()
	err := e.err
	e.mu.Unlock()
	if lost {
		e.c.log.Info("leader election lost")
		if err != nil {
			return fmt.Errorf("%w; %w", ErrLeadershipLost, err)
		}
		return ErrLeadershipLost
	}
	return err
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
